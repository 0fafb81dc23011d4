//go:build linux && amd64

package x86cpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/proc"
)

// Layout of the probe area mapped in the traced child. The addresses are
// fixed, so the same bytes always run at the same address. They lie at
// 64 GiB, where a freshly executed program has nothing, and low enough that
// a register pointing into the data area, scaled by 8 and plus a 32-bit
// displacement, is still a canonical address: most memory operands then
// touch the data area or fault as an ordinary page fault rather than #GP.
// They are mapped with MAP_FIXED_NOREPLACE so nothing is clobbered.
const (
	// probeBase is page A, mapped read+execute: the candidate bytes are
	// written at its end.
	probeBase = 0x10_0000_0000
	pageSize  = 0x1000
	// probeBoundary is the first byte of page B, mapped read+write but not
	// executable, right after page A. Fetching it faults.
	probeBoundary = probeBase + pageSize
	// dataBase is a read+write area that all address registers point into.
	dataBase = probeBase + 0x10000
	dataSize = 0x10000
	// dataRegs is where in the data area the register values start.
	dataRegs = dataBase + 0x8000
	// badSyscall is the value of rax: no such system call exists, so a
	// syscall instruction that were executed would only return -ENOSYS.
	badSyscall = 0x7fff_ffff
)

// Kernel interface constants not worth an import, and tuning.
const (
	ripUserOffset     = 16 * 8 // offsetof(struct user, regs.rip)
	csUserOffset      = 17 * 8 // offsetof(struct user, regs.cs)
	ssUserOffset      = 20 * 8 // offsetof(struct user, regs.ss)
	siKernel          = 0x80   // si_code SI_KERNEL: a SIGSEGV the kernel raised for #GP
	fxsaveSize        = 512    // struct user_i387_struct
	archReqXcompPerm  = 0x1023 // arch_prctl ARCH_REQ_XCOMP_PERM
	xfeatureXtiledata = 18     // AMX tile data state component
	// callTimeout bounds the work on one string (at most 16 single steps).
	callTimeout = 5 * time.Second
)

// LengthOracle asks the host CPU how long an x86-64 instruction is.
//
// It keeps one child process stopped under ptrace that never runs code of
// its own (but a `jmp .` while it is handed over at its start). To test
// whether a candidate is longer than k bytes, its first k bytes are written
// so that they end exactly at the boundary between an executable page and
// a non-executable one, the registers are reset to fixed
// values, the instruction pointer is set to the first byte, and the child
// makes one single step with system calls emulated
// (PTRACE_SYSEMU_SINGLESTEP, so a syscall instruction is never executed).
// An instruction-fetch fault at the boundary with the instruction pointer
// still at the first byte means the CPU wanted more than k bytes. Anything
// else (the single-step trap, a fault on data, #GP, #DE, a system-call
// stop...) means it fetched the whole instruction within k bytes, and SIGILL
// means #UD. No signal is ever delivered to the child.
//
// Length tries k = 1, 2, 3... and stops at the first k without a fetch
// fault: the steps before it run nothing, so only one step per string runs
// the instruction. With 15 bytes in hand the CPU raises #GP for an
// instruction longer than 15 bytes instead of fetching a 16th byte, which
// looks like a 15-byte instruction that faulted while executing; the two
// are told apart by removing one prefix that cannot change the length and
// trying again with 14 bytes.
//
// The child is started, and its probe area mapped, through package proc
// (the traced-child driver of the project); proc then hands it over to the
// oracle's own tracer thread, because the steps need requests that proc's
// World.Step does not make (see spawn). Every ptrace request must come from
// the tracer thread. A LengthOracle therefore owns one goroutine locked to
// its OS thread for its whole life (never unlocked); that goroutine has
// proc start the child, seizes it, makes every ptrace call of the steps,
// and runs the work of each method as a closure. The methods may be called from any
// goroutine and are safe for concurrent use: calls are served one at a
// time. That thread and the child are pinned to the CPU the thread was on
// when the oracle started, so that each step hands the CPU from one to the
// other instead of waking another CPU (which costs tens of microseconds in
// a virtual machine); LengthBatch saves the hand-off from the caller's
// goroutine to that thread for each string.
//
// If the child dies (it should not), it is started again and the call is
// retried once; Restarts counts these. A call that does not come back
// within a few seconds kills the child, which is replaced, and the call
// fails with ErrTimeout.
type LengthOracle struct {
	mu     sync.Mutex    // serialises calls and guards closed
	closed bool          // Close was called
	calls  chan func()   // work for the ptrace thread
	reply  chan struct{} // the ptrace thread finished a closure
	exited chan struct{} // closed when the ptrace thread has ended

	// Shared between the ptrace thread and the watchdog goroutine.
	callStart atomic.Int64 // unix nanoseconds when the call in flight began, 0 when idle
	timedOut  atomic.Bool  // the watchdog killed the child
	killMu    sync.Mutex   // guards pidfd and childPid
	pidfd     int          // pidfd of the child, -1 when none
	childPid  int          // pid of the child for the watchdog, 0 when none
	stopWatch chan struct{}
	restarts  atomic.Int64
	steps     atomic.Uint64

	// Owned by the ptrace thread.
	pid     int             // the traced child, 0 when none
	mem     int             // /proc/pid/mem, -1 when not open
	regs    unix.PtraceRegs // register template; Rip is set for each step
	fpregs  [fxsaveSize]byte
	siginfo faultSiginfo
	peek    uint64
	buf     [MaxX86Len]byte
}

