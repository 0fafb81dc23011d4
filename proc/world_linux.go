//go:build linux && (amd64 || arm64)

package proc

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// worldBackend is the Linux backend of a World (see backend.go), held by
// value: Process.Stopped allocates nothing more than before the seam.
type worldBackend = ptraceWorld

var _ worldOps = (*worldBackend)(nil)

// ptraceWorld is the backend of a World: the exported methods below are
// documented on World and run on the tracer thread.
type ptraceWorld struct {
	t    *tracer
	p    *ptraceProcess
	live bool
}

func (w *ptraceWorld) check() error {
	if !w.live {
		return ErrRunning
	}
	if w.p.done {
		return ErrExited
	}
	return nil
}

// The exported methods of ptraceWorld implement worldOps: each is
// documented on the World method of the same name (world.go).
func (w *ptraceWorld) Pid() int { return w.p.pid }

func (w *ptraceWorld) Execs() int { return w.p.execs }

func (w *ptraceWorld) thread(tid int) (*thread, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	for _, q := range w.p.members() {
		if th := q.threads[tid]; th != nil && !th.gone {
			return th, nil
		}
	}
	return nil, &ThreadError{Tid: tid, Op: "find", Err: ErrNoThread}
}

func (w *ptraceWorld) Refresh() error {
	if err := w.check(); err != nil {
		return err
	}
	t0, t1 := w.p.stopT0, w.p.stopT1
	err := w.t.stopWorld(w.p)
	if !t0.IsZero() {
		w.p.stopT0 = t0
	}
	if !t1.IsZero() && !t1.Before(t0) {
		w.p.stopT1 = t1
	}
	return err
}

func (w *ptraceWorld) Paused() time.Duration {
	if w.p.stopT0.IsZero() {
		return 0
	}
	return time.Since(w.p.stopT0)
}

