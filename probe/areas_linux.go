//go:build linux && (amd64 || arm64)

package probe

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// The areas a tracer maps in a process (slot areas, the thread table of
// the return probes, the data area) outlive a Detach and a tracer that
// died: a thread interrupted inside a slot by a signal resumes there when
// its handler returns, and a frame whose return address a return probe
// replaced returns through the return trampoline, which reads the thread
// table. Left alone they would pile up with every attach (1 MiB r-x, the
// data memfd and 8 MiB rw-p each). So each area is recognisable (a slot
// area and a thread table start with a header page of their own; the data
// area is the memfd named probeopt-data, whose first bytes are the
// trampoline package's magic), and they are unmapped, all of a process's
// together, when no thread can still be in them:
//
//  1. no site jumps into them any more: at a clean Detach, the batch that
//     removed every site succeeded; in every case, no executable file
//     mapping holds a jmp rel32 whose target lies in a slot area (a byte
//     sequence that only looks like one keeps the areas: the check errs
//     on the side of keeping);
//  2. no thread's PC lies in them (a thread stopped in a slot);
//  3. no thread has a return probe armed: every claimed slot of every
//     thread table holds no entry (an armed entry stands for a return
//     address on a stack that leads into the return trampoline);
//  4. no stack holds a signal frame that interrupted a thread in a slot
//     area, and no word just above a thread's stack pointer (areaNearSP)
//     points into a slot area or a thread table (the frame of a slot
//     that called a function, a BPF program, and stopped there). A signal
//     frame is recognised by its first word, the handler's return address,
//     which leads to a sigreturn stub (mov $15,%rax; syscall: the C
//     libraries' __restore_rt, Go's sigreturn), and holds the interrupted
//     instruction pointer sigframeRIP bytes further. The stacks scanned
//     are, for each thread, from its stack pointer to the end of the
//     mapping that holds it (the frames in use); and when a thread runs
//     on some other memory (an alternate signal stack), every stack no
//     thread runs on, whole: the main thread's [stack] and every private
//     writable mapping right above a guard mapping (---p: how the C
//     library and most thread libraries lay out a thread's stack), since
//     the handler may have interrupted code on one of them. So a thread
//     interrupted in a slot keeps the areas, whether its handler runs on
//     the same stack, on an alternate stack, or was itself interrupted
//     by a handler on an alternate stack. Not covered: a thread whose
//     stack is none of these (a stack in the heap without a guard page, a
//     coroutine's) while it runs elsewhere. Words further up that only
//     look like area addresses (stale values in a live frame) are not
//     taken for frames, so they do not keep the areas for ever. More than
//     areaScanLimit bytes of stacks keep the areas.
//
// The checks run in a stop (every thread stopped), so nothing changes
// between them and the munmap. An earlier tracer's areas are looked for
// when a process is attached (before anything of the new tracer's is
// mapped) and at its Detach, with the tracer's own.
//
// The checks are x86-64's (its jmp rel32, its signal frame and sigreturn
// stub: areas_linux_amd64.go). On arm64 the areas carry the same headers
// but are not unmapped, neither at Detach nor at a later attach
// (areas_linux_arm64.go).

// areaMagic starts the header page of a slot area or a thread table.
const areaMagic = "PRBOAREA"

// areaHeaderSize is the size of the header page at the start of a slot
// area or a thread table.
const areaHeaderSize = 4096

// Area kinds (the header's kind field).
const (
	areaSlots   = 1
	areaThreads = 2
	areaData    = 3 // the data area (no header page of ours)
	// areaTrapGuard is the trap guard's handler and table
	// (trapguard_linux_amd64.go).
	areaTrapGuard = 4
)

// Header fields (byte offsets; little-endian).
const (
	ahMagic  = 0  // areaMagic
	ahKind   = 8  // uint32
	ahAddr   = 16 // uint64: the address of the mapping (its header)
	ahSize   = 24 // uint64: the size of the mapping, header included
	ahPid    = 32 // uint64: the tracer's process id
	ahSlots  = 40 // uint64: a thread table's Slots
	ahDepth  = 48 // uint64: a thread table's Depth
	ahLength = 56
	// A trap guard's (trapguard_linux_amd64.go), after the common ones:
	ahTrapOrig = 64 // 32 bytes: SIGTRAP's kernel sigaction before the trap guard
	ahTrapData = 96 // uint64: the size of its read-write part, mapped just below
)