// faultSiginfo is the start of the kernel's siginfo_t for a fault signal on
// amd64 (128 bytes in all).
type faultSiginfo struct {
	Signo int32
	Errno int32
	Code  int32
	_     int32
	Addr  uint64 // si_addr: the faulting address
	_     [104]byte
}

// NewLengthOracle starts a traced child (a new execution of the current
// program, stopped before its first instruction) and maps the probe pages in it. Close
// releases it. It fails with an error wrapping the errno (EPERM, for
// example) when ptrace is not permitted.
func NewLengthOracle() (*LengthOracle, error) {
	o := &LengthOracle{
		calls:     make(chan func()),
		reply:     make(chan struct{}),
		exited:    make(chan struct{}),
		stopWatch: make(chan struct{}),
		pidfd:     -1,
		mem:       -1,
	}
	started := make(chan error, 1)
	go o.serve(started)
	if err := <-started; err != nil {
		<-o.exited
		return nil, err
	}
	go o.watch()
	return o, nil
}

// Length returns how many bytes of b the host CPU takes as one instruction.
// Only the first 15 bytes of b are used.
//
// With res == CPUAccepted, n is the instruction length (1..15). With
// CPUUndefined the CPU raised #UD and n is the number of bytes it fetched
// first. With CPULonger the CPU wanted more bytes than b has (or than 15)
// and n is 0. With CPUAmbiguous n is 15. err is non-nil only when the
// oracle itself failed (the child could not be traced or restarted, a
// timeout, or the oracle is closed).
func (o *LengthOracle) Length(b []byte) (n int, res CPUResult, err error) {
	var cerr error
	if err := o.run(func() { n, res, cerr = o.lengthRetry(b) }); err != nil {
		return 0, CPUNone, err
	}
	return n, res, cerr
}