func (w *ptraceWorld) Threads() ([]ThreadInfo, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	var out []ThreadInfo
	for _, q := range w.p.members() {
		for _, th := range q.threads {
			if th.gone {
				continue
			}
			info := ThreadInfo{Tid: th.tid, Pid: q.pid, Signal: th.sig, Exiting: th.exiting, Parked: th.parked}
			var r Regs
			switch {
			case th.parked:
				r = th.parkRegs
			case th.stopped:
				if err := w.t.loadRegs(th); err != nil {
					if errors.Is(err, ErrNoThread) {
						continue
					}
					return nil, err
				}
				r = th.regs
			default:
				continue // exiting and already resumed: runs no user code
			}
			info.PC = r.PC()
			info.InSyscall = r.inSyscall()
			if !info.InSyscall && hostArch.rewindsSyscalls && !th.parked {
				// The kernel moved a thread interrupted in a system call
				// back to its svc: standing on one, it is in the call as
				// far as a step goes (the step enters it again).
				insn := make([]byte, len(hostArch.syscallInsn))
				info.InSyscall = q.readMem(info.PC, insn) == nil && bytes.Equal(insn, hostArch.syscallInsn)
			}
			if pc, ok := r.restartPC(); ok {
				info.RestartPC = pc
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tid < out[j].Tid })
	return out, nil
}

func (w *ptraceWorld) Regs(tid int) (Regs, error) {
	th, err := w.thread(tid)
	if err != nil {
		return Regs{}, err
	}
	if th.parked {
		return th.parkRegs, nil
	}
	if err := w.settle(th); err != nil {
		return Regs{}, err
	}
	if err := w.t.loadRegs(th); err != nil {
		return Regs{}, err
	}
	return th.regs, nil
}

func (w *ptraceWorld) SetRegs(tid int, r *Regs) error {
	th, err := w.thread(tid)
	if err != nil {
		return err
	}
	if th.parked {
		return &ThreadError{Tid: tid, Op: "set registers", Err: ErrParked}
	}
	if err := w.settle(th); err != nil {
		return err
	}
	return w.t.storeRegs(th, r)
}

func (w *ptraceWorld) ReadMemory(addr uint64, buf []byte) error {
	if err := w.check(); err != nil {
		return err
	}
	return w.p.readMem(addr, buf)
}

func (w *ptraceWorld) WriteMemory(addr uint64, data []byte) error {
	if err := w.check(); err != nil {
		return err
	}
	return w.p.writeMem(addr, data)
}

func (w *ptraceWorld) Maps() ([]Mapping, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	return readMaps(w.p.pid)
}

func (w *ptraceWorld) Step(tid int, timeout time.Duration) error {
	th, err := w.thread(tid)
	if err != nil {
		return err
	}
	switch {
	case th.parked:
		return &ThreadError{Tid: tid, Op: "step", Err: ErrParked}
	case th.exiting:
		return &ThreadError{Tid: tid, Op: "step", Err: ErrNoThread}
	case !th.stopped:
		return &ThreadError{Tid: tid, Op: "step", Err: ErrRunning}
	}
	if err := w.settle(th); err != nil {
		return err
	}
	return w.step(th, timeout)
}

func (w *ptraceWorld) DropStepTrap(tid int) error {
	th, err := w.thread(tid)
	if err != nil {
		return err
	}
	th.staleStep = true
	return nil
}

func (w *ptraceWorld) StepSignals(tid int) int {
	th, err := w.thread(tid)
	if err != nil {
		return 0
	}
	return th.stepSignals
}

// settle brings a thread stopped at a clone, fork, vfork-done or exec
// event out of the system call it is still inside: one step completes the
// call, which writes its result, and stops the thread at the call's return
// without running an instruction. Registers read or written before that
// would be stale or overwritten.
func (w *ptraceWorld) settle(th *thread) error {
	if !th.stopped || th.event == unix.PTRACE_EVENT_VFORK || !inSyscallEvent(th.event) {
		return nil
	}
	if err := w.step(th, 10*time.Second); err != nil {
		return fmt.Errorf("finishing the system call of thread %d: %w", th.tid, err)
	}
	th.event = 0
	return nil
}

// step single-steps a stopped thread and waits for it to stop again.
func (w *ptraceWorld) step(th *thread, timeout time.Duration) error {
	tid := th.tid
	if !hostArch.singleStep {
		return &ThreadError{Tid: tid, Op: "step", Err: ErrNotSupported}
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	if th.sig != 0 {
		th.extra = append(th.extra, th.sig)
		th.sig = 0
	}
	raiseNice(th, w.p.opts.StopNice)
	defer restoreNice(w.p)
	if h := w.p.stepping; h != nil {
		h(tid, true)
		defer h(tid, false)
	}
	if err := ptrace(unix.PTRACE_SINGLESTEP, tid, 0, 0); err != nil {
		return &ThreadError{Tid: tid, Op: "step", Err: threadErr(err)}
	}
	th.stopped, th.stepping, th.regsOK, th.group = false, true, false, false
	th.stepRestarts, th.stepSignals = 0, 0
	ok, werr := w.t.waitUntil(func() bool { return th.stopped || th.gone || w.p.done }, timeout)
	if werr == nil && !ok && !th.gone {
		if err := ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0); err == nil {
			th.interrupted = true
			th.staleStep = true
			_, werr = w.t.waitUntil(func() bool { return th.stopped || th.gone || w.p.done }, 0)
		}
	}
	th.stepping = false
	switch {
	case w.p.done:
		return ErrExited
	case werr != nil:
		return &ThreadError{Tid: tid, Op: "step", Err: werr}
	case th.gone:
		return &ThreadError{Tid: tid, Op: "step", Err: ErrNoThread}
	case !ok:
		return &ThreadError{Tid: tid, Op: "step", Err: ErrStepTimeout}
	}
	return nil
}

// borrow picks a stopped thread of the traced process to run a remote
// system call, preferring one that holds no signal and stands in user
// mode: a thread stopped at a fork, clone or exec event is first settled
// out of that system call.
func (w *ptraceWorld) borrow() (*thread, error) {
	var best *thread
	rank := func(th *thread) int {
		r := 0
		if inSyscallEvent(th.event) {
			r += 2
		}
		if th.sig != 0 {
			r++
		}
		return r
	}
	for _, th := range w.p.threads {
		if th.gone || th.exiting || th.parked || !th.stopped || th.event == unix.PTRACE_EVENT_VFORK {
			continue
		}
		if best == nil || rank(th) < rank(best) || rank(th) == rank(best) && th.tid < best.tid {
			best = th
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no stopped thread to borrow: %w", ErrNoThread)
	}
	if err := w.settle(best); err != nil {
		return nil, err
	}
	return best, nil
}

// inSyscallEvent reports whether a thread stopped at event is still
// inside the system call that raised it.
func inSyscallEvent(event int) bool {
	switch event {
	case unix.PTRACE_EVENT_CLONE, unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK,
		unix.PTRACE_EVENT_VFORK_DONE, unix.PTRACE_EVENT_EXEC:
		return true
	}
	return false
}

// syscallSite finds a system-call instruction in executable memory (the
// vDSO first), so that a borrowed thread can execute one without any text
// being written.
func (w *ptraceWorld) syscallSite() (uint64, error) {
	if w.p.sysSite != 0 {
		return w.p.sysSite, nil
	}
	maps, err := readMaps(w.p.pid)
	if err != nil {
		return 0, err
	}
	sort.SliceStable(maps, func(i, j int) bool { return maps[i].Path == "[vdso]" && maps[j].Path != "[vdso]" })
	buf := make([]byte, 64<<10)
	for _, m := range maps {
		if !m.Exec || !m.Read || m.Path == "[vsyscall]" {
			continue
		}
		for a := m.Start; a < m.End; a += uint64(len(buf)) {
			n := min(uint64(len(buf)+len(hostArch.syscallInsn)-1), m.End-a)
			chunk := buf[:min(n, uint64(len(buf)))]
			if n > uint64(len(buf)) {
				chunk = make([]byte, n)
			}
			if err := w.p.readMem(a, chunk); err != nil {
				break
			}
			for off := 0; off+len(hostArch.syscallInsn) <= len(chunk); {
				i := bytes.Index(chunk[off:], hostArch.syscallInsn)
				if i < 0 {
					break
				}
				at := a + uint64(off+i)
				if at%hostArch.insnAlign == 0 {
					w.p.sysSite = at
					return at, nil
				}
				off += i + 1
			}
		}
	}
	return 0, errors.New("no system-call instruction found in executable memory")
}

func (w *ptraceWorld) Syscall(nr uint64, args ...uint64) (uint64, error) {
	return w.syscall("syscall "+fmt.Sprint(nr), nr, args)
}

func (w *ptraceWorld) syscall(name string, nr uint64, args []uint64) (uint64, error) {
	if err := w.check(); err != nil {
		return 0, err
	}
	if !hostArch.remoteSyscalls {
		return 0, fmt.Errorf("remote %s: %w", name, ErrNotSupported)
	}
	if len(args) > 6 {
		return 0, fmt.Errorf("remote %s: %d arguments, at most 6", name, len(args))
	}
	th, err := w.borrow()
	if err != nil {
		return 0, fmt.Errorf("remote %s: %w", name, err)
	}
	site, err := w.syscallSite()
	if err != nil {
		return 0, fmt.Errorf("remote %s: %w", name, err)
	}
	if err := w.t.loadRegs(th); err != nil {
		return 0, fmt.Errorf("remote %s: %w", name, err)
	}
	saved := th.regs
	if h := w.p.syscalling; h != nil {
		h(th.tid, &saved, true)
		defer h(th.tid, &saved, false)
	}
	var a [6]uint64
	copy(a[:], args)
	var stepErr error
	var res, pc uint64
	// A call that a signal's arrival cut short (left at the system-call
	// instruction after a step, or ended with a restart code at its exit
	// stop) is made again, a few times at most.
	for try := 0; try < 3 && (try == 0 || stepErr == nil && (pc == site || restarts(res))); try++ {
		r := saved
		r.prepareSyscall(site, nr, a)
		if err := w.t.storeRegs(th, &r); err != nil {
			return 0, fmt.Errorf("remote %s: %w", name, err)
		}
		if hostArch.syscallStops {
			stepErr = w.runSyscall(th, 10*time.Second)
		} else {
			stepErr = w.Step(th.tid, 10*time.Second)
		}
		if stepErr == nil {
			if err := w.t.loadRegs(th); err != nil {
				stepErr = err
			} else {
				res, pc = th.regs.syscallResult(), th.regs.PC()
			}
		}
	}
	if th.stopped && !th.gone {
		if hostArch.syscallStops && th.sig == 0 && len(th.extra) == 0 {
			// Resumed from the exit stop with no signal to take, the
			// thread returns to user mode without the kernel's restart.
			saved.restartSyscall()
		}
		if err := w.t.storeRegs(th, &saved); err != nil && stepErr == nil {
			stepErr = err
		}
	}
	if stepErr != nil {
		return 0, fmt.Errorf("remote %s: %w", name, stepErr)
	}
	if pc != site+uint64(len(hostArch.syscallInsn)) {
		return 0, fmt.Errorf("remote %s: thread %d stopped at %#x, not after the system call at %#x", name, th.tid, pc, site)
	}
	if res > ^uint64(4095) {
		errno := uintptr(-res)
		return 0, &SyscallError{Name: name, Errno: errno, Err: unix.Errno(errno)}
	}
	return res, nil
}

// runSyscall lets a stopped thread whose registers are set up for a system
// call at a system-call instruction make it, under PTRACE_SYSCALL: an entry
// stop, then an exit stop, where it stays. Unlike a single step, a tracer
// that dies between the two leaves the thread nothing to trap on: a system
// call stop's code (SIGTRAP|0x80 under PTRACE_O_TRACESYSGOOD) is no
// signal, and no trap flag is set. A signal or an interrupt that stops
// the thread before the call is kept for the world's resumption, and the
// thread let go on.
func (w *ptraceWorld) runSyscall(th *thread, timeout time.Duration) error {
	tid := th.tid
	if th.sig != 0 {
		th.extra = append(th.extra, th.sig)
		th.sig = 0
	}
	th.remote = true
	defer func() { th.remote = false }()
	deadline := time.Now().Add(timeout)
	want := uint8(unix.PTRACE_SYSCALL_INFO_ENTRY)
	for stops := 0; ; stops++ {
		if stops > 2+maxStepRestarts {
			return &ThreadError{Tid: tid, Op: "system call", Err: fmt.Errorf("stopped %d times before its end", stops)}
		}
		if err := ptrace(unix.PTRACE_SYSCALL, tid, 0, 0); err != nil {
			return &ThreadError{Tid: tid, Op: "system call", Err: threadErr(err)}
		}
		th.stopped, th.regsOK, th.group = false, false, false
		ok, werr := w.t.waitUntil(func() bool { return th.stopped || th.gone || w.p.done }, time.Until(deadline))
		if werr == nil && !ok && !th.gone {
			// Blocked in the call: interrupted, it ends (to be
			// restarted) at its exit stop.
			if err := ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0); err == nil {
				th.interrupted = true
				ok, werr = w.t.waitUntil(func() bool { return th.stopped || th.gone || w.p.done }, 0)
			}
		}
		switch {
		case w.p.done:
			return ErrExited
		case werr != nil:
			return &ThreadError{Tid: tid, Op: "system call", Err: werr}
		case th.gone:
			return &ThreadError{Tid: tid, Op: "system call", Err: ErrNoThread}
		case !ok:
			return &ThreadError{Tid: tid, Op: "system call", Err: ErrStepTimeout}
		}
		info, err := syscallInfo(tid)
		if err == nil && info.op == want {
			if want == unix.PTRACE_SYSCALL_INFO_EXIT {
				return nil
			}
			want = unix.PTRACE_SYSCALL_INFO_EXIT
			continue
		}
		// Another stop: a signal (kept for later) or an interrupt.
		if th.sig != 0 {
			th.extra = append(th.extra, th.sig)
			th.sig = 0
		}
	}
}

// restarts reports whether res, a system call's result at its exit stop,
// asks the kernel to make it again (ERESTARTSYS, ERESTARTNOINTR,
// ERESTARTNOHAND, ERESTART_RESTARTBLOCK).
func restarts(res uint64) bool {
	e := -int64(res)
	return e >= 512 && e <= 514 || e == 516
}

func (w *ptraceWorld) Mmap(addr, length uint64, prot, flags, fd int, offset uint64) (uint64, error) {
	return w.syscall("mmap", unix.SYS_MMAP, []uint64{addr, length, uint64(prot), uint64(flags), uint64(int64(fd)), offset})
}

func (w *ptraceWorld) Munmap(addr, length uint64) error {
	_, err := w.syscall("munmap", unix.SYS_MUNMAP, []uint64{addr, length})
	return err
}

func (w *ptraceWorld) Mprotect(addr, length uint64, prot int) error {
	_, err := w.syscall("mprotect", unix.SYS_MPROTECT, []uint64{addr, length, uint64(prot)})
	return err
}

func (w *ptraceWorld) MemfdCreate(name string, flags int) (int, error) {
	if err := w.check(); err != nil {
		return -1, err
	}
	th, err := w.borrow()
	if err != nil {
		return -1, fmt.Errorf("remote memfd_create: %w", err)
	}
	if err := w.t.loadRegs(th); err != nil {
		return -1, fmt.Errorf("remote memfd_create: %w", err)
	}
	str := append([]byte(name), 0)
	at := (th.regs.SP() - 512 - uint64(len(str))) &^ 15
	old := make([]byte, len(str))
	if err := w.p.readMem(at, old); err != nil {
		return -1, fmt.Errorf("remote memfd_create: save stack: %w", err)
	}
	if err := w.p.writeMem(at, str); err != nil {
		return -1, fmt.Errorf("remote memfd_create: write name: %w", err)
	}
	fd, err := w.syscall("memfd_create", unix.SYS_MEMFD_CREATE, []uint64{at, uint64(flags)})
	if rerr := w.p.writeMem(at, old); rerr != nil && err == nil {
		err = fmt.Errorf("remote memfd_create: restore stack: %w", rerr)
	}
	if err != nil {
		return -1, err
	}
	return int(fd), nil
}
