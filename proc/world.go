package proc

import "time"

// World is the stopped process handed to the function given to
// Process.Stopped. Its methods run directly on the tracer thread, so they
// are cheap and may be called many times; they fail with ErrRunning once
// that function has returned.
type World struct {
	b worldBackend // the platform's stopped world: see backend.go
}

// Pid returns the process id of the stopped process.
func (w *World) Pid() int { return w.b.Pid() }

// Execs returns how many times the process has called execve since it
// was attached.
func (w *World) Execs() int { return w.b.Execs() }

// Refresh runs the stop protocol again, so that threads created while a
// thread was stepped are stopped and listed too. It is part of the same
// stop: the StopStats keep the time the world was first all stopped, so
// the pause counts the steps made before the refresh.
func (w *World) Refresh() error { return w.b.Refresh() }

// Paused returns how long the world has been stopped so far: from the
// first thread interrupted, as StopStats.Total counts it, until now. A
// caller with a pause bound reads it to decide whether more work still
// fits in the stop.
func (w *World) Paused() time.Duration { return w.b.Paused() }

// Threads describes every thread of the world (the process and the
// children sharing its memory), sorted by tid. Exited threads are left
// out; exiting and vfork-parked ones are included and flagged.
func (w *World) Threads() ([]ThreadInfo, error) { return w.b.Threads() }

// Regs returns the registers of a stopped thread.
func (w *World) Regs(tid int) (Regs, error) { return w.b.Regs(tid) }

// SetRegs sets the registers of a stopped thread.
func (w *World) SetRegs(tid int, r *Regs) error { return w.b.SetRegs(tid, r) }

// ReadMemory reads len(buf) bytes at virtual address addr.
func (w *World) ReadMemory(addr uint64, buf []byte) error { return w.b.ReadMemory(addr, buf) }

// WriteMemory writes data at virtual address addr.
func (w *World) WriteMemory(addr uint64, data []byte) error { return w.b.WriteMemory(addr, data) }

// Maps returns the parsed /proc/PID/maps.
func (w *World) Maps() ([]Mapping, error) { return w.b.Maps() }

// Step executes one instruction of thread tid while every other thread
// stays stopped. If the thread does not stop again within timeout (0 means
// one second) — it is blocked in a system call, typically — it is
// interrupted and the error wraps ErrStepTimeout. A signal the thread held,
// or one that reaches it before the instruction runs, is queued again when
// the world resumes. A thread stopped at a clone, fork or exec event first
// finishes that system call (see settle).
func (w *World) Step(tid int, timeout time.Duration) error { return w.b.Step(tid, timeout) }

// StepSignals returns how many signals reached thread tid before the
// instruction of its last Step ran: each was kept, the step made again,
// and the signal is delivered when the world resumes.
func (w *World) StepSignals(tid int) int { return w.b.StepSignals(tid) }

// DropStepTrap discards the next SIGTRAP that ends a single step (si_code
// TRAP_BRKPT or TRAP_TRACE) thread tid takes: a step made by a tracer
// that died before the instruction ran, whose trap is queued or still to
// come. A breakpoint's SIGTRAP or one sent by a process is not affected.
func (w *World) DropStepTrap(tid int) error { return w.b.DropStepTrap(tid) }

// Syscall makes system call nr with up to six arguments in the tracee, on
// a borrowed stopped thread whose registers are restored afterwards. It
// returns the call's result; a negative errno becomes a *SyscallError.
func (w *World) Syscall(nr uint64, args ...uint64) (uint64, error) { return w.b.Syscall(nr, args...) }

// Mmap maps memory in the tracee (mmap(2)); it returns the address.
// Never ask for PROT_WRITE|PROT_EXEC together: map code read-write, fill
// it, then Mprotect it read-execute.
func (w *World) Mmap(addr, length uint64, prot, flags, fd int, offset uint64) (uint64, error) {
	return w.b.Mmap(addr, length, prot, flags, fd, offset)
}

// Munmap unmaps memory in the tracee (munmap(2)).
func (w *World) Munmap(addr, length uint64) error { return w.b.Munmap(addr, length) }

// Mprotect changes the protection of memory in the tracee (mprotect(2)).
func (w *World) Mprotect(addr, length uint64, prot int) error {
	return w.b.Mprotect(addr, length, prot)
}

// MemfdCreate creates an anonymous file in the tracee (memfd_create(2))
// and returns its descriptor there. The name is written briefly below the
// borrowed thread's stack red zone and restored afterwards.
func (w *World) MemfdCreate(name string, flags int) (int, error) { return w.b.MemfdCreate(name, flags) }