// LengthBatch is Length for many strings in one hand-off to the ptrace
// thread: out[i] receives the answer for in[i] (len(out) must be at least
// len(in)). It stops at the first failure of the oracle and returns it; the
// answers before it are valid.
func (o *LengthOracle) LengthBatch(in [][]byte, out []CPULength) error {
	if len(out) < len(in) {
		return fmt.Errorf("length batch: %d results for %d strings", len(out), len(in))
	}
	var cerr error
	err := o.run(func() {
		for i, b := range in {
			n, res, err := o.lengthRetry(b)
			out[i] = CPULength{N: n, Result: res}
			if err != nil {
				cerr = fmt.Errorf("string %d: %w", i, err)
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return cerr
}

// Restarts returns how many times the traced child had to be started again
// after it died or timed out.
func (o *LengthOracle) Restarts() int { return int(o.restarts.Load()) }

// Steps returns how many single steps the child has made so far.
func (o *LengthOracle) Steps() uint64 { return o.steps.Load() }

// Close kills the traced child and ends the ptrace thread. It waits for a
// call in flight to finish. Calls after Close fail with ErrClosed; Close
// itself may be called more than once.
func (o *LengthOracle) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	close(o.calls)
	o.mu.Unlock()
	<-o.exited
	close(o.stopWatch)
	return nil
}

// run executes f on the ptrace thread and waits for it.
func (o *LengthOracle) run(f func()) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return ErrClosed
	}
	o.calls <- f
	<-o.reply
	return nil
}

// serve is the ptrace thread: it starts the child, then runs closures until
// Close. It never unlocks its OS thread, so the runtime ends the thread with
// the goroutine instead of handing a tracer thread to other goroutines.
func (o *LengthOracle) serve(started chan<- error) {
	runtime.LockOSThread()
	defer close(o.exited)
	pinToCurrentCPU()
	err := o.spawn()
	if err == nil {
		err = o.selfCheck()
	}
	if err != nil {
		o.reap()
		started <- err
		return
	}
	started <- nil
	for f := range o.calls {
		f()
		o.reply <- struct{}{}
	}
	o.reap()
}

// selfCheck measures a 5-byte nop, which needs every part of the machinery
// (fetch faults at four guesses, then the single-step trap), so that a
// kernel or sandbox that traces differently fails at once instead of giving
// wrong answers.
func (o *LengthOracle) selfCheck() error {
	nop5 := []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}
	n, res, err := o.length(nop5)
	if err != nil {
		return fmt.Errorf("cpu length oracle self-check: %w", err)
	}
	if n != len(nop5) || res != CPUAccepted {
		return fmt.Errorf("cpu length oracle self-check: nop5 measured %d bytes (%v), want 5", n, res)
	}
	return nil
}

// watch kills the child when one call has been in flight for longer than
// callTimeout; the ptrace thread then sees it die and replaces it.
func (o *LengthOracle) watch() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-o.stopWatch:
			return
		case <-t.C:
		}
		s := o.callStart.Load()
		if s == 0 || time.Since(time.Unix(0, s)) < callTimeout {
			continue
		}
		o.killMu.Lock()
		if o.callStart.Load() == s {
			o.timedOut.Store(true)
			// Best effort: if it fails the child is already gone. Without
			// a pidfd (Linux before 5.3) the pid is used; the ptrace
			// thread clears it as soon as it has reaped the child.
			if o.pidfd >= 0 {
				_ = unix.PidfdSendSignal(o.pidfd, unix.SIGKILL, nil, 0)
			} else if o.childPid > 0 {
				_ = unix.Kill(o.childPid, unix.SIGKILL)
			}
		}
		o.killMu.Unlock()
	}
}

// pinToCurrentCPU restricts the calling thread to the CPU it runs on;
// spawn gives the child the same restriction. Failure is harmless (only
// slower), so it is ignored.
func pinToCurrentCPU() {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return
	}
	var set unix.CPUSet
	set.Set(int(cpu))
	_ = unix.SchedSetaffinity(0, &set)
}

