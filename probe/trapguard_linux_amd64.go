//go:build linux && amd64

package probe

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/x86enc"
	"github.com/probeopt/probeopt/proc"
)

// The trap guard: a SIGTRAP handler the engine installs in a process that
// has a guardian, for the one instant package guardian cannot cover. A
// thread that ran into the int3 of a trap site and whose trap stop the
// tracer had not collected (wait4) when it died is handed its SIGTRAP by
// the kernel as it is detached (the stop's signal is cleared only by the
// tracer's wait4). Under SIG_DFL that kills the process; with the trap
// guard the kernel sets up the handler's frame, the stop latch stops the
// thread before the handler's first instruction, and the guardian restores
// the text and returns the thread from the handler to the site, where the
// original instruction is now (as it does with a program's own handler).
// The handler, should it run, sends the thread back to the site itself.
//
// The handler acts only on a trap the CPU raised at an int3 (si_code
// SI_KERNEL) one byte before the interrupted instruction pointer, at an
// address in its table of trap sites: the address of every trap site the
// engine recorded in the guardian's log, written into the table before the
// batch that writes its int3 (and never taken out: a thread may have run a
// site's int3 before the site was removed). When the int3 is still in
// memory (no guardian restored the text yet) it waits, a millisecond at a
// time, for up to trapGuardWait; then, and for every other SIGTRAP, it
// passes the signal on to the default action unchanged: it puts SIG_DFL
// back and queues the same signal, with the same siginfo, to its own
// thread (rt_tgsigqueueinfo), which the kernel delivers at once (the
// handler blocks no signal: SA_NODEFER, an empty mask). The process then ends as it would have without the handler
// (killed by SIGTRAP, with a core dump where the limits allow one).
//
// While the tracer lives the handler never runs for a trap site: the
// tracer takes every int3's trap and discards its signal. A program's own
// SIGTRAP (raise, kill, its own int3) reaches the handler, which passes
// it on as above.
//
// It is installed only where SIGTRAP's disposition is SIG_DFL (a program
// that handles SIGTRAP keeps its handler, whose frame the guardian
// unwinds the same way; one that ignores it keeps the window),
// put back as it was on a clean detach (when the disposition still names
// the handler), and, left by a tracer that died, put back by a later
// attach when it unmaps the areas (the original disposition is in the
// area's header). A program that asks for SIGTRAP's disposition while the
// trap guard is installed sees the handler, not SIG_DFL; a program that
// installs its own handler later replaces it (its handler then gets the
// SIGTRAP of such a trap stop).
//
// The area (areaTrapGuard) is two mappings, one after the other: a
// read-write part (a scratch page for the remote rt_sigaction calls, then
// the table: a count, then the sites' addresses, little-endian uint64) and
// the read-execute area proper, whose header page (areas_linux.go) holds
// the original disposition (ahTrapOrig) and the size of the part below it
// (ahTrapData), followed by the code page (the handler, the sigreturn stub
// it returns through, the handler's sigaction and a SIG_DFL sigaction).
// Making it costs three remote system calls at an attach (mmap, mprotect,
// rt_sigaction) and none where SIGTRAP is not SIG_DFL (read from
// /proc/PID/status); putting it back one at a detach. Each is an instant
// in which the tracer's death leaves the borrowed thread with the call's
// registers (see package guardian).

// The trap guard's layout: offsets from the area proper (its header), the
// read-write part below it.
const (
	tgCode          = areaHeaderSize         // the handler
	tgRestorer      = tgCode + 1024          // the sigreturn stub
	tgAction        = tgCode + 2048          // the handler's kernel sigaction (32 bytes)
	tgDefault       = tgCode + 2048 + 64     // SIG_DFL's kernel sigaction (zeros)
	tgSize          = tgCode + pageSize      // the read-execute part
	tgTableSize     = 1 << 20                // bytes of the table, count included
	tgData          = pageSize + tgTableSize // the read-write part: scratch, table
	tgScratchBelow  = tgData                 // the scratch page, this far below the area
	tgTableBelow    = tgData - pageSize      // the table (a count, then the entries), this far below
	tgCapacity      = tgTableSize/8 - 1      // entries
	trapGuardWaitMs = 5000                   // how long the handler waits for the text, in ms
)

