//go:build linux && amd64

package probe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
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
)

// areaScanLimit bounds the bytes of stacks and text the checks read.
const areaScanLimit = 512 << 20

// dataAreaPath is how /proc/PID/maps names the data area's memfd.
const dataAreaPath = "/memfd:probeopt-data"

// leftArea is an area of ours found in a process.
type leftArea struct {
	addr, size uint64
	kind       int
	threads    *trampoline.Threads // a thread table's layout
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

// findAreas returns every area of ours (any tracer's) that process w maps.
func findAreas(w *proc.World) ([]leftArea, error) {
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
				if a.kind == areaSlots && m.Exec || a.kind == areaThreads && m.Write {
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
func readAreaHeader(w *proc.World, addr, end uint64) (leftArea, bool) {
	h := make([]byte, ahLength)
	if w.ReadMemory(addr, h) != nil || string(h[ahMagic:ahMagic+8]) != areaMagic {
		return leftArea{}, false
	}
	a := leftArea{
		addr: binary.LittleEndian.Uint64(h[ahAddr:]),
		size: binary.LittleEndian.Uint64(h[ahSize:]),
		kind: int(binary.LittleEndian.Uint32(h[ahKind:])),
	}
	if a.addr != addr || a.size < areaHeaderSize || a.size%4096 != 0 || a.size > end-addr || a.kind != areaSlots && a.kind != areaThreads {
		return leftArea{}, false
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

// areasBusy returns why the areas may still be in use in the stopped
// process (see the checks above), "" when none applies.
func areasBusy(w *proc.World, areas []leftArea) string {
	inCode := func(v uint64) bool {
		for _, a := range areas {
			if a.kind != areaData && v >= a.addr && v < a.addr+a.size {
				return true
			}
		}
		return false
	}
	maps, err := w.Maps()
	if err != nil {
		return err.Error()
	}
	ths, err := w.Threads()
	if err != nil {
		return err.Error()
	}
	// 2: the threads' PCs.
	for _, th := range ths {
		for _, a := range areas {
			if th.PC >= a.addr && th.PC < a.addr+a.size {
				return fmt.Sprintf("thread %d runs at %#x in the area at %#x", th.Tid, th.PC, a.addr)
			}
		}
	}
	// 3: armed return probes.
	for _, a := range areas {
		if a.threads == nil {
			continue
		}
		mem := make([]byte, a.threads.Size())
		if err := w.ReadMemory(a.threads.Addr, mem); err != nil {
			return fmt.Sprintf("read the thread table at %#x: %v", a.threads.Addr, err)
		}
		stacks, err := a.threads.ReadThreads(mem)
		if err != nil {
			return fmt.Sprintf("the thread table at %#x: %v", a.threads.Addr, err)
		}
		for _, s := range stacks {
			if len(s.Entries) > 0 {
				return fmt.Sprintf("a thread has %d return probes armed (thread table at %#x)", len(s.Entries), a.threads.Addr)
			}
		}
	}
	budget := uint64(areaScanLimit)
	// 1: jumps into the slot areas from executable files' text.
	for _, m := range maps {
		if !m.Exec || m.Path == "" || strings.HasPrefix(m.Path, "[") {
			continue
		}
		if m.End-m.Start > budget {
			return "too much text to check for jumps into the areas"
		}
		budget -= m.End - m.Start
		text := make([]byte, m.End-m.Start)
		if w.ReadMemory(m.Start, text) != nil {
			continue // unreadable: nothing runs from there either
		}
		for i := 0; i+5 <= len(text); i++ {
			if text[i] != 0xe9 {
				continue
			}
			to := m.Start + uint64(i) + 5 + uint64(int64(int32(binary.LittleEndian.Uint32(text[i+1:]))))
			if inCode(to) {
				return fmt.Sprintf("%s holds a jump at %#x into the area at %#x", m.Path, m.Start+uint64(i), to)
			}
		}
	}
	// 4: the stacks.
	type span struct {
		lo, hi uint64
		sp     bool // lo is a thread's stack pointer
	}
	var spans []span
	seen := map[uint64]bool{}
	add := func(lo, hi uint64, sp bool) {
		if hi > lo && !seen[lo] {
			seen[lo] = true
			spans = append(spans, span{lo, hi, sp})
		}
	}
	stackLike := func(i int) bool {
		m := maps[i]
		return m.Path == "[stack]" ||
			m.Path == "" && m.Read && m.Write && !m.Exec && !m.Shared && i > 0 && maps[i-1].End == m.Start && !maps[i-1].Read && !maps[i-1].Write && !maps[i-1].Exec
	}
	withSP := map[int]bool{}
	offStack := false // a thread runs on a stack of another kind (an alternate signal stack)
	for _, th := range ths {
		r, err := w.Regs(th.Tid)
		if err != nil {
			continue
		}
		sp := r.SP()
		for i, m := range maps {
			if sp >= m.Start && sp < m.End {
				add(sp&^7, m.End, true)
				withSP[i] = true
				offStack = offStack || !stackLike(i)
			}
		}
	}
	// The stacks no thread runs on hold only dead frames unless a thread
	// runs on an alternate stack: its handler interrupted code on one of
	// them. Then they are scanned whole.
	for i, m := range maps {
		if offStack && stackLike(i) && !withSP[i] {
			add(m.Start, m.End, false)
		}
	}
	exec := execRanges(maps)
	restorer := map[uint64]bool{} // the words checked to lead to a sigreturn stub
	isRestorer := func(v uint64) bool {
		ok, seen := restorer[v]
		if seen {
			return ok
		}
		for _, m := range maps {
			if m.Exec && v >= m.Start && v+9 <= m.End {
				code := make([]byte, 9)
				ok = w.ReadMemory(v, code) == nil && isSigreturn(code)
				break
			}
		}
		restorer[v] = ok
		return ok
	}
	for _, sp := range spans {
		if sp.hi-sp.lo > budget {
			return "too much stack to scan for addresses in the areas"
		}
		budget -= sp.hi - sp.lo
		buf := make([]byte, sp.hi-sp.lo)
		if w.ReadMemory(sp.lo, buf) != nil {
			// Read page by page: a page that cannot be read holds nothing.
			for off := uint64(0); off < uint64(len(buf)); off += 4096 {
				n := min(4096-(sp.lo+off)%4096, uint64(len(buf))-off)
				if w.ReadMemory(sp.lo+off, buf[off:off+n]) != nil {
					clear(buf[off : off+n])
				}
			}
		}
		for off := 0; off+8 <= len(buf); off += 8 {
			v := binary.LittleEndian.Uint64(buf[off:])
			switch {
			case off < areaNearSP && sp.sp && inCode(v):
				// Just above a thread's stack pointer: the frame of a
				// slot that called a function (a BPF program).
				return fmt.Sprintf("the stack at %#x holds %#x, in an area", sp.lo+uint64(off), v)
			case off+sigframeRIP+8 <= len(buf) && inRanges(exec, v) && isRestorer(v):
				// A signal frame: the interrupted instruction pointer.
				if rip := binary.LittleEndian.Uint64(buf[off+sigframeRIP:]); inCode(rip) {
					return fmt.Sprintf("a signal frame at %#x interrupted %#x, in an area", sp.lo+uint64(off), rip)
				}
			}
		}
	}
	return ""
}

// reclaimAreas unmaps every area of ours the stopped process maps when
// none is in use (areasBusy); it returns the areas unmapped and, when
// they stay, why.
func reclaimAreas(w *proc.World) (freed []leftArea, why string) {
	areas, err := findAreas(w)
	if err != nil {
		return nil, err.Error()
	}
	if len(areas) == 0 {
		return nil, ""
	}
	if why := areasBusy(w, areas); why != "" {
		return nil, why
	}
	// Any subset may go: nothing can be in any of them. An area whose
	// munmap fails is tried once more, and stays for the next look.
	for _, a := range areas {
		err := w.Munmap(a.addr, a.size)
		if err != nil {
			err = w.Munmap(a.addr, a.size)
		}
		if err != nil {
			why = fmt.Sprintf("unmap the area at %#x: %v", a.addr, err)
			continue
		}
		freed = append(freed, a)
	}
	return freed, why
}

// reclaimLeft unmaps the areas of ours the stopped process maps when
// nothing can be in them, and keeps the count and why they stay.
func (tg *target) reclaimLeft(w *proc.World) {
	freed, why := reclaimAreas(w)
	tg.areasFreed += len(freed)
	tg.areasKept = why
}

// areaNearSP is how far above a thread's stack pointer any word that
// points into an area keeps the areas.
const areaNearSP = 8 << 10

// sigframeRIP is the offset of the interrupted instruction pointer in an
// x86-64 signal frame from its first word, the return address of the
// handler (pretcode, the sigreturn stub): then uc_flags, uc_link and
// uc_stack (40 bytes), and the general registers r8-r15, rdi, rsi, rbp,
// rbx, rdx, rax, rcx, rsp, then rip.
const sigframeRIP = 8 + 40 + 16*8

// isSigreturn reports whether code is a sigreturn stub, the return
// address of a signal handler: mov $15,%rax (or %eax); syscall (the C
// libraries' __restore_rt, Go's runtime.sigreturn).
func isSigreturn(code []byte) bool {
	return bytes.HasPrefix(code, []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}) ||
		bytes.HasPrefix(code, []byte{0xb8, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05})
}

// execRanges returns the executable mappings' ranges, in address order
// (as /proc/PID/maps lists them).
func execRanges(maps []proc.Mapping) [][2]uint64 {
	var out [][2]uint64
	for _, m := range maps {
		if m.Exec {
			out = append(out, [2]uint64{m.Start, m.End})
		}
	}
	return out
}

// inRanges reports whether v lies in one of the sorted ranges rs.
func inRanges(rs [][2]uint64, v uint64) bool {
	i := sort.Search(len(rs), func(i int) bool { return rs[i][1] > v })
	return i < len(rs) && v >= rs[i][0]
}
