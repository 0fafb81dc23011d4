// Package proc controls live processes on Linux through ptrace: it spawns a
// command or attaches to a pid with PTRACE_SEIZE, tracks every thread (and the
// children that share the address space), stops and resumes the whole
// process without losing signals, reads and writes registers and memory,
// parses /proc/PID/maps, runs system calls inside the tracee (mmap, munmap,
// mprotect, memfd_create) and reports clone, fork, vfork, exec and exit
// events.
//
// # One ptrace thread
//
// Linux accepts ptrace requests on a tracee only from the OS thread that
// attached to it. Every Process therefore belongs to a tracer: a goroutine
// locked to its OS thread (runtime.LockOSThread) that performs every ptrace
// request, every wait4 and every access to /proc/PID/mem, by running
// closures sent to it (the execPtraceFunc pattern of delve). Process methods
// are safe to call from any goroutine: each one hands its work to the
// tracer and waits for it. The functions passed to Stopped and the
// TrapHandler run on the tracer itself and must not call Process methods
// (that would deadlock); they use the World or TrapContext they are given.
// While no request is running the tracer services stops: signals are passed
// on to the tracee, new threads are adopted, events are recorded. It wakes on
// SIGCHLD (os/signal) and waits only for its own tracees (__WNOTHREAD), so
// it never reaps another child of the program.
//
// # Stop the world
//
// Stop follows a written protocol:
//
//  1. Drain every pending wait status (WNOHANG), so the bookkeeping knows
//     which threads already sit in a ptrace-stop.
//  2. List /proc/PID/task (and the tasks of children sharing the address
//     space); adopt tids not seen yet.
//  3. PTRACE_INTERRUPT every running thread. ESRCH means the thread has
//     exited: it is marked gone and not waited for. A thread blocked in
//     vfork (between PTRACE_EVENT_VFORK and PTRACE_EVENT_VFORK_DONE) is not
//     interrupted: it cannot run user code before its VFORK_DONE stop, and
//     its registers were saved at the VFORK stop.
//  4. wait4 until every interrupted thread reports a stop or an exit,
//     retrying on EINTR. A stop other than the interrupt (a signal arriving,
//     an event) counts as stopped; its signal is kept to be re-injected.
//  5. List the tasks again; if a tid appeared, go to 3. The world is stopped
//     when two listings agree and every known thread is stopped or gone.
//
// Resume restarts every stopped thread from the stop it is in: a
// signal-delivery stop with its own signal (so the siginfo is kept), a group
// stop with PTRACE_LISTEN (job control is respected), any other stop with
// PTRACE_CONT. A signal that could not stay attached to its own stop (the
// thread was single-stepped or borrowed for a system call afterwards) is
// queued again with tgkill before the thread runs.
//
// A thread or process that vanishes is reported as an error wrapping
// ErrNoThread or ErrExited, never a panic.
//
// # What it does not do
//
// proc does not decide what to write where (see batchpatch for text patches
// applied as one transaction), decode instructions (decode) or handle
// probes (probe). The real implementation is for linux/amd64 and
// linux/arm64 (its tests run on arm64 in the guest of internal/vm; what
// differs between the two is the arch table and the register files). The
// public types are defined once, over an unexported backend per platform;
// on other systems there is no backend, and Spawn and Attach return an
// error wrapping ErrNotSupported (so no Process exists there).
package proc