// spawn starts the traced child, stopped at its exec, and prepares it.
// Must run on the ptrace thread.
//
// The setup goes through package proc, the project's traced-child driver:
// proc starts the child (stopped before its first instruction) and makes
// the system calls that map the probe area in it. The stepping cannot:
// it needs PTRACE_SYSEMU_SINGLESTEP, the signal and siginfo of the stop a
// step ends in (proc's Step takes a fault before the instruction for an
// asynchronous signal and steps again), the x87/SSE state and the segment
// selectors, each of them on every step, on this thread. So the child is
// parked on a `jmp .` in page A, detached from proc, and seized by this
// thread, which then makes every request of the steps itself.
func (o *LengthOracle) spawn() error {
	// The child runs this very program (through /proc/self/exe, which
	// works even if the file was replaced or removed), but it never gets
	// to run any of it.
	const exe = "/proc/self/exe"
	p, err := proc.Spawn([]string{exe}, &proc.SpawnOptions{Env: []string{}})
	if err != nil {
		return fmt.Errorf("start traced child: %w", err)
	}
	pid := p.Pid()
	if err := o.mapProbeArea(p); err != nil {
		_ = p.Kill()
		return err
	}
	if err := p.Detach(); err != nil {
		_ = p.Kill()
		return fmt.Errorf("hand traced child %d over: %w", pid, err)
	}
	// From here on the child spins on the loop until it is seized; it is
	// killed when this thread ends (PTRACE_O_EXITKILL).
	o.pid = pid
	if err := o.ptrace(unix.PTRACE_SEIZE, 0, unix.PTRACE_O_EXITKILL|unix.PTRACE_O_TRACESYSGOOD); err != nil {
		return fmt.Errorf("seize traced child %d: %w", pid, err)
	}
	if err := o.ptrace(unix.PTRACE_INTERRUPT, 0, 0); err != nil {
		return fmt.Errorf("interrupt traced child %d: %w", pid, err)
	}
	var ws unix.WaitStatus
	if err := o.wait(&ws); err != nil {
		return fmt.Errorf("wait for traced child %d: %w", pid, err)
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP || ws.TrapCause() != unix.PTRACE_EVENT_STOP {
		if ws.Exited() || ws.Signaled() {
			o.childGone()
		}
		return fmt.Errorf("traced child %d did not stop when interrupted: %s", pid, describeWait(ws))
	}
	o.killMu.Lock()
	o.childPid = pid
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		o.pidfd = fd
	}
	o.killMu.Unlock()
	// The child shares the CPU of this thread (see LengthOracle).
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		_ = unix.SchedSetaffinity(pid, &set)
	}
	mem, err := unix.Open(fmt.Sprintf("/proc/%d/mem", pid), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open memory of %d: %w", pid, err)
	}
	o.mem = mem
	var init unix.PtraceRegs
	if err := unix.PtraceGetRegs(pid, &init); err != nil {
		return fmt.Errorf("get registers of %d: %w", pid, err)
	}
	if init.Rip != probeBase {
		return fmt.Errorf("traced child %d seized at %#x, not at its loop at %#x", pid, init.Rip, uint64(probeBase))
	}
	if err := o.ptracePtr(unix.PTRACE_GETFPREGS, 0, unsafe.Pointer(&o.fpregs)); err != nil {
		return fmt.Errorf("get fp registers of %d: %w", pid, err)
	}
	o.setTemplate(&init)
	return nil
}

// setTemplate fills the register template from the child's registers at
// exec: the segment selectors stay; every general-purpose register but rax
// points into the data area, at distinct places; rax holds a system call
// number that does not exist; orig_rax is -1 so that no system call restart
// is ever applied; only IF (and the always-one bit 1) is set in rflags.
func (o *LengthOracle) setTemplate(init *unix.PtraceRegs) {
	r := *init
	p := uint64(dataRegs)
	r.Rax = badSyscall
	r.Rsp = p
	r.Rcx = p + 0x100
	r.Rdx = p + 0x200
	r.Rbx = p + 0x300
	r.Rbp = p + 0x400
	r.Rsi = p + 0x500
	r.Rdi = p + 0x600
	r.R8 = p + 0x700
	r.R9 = p + 0x800
	r.R10 = p + 0x900
	r.R11 = p + 0xa00
	r.R12 = p + 0xb00
	r.R13 = p + 0xc00
	r.R14 = p + 0xd00
	r.R15 = p + 0xe00
	r.Orig_rax = ^uint64(0)
	r.Eflags = 0x202
	r.Fs_base = 0
	r.Gs_base = 0
	o.regs = r
}

