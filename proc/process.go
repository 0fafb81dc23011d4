package proc

import "time"

// Process is a traced process: its threads, and the children that share
// its address space until they exec or exit. Its methods may be called from
// any goroutine; each hands its work to the tracer thread (see the package
// documentation).
type Process struct {
	b processBackend // the platform's tracer: see backend.go
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.b.Pid() }

// Events returns the channel on which events are delivered. It is never
// closed; use Exited to learn that the process is gone.
func (p *Process) Events() <-chan Event { return p.b.Events() }

// DroppedEvents returns how many events found the Events channel full.
func (p *Process) DroppedEvents() int64 { return p.b.DroppedEvents() }

// Exited returns a channel closed when the process has exited or was
// detached.
func (p *Process) Exited() <-chan struct{} { return p.b.Exited() }

// Wait waits until the process exits and returns its status. It returns
// an error wrapping ErrDetached if the process was detached instead.
func (p *Process) Wait() (ExitStatus, error) { return p.b.Wait() }

// Stop stops every thread (see the package documentation for the
// protocol). The process stays stopped until Resume.
func (p *Process) Stop() error { return p.b.Stop() }

// Resume lets every stopped thread run again, re-injecting the signals
// that arrived meanwhile. Threads held by a TrapHandler stay stopped.
func (p *Process) Resume() error { return p.b.Resume() }

// LastStop returns the timing of the latest stop that was resumed.
func (p *Process) LastStop() StopStats { return p.b.LastStop() }

// Stopped stops the world (unless it is stopped already), runs fn on the
// tracer thread with the World, and resumes the world if it was running
// before. fn must not call Process methods; it uses w. The StopStats time
// this stop (zero when the world was already stopped).
func (p *Process) Stopped(fn func(w *World) error) (StopStats, error) { return p.b.Stopped(fn) }

// Threads returns the tids of the traced threads of the process (not of
// the children sharing its memory), sorted.
func (p *Process) Threads() ([]int, error) { return p.b.Threads() }

// Regs returns the registers of a thread. The process must be stopped.
func (p *Process) Regs(tid int) (Regs, error) {
	var r Regs
	err := p.b.withWorld(func(w *World) error {
		var err error
		r, err = w.Regs(tid)
		return err
	})
	return r, err
}

// SetRegs sets the registers of a thread. The process must be stopped.
func (p *Process) SetRegs(tid int, r *Regs) error {
	return p.b.withWorld(func(w *World) error { return w.SetRegs(tid, r) })
}

// Step single-steps one thread while the others stay stopped; timeout
// bounds the wait (0 means 1 second).
func (p *Process) Step(tid int, timeout time.Duration) error {
	return p.b.withWorld(func(w *World) error { return w.Step(tid, timeout) })
}

// ReadMemory reads len(buf) bytes at virtual address addr through
// /proc/PID/mem. It works whether the process runs or not.
func (p *Process) ReadMemory(addr uint64, buf []byte) error { return p.b.ReadMemory(addr, buf) }

// WriteMemory writes data at virtual address addr through /proc/PID/mem,
// which writes read-only text too (the kernel breaks copy-on-write; no
// mapping changes its protection). Writing code while threads run is the
// caller's responsibility: see package batchpatch.
func (p *Process) WriteMemory(addr uint64, data []byte) error { return p.b.WriteMemory(addr, data) }

// Maps returns the parsed /proc/PID/maps.
func (p *Process) Maps() ([]Mapping, error) { return p.b.Maps() }

// Execs returns how many times the process has called execve since it
// was attached: text patched before an exec is gone after it.
func (p *Process) Execs() int { return p.b.Execs() }

// SetExitHandler installs h, called on the tracer thread when a thread of
// the process stops on its way out (PTRACE_EVENT_EXIT): its memory, its
// registers and the thread id its C library keeps are still there. The
// thread resumes when h returns; h must not call back into the Process.
// nil removes the handler.
func (p *Process) SetExitHandler(h func(tid int)) error { return p.b.SetExitHandler(h) }

// SyscallHandler is told, on the tracer thread, that a remote system call
// (World.Syscall, Mmap, Munmap, ...) borrows thread tid, whose registers
// before it are saved (active), and again once they are back (not
// active). Between the two the thread holds the call's registers: a
// tracer that dies then leaves it so, unless someone puts saved back. It
// must not call back into the Process.
type SyscallHandler func(tid int, saved *Regs, active bool)

// SetSyscallHandler installs h (nil removes it).
func (p *Process) SetSyscallHandler(h SyscallHandler) error { return p.b.SetSyscallHandler(h) }

// StepHandler is told, on the tracer thread, that thread tid is about to
// be single-stepped (active), and again once the step's stop is collected
// or the step given up (not active). Between the two the thread runs with
// the trap flag set or stands in a stop whose SIGTRAP only the tracer's
// wait discards: a tracer that dies then leaves the thread to take that
// SIGTRAP (see package guardian). It must not call back into the Process.
type StepHandler func(tid int, active bool)

// SetStepHandler installs h (nil removes it).
func (p *Process) SetStepHandler(h StepHandler) error { return p.b.SetStepHandler(h) }

// SetTrapHandler installs h for breakpoint traps of every thread (nil
// removes it) and returns the handler it replaces, so that a caller can
// chain to it and put it back. See TrapHandler.
func (p *Process) SetTrapHandler(h TrapHandler) (TrapHandler, error) { return p.b.SetTrapHandler(h) }

// Release resumes threads held by a TrapHandler. fn, when not nil, is
// called first for each of them on the tracer thread; it may change the
// registers (written back before the thread runs) and whether the
// thread's system calls are watched (TrapContext.WatchSyscalls), and
// returns whether to release that thread (nil releases all). Released threads stay stopped
// while the world is stopped and run when it resumes.
func (p *Process) Release(fn func(ctx *TrapContext) bool) error { return p.b.Release(fn) }

// Detach stops the world, detaches every thread (handing back pending
// signals) and forgets the process, which runs on untraced. Text patches
// stay as they are.
func (p *Process) Detach() error { return p.b.Detach() }

// Latch arms the stop latch (Options.StopLatch) of a process traced
// without it, and stops asking the kernel to kill the process when the
// calling program exits (Options.KillOnExit, which Spawn sets): from then
// on the death of the calling program leaves the process stopped, for a
// guardian to restore and let go. The world must be stopped (ErrRunning
// otherwise). Threads and children traced later get the same options. A
// process whose latch holds already is left as it is.
func (p *Process) Latch() error { return p.b.Latch() }

// Kill sends SIGKILL to the process and waits until it is reaped.
func (p *Process) Kill() error { return p.b.Kill() }

// DrainTraps waits until breakpoint traps already taken have reached the
// TrapHandler: it waits at least grace, then until no thread has a SIGTRAP
// queued (at most one second), handling every stop reported meanwhile. A
// caller that removes its int3 bytes and then its handler calls it in
// between, so that a thread which ran an int3 just before the byte changed
// does not die of a SIGTRAP nobody handles.
func (p *Process) DrainTraps(grace time.Duration) error { return p.b.DrainTraps(grace) }

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
