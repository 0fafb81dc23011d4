//go:build linux && (amd64 || arm64)

package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// processBackend is the Linux backend of a Process (see backend.go).
type processBackend = *ptraceProcess

var _ processOps = processBackend(nil)

// ptraceProcess is a traced process as its tracer keeps it: the backend of
// a Process, which it implements method by method (the exported methods
// below are documented on Process), and the bookkeeping of the tracer.
type ptraceProcess struct {
	pub  *Process // the handle given to callers (Spawn, Attach, Event.Child)
	t    *tracer
	pid  int
	opts Options

	// Owned by the tracer goroutine.
	threads    map[int]*thread
	sharers    map[int]*ptraceProcess // children sharing the address space
	parent     *ptraceProcess         // for a sharer: the process whose memory it shares
	mem        *os.File               // /proc/PID/mem
	memErr     error
	stopped    bool // the world is held stopped (Stop, Stopped, or fresh from Spawn/Attach)
	trap       TrapHandler
	exiting    func(tid int)  // see SetExitHandler
	syscalling SyscallHandler // see SetSyscallHandler
	stepping   StepHandler    // see SetStepHandler
	execs      int
	sysSite    uint64 // address of a syscall instruction, 0 if not found yet
	stats      StopStats
	niceOld    *int            // the tracer thread's nice value before a StopNice stop raised it
	schedOld   *unix.SchedAttr // the tracer thread's policy before a StopFIFO stop
	stopT0     time.Time       // first interrupt of the current stop
	stopT1     time.Time       // every thread stopped
	done       bool            // exited or detached

	events  chan Event
	dropped atomic.Int64

	latch latch // Options.StopLatch: see latch_linux.go

	exitCh  chan struct{} // closed when the process has exited or was detached
	status  ExitStatus
	exitErr error // ErrDetached when detached rather than exited
}

func newProcess(t *tracer, pid int, opts Options) *ptraceProcess {
	n := opts.EventBuffer
	if n <= 0 {
		n = 1024
	}
	p := &ptraceProcess{
		t: t, pid: pid, opts: opts,
		threads: make(map[int]*thread),
		sharers: make(map[int]*ptraceProcess),
		events:  make(chan Event, n),
		exitCh:  make(chan struct{}),
	}
	p.pub = &Process{b: p}
	return p
}

// emit records an event without ever blocking the tracer.
func (p *ptraceProcess) emit(e Event) bool {
	e.Time = time.Now()
	select {
	case p.events <- e:
		return true
	default:
		p.dropped.Add(1)
		return false
	}
}

// finish marks p as exited (err nil) or detached (err ErrDetached).
func (p *ptraceProcess) finish(st ExitStatus, err error) {
	if p.done {
		return
	}
	p.done = true
	p.status, p.exitErr = st, err
	if p.mem != nil && p.parent == nil {
		p.mem.Close()
	}
	p.mem = nil
	close(p.exitCh)
}

// keepStopped reports whether stops of p's threads are kept rather than
// resumed at once.
func (p *ptraceProcess) keepStopped() bool {
	for q := p; q != nil; q = q.parent {
		if q.stopped {
			return true
		}
	}
	return false
}

// root returns the process whose world p belongs to.
func (p *ptraceProcess) root() *ptraceProcess {
	for p.parent != nil {
		p = p.parent
	}
	return p
}

// members returns p and, recursively, the children sharing its memory.
func (p *ptraceProcess) members() []*ptraceProcess {
	out := []*ptraceProcess{p}
	for i := 0; i < len(out); i++ {
		for _, c := range out[i].sharers {
			out = append(out, c)
		}
	}
	return out
}

// memFile returns the open /proc/PID/mem of p's address space.
func (p *ptraceProcess) memFile() (*os.File, error) {
	r := p.root()
	if r.done {
		return nil, ErrExited
	}
	if r.mem == nil {
		if r.memErr != nil {
			return nil, r.memErr
		}
		return nil, ErrExited
	}
	return r.mem, nil
}

func (p *ptraceProcess) openMem() error {
	if p.mem != nil {
		p.mem.Close()
		p.mem = nil
	}
	f, err := os.OpenFile("/proc/"+strconv.Itoa(p.pid)+"/mem", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open memory of %d: %w", p.pid, err)
	}
	p.mem = f
	p.memErr = nil
	return nil
}