// dataAreaPath is how /proc/PID/maps names the data area's memfd.
const dataAreaPath = "/memfd:probeopt-data"

// leftArea is an area of ours found in a process.
type leftArea struct {
	addr, size uint64
	kind       int
	threads    *trampoline.Threads // a thread table's layout
	// before is the size of the trap guard's read-write part, mapped
	// just below its header (ahTrapData); 0 for the other kinds.
	before uint64
}

// writeAreaHeader writes the header page of the area at addr (size bytes
// with the header) of kind; th is a thread table's layout.
func writeAreaHeader(w *proc.World, addr, size uint64, kind int, pid int, th *trampoline.Threads) error {
	h := make([]byte, ahLength)
	copy(h[ahMagic:], areaMagic)
	binary.LittleEndian.PutUint32(h[ahKind:], uint32(kind))
	binary.LittleEndian.PutUint64(h[ahAddr:], addr)
	binary.LittleEndian.PutUint64(h[ahSize:], size)
	binary.LittleEndian.PutUint64(h[ahPid:], uint64(pid))
	if th != nil {
		binary.LittleEndian.PutUint64(h[ahSlots:], uint64(th.Slots))
		binary.LittleEndian.PutUint64(h[ahDepth:], uint64(th.Depth))
	}
	if err := w.WriteMemory(addr, h); err != nil {
		return fmt.Errorf("write the header of the area at %#x: %w", addr, err)
	}
	return nil
}

// memMaps is what findAreas reads a process through: a stopped
// *proc.World, or the files of /proc for a process nobody traces
// (Leftover).
type memMaps interface {
	Maps() ([]proc.Mapping, error)
	ReadMemory(addr uint64, b []byte) error
}

// findAreas returns every area of ours (any tracer's) that process w maps.
func findAreas(w memMaps) ([]leftArea, error) {
	maps, err := w.Maps()
	if err != nil {
		return nil, err
	}
	var out []leftArea
	for _, m := range maps {
		switch {
		case strings.HasPrefix(m.Path, dataAreaPath) && m.Shared:
			var b [8]byte
			if w.ReadMemory(m.Start, b[:]) == nil && string(b[:]) == "PRBOTRMP" {
				out = append(out, leftArea{addr: m.Start, size: m.End - m.Start, kind: areaData})
			}
		case m.Path == "" && !m.Shared && m.Read && m.Exec != m.Write:
			// Adjacent areas of one protection are one mapping: walk
			// their headers.
			for at := m.Start; at+ahLength <= m.End; {
				a, ok := readAreaHeader(w, at, m.End)
				if !ok {
					break
				}
				if (a.kind == areaSlots || a.kind == areaTrapGuard) && m.Exec || a.kind == areaThreads && m.Write {
					out = append(out, a)
				}
				at += a.size
			}
		}
	}
	return out, nil
}

// readAreaHeader reads the header at addr of an area that must end by
// end.
func readAreaHeader(w memMaps, addr, end uint64) (leftArea, bool) {
	h := make([]byte, ahLength)
	if w.ReadMemory(addr, h) != nil || string(h[ahMagic:ahMagic+8]) != areaMagic {
		return leftArea{}, false
	}
	a := leftArea{
		addr: binary.LittleEndian.Uint64(h[ahAddr:]),
		size: binary.LittleEndian.Uint64(h[ahSize:]),
		kind: int(binary.LittleEndian.Uint32(h[ahKind:])),
	}
	if a.addr != addr || a.size < areaHeaderSize || a.size%4096 != 0 || a.size > end-addr || a.kind != areaSlots && a.kind != areaThreads && a.kind != areaTrapGuard {
		return leftArea{}, false
	}
	if a.kind == areaTrapGuard {
		var d [8]byte
		if w.ReadMemory(addr+ahTrapData, d[:]) != nil {
			return leftArea{}, false
		}
		a.before = binary.LittleEndian.Uint64(d[:])
		if a.before%4096 != 0 || a.before > 1<<30 || a.before > addr {
			return leftArea{}, false
		}
	}
	if a.kind == areaThreads {
		th := &trampoline.Threads{Addr: addr + areaHeaderSize, Slots: int(binary.LittleEndian.Uint64(h[ahSlots:])), Depth: int(binary.LittleEndian.Uint64(h[ahDepth:]))}
		if th.Slots <= 0 || th.Slots > 1<<20 || th.Size()+areaHeaderSize != a.size {
			return leftArea{}, false
		}
		a.threads = th
	}
	return a, true
}
