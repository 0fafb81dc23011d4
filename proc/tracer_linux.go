//go:build linux && (amd64 || arm64)

package proc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tracer is the goroutine, locked to one OS thread, that makes every ptrace
// request and every wait4 for the processes it traces. Its fields are owned
// by that goroutine: other goroutines reach them only through do.
type tracer struct {
	reqs chan func()
	dead chan struct{} // closed when the goroutine has returned
	sigc chan os.Signal

	procs   map[int]*ptraceProcess // traced processes (not the address-space sharers), by pid
	threads map[int]*thread        // every traced task, by tid
	// orphans holds stops of tasks whose creation event has not been
	// seen yet (a new thread or child can report before its parent).
	orphans map[int]unix.WaitStatus
	served  bool // at least one request ran
}

// thread is the bookkeeping of one traced task.
type thread struct {
	tid int
	p   *ptraceProcess

	stopped bool // in a ptrace-stop
	gone    bool // exited, or ptrace says ESRCH; its exit status may still come
	// sig is the signal of a signal-delivery stop, injected on resume.
	sig int
	// extra are signals taken from the thread while it was stepped or
	// borrowed; they are queued again with tgkill before it resumes.
	extra []int
	group bool // the stop is a group-stop: resume with PTRACE_LISTEN
	event int  // the PTRACE_EVENT_* of the last stop, 0 for a signal stop

	interrupted bool // PTRACE_INTERRUPT sent, stop not seen yet
	// niceOld is the thread's own nice value while a StopNice stop has
	// raised it to reach its stop sooner (see stopWorld), nil otherwise.
	niceOld     *int
	initPending bool // auto-attached, its first stop has not been seen
	detachOnce  bool // detach at its first stop (an unfollowed fork child)
	exiting     bool // reported PTRACE_EVENT_EXIT
	parked      bool // resumed after a vfork event, blocked until VFORK_DONE
	parkRegs    Regs // registers at the vfork stop
	held        bool // kept stopped by a TrapHandler
	latched     bool // has taken the stop latch's group stop (Options.StopLatch)
	stepping    bool // single-stepped, a SIGTRAP ends the step
	// stepRestarts counts the steps reissued because a signal stopped
	// the thread before the stepped instruction ran; stepSignals the
	// signals among them, kept for delivery after the step.
	stepRestarts, stepSignals int
	// staleStep is set when a step was cut short by an interrupt, or
	// made by a tracer that died before the instruction ran
	// (World.DropStepTrap): the kernel may still deliver that step's
	// SIGTRAP later, which must not reach the tracee.
	staleStep bool
	// watch makes the thread stop at its system calls (PTRACE_SYSCALL:
	// TrapContext.WatchSyscalls); entry is the call seen at its entry
	// stop, whose exit stop comes next (nil between calls).
	watch bool
	entry *SyscallExit
	// remote is set while the thread makes a remote system call under
	// PTRACE_SYSCALL (World.Syscall): its system call stops are the
	// call's, not a watched thread's.
	remote bool

	regs   Regs
	regsOK bool
}

// newTracer starts a tracer goroutine.
func newTracer() *tracer {
	t := &tracer{
		reqs:    make(chan func()),
		dead:    make(chan struct{}),
		sigc:    make(chan os.Signal, 1),
		procs:   make(map[int]*ptraceProcess),
		threads: make(map[int]*thread),
		orphans: make(map[int]unix.WaitStatus),
	}
	ready := make(chan struct{})
	go t.loop(ready)
	<-ready
	return t
}

// loop is the tracer goroutine. It runs requests and, between them, drains
// the wait statuses of its tracees. It returns once it has run at least one
// request and traces nothing any more; the OS thread, still locked, then
// exits with it.
func (t *tracer) loop(ready chan<- struct{}) {
	runtime.LockOSThread()
	// No UnlockOSThread: the thread is the tracer of every tracee and must
	// not run other goroutines; it ends with this goroutine.
	signal.Notify(t.sigc, unix.SIGCHLD)
	defer signal.Stop(t.sigc)
	defer close(t.dead)
	close(ready)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		t.poll()
		if t.served && len(t.procs) == 0 {
			return
		}
		select {
		case fn := <-t.reqs:
			fn()
			t.served = true
		case <-t.sigc:
		case <-tick.C:
		}
	}
}