// Spawn starts argv as a new traced process and returns it stopped just
// after execve, before the program's first instruction runs; call Resume
// to let it go. argv[0] is looked up in PATH. The child is killed if the
// calling program exits without detaching (PTRACE_O_EXITKILL).
func Spawn(argv []string, opts *SpawnOptions) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("spawn: empty command")
	}
	var o SpawnOptions
	if opts != nil {
		o = *opts
	}
	o.KillOnExit = true
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", argv[0], err)
	}
	files := []*os.File{o.Stdin, o.Stdout, o.Stderr}
	for i, f := range files {
		if f == nil {
			null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				return nil, fmt.Errorf("spawn %s: %w", argv[0], err)
			}
			defer null.Close()
			files[i] = null
		}
	}
	t := newTracer()
	var p *ptraceProcess
	if derr := t.do(func() { p, err = t.spawn(path, argv, files, &o) }); derr != nil {
		return nil, derr
	}
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", argv[0], err)
	}
	return p.pub, nil
}

// spawn runs on the tracer. The child asks to be traced (PTRACE_TRACEME)
// and stops after execve; it is then detached into a SIGSTOP job-control
// stop and seized, so that it is traced with PTRACE_SEIZE semantics
// (PTRACE_INTERRUPT, PTRACE_LISTEN) without running a single instruction
// untraced. A SIGCONT ends the job-control stop; the tracee sees it as an
// ignored signal when it resumes.
func (t *tracer) spawn(path string, argv []string, files []*os.File, o *SpawnOptions) (*ptraceProcess, error) {
	attr := &os.ProcAttr{Dir: o.Dir, Env: o.Env, Files: files, Sys: &syscall.SysProcAttr{Ptrace: true}}
	child, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return nil, err
	}
	pid := child.Pid
	_ = child.Release()
	fail := func(err error) (*ptraceProcess, error) {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		return nil, err
	}
	waitPid := func(flags int) (unix.WaitStatus, error) {
		for {
			var ws unix.WaitStatus
			_, err := unix.Wait4(pid, &ws, flags, nil)
			if err == unix.EINTR {
				continue
			}
			return ws, err
		}
	}
	ws, err := waitPid(unix.WALL)
	if err != nil {
		return fail(fmt.Errorf("wait for exec: %w", err))
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
		return fail(fmt.Errorf("unexpected status %#x after exec", uint32(ws)))
	}
	if err := ptrace(unix.PTRACE_DETACH, pid, 0, uintptr(unix.SIGSTOP)); err != nil {
		return fail(fmt.Errorf("detach to seize: %w", err))
	}
	if ws, err = waitPid(unix.WSTOPPED); err != nil || !ws.Stopped() {
		return fail(fmt.Errorf("wait for job-control stop (status %#x): %w", uint32(ws), err))
	}
	if err := ptrace(unix.PTRACE_SEIZE, pid, 0, ptraceOptions(&o.Options)); err != nil {
		return fail(fmt.Errorf("seize: %w", err))
	}
	if ws, err = waitPid(unix.WALL); err != nil || !ws.Stopped() {
		return fail(fmt.Errorf("wait for seize stop (status %#x): %w", uint32(ws), err))
	}
	if err := unix.Kill(pid, unix.SIGCONT); err != nil {
		return fail(fmt.Errorf("continue job-control stop: %w", err))
	}
	p := newProcess(t, pid, o.Options)
	if err := p.openMem(); err != nil {
		return fail(err)
	}
	th := &thread{tid: pid, p: p, stopped: true, event: unix.PTRACE_EVENT_STOP}
	t.threads[pid] = th
	p.threads[pid] = th
	p.stopped = true
	t.procs[pid] = p
	if o.StopLatch {
		if err := t.armLatch(p); err != nil {
			return fail(err)
		}
	}
	return p, nil
}

// Attach seizes every thread of process pid (PTRACE_SEIZE) and returns
// it with the world stopped; call Resume to let it go. A pid that does not
// exist gives an error wrapping ErrNoProcess (which matches ErrExited); a
// process another program traces, a *TracedError.
func Attach(pid int, opts *Options) (*Process, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	t := newTracer()
	var p *ptraceProcess
	var err error
	if derr := t.do(func() { p, err = t.attach(pid, &o) }); derr != nil {
		return nil, derr
	}
	if err != nil {
		return nil, fmt.Errorf("attach %d: %w", pid, err)
	}
	return p.pub, nil
}

