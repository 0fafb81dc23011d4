//go:build linux && amd64

package probe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/probeopt/probeopt/proc"
)

// The checks that tell whether the areas may be unmapped (see
// areas_linux.go), on x86-64.

// areaScanLimit bounds the bytes of stacks and text the checks read.
const areaScanLimit = 512 << 20

// areasBusy returns why the areas may still be in use in the stopped
// process (see the checks above), "" when none applies.
func areasBusy(w *proc.World, areas []leftArea) string {
	maps, err := w.Maps()
	if err != nil {
		return err.Error()
	}
	ths, err := w.Threads()
	if err != nil {
		return err.Error()
	}
	c := &areaCheck{w: w, areas: areas, maps: maps, ths: ths, budget: areaScanLimit}
	for _, check := range []func() string{c.threadPCs, c.armedReturns, c.jumpsInto, c.stackWords} {
		if why := check(); why != "" {
			return why
		}
	}
	return ""
}

// areaCheck is the state of areasBusy's checks: the stopped process's
// mappings and threads, and the bytes of text and stacks they may still
// read (budget).
type areaCheck struct {
	w      *proc.World
	areas  []leftArea
	maps   []proc.Mapping
	ths    []proc.ThreadInfo
	budget uint64
}

// inCode reports whether v lies in a slot area (not the data area).
func (c *areaCheck) inCode(v uint64) bool {
	for _, a := range c.areas {
		if a.kind != areaData && v >= a.addr && v < a.addr+a.size {
			return true
		}
	}
	return false
}

// threadPCs is check 2: a thread's PC in an area.
func (c *areaCheck) threadPCs() string {
	for _, th := range c.ths {
		for _, a := range c.areas {
			if th.PC >= a.addr && th.PC < a.addr+a.size {
				return fmt.Sprintf("thread %d runs at %#x in the area at %#x", th.Tid, th.PC, a.addr)
			}
		}
	}
	return ""
}

// armedReturns is check 3: a return probe armed in a thread table.
func (c *areaCheck) armedReturns() string {
	for _, a := range c.areas {
		if a.threads == nil {
			continue
		}
		mem := make([]byte, a.threads.Size())
		if err := c.w.ReadMemory(a.threads.Addr, mem); err != nil {
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
	return ""
}

// jumpsInto is check 1: a jump into a slot area from an executable
// file's text.
func (c *areaCheck) jumpsInto() string {
	for _, m := range c.maps {
		if !m.Exec || m.Path == "" || strings.HasPrefix(m.Path, "[") {
			continue
		}
		if m.End-m.Start > c.budget {
			return "too much text to check for jumps into the areas"
		}
		c.budget -= m.End - m.Start
		text := make([]byte, m.End-m.Start)
		if c.w.ReadMemory(m.Start, text) != nil {
			continue // unreadable: nothing runs from there either
		}
		for i := 0; i+5 <= len(text); i++ {
			if text[i] != 0xe9 {
				continue
			}
			to := m.Start + uint64(i) + 5 + uint64(int64(int32(binary.LittleEndian.Uint32(text[i+1:]))))
			if c.inCode(to) {
				return fmt.Sprintf("%s holds a jump at %#x into the area at %#x", m.Path, m.Start+uint64(i), to)
			}
		}
	}
	return ""
}

// stackWords is check 4: an address in a slot area just above a thread's
// stack pointer, or a signal frame that interrupted a slot, on the
// stacks.
func (c *areaCheck) stackWords() string {
	w, maps := c.w, c.maps
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
	for _, th := range c.ths {
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
		if sp.hi-sp.lo > c.budget {
			return "too much stack to scan for addresses in the areas"
		}
		c.budget -= sp.hi - sp.lo
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
			case off < areaNearSP && sp.sp && c.inCode(v):
				// Just above a thread's stack pointer: the frame of a
				// slot that called a function (a BPF program).
				return fmt.Sprintf("the stack at %#x holds %#x, in an area", sp.lo+uint64(off), v)
			case off+sigframeRIP+8 <= len(buf) && inRanges(exec, v) && isRestorer(v):
				// A signal frame: the interrupted instruction pointer.
				if rip := binary.LittleEndian.Uint64(buf[off+sigframeRIP:]); c.inCode(rip) {
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
	// munmap fails is tried once more, and stays for the next look. The
	// trap guards go last, once their handler is SIGTRAP's no more: until
	// then a tracer that dies in one of these remote system calls leaves
	// the process guarded.
	sort.SliceStable(areas, func(i, j int) bool { return areas[i].kind != areaTrapGuard && areas[j].kind == areaTrapGuard })
	released := false
	for _, a := range areas {
		if a.kind == areaTrapGuard && !released {
			if err := releaseTrapGuards(w, areas); err != nil {
				return freed, err.Error()
			}
			released = true
		}
		err := w.Munmap(a.addr-a.before, a.before+a.size)
		if err != nil {
			err = w.Munmap(a.addr-a.before, a.before+a.size)
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
	for _, a := range freed {
		if a.addr == tg.tguard.area {
			tg.tguard.reset() // its disposition went back with it
			tg.tguard.why = "detached"
		}
	}
	tg.dropTrapGuard(w) // the areas stay: the disposition goes back alone
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
