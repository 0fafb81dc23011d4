package proc

import "time"

// The backend seam. Process and World (process.go, world.go) are defined
// once, with their documentation, for every platform; each method hands
// its work to the platform's backend, the field b:
//
//   - on linux/amd64 and linux/arm64, processBackend is *ptraceProcess and
//     worldBackend is ptraceWorld (process_linux.go, world_linux.go): the
//     calls are static, as cheap as before the seam, and every ptrace
//     request still runs on the tracer's one locked OS thread
//     (tracer_linux.go);
//   - elsewhere (proc_other.go) they are the interfaces below, which
//     nothing implements: Spawn and Attach fail with ErrNotSupported, so
//     no Process or World ever exists there.
//
// The interfaces are the contract a backend fulfils; the Linux backend is
// checked against them at compile time. An arm64 or another system's
// backend plugs in the same way. What differs between instruction sets
// inside the Linux backend is in the arch table (arch.go).

// processOps is what a platform's backend does for a Process. Each method
// implements the Process method of the same name (with*: the helper of
// Process.Regs, SetRegs and Step, which runs fn with the world if it is
// stopped and fails with ErrRunning otherwise).
type processOps interface {
	Pid() int
	Events() <-chan Event
	DroppedEvents() int64
	Exited() <-chan struct{}
	Wait() (ExitStatus, error)
	Stop() error
	Resume() error
	LastStop() StopStats
	Stopped(fn func(w *World) error) (StopStats, error)
	Threads() ([]int, error)
	ReadMemory(addr uint64, buf []byte) error
	WriteMemory(addr uint64, data []byte) error
	Maps() ([]Mapping, error)
	Execs() int
	SetExitHandler(h func(tid int)) error
	SetSyscallHandler(h SyscallHandler) error
	SetStepHandler(h StepHandler) error
	SetTrapHandler(h TrapHandler) (TrapHandler, error)
	Release(fn func(ctx *TrapContext) bool) error
	Detach() error
	Latch() error
	Kill() error
	DrainTraps(grace time.Duration) error
	withWorld(fn func(w *World) error) error
}

// worldOps is what a platform's backend does for a World; each method
// implements the World method of the same name.
type worldOps interface {
	Pid() int
	Execs() int
	Refresh() error
	Paused() time.Duration
	Threads() ([]ThreadInfo, error)
	Regs(tid int) (Regs, error)
	SetRegs(tid int, r *Regs) error
	ReadMemory(addr uint64, buf []byte) error
	WriteMemory(addr uint64, data []byte) error
	Maps() ([]Mapping, error)
	Step(tid int, timeout time.Duration) error
	StepSignals(tid int) int
	DropStepTrap(tid int) error
	Syscall(nr uint64, args ...uint64) (uint64, error)
	Mmap(addr, length uint64, prot, flags, fd int, offset uint64) (uint64, error)
	Munmap(addr, length uint64) error
	Mprotect(addr, length uint64, prot int) error
	MemfdCreate(name string, flags int) (int, error)
}