func (t *tracer) attach(pid int, o *Options) (*ptraceProcess, error) {
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); pid <= 0 || errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoProcess
	}
	p := newProcess(t, pid, *o)
	t.procs[pid] = p
	fail := func(err error) (*ptraceProcess, error) {
		for tid := range p.threads {
			_ = ptrace(unix.PTRACE_DETACH, tid, 0, 0)
			delete(t.threads, tid)
		}
		delete(t.procs, pid)
		return nil, err
	}
	for round := 0; ; round++ {
		tids, err := listTasks(pid)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fail(fmt.Errorf("%w (%w)", ErrExited, err))
			}
			return fail(err)
		}
		added := 0
		for _, tid := range tids {
			if p.threads[tid] != nil {
				continue
			}
			err := ptrace(unix.PTRACE_SEIZE, tid, 0, ptraceOptions(o))
			switch {
			case err == nil:
			case err == unix.ESRCH:
				continue // exited meanwhile
			case err == unix.EPERM && taskZombie(pid, tid):
				continue // an exited leader waiting for its threads
			case err == unix.EPERM && taskTracer(pid, tid) == unix.Gettid():
				// Created by a thread seized in an earlier round: traced
				// already, its first stop still to come.
				t.adopt(p, tid)
				added++
				continue
			case err == unix.EPERM && taskTracer(pid, tid) != 0:
				tracer := taskTracer(pid, tid)
				if tgid, err := readTgid(tracer); err == nil {
					tracer = tgid
				}
				return fail(&TracedError{Pid: pid, Tid: tid, Tracer: tracer})
			default:
				return fail(&ThreadError{Tid: tid, Op: "seize", Err: err})
			}
			th := &thread{tid: tid, p: p}
			t.threads[tid] = th
			p.threads[tid] = th
			added++
		}
		if len(p.threads) == 0 {
			return fail(ErrExited)
		}
		if added == 0 && round > 0 {
			break
		}
	}
	if err := p.openMem(); err != nil {
		return fail(err)
	}
	if err := t.stopWorld(p); err != nil {
		return fail(err)
	}
	if o.StopLatch {
		if err := t.armLatch(p); err != nil {
			return fail(err)
		}
	}
	return p, nil
}

// stopWorld stops every thread of p and of the children sharing its memory,
// following the protocol in the package documentation. On return every
// known thread is stopped, gone, exiting or parked in vfork.
func (t *tracer) stopWorld(p *ptraceProcess) error {
	p.stopT0 = time.Now()
	defer restoreNice(p)
	t.poll()
	if p.done {
		return ErrExited
	}
	p.stopped = true
	for round := 0; ; round++ {
		fresh := 0
		for _, q := range p.members() {
			tids, err := listTasks(q.pid)
			if err != nil {
				continue // the process is exiting; its statuses will say so
			}
			for _, tid := range tids {
				if q.threads[tid] != nil || t.threads[tid] != nil {
					continue
				}
				// A task we have no record of: a thread whose creation
				// event is still queued, or one created untraced during
				// Attach. Seize it; EPERM means it is ours already.
				err := ptrace(unix.PTRACE_SEIZE, tid, 0, ptraceOptions(&q.opts))
				if err == unix.ESRCH {
					continue
				}
				th := t.adopt(q, tid)
				if err == nil {
					th.initPending = false
				}
				fresh++
			}
		}
		for _, q := range p.members() {
			for _, th := range q.threads {
				if th.stopped || th.gone || th.parked || th.exiting || th.interrupted || th.initPending {
					continue
				}
				raiseNice(th, p.opts.StopNice)
				if err := ptrace(unix.PTRACE_INTERRUPT, th.tid, 0, 0); err != nil {
					if err == unix.ESRCH {
						th.gone = true
						continue
					}
					return &ThreadError{Tid: th.tid, Op: "interrupt", Err: err}
				}
				th.interrupted = true
			}
		}
		_, err := t.waitUntil(func() bool { return p.done || p.settled() }, 0)
		if p.done {
			return ErrExited
		}
		if err != nil {
			return err
		}
		if fresh == 0 && round > 0 && p.settled() {
			break
		}
	}
	p.stopT1 = time.Now()
	return nil
}

// settled reports whether no thread of the world is still running.
func (p *ptraceProcess) settled() bool {
	for _, q := range p.members() {
		for _, th := range q.threads {
			if !th.stopped && !th.gone && !th.parked && !th.exiting {
				if !th.interrupted && !th.initPending {
					return false // needs an interrupt first
				}
				return false
			}
		}
	}
	return true
}