// The kernel's struct sigaction on x86-64: handler, flags, restorer, mask.
const (
	sigactionSize = 32
	saSiginfo     = 0x4
	saOnstack     = 0x08000000
	saRestorer    = 0x04000000
	saNodefer     = 0x40000000
	siKernel      = 0x80      // si_code of a trap the CPU raised at an int3
	ucRIP         = 40 + 16*8 // offset of the saved rip in a ucontext
)

// trapGuardCode returns the handler's code for an area at base.
func trapGuardCode(base uint64) ([]byte, error) {
	a := x86enc.New(base + tgCode)
	pass, found, wait, back, scan, queued := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	// rdi: the signal, rsi: its siginfo, rdx: the ucontext. Every
	// register is the handler's own: sigreturn restores the thread's.
	a.Mov(x86enc.S64, x86enc.R13, x86enc.RSI)
	a.Mov(x86enc.S64, x86enc.R14, x86enc.RDX)
	a.ALUMemImm32(x86enc.Cmp, x86enc.S32, x86enc.At(x86enc.RSI, 8), siKernel)
	a.Jcc(x86enc.CondNE, pass)
	a.Load(x86enc.S64, x86enc.RBX, x86enc.At(x86enc.RDX, ucRIP))
	a.Dec(x86enc.S64, x86enc.RBX) // where the int3 was
	a.MovAbs(x86enc.R8, base-tgTableBelow)
	a.Load(x86enc.S64, x86enc.R9, x86enc.At(x86enc.R8, 0))
	a.ALU(x86enc.Xor, x86enc.S32, x86enc.RCX, x86enc.RCX)
	a.Bind(scan)
	a.ALU(x86enc.Cmp, x86enc.S64, x86enc.RCX, x86enc.R9)
	a.Jcc(x86enc.CondAE, pass)
	a.ALULoad(x86enc.Cmp, x86enc.S64, x86enc.RBX, x86enc.Indexed(x86enc.R8, x86enc.RCX, 8, 8))
	a.Jcc(x86enc.CondE, found)
	a.Inc(x86enc.S64, x86enc.RCX)
	a.Jmp(scan)
	a.Bind(found)
	a.MovImm32(x86enc.R12, trapGuardWaitMs)
	a.Bind(wait)
	a.LoadZxB(x86enc.RAX, x86enc.At(x86enc.RBX, 0))
	a.ALUImm32(x86enc.Cmp, x86enc.S32, x86enc.RAX, 0xcc)
	a.Jcc(x86enc.CondNE, back)
	// nanosleep({0, 1 ms}, NULL)
	a.ALUImm8(x86enc.Sub, x86enc.S64, x86enc.RSP, 16)
	a.StoreImm(x86enc.S64, x86enc.At(x86enc.RSP, 0), 0)
	a.StoreImm(x86enc.S64, x86enc.At(x86enc.RSP, 8), 1000000)
	a.Mov(x86enc.S64, x86enc.RDI, x86enc.RSP)
	a.ALU(x86enc.Xor, x86enc.S32, x86enc.RSI, x86enc.RSI)
	a.MovImm32(x86enc.RAX, unix.SYS_NANOSLEEP)
	a.Syscall()
	a.ALUImm8(x86enc.Add, x86enc.S64, x86enc.RSP, 16)
	a.Dec(x86enc.S32, x86enc.R12)
	a.Jcc(x86enc.CondNE, wait)
	a.Jmp(pass)
	a.Bind(back)
	// The original instruction is in memory: run it.
	a.Store(x86enc.S64, x86enc.At(x86enc.R14, ucRIP), x86enc.RBX)
	a.Ret()
	a.Bind(pass)
	// rt_sigaction(SIGTRAP, &SIG_DFL, NULL, 8)
	a.MovImm32(x86enc.RDI, uint32(unix.SIGTRAP))
	a.MovAbs(x86enc.RSI, base+tgDefault)
	a.ALU(x86enc.Xor, x86enc.S32, x86enc.RDX, x86enc.RDX)
	a.MovImm32(x86enc.R10, 8)
	a.MovImm32(x86enc.RAX, unix.SYS_RT_SIGACTION)
	a.Syscall()
	a.MovImm32(x86enc.RAX, unix.SYS_GETPID)
	a.Syscall()
	a.Mov(x86enc.S64, x86enc.R12, x86enc.RAX)
	a.MovImm32(x86enc.RAX, unix.SYS_GETTID)
	a.Syscall()
	a.Mov(x86enc.S64, x86enc.R15, x86enc.RAX)
	// rt_tgsigqueueinfo(pid, tid, SIGTRAP, info): the same siginfo.
	a.Mov(x86enc.S64, x86enc.RDI, x86enc.R12)
	a.Mov(x86enc.S64, x86enc.RSI, x86enc.R15)
	a.MovImm32(x86enc.RDX, uint32(unix.SIGTRAP))
	a.Mov(x86enc.S64, x86enc.R10, x86enc.R13)
	a.MovImm32(x86enc.RAX, unix.SYS_RT_TGSIGQUEUEINFO)
	a.Syscall()
	a.Test(x86enc.S64, x86enc.RAX, x86enc.RAX)
	a.Jcc(x86enc.CondE, queued)
	// Not queued (the queue is full): tgkill(pid, tid, SIGTRAP).
	a.Mov(x86enc.S64, x86enc.RDI, x86enc.R12)
	a.Mov(x86enc.S64, x86enc.RSI, x86enc.R15)
	a.MovImm32(x86enc.RDX, uint32(unix.SIGTRAP))
	a.MovImm32(x86enc.RAX, unix.SYS_TGKILL)
	a.Syscall()
	a.Bind(queued)
	a.Ret()
	code, err := a.Finish()
	if err != nil {
		return nil, err
	}
	if len(code) > tgRestorer-tgCode {
		return nil, fmt.Errorf("trap guard handler of %d bytes", len(code))
	}
	return code, nil
}