// do runs fn on the tracer goroutine and waits for it.
func (t *tracer) do(fn func()) error {
	done := make(chan struct{})
	select {
	case t.reqs <- func() { defer close(done); fn() }:
		<-done
		return nil
	case <-t.dead:
		return ErrDetached
	}
}

// ptrace makes one raw ptrace request.
func ptrace(req int, pid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(pid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// ptraceOptions returns the PTRACE_O_* options for opts.
func ptraceOptions(opts *Options) uintptr {
	o := unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK |
		unix.PTRACE_O_TRACEVFORKDONE | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACEEXIT |
		unix.PTRACE_O_TRACESYSGOOD
	if opts.KillOnExit {
		o |= unix.PTRACE_O_EXITKILL
	}
	return uintptr(o)
}

// wait4 waits for one status of this thread's tracees and children.
func wait4(block bool) (int, unix.WaitStatus, error) {
	flags := unix.WALL | unix.WNOTHREAD
	if !block {
		flags |= unix.WNOHANG
	}
	for {
		var ws unix.WaitStatus
		tid, err := unix.Wait4(-1, &ws, flags, nil)
		if err == unix.EINTR {
			continue
		}
		return tid, ws, err
	}
}

// poll handles every wait status available now.
func (t *tracer) poll() {
	for {
		tid, ws, err := wait4(false)
		if err != nil || tid <= 0 {
			return
		}
		t.handle(tid, ws)
	}
}

// waitBlocking handles one wait status, waiting for it. It fails with
// ECHILD when there is nothing left to wait for.
func (t *tracer) waitBlocking() error {
	tid, ws, err := wait4(true)
	if err != nil {
		return fmt.Errorf("wait4: %w", err)
	}
	t.handle(tid, ws)
	return nil
}

// waitUntil handles wait statuses until cond holds. With a zero timeout it
// blocks; otherwise it polls with a growing sleep and gives up at the
// deadline, returning false.
func (t *tracer) waitUntil(cond func() bool, timeout time.Duration) (bool, error) {
	if timeout <= 0 {
		for !cond() {
			if err := t.waitBlocking(); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	deadline := time.Now().Add(timeout)
	nap := 2 * time.Microsecond
	for spins := 0; !cond(); spins++ {
		tid, ws, err := wait4(false)
		if err != nil {
			return false, fmt.Errorf("wait4: %w", err)
		}
		if tid > 0 {
			t.handle(tid, ws)
			continue
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if spins < 20 {
			runtime.Gosched()
			continue
		}
		time.Sleep(nap)
		if nap < time.Millisecond {
			nap *= 2
		}
	}
	return true, nil
}

// handle updates the bookkeeping for one wait status and, when the process
// is not held stopped, lets the thread go on.
func (t *tracer) handle(tid int, ws unix.WaitStatus) {
	th := t.threads[tid]
	if th == nil {
		if !ws.Stopped() {
			delete(t.orphans, tid)
			return
		}
		t.orphans[tid] = ws
		// A new thread of a known process can report before its creator
		// (whose clone event a fatal signal may even suppress): adopt it
		// now.
		if tgid, err := readTgid(tid); err == nil && tgid != tid {
			if p := t.findProcess(tgid); p != nil {
				t.adopt(p, tid)
			}
		}
		return
	}
	if ws.Exited() || ws.Signaled() {
		t.threadGone(th, ws)
		return
	}
	if !ws.Stopped() {
		return
	}
	t.onStop(th, ws)
}

// exitStatus converts a wait status.
func exitStatus(ws unix.WaitStatus) ExitStatus {
	if ws.Signaled() {
		return ExitStatus{Signal: int(ws.Signal())}
	}
	return ExitStatus{Code: ws.ExitStatus()}
}

// threadGone forgets a task whose exit was reaped.
func (t *tracer) threadGone(th *thread, ws unix.WaitStatus) {
	p := th.p
	th.gone, th.stopped = true, false
	delete(t.threads, th.tid)
	delete(p.threads, th.tid)
	st := exitStatus(ws)
	if th.tid == p.pid {
		t.processGone(p, st)
		return
	}
	p.emit(Event{Kind: EventThreadExit, Pid: p.pid, Tid: th.tid, Status: st, Signal: st.Signal})
}

// processGone records the end of p.
func (t *tracer) processGone(p *ptraceProcess, st ExitStatus) {
	for tid, th := range p.threads {
		th.gone = true
		delete(t.threads, tid)
	}
	p.threads = map[int]*thread{}
	if p.parent != nil {
		delete(p.parent.sharers, p.pid)
	}
	delete(t.procs, p.pid)
	p.emit(Event{Kind: EventExit, Pid: p.pid, Tid: p.pid, Status: st, Signal: st.Signal})
	p.finish(st, nil)
}

// stopSignals are the signals whose EVENT_STOP is a group-stop.
func isStopSignal(sig int) bool {
	switch sig {
	case int(unix.SIGSTOP), int(unix.SIGTSTP), int(unix.SIGTTIN), int(unix.SIGTTOU):
		return true
	}
	return false
}

// siginfoCode returns si_code of the signal that stopped tid.
func siginfoCode(tid int) (int32, error) {
	code, _, err := siginfo(tid)
	return code, err
}

// siginfo returns si_code and si_pid of the signal that stopped tid.
func siginfo(tid int) (code, pid int32, err error) {
	info := make([]byte, 128) // on the heap, so its address stays put
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETSIGINFO, uintptr(tid), 0, uintptr(unsafe.Pointer(&info[0])), 0, 0)
	if e != 0 {
		return 0, 0, e
	}
	// struct siginfo: si_signo, si_errno, si_code (int32 each), then on
	// 64-bit systems the union at offset 16, whose first field for a
	// signal sent by a process is si_pid.
	return int32(binary.LittleEndian.Uint32(info[8:])), int32(binary.LittleEndian.Uint32(info[16:])), nil
}

// maxStepRestarts bounds how often one step is reissued because of
// signals arriving first; past it the step ends where the thread stands
// and the caller sees a PC that did not move.
const maxStepRestarts = 64

// isAsyncSignal reports whether the signal that stopped tid came from
// outside the thread's own execution: sent by a process, or one of the
// signals the kernel never raises for the instruction a thread runs.
func isAsyncSignal(tid, sig int) bool {
	switch unix.Signal(sig) {
	case unix.SIGSEGV, unix.SIGBUS, unix.SIGILL, unix.SIGFPE, unix.SIGTRAP, unix.SIGSYS:
		return isUserSignal(tid)
	}
	return true
}

// isUserSignal reports whether the signal that stopped tid was sent by
// a process (kill, tgkill, sigqueue: si_code <= 0) rather than raised by
// the kernel for the thread's own execution.
func isUserSignal(tid int) bool {
	code, pid, err := siginfo(tid)
	return err == nil && code <= 0 && !(hostArch.stepOverSyscallSIUser && code == siUser && pid == 0)
}

// siUser is SI_USER, the si_code of kill(2).
const siUser = 0

// isStepTrap reports whether the SIGTRAP that stopped tid ends a single
// step: the trap flag's (si_code TRAP_BRKPT or TRAP_TRACE), or the report
// of a step over a system-call instruction where the kernel makes it
// look sent (arch.stepOverSyscallSIUser).
func isStepTrap(tid int) bool {
	code, pid, err := siginfo(tid)
	return err == nil && (code == 1 || code == 2 || hostArch.stepOverSyscallSIUser && code == siUser && pid == 0)
}

// onStop handles a ptrace-stop of a known thread.
func (t *tracer) onStop(th *thread, ws unix.WaitStatus) {
	p := th.p
	sig := int(ws.StopSignal())
	event := int(ws>>16) & 0xff
	th.stopped, th.interrupted, th.regsOK = true, false, false
	th.sig, th.group, th.event = 0, false, event
	first := th.initPending
	th.initPending = false

	if first && th.detachOnce {
		t.detachThread(th, 0)
		return
	}
	switch event {
	case 0:
		switch {
		case th.stepping && !th.staleStep && isAsyncSignal(th.tid, sig) && th.stepRestarts < maxStepRestarts:
			// A signal was pending when the step began: the kernel
			// reports it before the instruction runs (a step's trap and
			// the faults of the stepped instruction are synchronous and
			// would be dequeued first). Keep it for delivery after the
			// step, and step again.
			th.extra = append(th.extra, sig)
			th.stepRestarts++
			th.stepSignals++
			if ptrace(unix.PTRACE_SINGLESTEP, th.tid, 0, 0) == nil {
				th.stopped = false
				return
			}
		case th.stepping && sig == int(unix.SIGTRAP):
			// The step finished, unless someone sent a real SIGTRAP.
			if isUserSignal(th.tid) {
				th.extra = append(th.extra, sig)
			}
			th.staleStep = false
		case th.staleStep && sig == int(unix.SIGTRAP) && isStepTrap(th.tid):
			th.staleStep = false // the late trap of an interrupted step
		case sig == int(unix.SIGTRAP)|0x80:
			// A system call stop (PTRACE_O_TRACESYSGOOD) of a watched
			// thread: no signal.
			t.syscallStop(th)
		case sig == int(unix.SIGTRAP) && p.trapHandler() != nil && t.trapStop(th):
		default:
			th.sig = sig
			p.root().latch.signalStop(p.pid, sig)
		}
	case unix.PTRACE_EVENT_STOP:
		th.group = p.root().latch.groupStop(sig)
		if !th.group && isStopSignal(sig) {
			th.latched = true // in the latch's group stop, or past it
		}
		if th.stepping && !th.staleStep && !th.group && th.stepRestarts < maxStepRestarts {
			// An interrupt sent while the thread was already in another
			// stop stays pending and fires when it resumes, before the
			// stepped instruction runs: step again.
			th.stepRestarts++
			if ptrace(unix.PTRACE_SINGLESTEP, th.tid, 0, 0) == nil {
				th.stopped = false
				return
			}
		}
	case unix.PTRACE_EVENT_CLONE, unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK:
		msg, err := unix.PtraceGetEventMsg(th.tid)
		if err == nil {
			t.newChild(th, event, int(msg))
		}
	case unix.PTRACE_EVENT_VFORK_DONE:
		th.parked = false
		p.emit(t.vforkEvent(th, Event{Kind: EventVforkDone, Pid: p.pid, Tid: th.tid}))
	case unix.PTRACE_EVENT_EXEC:
		msg, _ := unix.PtraceGetEventMsg(th.tid)
		if !t.onExec(th, int(msg)) {
			return
		}
	case unix.PTRACE_EVENT_EXIT:
		th.exiting = true
		if p.exiting != nil {
			p.exiting(th.tid)
		}
	}
	if th.held || p.keepStopped() {
		return
	}
	t.resumeThread(th)
}

// syscallStop handles a system call stop of a watched thread: the entry
// is noted, the exit offered to the TrapHandler.
func (t *tracer) syscallStop(th *thread) {
	if th.remote {
		return
	}
	info, err := syscallInfo(th.tid)
	if err != nil {
		return
	}
	switch info.op {
	case unix.PTRACE_SYSCALL_INFO_ENTRY:
		th.entry = &SyscallExit{Nr: info.nr, Args: info.args}
		return
	case unix.PTRACE_SYSCALL_INFO_EXIT:
	default:
		return
	}
	sc := th.entry
	th.entry = nil
	h := th.p.trapHandler()
	if sc == nil || h == nil {
		return // watched from within the call: its entry was not seen
	}
	sc.Ret = info.ret
	if err := t.loadRegs(th); err != nil {
		return
	}
	regs := th.regs
	ctx := &TrapContext{Pid: th.p.pid, Tid: th.tid, Regs: &regs, Syscall: sc, WatchSyscalls: th.watch}
	act := h(ctx)
	th.watch = ctx.WatchSyscalls
	if act == TrapPass {
		return
	}
	if regs != th.regs {
		_ = t.storeRegs(th, &regs)
	}
	if act == TrapHold {
		th.held = true
	}
}

// syscallStop is what PTRACE_GET_SYSCALL_INFO says of a system call stop.
type syscallStop struct {
	op   uint8
	nr   uint64
	args [6]uint64
	ret  int64
}

// syscallInfo reads the system call stop of a stopped thread.
func syscallInfo(tid int) (syscallStop, error) {
	// struct ptrace_syscall_info: op, 3 bytes of padding, arch, the
	// instruction and stack pointers, then the entry's nr and args or the
	// exit's rval and is_error.
	b := new([88]byte)
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GET_SYSCALL_INFO, uintptr(tid), uintptr(len(b)), uintptr(unsafe.Pointer(b)), 0, 0)
	if e != 0 {
		return syscallStop{}, e
	}
	st := syscallStop{op: b[0]}
	switch st.op {
	case unix.PTRACE_SYSCALL_INFO_ENTRY:
		st.nr = binary.LittleEndian.Uint64(b[24:])
		for i := range st.args {
			st.args[i] = binary.LittleEndian.Uint64(b[32+8*i:])
		}
	case unix.PTRACE_SYSCALL_INFO_EXIT:
		st.ret = int64(binary.LittleEndian.Uint64(b[24:]))
	}
	return st, nil
}

// trapHandler returns the process's TrapHandler; a child that shares its
// parent's address space (vfork) uses the parent's: it runs the same text,
// with the same breakpoints.
func (p *ptraceProcess) trapHandler() TrapHandler {
	if p.trap == nil && p.parent != nil {
		return p.parent.trap
	}
	return p.trap
}

// trapStop offers a breakpoint trap to the process's TrapHandler. It
// reports whether the handler took it (the signal is then not delivered).
func (t *tracer) trapStop(th *thread) bool {
	code, err := siginfoCode(th.tid)
	if err != nil || code != hostArch.breakpointCode {
		return false
	}
	if err := t.loadRegs(th); err != nil {
		return false
	}
	regs := th.regs
	ctx := &TrapContext{Pid: th.p.pid, Tid: th.tid, Addr: regs.PC() - hostArch.breakpointPCAdjust, Regs: &regs, WatchSyscalls: th.watch}
	act := th.p.trapHandler()(ctx)
	th.watch = ctx.WatchSyscalls
	switch act {
	case TrapResume:
		if regs != th.regs {
			if err := t.storeRegs(th, &regs); err != nil {
				return false
			}
		}
		return true
	case TrapHold:
		if regs != th.regs {
			_ = t.storeRegs(th, &regs)
		}
		th.held = true
		return true
	}
	return false
}

// newChild records the task created by th (a clone, fork or vfork event).
func (t *tracer) newChild(th *thread, event, child int) {
	p := th.p
	if event == unix.PTRACE_EVENT_CLONE {
		if tgid, err := readTgid(child); err == nil && tgid == p.pid {
			t.adopt(p, child)
			p.emit(Event{Kind: EventClone, Pid: p.pid, Tid: th.tid, NewPid: child})
			return
		}
	}
	shares := event != unix.PTRACE_EVENT_FORK // vfork and CLONE_VM-like clones, unless kcmp says otherwise
	if same, err := sameMM(p.pid, child); err == nil {
		shares = same
	}
	kind := EventFork
	if event == unix.PTRACE_EVENT_VFORK {
		kind = EventVfork
	}
	c := newProcess(t, child, p.opts)
	if shares {
		c.parent = p
		c.events = p.events
		c.mem = nil
		p.sharers[child] = c
		ev := Event{Kind: kind, Pid: p.pid, Tid: th.tid, NewPid: child}
		if kind == EventVfork {
			ev = t.vforkEvent(th, ev)
		}
		t.adopt(c, child)
		p.emit(ev)
		return
	}
	if !p.opts.FollowForks {
		ct := t.adopt(c, child)
		if ct.stopped {
			t.detachThread(ct, 0)
		} else {
			ct.detachOnce = true
		}
		p.emit(Event{Kind: kind, Pid: p.pid, Tid: th.tid, NewPid: child})
		return
	}
	if err := c.openMem(); err != nil {
		c.memErr = err
	}
	t.procs[child] = c
	c.stopped = true
	t.adopt(c, child)
	p.emit(Event{Kind: kind, Pid: p.pid, Tid: th.tid, NewPid: child, Child: c.pub})
}

// vforkEvent completes an EventVfork or EventVforkDone of the stopped
// thread th with its thread pointer and hands it to Options.OnVfork.
func (t *tracer) vforkEvent(th *thread, ev Event) Event {
	if t.loadRegs(th) == nil {
		ev.ThreadPointer = th.regs.threadPointer()
	}
	if h := th.p.root().opts.OnVfork; h != nil {
		h(ev)
	}
	return ev
}

// sameMM asks the kernel whether two tasks share their address space.
func sameMM(a, b int) (bool, error) {
	const kcmpVM = 1
	r, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(a), uintptr(b), kcmpVM, 0, 0, 0)
	if e != 0 {
		return false, e
	}
	return r == 0, nil
}

// adopt adds task tid to p, taking over a stop that it already reported.
func (t *tracer) adopt(p *ptraceProcess, tid int) *thread {
	if th := t.threads[tid]; th != nil {
		return th
	}
	th := &thread{tid: tid, p: p, initPending: true}
	t.threads[tid] = th
	p.threads[tid] = th
	if ws, ok := t.orphans[tid]; ok {
		delete(t.orphans, tid)
		th.initPending = false
		th.stopped = true
		th.event = int(ws>>16) & 0xff
		if !p.keepStopped() {
			t.resumeThread(th)
		}
	}
	return th
}

// onExec handles PTRACE_EVENT_EXEC reported by th (now the leader of its
// thread group); former is the tid that called execve. It reports whether
// th is still traced and onStop should go on.
func (t *tracer) onExec(th *thread, former int) bool {
	p := th.p
	for tid, o := range p.threads {
		if tid != th.tid {
			o.gone = true
			delete(t.threads, tid)
			delete(p.threads, tid)
		}
	}
	th.exiting, th.parked, th.gone = false, false, false
	th.watch, th.entry = false, nil // the new image is not watched
	p.execs++
	p.sysSite = 0
	if p.parent != nil {
		// A vfork or CLONE_VM child has its own address space now.
		parent := p.parent
		delete(parent.sharers, p.pid)
		p.parent = nil
		if !parent.opts.FollowForks {
			parent.emit(Event{Kind: EventExec, Pid: p.pid, Tid: former})
			t.detachThread(th, 0)
			return false
		}
		p.events = make(chan Event, cap(parent.events))
		if err := p.openMem(); err != nil {
			p.memErr = err
		}
		t.procs[p.pid] = p
		p.stopped = true
		parent.emit(Event{Kind: EventExec, Pid: p.pid, Tid: former, Child: p.pub})
		return true
	}
	if err := p.openMem(); err != nil {
		p.memErr = err
	}
	if p.emit(Event{Kind: EventExec, Pid: p.pid, Tid: former}) && p.opts.HoldExec {
		// Held until Release: the new image runs no instruction before
		// the caller has seen the event (a dropped event holds nothing).
		th.held = true
	}
	return true
}

// detachThread detaches one stopped task and forgets it.
func (t *tracer) detachThread(th *thread, sig int) {
	_ = ptrace(unix.PTRACE_DETACH, th.tid, 0, uintptr(sig))
	th.gone, th.stopped = true, false
	delete(t.threads, th.tid)
	delete(th.p.threads, th.tid)
}

// resumeThread lets a stopped thread run again from the stop it is in.
func (t *tracer) resumeThread(th *thread) {
	if !th.stopped || th.gone || th.held {
		return
	}
	for _, s := range th.extra {
		_ = unix.Tgkill(th.p.pid, th.tid, unix.Signal(s))
	}
	th.extra = nil
	if th.event == unix.PTRACE_EVENT_VFORK {
		// It blocks in the kernel until the child execs or exits, and
		// cannot be interrupted meanwhile: keep its registers for the
		// safety checks.
		if t.loadRegs(th) == nil {
			th.parkRegs = th.regs
		}
		th.parked = true
	}
	if th.sig != 0 {
		th.p.emit(Event{Kind: EventSignal, Pid: th.p.pid, Tid: th.tid, Signal: th.sig})
	}
	var err error
	if th.group {
		err = ptrace(unix.PTRACE_LISTEN, th.tid, 0, 0)
		if err == unix.EIO {
			err = ptrace(unix.PTRACE_CONT, th.tid, 0, 0)
		}
	} else if th.watch {
		err = ptrace(unix.PTRACE_SYSCALL, th.tid, 0, uintptr(th.sig))
	} else {
		th.entry = nil
		err = ptrace(unix.PTRACE_CONT, th.tid, 0, uintptr(th.sig))
	}
	// ESRCH: the thread left its stop on its own (SIGKILL wakes a stopped
	// tracee), or is gone. Either way the kernel reports what comes next
	// (its PTRACE_EVENT_EXIT stop, which must be continued, or its exit):
	// it is not marked gone here.
	_ = err
	th.p.root().latch.resumed(th.p.pid)
	th.stopped, th.sig, th.group, th.regsOK = false, 0, false, false
	if th.event == unix.PTRACE_EVENT_EXIT {
		th.gone = true // it only finishes exiting now
	}
}

// loadRegs reads the registers of a stopped thread (cached per stop).
func (t *tracer) loadRegs(th *thread) error {
	if th.regsOK {
		return nil
	}
	if !th.stopped {
		return &ThreadError{Tid: th.tid, Op: "get registers", Err: ErrRunning}
	}
	if err := getRegs(th.tid, &th.regs); err != nil {
		return &ThreadError{Tid: th.tid, Op: "get registers", Err: threadErr(err)}
	}
	th.regsOK = true
	return nil
}

// storeRegs writes the registers of a stopped thread.
func (t *tracer) storeRegs(th *thread, r *Regs) error {
	if !th.stopped {
		return &ThreadError{Tid: th.tid, Op: "set registers", Err: ErrRunning}
	}
	if err := setRegs(th.tid, r); err != nil {
		th.regsOK = false
		return &ThreadError{Tid: th.tid, Op: "set registers", Err: threadErr(err)}
	}
	th.regs, th.regsOK = *r, true
	return nil
}

// threadErr maps ESRCH to ErrNoThread, keeping the errno in the chain.
func threadErr(err error) error {
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("%w (%w)", ErrNoThread, err)
	}
	return err
}

// listTasks returns the tids in /proc/PID/task.
func listTasks(pid int) ([]int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// taskZombie reports whether task tid of pid is a zombie (or gone).
// taskTracer returns the tid of the thread that traces task tid of
// process pid (TracerPid), 0 if none or unknown.
func taskTracer(pid, tid int) int {
	s, err := readProcStatus(pid, tid)
	if err != nil {
		return 0
	}
	v, _ := statusValue(s, "TracerPid")
	n, _ := strconv.Atoi(v)
	return n
}

func taskZombie(pid, tid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			if i+2 < len(b) {
				return b[i+2] == 'Z' || b[i+2] == 'X'
			}
			break
		}
	}
	return false
}