// resumeWorld resumes every thread of the world that is not held.
func (t *tracer) resumeWorld(p *ptraceProcess) {
	p.stopped = false
	for _, q := range p.members() {
		for _, th := range q.threads {
			t.resumeThread(th)
		}
	}
	end := time.Now()
	p.stats = StopStats{Threads: p.countThreads(), Stop: p.stopT1.Sub(p.stopT0), Pause: end.Sub(p.stopT1), Total: end.Sub(p.stopT0)}
}

// raiseNice gives thread th the nice value nice until it has stopped,
// when nice is lower (a higher priority) than its own: on a busy machine
// an interrupted thread waits for a CPU to enter its stop, and every
// thread already stopped waits with it. It runs no user code before the
// stop, where restoreNice gives it its own value back. 0 does nothing.
func raiseNice(th *thread, nice int) {
	if nice == 0 || th.niceOld != nil {
		return
	}
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, th.tid)
	if err != nil || 20-prio <= nice {
		return
	}
	if unix.Setpriority(unix.PRIO_PROCESS, th.tid, nice) == nil {
		old := 20 - prio
		th.niceOld = &old
	}
}

// restoreNice gives every thread of the world whose nice value
// raiseNice changed its own value back.
func restoreNice(p *ptraceProcess) {
	for _, q := range p.members() {
		for _, th := range q.threads {
			if th.niceOld != nil {
				_ = unix.Setpriority(unix.PRIO_PROCESS, th.tid, *th.niceOld)
				th.niceOld = nil
			}
		}
	}
}

// renice sets the tracer thread's nice value to Options.StopNice and its
// policy to SCHED_FIFO with Options.StopFIFO, for the stop of Stopped,
// keeping what it had.
func (p *ptraceProcess) renice() {
	if p.opts.StopFIFO && p.schedOld == nil {
		old, err := unix.SchedGetAttr(0, 0)
		if err == nil && old.Policy != unix.SCHED_FIFO && old.Policy != unix.SCHED_RR {
			fifo := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}
			if unix.SchedSetAttr(0, &fifo, 0) == nil {
				p.schedOld = old
			}
		}
	}
	if p.opts.StopNice == 0 || p.niceOld != nil {
		return
	}
	tid := unix.Gettid()
	// getpriority(2) returns 20 - nice for a thread.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return
	}
	if unix.Setpriority(unix.PRIO_PROCESS, tid, p.opts.StopNice) == nil {
		old := 20 - prio
		p.niceOld = &old
	}
}

// unrenice puts back the nice value and the policy renice changed.
func (p *ptraceProcess) unrenice() {
	if p.schedOld != nil {
		_ = unix.SchedSetAttr(0, p.schedOld, 0)
		p.schedOld = nil
	}
	if p.niceOld == nil {
		return
	}
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), *p.niceOld)
	p.niceOld = nil
}

func (p *ptraceProcess) countThreads() int {
	n := 0
	for _, q := range p.members() {
		n += len(q.threads)
	}
	return n
}

// The exported methods of ptraceProcess implement processOps: each is
// documented on the Process method of the same name (process.go).
func (p *ptraceProcess) Pid() int { return p.pid }

func (p *ptraceProcess) Events() <-chan Event { return p.events }

func (p *ptraceProcess) DroppedEvents() int64 { return p.dropped.Load() }

func (p *ptraceProcess) Exited() <-chan struct{} { return p.exitCh }

func (p *ptraceProcess) Wait() (ExitStatus, error) {
	<-p.exitCh
	return p.status, p.exitErr
}

// run executes fn on the tracer, failing with ErrExited (or ErrDetached)
// when the process is gone.
func (p *ptraceProcess) run(fn func() error) error {
	var err error
	if derr := p.t.do(func() {
		if p.done {
			err = p.goneErr()
			return
		}
		err = fn()
	}); derr != nil {
		return p.goneErr()
	}
	return err
}

func (p *ptraceProcess) goneErr() error {
	select {
	case <-p.exitCh:
		if p.exitErr != nil {
			return p.exitErr
		}
		return ErrExited
	default:
		return ErrDetached
	}
}

func (p *ptraceProcess) Stop() error {
	return p.run(func() error {
		if p.parent != nil {
			return errors.New("stop: process shares its parent's memory; stop the parent")
		}
		if err := p.t.stopWorld(p); err != nil {
			return fmt.Errorf("stop %d: %w", p.pid, err)
		}
		return nil
	})
}

func (p *ptraceProcess) Resume() error {
	return p.run(func() error {
		p.t.resumeWorld(p)
		return nil
	})
}