// mapProbeArea maps page A (R-X), page B (RW, right after A) and the data
// area in the child, stopped under proc, through remote system calls;
// puts the child in a process group of its own (so that terminal signals
// do not reach it); and parks it on a `jmp .` at the start of page A, from
// where the ptrace thread takes it over.
func (o *LengthOracle) mapProbeArea(p *proc.Process) error {
	pid := p.Pid()
	const (
		anonFixed = unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_FIXED_NOREPLACE
		rx        = unix.PROT_READ | unix.PROT_EXEC
		rw        = unix.PROT_READ | unix.PROT_WRITE
	)
	maps := []struct {
		addr, size uint64
		prot       int
	}{
		{probeBase, pageSize, rx},
		{probeBoundary, pageSize, rw},
		{dataBase, dataSize, rw},
	}
	for _, m := range maps {
		got, err := p.Mmap(m.addr, m.size, m.prot, anonFixed, -1, 0)
		if err == nil && got != m.addr {
			err = fmt.Errorf("returned %#x", got)
		}
		if err != nil {
			return fmt.Errorf("child %d: mmap at %#x: %w", pid, m.addr, err)
		}
	}
	// AMX instructions are valid on CPUs that have them, but Linux raises
	// SIGILL for them until the process asks for the tile state. Ask; on
	// other CPUs or kernels this just fails.
	_, _ = p.Syscall(unix.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata)
	if _, err := p.Syscall(unix.SYS_SETPGID, 0, 0); err != nil {
		return fmt.Errorf("child %d: setpgid: %w", pid, err)
	}
	if err := p.WriteMemory(probeBase, []byte{0xeb, 0xfe}); err != nil {
		return fmt.Errorf("child %d: write its loop: %w", pid, err)
	}
	r, err := p.Regs(pid)
	if err != nil {
		return fmt.Errorf("child %d: %w", pid, err)
	}
	r.SetPC(probeBase)
	if err := p.SetRegs(pid, &r); err != nil {
		return fmt.Errorf("child %d: %w", pid, err)
	}
	return nil
}

// lengthRetry runs length, replacing the child and retrying once if it
// died.
func (o *LengthOracle) lengthRetry(b []byte) (int, CPUResult, error) {
	o.callStart.Store(time.Now().UnixNano())
	defer o.callStart.Store(0)
	for attempt := 0; ; attempt++ {
		n, res, err := o.length(b)
		if !errors.Is(err, ErrChildDied) {
			return n, res, err
		}
		timedOut := o.timedOut.Swap(false)
		// Starting a child is not work on the string: the watch must
		// not kill the new one while it starts (a loaded machine took
		// longer than callTimeout over the two).
		o.callStart.Store(0)
		if rerr := o.respawn(); rerr != nil {
			return 0, CPUNone, fmt.Errorf("restart traced child: %w (after %w)", rerr, err)
		}
		switch {
		case timedOut:
			return 0, CPUNone, fmt.Errorf("length of % x: %w", b[:min(len(b), MaxX86Len)], ErrTimeout)
		case attempt >= 1:
			return 0, CPUNone, fmt.Errorf("length of % x: %w", b[:min(len(b), MaxX86Len)], err)
		}
		o.callStart.Store(time.Now().UnixNano())
	}
}

// childGone records that the child has been reaped.
func (o *LengthOracle) childGone() {
	o.pid = 0
	o.killMu.Lock()
	o.childPid = 0
	o.killMu.Unlock()
}

// respawn replaces a dead (or killed) child with a new one.
func (o *LengthOracle) respawn() error {
	o.reap()
	o.restarts.Add(1)
	return o.spawn()
}

// reap kills the child if it is still there, waits for it and closes its
// descriptors.
func (o *LengthOracle) reap() {
	o.killMu.Lock()
	if o.pidfd >= 0 {
		_ = unix.Close(o.pidfd)
		o.pidfd = -1
	}
	o.childPid = 0
	o.killMu.Unlock()
	if o.mem >= 0 {
		_ = unix.Close(o.mem)
		o.mem = -1
	}
	if o.pid <= 0 {
		return
	}
	_ = unix.Kill(o.pid, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		if err := o.wait(&ws); err != nil || ws.Exited() || ws.Signaled() {
			break
		}
	}
	o.childGone()
}

// stopKind is how one step of the child ended.
type stopKind uint8

