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

// World is the stopped process handed to the function given to
// Process.Stopped. Its methods run directly on the tracer thread, so they
// are cheap and may be called many times; they fail with ErrRunning once
// that function has returned.
type World struct {
	t    *tracer
	p    *Process
	live bool
}

func (w *World) check() error {
	if !w.live {
		return ErrRunning
	}
	if w.p.done {
		return ErrExited
	}
	return nil
}

// Pid returns the process id of the stopped process.
func (w *World) Pid() int { return w.p.pid }

// Execs returns how many times the process has called execve since it
// was attached.
func (w *World) Execs() int { return w.p.execs }

func (w *World) thread(tid int) (*thread, error) {
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

// Refresh runs the stop protocol again, so that threads created while a
// thread was stepped are stopped and listed too. It is part of the same
// stop: the StopStats keep the time the world was first all stopped, so
// the pause counts the steps made before the refresh.
func (w *World) Refresh() error {
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

// Threads describes every thread of the world (the process and the
// children sharing its memory), sorted by tid. Exited threads are left
// out; exiting and vfork-parked ones are included and flagged.
func (w *World) Threads() ([]ThreadInfo, error) {
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
			if pc, ok := r.restartPC(); ok {
				info.RestartPC = pc
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tid < out[j].Tid })
	return out, nil
}

// Regs returns the registers of a stopped thread.
func (w *World) Regs(tid int) (Regs, error) {
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

// SetRegs sets the registers of a stopped thread.
func (w *World) SetRegs(tid int, r *Regs) error {
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

// ReadMemory reads len(buf) bytes at virtual address addr.
func (w *World) ReadMemory(addr uint64, buf []byte) error {
	if err := w.check(); err != nil {
		return err
	}
	return w.p.readMem(addr, buf)
}

// WriteMemory writes data at virtual address addr.
func (w *World) WriteMemory(addr uint64, data []byte) error {
	if err := w.check(); err != nil {
		return err
	}
	return w.p.writeMem(addr, data)
}

// Maps returns the parsed /proc/PID/maps.
func (w *World) Maps() ([]Mapping, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	return readMaps(w.p.pid)
}

// Step executes one instruction of thread tid while every other thread
// stays stopped. If the thread does not stop again within timeout (0 means
// one second) — it is blocked in a system call, typically — it is
// interrupted and the error wraps ErrStepTimeout. A signal the thread held,
// or one that reaches it before the instruction runs, is queued again when
// the world resumes. A thread stopped at a clone, fork or exec event first
// finishes that system call (see settle).
func (w *World) Step(tid int, timeout time.Duration) error {
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

// StepSignals returns how many signals reached thread tid before the
// instruction of its last Step ran: each was kept, the step made again,
// and the signal is delivered when the world resumes.
func (w *World) StepSignals(tid int) int {
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
func (w *World) settle(th *thread) error {
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
func (w *World) step(th *thread, timeout time.Duration) error {
	tid := th.tid
	if timeout <= 0 {
		timeout = time.Second
	}
	if th.sig != 0 {
		th.extra = append(th.extra, th.sig)
		th.sig = 0
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
func (w *World) borrow() (*thread, error) {
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
func (w *World) syscallSite() (uint64, error) {
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
			n := min(uint64(len(buf)+len(syscallInsn)-1), m.End-a)
			chunk := buf[:min(n, uint64(len(buf)))]
			if n > uint64(len(buf)) {
				chunk = make([]byte, n)
			}
			if err := w.p.readMem(a, chunk); err != nil {
				break
			}
			for off := 0; off+len(syscallInsn) <= len(chunk); {
				i := bytes.Index(chunk[off:], syscallInsn)
				if i < 0 {
					break
				}
				at := a + uint64(off+i)
				if at%syscallInsnAlign == 0 {
					w.p.sysSite = at
					return at, nil
				}
				off += i + 1
			}
		}
	}
	return 0, errors.New("no system-call instruction found in executable memory")
}

// Syscall makes system call nr with up to six arguments in the tracee, on
// a borrowed stopped thread whose registers are restored afterwards. It
// returns the call's result; a negative errno becomes a *SyscallError.
func (w *World) Syscall(nr uint64, args ...uint64) (uint64, error) {
	return w.syscall("syscall "+fmt.Sprint(nr), nr, args)
}

func (w *World) syscall(name string, nr uint64, args []uint64) (uint64, error) {
	if err := w.check(); err != nil {
		return 0, err
	}
	if !remoteSyscalls {
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
	r := saved
	var a [6]uint64
	copy(a[:], args)
	r.prepareSyscall(site, nr, a)
	if err := w.t.storeRegs(th, &r); err != nil {
		return 0, fmt.Errorf("remote %s: %w", name, err)
	}
	stepErr := w.Step(th.tid, 10*time.Second)
	var res, pc uint64
	if stepErr == nil {
		if err := w.t.loadRegs(th); err != nil {
			stepErr = err
		} else {
			res, pc = th.regs.syscallResult(), th.regs.PC()
		}
	}
	if th.stopped && !th.gone {
		if err := w.t.storeRegs(th, &saved); err != nil && stepErr == nil {
			stepErr = err
		}
	}
	if stepErr != nil {
		return 0, fmt.Errorf("remote %s: %w", name, stepErr)
	}
	if pc != site+uint64(len(syscallInsn)) {
		return 0, fmt.Errorf("remote %s: thread %d stopped at %#x, not after the system call at %#x", name, th.tid, pc, site)
	}
	if res > ^uint64(4095) {
		errno := uintptr(-res)
		return 0, &SyscallError{Name: name, Errno: errno, Err: unix.Errno(errno)}
	}
	return res, nil
}

// Mmap maps memory in the tracee (mmap(2)); it returns the address.
// Never ask for PROT_WRITE|PROT_EXEC together: map code read-write, fill
// it, then Mprotect it read-execute.
func (w *World) Mmap(addr, length uint64, prot, flags, fd int, offset uint64) (uint64, error) {
	return w.syscall("mmap", unix.SYS_MMAP, []uint64{addr, length, uint64(prot), uint64(flags), uint64(int64(fd)), offset})
}

// Munmap unmaps memory in the tracee (munmap(2)).
func (w *World) Munmap(addr, length uint64) error {
	_, err := w.syscall("munmap", unix.SYS_MUNMAP, []uint64{addr, length})
	return err
}

// Mprotect changes the protection of memory in the tracee (mprotect(2)).
func (w *World) Mprotect(addr, length uint64, prot int) error {
	_, err := w.syscall("mprotect", unix.SYS_MPROTECT, []uint64{addr, length, uint64(prot)})
	return err
}

// MemfdCreate creates an anonymous file in the tracee (memfd_create(2))
// and returns its descriptor there. The name is written briefly below the
// borrowed thread's stack red zone and restored afterwards.
func (w *World) MemfdCreate(name string, flags int) (int, error) {
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

// Syscall runs one system call in the tracee, stopping the world for it
// if it is running. See World.Syscall.
func (p *Process) Syscall(nr uint64, args ...uint64) (uint64, error) {
	var res uint64
	_, err := p.Stopped(func(w *World) error {
		var err error
		res, err = w.Syscall(nr, args...)
		return err
	})
	return res, err
}

// Mmap maps memory in the tracee; see World.Mmap.
func (p *Process) Mmap(addr, length uint64, prot, flags, fd int, offset uint64) (uint64, error) {
	var res uint64
	_, err := p.Stopped(func(w *World) error {
		var err error
		res, err = w.Mmap(addr, length, prot, flags, fd, offset)
		return err
	})
	return res, err
}

// Munmap unmaps memory in the tracee; see World.Munmap.
func (p *Process) Munmap(addr, length uint64) error {
	_, err := p.Stopped(func(w *World) error { return w.Munmap(addr, length) })
	return err
}

// Mprotect changes memory protection in the tracee; see World.Mprotect.
func (p *Process) Mprotect(addr, length uint64, prot int) error {
	_, err := p.Stopped(func(w *World) error { return w.Mprotect(addr, length, prot) })
	return err
}

// MemfdCreate creates an anonymous file in the tracee; see
// World.MemfdCreate.
func (p *Process) MemfdCreate(name string, flags int) (int, error) {
	fd := -1
	_, err := p.Stopped(func(w *World) error {
		var err error
		fd, err = w.MemfdCreate(name, flags)
		return err
	})
	return fd, err
}