// restorerCode is the sigreturn stub: mov $15,%rax; syscall (what
// isSigreturn recognises).
var restorerCode = []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}

// trapGuardAction returns the handler's kernel sigaction for an area at
// base.
func trapGuardAction(base uint64) []byte {
	b := make([]byte, sigactionSize)
	binary.LittleEndian.PutUint64(b[0:], base+tgCode)
	// No signal blocked while it runs, SIGTRAP included: a handler frame
	// that never returns (the guardian gave a borrowed thread its
	// registers back over it) leaves the thread's signal mask as it was.
	binary.LittleEndian.PutUint64(b[8:], saSiginfo|saRestorer|saOnstack|saNodefer)
	binary.LittleEndian.PutUint64(b[16:], base+tgRestorer)
	return b
}

// remoteSigaction calls rt_sigaction(SIGTRAP, act, &old) in the stopped
// process (act 0: a query) with old in the scratch page of the trap guard
// at area, and returns old.
func remoteSigaction(w *proc.World, area, act uint64) ([]byte, error) {
	scratch := area - tgScratchBelow
	if _, err := w.Syscall(unix.SYS_RT_SIGACTION, uint64(unix.SIGTRAP), act, scratch, 8); err != nil {
		return nil, err
	}
	old := make([]byte, sigactionSize)
	if err := w.ReadMemory(scratch, old); err != nil {
		return nil, err
	}
	return old, nil
}

// trapDisposition reads from /proc/PID/status whether the process
// catches or ignores SIGTRAP (neither: SIG_DFL).
func trapDisposition(pid int) (caught, ignored bool, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, false, err
	}
	bit := uint64(1) << (unix.SIGTRAP - 1)
	for _, l := range strings.Split(string(b), "\n") {
		for k, p := range map[string]*bool{"SigCgt:": &caught, "SigIgn:": &ignored} {
			if v, ok := strings.CutPrefix(l, k); ok {
				m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					return false, false, fmt.Errorf("%s %q: %w", k, v, err)
				}
				*p = m&bit != 0
			}
		}
	}
	return caught, ignored, nil
}