func (p *ptraceProcess) LastStop() StopStats {
	var s StopStats
	_ = p.run(func() error { s = p.stats; return nil })
	return s
}

func (p *ptraceProcess) Stopped(fn func(w *World) error) (StopStats, error) {
	var stats StopStats
	err := p.run(func() error {
		was := p.stopped
		if !was {
			p.renice()
			defer p.unrenice()
			if err := p.t.stopWorld(p); err != nil {
				if !p.done {
					p.t.resumeWorld(p)
				}
				return fmt.Errorf("stop %d: %w", p.pid, err)
			}
		}
		w := &World{b: ptraceWorld{t: p.t, p: p, live: true}}
		ferr := fn(w)
		w.b.live = false
		if !was && !p.done {
			p.t.resumeWorld(p)
			stats = p.stats
		}
		return ferr
	})
	return stats, err
}

func (p *ptraceProcess) Threads() ([]int, error) {
	var tids []int
	err := p.run(func() error {
		for tid, th := range p.threads {
			if !th.gone {
				tids = append(tids, tid)
			}
		}
		return nil
	})
	sort.Ints(tids)
	return tids, err
}

// withWorld runs fn with a World, requiring the process stopped.
func (p *ptraceProcess) withWorld(fn func(w *World) error) error {
	return p.run(func() error {
		if !p.keepStopped() {
			return ErrRunning
		}
		w := &World{b: ptraceWorld{t: p.t, p: p.root(), live: true}}
		defer func() { w.b.live = false }()
		return fn(w)
	})
}

func (p *ptraceProcess) ReadMemory(addr uint64, buf []byte) error {
	return p.run(func() error { return p.readMem(addr, buf) })
}

func (p *ptraceProcess) WriteMemory(addr uint64, data []byte) error {
	return p.run(func() error { return p.writeMem(addr, data) })
}

func (p *ptraceProcess) readMem(addr uint64, buf []byte) error {
	f, err := p.memFile()
	if err != nil {
		return &MemoryError{Addr: addr, Len: len(buf), Err: err}
	}
	done := 0
	for done < len(buf) {
		n, err := unix.Pread(int(f.Fd()), buf[done:], int64(addr)+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &MemoryError{Addr: addr, Len: len(buf), Done: done, Err: err}
		}
		if n == 0 {
			return &MemoryError{Addr: addr, Len: len(buf), Done: done, Err: ErrShortIO}
		}
		done += n
	}
	return nil
}

func (p *ptraceProcess) writeMem(addr uint64, data []byte) error {
	f, err := p.memFile()
	if err != nil {
		return &MemoryError{Addr: addr, Len: len(data), Write: true, Err: err}
	}
	done := 0
	for done < len(data) {
		n, err := unix.Pwrite(int(f.Fd()), data[done:], int64(addr)+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &MemoryError{Addr: addr, Len: len(data), Done: done, Write: true, Err: err}
		}
		if n == 0 {
			return &MemoryError{Addr: addr, Len: len(data), Done: done, Write: true, Err: ErrShortIO}
		}
		done += n
	}
	return nil
}

func (p *ptraceProcess) Maps() ([]Mapping, error) {
	var m []Mapping
	err := p.run(func() error {
		var err error
		m, err = readMaps(p.pid)
		return err
	})
	return m, err
}

func readMaps(pid int) ([]Mapping, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("read maps of %d: %w", pid, ErrExited)
		}
		return nil, fmt.Errorf("read maps of %d: %w", pid, err)
	}
	defer f.Close()
	return ParseMaps(f)
}

func (p *ptraceProcess) Execs() int {
	n := 0
	_ = p.run(func() error { n = p.execs; return nil })
	return n
}

func (p *ptraceProcess) SetExitHandler(h func(tid int)) error {
	return p.run(func() error { p.exiting = h; return nil })
}

func (p *ptraceProcess) SetSyscallHandler(h SyscallHandler) error {
	return p.run(func() error { p.syscalling = h; return nil })
}

func (p *ptraceProcess) SetStepHandler(h StepHandler) error {
	return p.run(func() error { p.stepping = h; return nil })
}

func (p *ptraceProcess) SetTrapHandler(h TrapHandler) (TrapHandler, error) {
	var prev TrapHandler
	err := p.run(func() error { prev, p.trap = p.trap, h; return nil })
	return prev, err
}