const (
	// stopFetch: instruction fetch fault at the boundary, instruction
	// pointer still at the first byte: the CPU wanted more bytes.
	stopFetch stopKind = iota
	// stopUD: SIGILL, the CPU raised #UD after fetching what it wanted.
	stopUD
	// stopGP: SIGSEGV from #GP (si_code SI_KERNEL, no address) with the
	// instruction pointer at the first byte.
	stopGP
	// stopOther: anything else; the CPU fetched the whole instruction.
	stopOther
)

// length is Length on the ptrace thread.
//
// The search is linear from one byte up: every guess below the length is a
// cheap fetch fault that runs nothing, and the first guess that does not
// fault is the length, so only that step runs the instruction (and pays for
// the single-step trap, which a hypervisor usually intercepts). A binary
// search makes fewer steps but about half of them run the instruction.
func (o *LengthOracle) length(b []byte) (int, CPUResult, error) {
	m := copy(o.buf[:], b)
	if m == 0 {
		return 0, CPULonger, nil
	}
	// An instruction may have changed the x87/SSE control state (fldcw,
	// ldmxcsr, fxrstor...); start every string from the same state.
	if err := o.ptracePtr(unix.PTRACE_SETFPREGS, 0, unsafe.Pointer(&o.fpregs)); err != nil {
		return 0, CPUNone, o.stepError("set fp registers", err)
	}
	for k := 1; k <= m; k++ {
		kind, err := o.step(o.buf[:k])
		if err != nil {
			return 0, CPUNone, err
		}
		switch {
		case kind == stopFetch:
			continue
		case kind == stopUD:
			return k, CPUUndefined, nil
		case kind == stopGP && k == MaxX86Len:
			return o.resolveGP15()
		}
		return k, CPUAccepted, nil
	}
	return 0, CPULonger, nil
}

// resolveGP15 decides between a 15-byte instruction that raised #GP while
// executing and a longer one: the CPU raises #GP for an instruction longer
// than 15 bytes when it has 15 bytes in hand, without fetching a 16th, so
// both stop the same way. A copy with one length-neutral prefix removed
// tells them apart: it is 14 bytes long (no fetch fault with 14 bytes) only
// if the original was 15.
func (o *LengthOracle) resolveGP15() (int, CPUResult, error) {
	j := neutralPrefix(o.buf[:])
	if j < 0 {
		return MaxX86Len, CPUAmbiguous, nil
	}
	var t [MaxX86Len - 1]byte
	copy(t[:], o.buf[:j])
	copy(t[j:], o.buf[j+1:])
	kind, err := o.step(t[:])
	switch {
	case err != nil:
		return 0, CPUNone, err
	case kind == stopFetch:
		return 0, CPULonger, nil
	}
	return MaxX86Len, CPUAccepted, nil
}

// step runs code, placed to end at the probe boundary, for one single step
// with the register template and reports how the step ended. A stop for a
// signal the instruction cannot have raised (one sent from outside) does
// not count: the step is made again.
func (o *LengthOracle) step(code []byte) (stopKind, error) {
	for range 3 {
		kind, async, err := o.step1(code)
		if err != nil || !async {
			return kind, err
		}
	}
	return stopOther, fmt.Errorf("step: interrupted by signals three times")
}

