package proc

import (
	"errors"
	"fmt"
)

// Errors of the package. They are wrapped with context; compare with
// errors.Is.
var (
	// ErrNotSupported means the operation is not available on this
	// operating system or architecture.
	ErrNotSupported = errors.New("not supported on this platform")
	// ErrExited means the process has exited (or was never there).
	ErrExited = errors.New("process exited")
	// ErrNoThread means the thread does not exist or has exited.
	ErrNoThread = errors.New("no such thread")
	// ErrDetached means the process is no longer traced by this program.
	ErrDetached = errors.New("process detached")
	// ErrRunning means the operation needs the process stopped (Stop or
	// Stopped) and it is running.
	ErrRunning = errors.New("process is running")
	// ErrStepTimeout means a single step did not finish within its bound
	// (the thread is blocked in the kernel, typically in a system call);
	// the thread was interrupted again and is stopped.
	ErrStepTimeout = errors.New("single step did not finish in time")
	// ErrShortIO means a memory read or write moved fewer bytes than asked.
	ErrShortIO = errors.New("short memory transfer")
	// ErrNoProcess means no process has the pid given (Attach). It
	// matches ErrExited too.
	ErrNoProcess error = noProcess{}
	// ErrAlreadyTraced means another tracer traces the process; the error
	// is a *TracedError that names it.
	ErrAlreadyTraced = errors.New("already traced")
)

type noProcess struct{}

func (noProcess) Error() string { return "no such process" }

// Is makes ErrNoProcess match ErrExited.
func (noProcess) Is(target error) bool { return target == ErrExited }

// TracedError reports a process that another program traces already.
type TracedError struct {
	Pid    int // the process
	Tid    int // its thread that could not be seized
	Tracer int // the process (thread group) that traces it
}

func (e *TracedError) Error() string {
	return fmt.Sprintf("process %d is already traced by process %d", e.Pid, e.Tracer)
}

// Unwrap returns ErrAlreadyTraced.
func (e *TracedError) Unwrap() error { return ErrAlreadyTraced }

// ThreadError reports an operation that failed on one thread.
type ThreadError struct {
	Tid int    // the thread (kernel task id)
	Op  string // what was attempted, such as "get registers"
	Err error  // the cause; often a syscall.Errno or ErrNoThread
}

func (e *ThreadError) Error() string {
	return fmt.Sprintf("thread %d: %s: %v", e.Tid, e.Op, e.Err)
}

func (e *ThreadError) Unwrap() error { return e.Err }

// MemoryError reports a failed access to the tracee's memory.
type MemoryError struct {
	Addr  uint64 // first virtual address of the access
	Len   int    // bytes asked for
	Done  int    // bytes actually transferred before the failure
	Write bool   // a write (false: a read)
	Err   error  // the cause
}

func (e *MemoryError) Error() string {
	op := "read"
	if e.Write {
		op = "write"
	}
	return fmt.Sprintf("%s %d bytes at %#x (%d done): %v", op, e.Len, e.Addr, e.Done, e.Err)
}

func (e *MemoryError) Unwrap() error { return e.Err }

// SyscallError reports a remote system call that the tracee's kernel
// refused: Errno is what the call returned, negated.
type SyscallError struct {
	Name  string // "mmap", "memfd_create"...
	Errno uintptr
	Err   error // syscall.Errno(Errno) on Linux
}

func (e *SyscallError) Error() string { return fmt.Sprintf("remote %s: %v", e.Name, e.Err) }

func (e *SyscallError) Unwrap() error { return e.Err }

// ErrParked means the thread is blocked in vfork until its child execs or
// exits: it cannot be stepped or have its registers changed meanwhile.
var ErrParked = errors.New("thread is blocked in vfork")
