package proc

import (
	"os"
	"time"
)

// Options tune Spawn and Attach. A nil *Options means the defaults.
type Options struct {
	// FollowForks keeps the children of fork (and of exec'd vfork or
	// clone children) traced as Processes of their own, delivered stopped
	// in an EventFork (or EventExec) event; the caller resumes or detaches
	// them. By default such children are detached as soon as they appear,
	// so they run untraced. Children that share the address space (vfork,
	// clone with CLONE_VM) are always traced until they exec or exit,
	// because they must be stopped with the world.
	FollowForks bool
	// KillOnExit asks the kernel to kill the tracee if the tracing program
	// exits without detaching (PTRACE_O_EXITKILL). Spawn sets it whatever
	// the value; Attach leaves it off unless asked.
	KillOnExit bool
	// StopLatch makes the process stop, rather than run on, if the
	// tracing program dies without detaching (killed, crashed): every
	// thread then sits in a group stop until another tracer (a guardian
	// that restores the text) seizes it, or a SIGCONT ends the stop. It is
	// armed with a SIGSTOP once the process is seized, whose group stop is
	// resumed at once (the real parent of an attached process sees a
	// stop and a continue, as with a short job-control stop); a SIGCONT
	// the program receives is followed by a new SIGSTOP; Detach ends the
	// latch with a SIGCONT (which also ends a job-control stop in effect
	// then). A job-control stop the program gets while the latch holds is
	// kept while it is traced; one sent in the instant the latch is armed
	// is merged with the latch's own.
	StopLatch bool
	// HoldExec keeps a process that execs stopped at the exec, after its
	// EventExec is delivered, until Release lets it go: the caller can
	// prepare the new image (probe it) before it runs its first
	// instruction. A process whose event was dropped is not held.
	HoldExec bool
	// OnVfork, when set, is called with every EventVfork and
	// EventVforkDone on the tracer's thread, while the thread that
	// vforked is stopped and before the child (EventVfork) or that
	// thread again (EventVforkDone) runs an instruction: the caller can
	// note what the child changes in the memory it shares with its
	// parent. Like a TrapHandler it must be quick and must not call
	// Process methods. The events are delivered on Events as well.
	OnVfork func(Event)
	// StopNice is the nice value the tracer's thread runs at during a
	// Process.Stopped, from before the first thread is interrupted until
	// the last one resumed, and then puts back; 0 leaves it alone. A
	// thread being interrupted (by any stop) or single-stepped runs at it
	// too, when it is lower than the thread's own, until it has stopped
	// again, and then gets its own value back: it runs no user code
	// meanwhile, or the one instruction of its step. On a machine whose
	// CPUs are busy with other work, a thread that waits for a CPU to
	// enter its stop or to make its step, or a tracer preempted while
	// the world is stopped, lengthens the pause by whole time slices;
	// -20 shortens those waits (it needs CAP_SYS_NICE or RLIMIT_NICE;
	// without either the values are left alone). Threads spawned
	// meanwhile do not inherit it: Spawn runs outside any stop.
	StopNice int
	// StopFIFO runs the tracer's thread under the real-time policy
	// SCHED_FIFO (priority 1) for the same span as StopNice, and then
	// gives it its policy back. A thread resumed at the end of a stop
	// is woken on a CPU, often the tracer's own on a machine with few,
	// and the scheduler may run it before the tracer has resumed the
	// others, which stay stopped meanwhile: at any nice value one
	// PTRACE_CONT was measured taking 2.4 to 4.3 ms of a pass bounded at
	// 2 ms. A real-time tracer is not preempted by the threads it
	// resumes; it sleeps while it waits for threads to stop, and a stop
	// is short, so it keeps no CPU from others for long. It needs
	// CAP_SYS_NICE or RLIMIT_RTPRIO; without either the policy is left
	// alone.
	StopFIFO bool
	// EventBuffer is the capacity of the Events channel; 0 means 1024.
	// Events that find it full are dropped and counted (DroppedEvents).
	EventBuffer int
}

// SpawnOptions tune Spawn. A nil *SpawnOptions means the defaults.
type SpawnOptions struct {
	Options
	Dir    string   // working directory; "" means the caller's
	Env    []string // environment; nil means the caller's
	Stdin  *os.File // nil means /dev/null
	Stdout *os.File // nil means /dev/null
	Stderr *os.File // nil means /dev/null
}

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	EventClone      EventKind = iota + 1 // a new thread (NewPid is its tid)
	EventFork                            // fork: NewPid is the child; Child is set with FollowForks
	EventVfork                           // vfork: NewPid is the child, which shares the address space until it execs
	EventVforkDone                       // the vfork child released the parent (exec or exit)
	EventExec                            // the process (or a vfork child: Pid) replaced its image; Tid is the former tid
	EventThreadExit                      // a thread exited; Status holds its status
	EventExit                            // the whole process exited; Status holds its status
	EventSignal                          // a signal was passed on to the thread (Signal)
)