// step1 makes one step for step; async reports a stop for a signal that
// the instruction cannot have raised.
func (o *LengthOracle) step1(code []byte) (kind stopKind, async bool, err error) {
	start := uint64(probeBoundary - len(code))
	if _, err := unix.Pwrite(o.mem, code, int64(start)); err != nil {
		return stopOther, false, o.stepError("write probe bytes", err)
	}
	o.regs.Rip = start
	if err := o.resetRegs(); err != nil {
		return stopOther, false, o.stepError("set registers", err)
	}
	if err := o.ptrace(unix.PTRACE_SYSEMU_SINGLESTEP, 0, 0); err != nil {
		return stopOther, false, o.stepError("single-step", err)
	}
	o.steps.Add(1)
	var ws unix.WaitStatus
	if err := o.wait(&ws); err != nil {
		return stopOther, false, o.stepError("wait for step", err)
	}
	if ws.Exited() || ws.Signaled() {
		o.childGone()
		return stopOther, false, fmt.Errorf("step: %s: %w", describeWait(ws), ErrChildDied)
	}
	if !ws.Stopped() {
		return stopOther, false, fmt.Errorf("step: unexpected %s", describeWait(ws))
	}
	switch ws.StopSignal() {
	case unix.SIGILL:
		return stopUD, false, nil
	case unix.SIGSEGV:
	case unix.SIGTRAP, unix.SIGTRAP | 0x80, unix.SIGBUS, unix.SIGFPE, unix.SIGSYS:
		// The single-step trap, int3 or int1, a system call stop,
		// #AC or #SS, #DE or a floating-point exception.
		return stopOther, false, nil
	default:
		return stopOther, true, nil
	}
	if err := o.ptracePtr(unix.PTRACE_GETSIGINFO, 0, unsafe.Pointer(&o.siginfo)); err != nil {
		return stopOther, false, o.stepError("get signal info", err)
	}
	gp := o.siginfo.Code == siKernel && o.siginfo.Addr == 0
	if o.siginfo.Code <= 0 {
		return stopOther, true, nil // sent by a process, not raised by a fault
	}
	if !gp && o.siginfo.Addr != probeBoundary {
		return stopOther, false, nil
	}
	// A fetch fault (or #GP) belongs to these bytes only if the
	// instruction did not complete: when it did (after mov ss, or a jump
	// to the boundary) it was the fetch of the next one that faulted.
	if err := o.ptracePtr(unix.PTRACE_PEEKUSR, ripUserOffset, unsafe.Pointer(&o.peek)); err != nil {
		return stopOther, false, o.stepError("get rip", err)
	}
	switch {
	case o.peek != start:
		return stopOther, false, nil
	case gp:
		return stopGP, false, nil
	}
	return stopFetch, false, nil
}

// resetRegs loads the register template into the child.
//
// SYSENTER, which Intel CPUs run in 64-bit mode, enters the kernel's
// 32-bit system call path, and the kernel returns to the child in 32-bit
// mode (code selector 0x23); PTRACE_SETREGS then refuses the register set
// with EIO. Putting the 64-bit code selector back first with
// PTRACE_POKEUSR makes it accept the set again.
//
// If the set is still refused, the child is in a state this code does not
// know how to repair; the error then wraps ErrChildDied so that the child
// is replaced.
func (o *LengthOracle) resetRegs() error {
	err := unix.PtraceSetRegs(o.pid, &o.regs)
	if err != unix.EIO {
		return err
	}
	for _, sel := range [...]struct {
		off uintptr
		val uint64
	}{{csUserOffset, o.regs.Cs}, {ssUserOffset, o.regs.Ss}} {
		if err := o.ptrace(unix.PTRACE_POKEUSR, sel.off, uintptr(sel.val)); err != nil {
			return fmt.Errorf("restore segment selector: %w", err)
		}
	}
	if err := unix.PtraceSetRegs(o.pid, &o.regs); err != nil {
		return fmt.Errorf("registers refused after restoring selectors: %w: %w", err, ErrChildDied)
	}
	return nil
}

// stepError wraps a failed request; ESRCH means the child vanished, which
// is reported as ErrChildDied so that the call is retried.
func (o *LengthOracle) stepError(what string, err error) error {
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ECHILD) {
		return fmt.Errorf("%s: %w: %w", what, err, ErrChildDied)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// wait waits for the child to change state, retrying on EINTR.
func (o *LengthOracle) wait(ws *unix.WaitStatus) error {
	for {
		_, err := unix.Wait4(o.pid, ws, unix.WALL, nil)
		if err != unix.EINTR {
			return err
		}
	}
}

// ptrace makes a ptrace request on the child with plain-integer arguments.
func (o *LengthOracle) ptrace(req int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(o.pid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// ptracePtr makes a ptrace request whose data argument points into memory
// of this process.
func (o *LengthOracle) ptracePtr(req int, addr uintptr, data unsafe.Pointer) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(o.pid), addr, uintptr(data), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// describeWait renders a wait status for an error message.
func describeWait(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return fmt.Sprintf("killed by %v", ws.Signal())
	case ws.Stopped():
		return fmt.Sprintf("stop by signal %d", int(ws.StopSignal()))
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}
