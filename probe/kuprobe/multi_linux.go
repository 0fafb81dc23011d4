//go:build linux

package kuprobe

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Multi counts the hits of many uprobes of one file, registered and
// removed as one batch through a BPF uprobe-multi link (the mechanism
// bpftrace uses for wildcard uprobes): a small BPF program adds one to the
// counter of the probe that fired, in an array indexed by the probe's
// cookie. Removing a perf uprobe costs the kernel a grace period each (about
// 0.1 s on a small VM); a Multi pays it once for all its probes.
type Multi struct {
	Path    string
	Offsets []uint64
	mapFD   int
	progFD  int
	linkFD  int
}

// BPF instruction encoding.
type bpfInsn struct {
	code uint8
	regs uint8 // dst in the low nibble, src in the high one
	off  int16
	imm  int32
}

func insn(code, dst, src uint8, off int16, imm int32) bpfInsn {
	return bpfInsn{code: code, regs: dst | src<<4, off: off, imm: imm}
}

// Helper function numbers of the BPF ABI.
const (
	helperMapLookupElem   = 1
	helperGetAttachCookie = 174
	pseudoMapFD           = 1
)

// counterProgram is the BPF program: counters[cookie] += 1.
func counterProgram(mapFD int) []bpfInsn {
	return []bpfInsn{
		insn(0x85, 0, 0, 0, helperGetAttachCookie),  // call bpf_get_attach_cookie(ctx)
		insn(0x63, 10, 0, -4, 0),                    // *(u32 *)(r10 - 4) = w0
		insn(0x18, 1, pseudoMapFD, 0, int32(mapFD)), // r1 = map (ld_imm64)
		insn(0x00, 0, 0, 0, 0),
		insn(0xbf, 2, 10, 0, 0),                  // r2 = r10
		insn(0x07, 2, 0, 0, -4),                  // r2 += -4
		insn(0x85, 0, 0, 0, helperMapLookupElem), // call bpf_map_lookup_elem
		insn(0x15, 0, 0, 2, 0),                   // if r0 == 0 goto +2
		insn(0xb7, 1, 0, 0, 1),                   // r1 = 1
		insn(0xdb, 0, 1, 0, 0),                   // lock *(u64 *)(r0 + 0) += r1
		insn(0xb7, 0, 0, 0, 0),                   // r0 = 0
		insn(0x95, 0, 0, 0, 0),                   // exit
	}
}

func bpf(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// The bpf(2) attributes used here, with the kernel's layout. Pointers are
// unsafe.Pointer so that the garbage collector and the stack copier see
// them.
type mapCreateAttr struct {
	mapType, keySize, valueSize, maxEntries uint32
	_                                       [112]byte
}

type progLoadAttr struct {
	progType, insnCnt  uint32
	insns, license     unsafe.Pointer
	logLevel, logSize  uint32
	logBuf             unsafe.Pointer
	kernVersion, flags uint32
	name               [16]byte
	ifindex            uint32
	expectedAttachType uint32
	_                  [64]byte
}

type linkCreateAttr struct {
	progFD, targetFD, attachType, flags uint32
	path, offsets, refCtrOffsets        unsafe.Pointer
	cookies                             unsafe.Pointer
	cnt, multiFlags, pid                uint32
	_                                   [68]byte
}

type mapElemAttr struct {
	mapFD      uint32
	_          uint32
	key, value unsafe.Pointer
	flags      uint64
}

// OpenMulti registers a counting uprobe at each file offset of path, for
// process pid (all its threads), in one batch.
func OpenMulti(path string, offsets []uint64, pid int) (*Multi, error) {
	if len(offsets) == 0 {
		return nil, fmt.Errorf("uprobes in %s: no offsets", path)
	}
	m := &Multi{Path: path, Offsets: append([]uint64(nil), offsets...), mapFD: -1, progFD: -1, linkFD: -1}
	ma := mapCreateAttr{mapType: unix.BPF_MAP_TYPE_ARRAY, keySize: 4, valueSize: 8, maxEntries: uint32(len(offsets))}
	fd, err := bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&ma), unsafe.Sizeof(ma))
	if err != nil {
		return nil, fmt.Errorf("uprobes in %s: create counter map: %w", path, err)
	}
	m.mapFD = fd

	prog := counterProgram(m.mapFD)
	code := make([]byte, 8*len(prog))
	le := binary.LittleEndian
	for i, in := range prog {
		code[8*i] = in.code
		code[8*i+1] = in.regs
		le.PutUint16(code[8*i+2:], uint16(in.off))
		le.PutUint32(code[8*i+4:], uint32(in.imm))
	}
	license := []byte("Dual BSD/GPL\x00")
	logBuf := make([]byte, 1<<14)
	pa := progLoadAttr{
		progType: unix.BPF_PROG_TYPE_KPROBE, insnCnt: uint32(len(prog)),
		insns: unsafe.Pointer(&code[0]), license: unsafe.Pointer(&license[0]),
		logLevel: 1, logSize: uint32(len(logBuf)), logBuf: unsafe.Pointer(&logBuf[0]),
		expectedAttachType: unix.BPF_TRACE_UPROBE_MULTI,
	}
	copy(pa.name[:], "uprobe_count")
	fd, err = bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&pa), unsafe.Sizeof(pa))
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("uprobes in %s: load the counting program: %w (%s)", path, err, cString(logBuf))
	}
	m.progFD = fd

	p, err := unix.BytePtrFromString(path)
	if err != nil {
		m.Close()
		return nil, err
	}
	cookies := make([]uint64, len(offsets))
	for i := range cookies {
		cookies[i] = uint64(i)
	}
	la := linkCreateAttr{
		progFD: uint32(m.progFD), attachType: unix.BPF_TRACE_UPROBE_MULTI,
		path: unsafe.Pointer(p), offsets: unsafe.Pointer(&m.Offsets[0]), cookies: unsafe.Pointer(&cookies[0]),
		cnt: uint32(len(offsets)), pid: uint32(pid),
	}
	fd, err = bpf(unix.BPF_LINK_CREATE, unsafe.Pointer(&la), unsafe.Sizeof(la))
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("uprobes in %s for %d: attach %d probes: %w", path, pid, len(offsets), err)
	}
	m.linkFD = fd
	return m, nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Counts returns the hits of every probe, in the order of Offsets.
func (m *Multi) Counts() ([]uint64, error) {
	out := make([]uint64, len(m.Offsets))
	var key uint32
	for i := range out {
		key = uint32(i)
		a := mapElemAttr{mapFD: uint32(m.mapFD), key: unsafe.Pointer(&key), value: unsafe.Pointer(&out[i])}
		if _, err := bpf(unix.BPF_MAP_LOOKUP_ELEM, unsafe.Pointer(&a), unsafe.Sizeof(a)); err != nil {
			return nil, fmt.Errorf("read uprobe counter %d: %w", i, err)
		}
	}
	return out, nil
}

// Close removes the probes and frees the counters.
func (m *Multi) Close() error {
	var first error
	for _, fd := range []*int{&m.linkFD, &m.progFD, &m.mapFD} {
		if *fd >= 0 {
			if err := unix.Close(*fd); err != nil && first == nil {
				first = err
			}
			*fd = -1
		}
	}
	return first
}