var eventNames = [...]string{
	EventClone: "clone", EventFork: "fork", EventVfork: "vfork", EventVforkDone: "vfork-done",
	EventExec: "exec", EventThreadExit: "thread-exit", EventExit: "exit", EventSignal: "signal",
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// Event is something that happened in a traced process.
type Event struct {
	Kind   EventKind
	Pid    int        // the process it happened in
	Tid    int        // the thread that reported it
	NewPid int        // the new thread or child (clone, fork, vfork)
	Signal int        // the signal (EventSignal), or the killing signal (exits)
	Status ExitStatus // exit status (EventThreadExit, EventExit)
	Child  *Process   // the traced child (EventFork with FollowForks), stopped
	Time   time.Time  // when the tracer saw it
	// ThreadPointer is the thread pointer of Tid (the %fs base on x86-64;
	// 0 where it is not read) for EventVfork and EventVforkDone: a vfork
	// child runs with its parent thread's.
	ThreadPointer uint64
}

// ExitStatus is how a process or thread ended.
type ExitStatus struct {
	Code   int // exit code when Signal is 0
	Signal int // the signal that killed it, 0 if it exited
}

// Success reports whether it exited with code 0.
func (s ExitStatus) Success() bool { return s.Signal == 0 && s.Code == 0 }

// StopStats times one stop-the-world pass. Durations are wall-clock time
// measured by the tracer.
type StopStats struct {
	Threads int           // threads stopped (including address-space sharers)
	Stop    time.Duration // from the first PTRACE_INTERRUPT until every thread was first stopped
	Pause   time.Duration // from then until every thread resumed, steps and World.Refresh included
	Total   time.Duration // Stop + Pause: the time the first thread was frozen
}

// ThreadInfo describes one stopped thread of the world.
type ThreadInfo struct {
	Tid int // kernel task id
	Pid int // the process it belongs to (a vfork or CLONE_VM child differs from the traced pid)
	// PC is the address of the next instruction the thread will run when
	// it resumes, as the registers say.
	PC uint64
	// RestartPC is non-zero when the thread sits in an interrupted system
	// call that the kernel will restart on resume: the thread then runs the
	// system-call instruction at RestartPC again instead of PC.
	RestartPC uint64
	// InSyscall is set when the thread stopped inside a system call. On
	// arm64, where the registers do not say so, it is set when the thread
	// stands at an svc #0: where the kernel leaves a thread interrupted in
	// a restartable call (PC is then the restart PC, and RestartPC 0).
	InSyscall bool
	// Parked is set for a thread blocked in vfork: it was not interrupted,
	// cannot run user code before the child releases it, and cannot be
	// stepped. PC is the value saved at its vfork stop.
	Parked bool
	// Exiting is set when the thread has reported its exit: it will never
	// run user code again.
	Exiting bool
	// Signal is the signal its stop holds, to be delivered on resume (0: none).
	Signal int
}

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64 // virtual addresses [Start, End)
	Read       bool
	Write      bool
	Exec       bool
	Shared     bool   // 's': shared; otherwise private (copy on write)
	Offset     uint64 // file offset of Start
	Dev        string // "major:minor" of the file's device
	Inode      uint64
	Path       string // file path, "[vdso]"-like names, or "" for anonymous memory
}

// Contains reports whether addr lies in [Start, End).
func (m Mapping) Contains(addr uint64) bool { return m.Start <= addr && addr < m.End }

// TrapAction is what a TrapHandler decides for a thread stopped by a trap.
type TrapAction uint8

// Trap actions.
const (
	// TrapPass delivers the SIGTRAP to the thread as if nobody traced it.
	TrapPass TrapAction = iota
	// TrapResume discards the signal and resumes the thread with the
	// registers as the handler left them in TrapContext.Regs.
	TrapResume
	// TrapHold keeps the thread stopped (with the signal discarded) until
	// Release is called for it; the rest of the process keeps running.
	TrapHold
)

// TrapContext is what a TrapHandler sees of the trapped thread.
type TrapContext struct {
	Pid, Tid int
	// Addr is the address of the trap instruction (for int3 on x86-64,
	// the PC minus 1); 0 at the end of a system call (Syscall).
	Addr uint64
	// Regs are the thread's registers; changes are written back when the
	// handler returns TrapResume.
	Regs *Regs
	// Syscall is set when the stop is not a trap but the end of a system
	// call the thread made while it was watched (WatchSyscalls).
	Syscall *SyscallExit
	// WatchSyscalls is whether the thread stops at the end of each system
	// call it makes (PTRACE_SYSCALL), calling the handler with Syscall
	// set. The handler may change it, for any action it returns: set at a
	// breakpoint that opens a phase of the program to watch, cleared at
	// the one that closes it. Each watched system call costs the thread
	// two stops.
	WatchSyscalls bool
}

// SyscallExit is a system call a watched thread made, seen at its end.
type SyscallExit struct {
	Nr   uint64    // the system call's number
	Args [6]uint64 // its arguments
	Ret  int64     // its result (a negative errno for an error)
}

// TrapHandler is called on the tracer thread for every breakpoint trap
// (int3 on x86-64, brk on arm64) that a running thread hits, and at the
// end of every system call of a thread whose system calls are watched
// (TrapContext.WatchSyscalls); TrapPass then means TrapResume. The traps
// of a child that shares its parent's address space (vfork) go to the
// parent's handler when the child has none, with the child's Pid and
// Tid. It must not call Process methods.
type TrapHandler func(ctx *TrapContext) TrapAction