// findProcess returns the traced process (or address-space sharer) pid.
func (t *tracer) findProcess(pid int) *ptraceProcess {
	if p := t.procs[pid]; p != nil {
		return p
	}
	for _, p := range t.procs {
		for _, q := range p.members() {
			if q.pid == pid {
				return q
			}
		}
	}
	return nil
}

// readTgid returns the thread group of task tid.
func readTgid(tid int) (int, error) { return statusInt(tid, "Tgid") }

// readTracer returns TracerPid of task pid.
func readTracer(pid int) (int, error) { return statusInt(pid, "TracerPid") }

// statusInt returns the decimal field key of /proc/PID/status.
func statusInt(pid int, key string) (int, error) {
	s, err := readProcStatus(pid, 0)
	if err != nil {
		return 0, err
	}
	v, ok := statusValue(s, key)
	if !ok {
		return 0, fmt.Errorf("no %s in status", key)
	}
	return strconv.Atoi(v)
}

// readProcStatus returns the text of /proc/PID/status, or of
// /proc/PID/task/TID/status when tid is not 0.
func readProcStatus(pid, tid int) (string, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	if tid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/status"
	}
	b, err := os.ReadFile(path)
	return string(b), err
}

// statusValue returns the value of field key ("Tgid") in the text s of a
// /proc status file, without the spaces around it.
func statusValue(s, key string) (string, bool) {
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}