func (p *ptraceProcess) Release(fn func(ctx *TrapContext) bool) error {
	return p.run(func() error {
		var firstErr error
		for _, q := range p.members() {
			for _, th := range q.threads {
				if !th.held {
					continue
				}
				if fn != nil {
					if err := p.t.loadRegs(th); err != nil {
						firstErr = errors.Join(firstErr, err)
					} else {
						regs := th.regs
						ctx := &TrapContext{Pid: q.pid, Tid: th.tid, Addr: regs.PC() - hostArch.breakpointPCAdjust, Regs: &regs, WatchSyscalls: th.watch}
						if !fn(ctx) {
							continue
						}
						th.watch = ctx.WatchSyscalls
						if regs != th.regs {
							if err := p.t.storeRegs(th, &regs); err != nil {
								firstErr = errors.Join(firstErr, err)
							}
						}
					}
				}
				th.held = false
				if !q.keepStopped() {
					p.t.resumeThread(th)
				}
			}
		}
		return firstErr
	})
}

func (p *ptraceProcess) Detach() error {
	return p.run(func() error {
		t := p.t
		if !p.stopped {
			if err := t.stopWorld(p); err != nil {
				return fmt.Errorf("detach %d: %w", p.pid, err)
			}
		}
		members := p.members()
		// Sharers first: a parent parked in vfork is released only when its
		// child runs on.
		var parked []*thread
		for i := len(members) - 1; i >= 0; i-- {
			for _, th := range members[i].threads {
				th.held = false
				if th.parked {
					parked = append(parked, th)
					continue
				}
				if th.stopped && !th.gone {
					for _, s := range th.extra {
						_ = unix.Tgkill(members[i].pid, th.tid, unix.Signal(s))
					}
					sig := th.sig
					if th.event != 0 {
						sig = 0
					}
					_ = ptrace(unix.PTRACE_DETACH, th.tid, 0, uintptr(sig))
				}
				delete(t.threads, th.tid)
			}
		}
		if len(parked) > 0 {
			for _, th := range parked {
				t.threads[th.tid] = th
			}
			_, _ = t.waitUntil(func() bool {
				for _, th := range parked {
					if th.parked && !th.gone {
						return false
					}
				}
				return true
			}, 2*time.Second)
			for _, th := range parked {
				if th.stopped {
					_ = ptrace(unix.PTRACE_DETACH, th.tid, 0, 0)
				}
				delete(t.threads, th.tid)
			}
		}
		if p.latch.armed {
			// Every thread left its tracer with the latch's group stop
			// in effect, so it stops again: end that stop (a job-control
			// stop of the program's, if one was in effect, ends too).
			_ = unix.Kill(p.pid, unix.SIGCONT)
		}
		for _, q := range members {
			q.threads = map[int]*thread{}
			delete(t.procs, q.pid)
			q.finish(ExitStatus{}, ErrDetached)
		}
		return nil
	})
}

func (p *ptraceProcess) Kill() error {
	err := p.run(func() error {
		// Stops that still come (an exit event) must not be held.
		for _, q := range p.members() {
			q.stopped = false
			for _, th := range q.threads {
				th.held = false
			}
		}
		if err := unix.Kill(p.pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
			return fmt.Errorf("kill %d: %w", p.pid, err)
		}
		_, err := p.t.waitUntil(func() bool { return p.done }, 0)
		return err
	})
	if errors.Is(err, ErrExited) {
		return nil
	}
	return err
}

func (p *ptraceProcess) DrainTraps(grace time.Duration) error {
	deadline := time.Now().Add(grace)
	limit := deadline.Add(time.Second)
	for {
		busy := false
		err := p.run(func() error {
			p.t.poll()
			for _, q := range p.members() {
				for _, th := range q.threads {
					if !th.gone && !th.stopped && trapQueued(q.pid, th.tid) {
						busy = true
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		now := time.Now()
		if (!busy && now.After(deadline)) || now.After(limit) {
			return nil
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// trapQueued reports whether task tid has a SIGTRAP queued, to itself or to
// its process (SigPnd, ShdPnd in /proc/PID/task/TID/status).
func trapQueued(pid, tid int) bool {
	s, err := readProcStatus(pid, tid)
	if err != nil {
		return false
	}
	const trapBit = 1 << (int(unix.SIGTRAP) - 1)
	for _, key := range []string{"SigPnd", "ShdPnd"} {
		f, _ := statusValue(s, key)
		if v, err := strconv.ParseUint(f, 16, 64); err == nil && v&trapBit != 0 {
			return true
		}
	}
	return false
}
