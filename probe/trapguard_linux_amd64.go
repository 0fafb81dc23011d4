//go:build linux && amd64

package probe

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

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
// thread before the handler's first instruction, the guardian restores the
// text, and the handler, once it runs, sends the thread back to the site,
// where the original instruction is now.
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
// thread (rt_tgsigqueueinfo), which the kernel delivers when the handler
// returns. The process then ends as it would have without the handler
// (killed by SIGTRAP, with a core dump where the limits allow one).
//
// While the tracer lives the handler never runs for a trap site: the
// tracer takes every int3's trap and discards its signal. A program's own
// SIGTRAP (raise, kill, its own int3) reaches the handler, which passes
// it on as above.
//
// It is installed only where SIGTRAP's disposition is SIG_DFL (a program
// that handles or ignores SIGTRAP keeps its disposition, and the window),
// put back as it was on a clean detach (when the disposition still names
// the handler), and, left by a tracer that died, put back by a later
// attach when it unmaps the areas (the original disposition is in the
// area's header). A program that asks for SIGTRAP's disposition while the
// trap guard is installed sees the handler, not SIG_DFL; a program that
// installs its own handler later replaces it (its handler then gets the
// SIGTRAP of such a trap stop).
//
// The area (areaTrapGuard) is one read-execute mapping: the header page
// (areas_linux.go) with the original disposition at ahTrapOrig, the code
// page (the handler, the sigreturn stub it returns through, the handler's
// sigaction and a SIG_DFL sigaction), then the table: a count, then the
// sites' addresses (little-endian uint64).

// The trap guard area's layout (offsets from its start).
const (
	tgCode          = areaHeaderSize     // the handler
	tgRestorer      = tgCode + 1024      // the sigreturn stub
	tgAction        = tgCode + 2048      // the handler's kernel sigaction (32 bytes)
	tgDefault       = tgCode + 2048 + 64 // SIG_DFL's kernel sigaction (zeros)
	tgTable         = tgCode + pageSize  // the table's count, then its entries
	tgTableSize     = 1 << 20            // bytes of the table, count included
	tgAreaSize      = tgTable + tgTableSize
	tgCapacity      = tgTableSize/8 - 1 // entries
	ahTrapOrig      = 64                // header: the original kernel sigaction (32 bytes)
	trapGuardWaitMs = 5000              // how long the handler waits for the text, in ms
)

// The kernel's struct sigaction on x86-64: handler, flags, restorer, mask.
const (
	sigactionSize = 32
	saSiginfo     = 0x4
	saOnstack     = 0x08000000
	saRestorer    = 0x04000000
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
	a.MovAbs(x86enc.R8, base+tgTable)
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
	binary.LittleEndian.PutUint64(b[8:], saSiginfo|saRestorer|saOnstack)
	binary.LittleEndian.PutUint64(b[16:], base+tgRestorer)
	binary.LittleEndian.PutUint64(b[24:], ^uint64(0)) // every signal blocked while it runs
	return b
}

// remoteSigaction calls rt_sigaction(SIGTRAP, act, &old) in the stopped
// process (act nil: a query), through a page mapped for the call.
func remoteSigaction(w *proc.World, act []byte) ([]byte, error) {
	page, err := w.Mmap(0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Munmap(page, pageSize) }()
	actAddr := uint64(0)
	if act != nil {
		if err := w.WriteMemory(page, act); err != nil {
			return nil, err
		}
		actAddr = page
	}
	if _, err := w.Syscall(unix.SYS_RT_SIGACTION, uint64(unix.SIGTRAP), actAddr, page+sigactionSize, 8); err != nil {
		return nil, err
	}
	old := make([]byte, sigactionSize)
	if err := w.ReadMemory(page+sigactionSize, old); err != nil {
		return nil, err
	}
	return old, nil
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
	old, err := remoteSigaction(w, nil)
	if err != nil {
		g.why = fmt.Sprintf("read the disposition of SIGTRAP: %v", err)
		return
	}
	if h := binary.LittleEndian.Uint64(old); h != 0 { // SIG_DFL is 0
		if !tg.adoptTrapGuard(w, h) {
			g.why = fmt.Sprintf("the program's disposition of SIGTRAP is %#x, not SIG_DFL", h)
		}
		tg.flushTrapTable()
		return
	}
	base, err := w.Mmap(0, tgAreaSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1, 0)
	if err != nil {
		g.why = fmt.Sprintf("map the trap guard: %v", err)
		return
	}
	fail := func(err error) {
		_ = w.Munmap(base, tgAreaSize)
		g.why = fmt.Sprintf("install the trap guard: %v", err)
	}
	code, err := trapGuardCode(base)
	if err != nil {
		fail(err)
		return
	}
	if err := writeAreaHeader(w, base, tgAreaSize, areaTrapGuard, os.Getpid(), nil); err != nil {
		fail(err)
		return
	}
	for _, wr := range []struct {
		at uint64
		b  []byte
	}{{base + ahTrapOrig, old}, {base + tgCode, code}, {base + tgRestorer, restorerCode}, {base + tgAction, trapGuardAction(base)}} {
		if err := w.WriteMemory(wr.at, wr.b); err != nil {
			fail(err)
			return
		}
	}
	if err := w.Mprotect(base, tgAreaSize, unix.PROT_READ|unix.PROT_EXEC); err != nil {
		fail(err)
		return
	}
	if _, err := remoteSigaction(w, trapGuardAction(base)); err != nil {
		fail(err)
		return
	}
	g.area, g.orig = base, old
	tg.flushTrapTable()
}

// adoptTrapGuard takes over the trap guard whose handler is at handler,
// when it is one of ours (a forked child's, or an earlier tracer's the
// process kept): its table is read and extended.
func (tg *target) adoptTrapGuard(w *proc.World, handler uint64) bool {
	areas, err := findAreas(w)
	if err != nil {
		return false
	}
	for _, a := range areas {
		if a.kind != areaTrapGuard || a.addr+tgCode != handler {
			continue
		}
		var cnt [8]byte
		if w.ReadMemory(a.addr+tgTable, cnt[:]) != nil {
			return false
		}
		n := int(binary.LittleEndian.Uint64(cnt[:]))
		if n > tgCapacity {
			return false
		}
		ents := make([]byte, 8*n)
		if w.ReadMemory(a.addr+tgTable+8, ents) != nil {
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
	if n, err := g.mem.WriteAt(b, int64(g.area+tgTable+8+8*uint64(g.n))); err != nil || n != len(b) {
		return
	}
	var cnt [8]byte
	binary.LittleEndian.PutUint64(cnt[:], uint64(g.n+len(add)))
	if n, err := g.mem.WriteAt(cnt[:], int64(g.area+tgTable)); err != nil || n != len(cnt) {
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
// disposition names the handler of the trap guard at area.
func restoreTrapDisposition(w *proc.World, area uint64, orig []byte) error {
	cur, err := remoteSigaction(w, nil)
	if err != nil {
		return err
	}
	if binary.LittleEndian.Uint64(cur) != area+tgCode {
		return nil // the program's own now
	}
	if len(orig) != sigactionSize {
		orig = make([]byte, sigactionSize)
	}
	_, err = remoteSigaction(w, orig)
	return err
}

// releaseTrapGuards puts back the disposition of SIGTRAP before the trap
// guard areas among areas are unmapped (the original disposition is in
// each one's header). The world is stopped.
func releaseTrapGuards(w *proc.World, areas []leftArea) error {
	for _, a := range areas {
		if a.kind != areaTrapGuard {
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
