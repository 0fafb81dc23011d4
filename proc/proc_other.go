//go:build !linux || !(amd64 || arm64)

package proc

import (
	"fmt"
	"time"
)

// Regs are the registers of a thread; empty where tracing is not
// supported.
type Regs struct{}

// PC returns 0.
func (r *Regs) PC() uint64 { return 0 }

// SetPC does nothing.
func (r *Regs) SetPC(uint64) {}

// SP returns 0.
func (r *Regs) SP() uint64 { return 0 }

// Process is a traced process. On this platform none can exist.
type Process struct{}

// World is the stopped process seen by Process.Stopped.
type World struct{}

func notSupported(op string) error { return fmt.Errorf("%s: %w", op, ErrNotSupported) }

// Spawn fails: tracing is supported on Linux (amd64, arm64) only.
func Spawn(argv []string, opts *SpawnOptions) (*Process, error) { return nil, notSupported("spawn") }

// Attach fails: tracing is supported on Linux (amd64, arm64) only.
func Attach(pid int, opts *Options) (*Process, error) { return nil, notSupported("attach") }

// Pid returns 0.
func (p *Process) Pid() int { return 0 }

// Events returns nil.
func (p *Process) Events() <-chan Event { return nil }

// DroppedEvents returns 0.
func (p *Process) DroppedEvents() int64 { return 0 }

// Exited returns a closed channel.
func (p *Process) Exited() <-chan struct{} { c := make(chan struct{}); close(c); return c }

// Wait fails.
func (p *Process) Wait() (ExitStatus, error) { return ExitStatus{}, notSupported("wait") }

// Stop fails.
func (p *Process) Stop() error { return notSupported("stop") }

// Resume fails.
func (p *Process) Resume() error { return notSupported("resume") }

// LastStop returns zero.
func (p *Process) LastStop() StopStats { return StopStats{} }

// Stopped fails.
func (p *Process) Stopped(fn func(w *World) error) (StopStats, error) {
	return StopStats{}, notSupported("stop")
}

// Threads fails.
func (p *Process) Threads() ([]int, error) { return nil, notSupported("threads") }

// Regs fails.
func (p *Process) Regs(tid int) (Regs, error) { return Regs{}, notSupported("get registers") }

// SetRegs fails.
func (p *Process) SetRegs(tid int, r *Regs) error { return notSupported("set registers") }

// Step fails.
func (p *Process) Step(tid int, timeout time.Duration) error { return notSupported("step") }

// ReadMemory fails.
func (p *Process) ReadMemory(addr uint64, buf []byte) error { return notSupported("read memory") }

// WriteMemory fails.
func (p *Process) WriteMemory(addr uint64, data []byte) error { return notSupported("write memory") }

// Maps fails.
func (p *Process) Maps() ([]Mapping, error) { return nil, notSupported("maps") }

// Execs returns 0.
func (p *Process) Execs() int { return 0 }

// SetExitHandler fails.
func (p *Process) SetExitHandler(h func(tid int)) error { return notSupported("exit handler") }

// SetTrapHandler fails.
func (p *Process) SetTrapHandler(h TrapHandler) (TrapHandler, error) {
	return nil, notSupported("trap handler")
}

// Release fails.
func (p *Process) Release(fn func(ctx *TrapContext) bool) error { return notSupported("release") }

// Detach fails.
func (p *Process) Detach() error { return notSupported("detach") }

// Kill fails.
func (p *Process) Kill() error { return notSupported("kill") }

// Syscall fails.
func (p *Process) Syscall(nr uint64, args ...uint64) (uint64, error) {
	return 0, notSupported("remote syscall")
}

// Mmap fails.
func (p *Process) Mmap(addr, length uint64, prot, flags, fd int, offset uint64) (uint64, error) {
	return 0, notSupported("remote mmap")
}

// Munmap fails.
func (p *Process) Munmap(addr, length uint64) error { return notSupported("remote munmap") }

// Mprotect fails.
func (p *Process) Mprotect(addr, length uint64, prot int) error {
	return notSupported("remote mprotect")
}

// MemfdCreate fails.
func (p *Process) MemfdCreate(name string, flags int) (int, error) {
	return -1, notSupported("remote memfd_create")
}

// Pid returns 0.
func (w *World) Pid() int { return 0 }

// Execs returns 0.
func (w *World) Execs() int { return 0 }

// Refresh fails.
func (w *World) Refresh() error { return notSupported("refresh") }

// Threads fails.
func (w *World) Threads() ([]ThreadInfo, error) { return nil, notSupported("threads") }

// Regs fails.
func (w *World) Regs(tid int) (Regs, error) { return Regs{}, notSupported("get registers") }

// SetRegs fails.
func (w *World) SetRegs(tid int, r *Regs) error { return notSupported("set registers") }

// ReadMemory fails.
func (w *World) ReadMemory(addr uint64, buf []byte) error { return notSupported("read memory") }

// WriteMemory fails.
func (w *World) WriteMemory(addr uint64, data []byte) error { return notSupported("write memory") }

// Maps fails.
func (w *World) Maps() ([]Mapping, error) { return nil, notSupported("maps") }

// Step fails.
func (w *World) Step(tid int, timeout time.Duration) error { return notSupported("step") }

// StepSignals returns 0.
func (w *World) StepSignals(tid int) int { return 0 }

// Syscall fails.
func (w *World) Syscall(nr uint64, args ...uint64) (uint64, error) {
	return 0, notSupported("remote syscall")
}

// Mmap fails.
func (w *World) Mmap(addr, length uint64, prot, flags, fd int, offset uint64) (uint64, error) {
	return 0, notSupported("remote mmap")
}

// Munmap fails.
func (w *World) Munmap(addr, length uint64) error { return notSupported("remote munmap") }

// Mprotect fails.
func (w *World) Mprotect(addr, length uint64, prot int) error {
	return notSupported("remote mprotect")
}

// MemfdCreate fails.
func (w *World) MemfdCreate(name string, flags int) (int, error) {
	return -1, notSupported("remote memfd_create")
}

// DrainTraps fails.
func (p *Process) DrainTraps(grace time.Duration) error { return notSupported("drain traps") }