// armTrapGuard installs the trap guard in the stopped process when it has
// a guardian and none is armed for its image yet, or adopts the one the
// process has (a forked child's, inherited; an earlier tracer's, kept),
// and writes the trap sites recorded so far into its table. When none can
// be installed the reason is kept (tg.tguard.why) and it is not tried
// again for this image.
func (tg *target) armTrapGuard(w *proc.World) {
	g := &tg.tguard
	if tg.guard == nil || g.area != 0 || g.why != "" {
		return
	}
	if tg.t.opts.NoTrapGuard {
		g.why = "Options.NoTrapGuard"
		return
	}
	caught, ignored, err := trapDisposition(tg.pid)
	switch {
	case err != nil:
		g.why = fmt.Sprintf("read the disposition of SIGTRAP: %v", err)
		return
	case ignored:
		g.why = "the program ignores SIGTRAP"
		return
	case caught:
		if !tg.adoptTrapGuard(w) {
			g.why = "the program handles SIGTRAP"
		}
		tg.flushTrapTable()
		return
	}
	// Where the engine's other areas go (placeMapping: far below the
	// program's mappings), so that the program's later mappings (the
	// libraries the dynamic linker has yet to map) are where they would
	// be untraced.
	maps, err := w.Maps()
	if err != nil {
		g.why = fmt.Sprintf("map the trap guard: %v", err)
		return
	}
	var near uint64
	for _, m := range maps {
		if m.Exec && m.Path != "" && !strings.HasPrefix(m.Path, "[") {
			near = max(near, m.Start)
		}
	}
	base, err := tg.placeMapping(w, []uint64{near}, tgData+tgSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1)
	if err != nil {
		g.why = fmt.Sprintf("map the trap guard: %v", err)
		return
	}
	area := base + tgData
	fail := func(err error) {
		_ = w.Munmap(base, tgData+tgSize)
		g.why = fmt.Sprintf("install the trap guard: %v", err)
	}
	code, err := trapGuardCode(area)
	if err != nil {
		fail(err)
		return
	}
	if err := writeAreaHeader(w, area, tgSize, areaTrapGuard, os.Getpid(), nil); err != nil {
		fail(err)
		return
	}
	var data [8]byte
	binary.LittleEndian.PutUint64(data[:], tgData)
	orig := make([]byte, sigactionSize) // SIG_DFL, as status said
	for _, wr := range []struct {
		at uint64
		b  []byte
	}{{area + ahTrapOrig, orig}, {area + ahTrapData, data[:]}, {area + tgCode, code}, {area + tgRestorer, restorerCode}, {area + tgAction, trapGuardAction(area)}} {
		if err := w.WriteMemory(wr.at, wr.b); err != nil {
			fail(err)
			return
		}
	}
	if err := w.Mprotect(area, tgSize, unix.PROT_READ|unix.PROT_EXEC); err != nil {
		fail(err)
		return
	}
	if _, err := w.Syscall(unix.SYS_RT_SIGACTION, uint64(unix.SIGTRAP), area+tgAction, 0, 8); err != nil {
		fail(err)
		return
	}
	g.area, g.orig = area, orig
	tg.flushTrapTable()
}

// adoptTrapGuard takes over the trap guard of ours whose handler is
// SIGTRAP's (a forked child's, or an earlier tracer's the process kept):
// its table is read and extended. It reports whether there was one.
func (tg *target) adoptTrapGuard(w *proc.World) bool {
	areas, err := findAreas(w)
	if err != nil {
		return false
	}
	for _, a := range areas {
		if a.kind != areaTrapGuard || a.before != tgData {
			continue
		}
		cur, err := remoteSigaction(w, a.addr, 0)
		if err != nil || binary.LittleEndian.Uint64(cur) != a.addr+tgCode {
			continue
		}
		table := a.addr - tgTableBelow
		var cnt [8]byte
		if w.ReadMemory(table, cnt[:]) != nil {
			return false
		}
		n := int(binary.LittleEndian.Uint64(cnt[:]))
		if n > tgCapacity {
			return false
		}
		ents := make([]byte, 8*n)
		if w.ReadMemory(table+8, ents) != nil {
			return false
		}
		g := &tg.tguard
		g.area, g.n, g.has = a.addr, n, map[uint64]bool{}
		g.orig = make([]byte, sigactionSize)
		_ = w.ReadMemory(a.addr+ahTrapOrig, g.orig)
		for i := 0; i < n; i++ {
			g.has[binary.LittleEndian.Uint64(ents[8*i:])] = true
		}
		return true
	}
	return false
}

// noteTrapSite adds the trap site at addr to the trap guard's table (at
// once when the trap guard is armed, else when it is), before its int3 is
// written (under Tracer.mu).
func (tg *target) noteTrapSite(addr uint64) {
	g := &tg.tguard
	if g.has == nil {
		g.has = map[uint64]bool{}
	}
	if g.has[addr] {
		return
	}
	g.has[addr] = true
	g.pending = append(g.pending, addr)
	tg.flushTrapTable()
}

// flushTrapTable writes the pending sites into the armed trap guard's
// table: the entries, then the count, through /proc/PID/mem (from any
// thread: the caller may be inside a stop). The process may run: nothing
// but the handler reads the table, and only once the tracer is gone.
func (tg *target) flushTrapTable() {
	g := &tg.tguard
	if g.area == 0 || len(g.pending) == 0 {
		return
	}
	add := g.pending
	if room := tgCapacity - g.n; len(add) > room {
		add = add[:room] // the rest keep the window
	}
	if len(add) == 0 {
		return
	}
	b := make([]byte, 8*len(add))
	for i, a := range add {
		binary.LittleEndian.PutUint64(b[8*i:], a)
	}
	if g.mem == nil {
		f, err := os.OpenFile("/proc/"+strconv.Itoa(tg.pid)+"/mem", os.O_RDWR, 0)
		if err != nil {
			return
		}
		g.mem = f
	}
	table := int64(g.area - tgTableBelow)
	if n, err := g.mem.WriteAt(b, table+8+8*int64(g.n)); err != nil || n != len(b) {
		return
	}
	var cnt [8]byte
	binary.LittleEndian.PutUint64(cnt[:], uint64(g.n+len(add)))
	if n, err := g.mem.WriteAt(cnt[:], table); err != nil || n != len(cnt) {
		return
	}
	g.n += len(add)
	g.pending = g.pending[:0]
}

// dropTrapGuard puts SIGTRAP's disposition back as it was before the trap
// guard, when it still names the trap guard's handler; the area stays for
// reclaimAreas. The world is stopped; every site is gone.
func (tg *target) dropTrapGuard(w *proc.World) {
	g := &tg.tguard
	if g.area == 0 {
		return
	}
	if err := restoreTrapDisposition(w, g.area, g.orig); err == nil {
		g.reset()
		g.why = "detached"
	}
}

// restoreTrapDisposition puts orig back as SIGTRAP's disposition when the
// disposition names the handler of the trap guard at area: one remote
// rt_sigaction that swaps them, and a second only when the program had
// put a handler of its own (which goes back). None when /proc/PID/status
// says SIGTRAP is not caught.
func restoreTrapDisposition(w *proc.World, area uint64, orig []byte) error {
	if caught, _, err := trapDisposition(w.Pid()); err == nil && !caught {
		return nil // the program put a disposition of its own
	}
	if len(orig) != sigactionSize {
		orig = make([]byte, sigactionSize)
	}
	act := area - tgScratchBelow + 2*sigactionSize
	if err := w.WriteMemory(act, orig); err != nil {
		return err
	}
	cur, err := remoteSigaction(w, area, act)
	if err != nil {
		return err
	}
	if binary.LittleEndian.Uint64(cur) == area+tgCode {
		return nil
	}
	// The program's own handler: put it back.
	_, err = w.Syscall(unix.SYS_RT_SIGACTION, uint64(unix.SIGTRAP), area-tgScratchBelow, 0, 8)
	return err
}

// releaseTrapGuards puts back the disposition of SIGTRAP before the trap
// guard areas among areas are unmapped (the original disposition is in
// each one's header). The world is stopped.
func releaseTrapGuards(w *proc.World, areas []leftArea) error {
	for _, a := range areas {
		if a.kind != areaTrapGuard || a.before != tgData {
			continue
		}
		orig := make([]byte, sigactionSize)
		_ = w.ReadMemory(a.addr+ahTrapOrig, orig)
		if err := restoreTrapDisposition(w, a.addr, orig); err != nil {
			return fmt.Errorf("the disposition of SIGTRAP: %w", err)
		}
	}
	return nil
}
