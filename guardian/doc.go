// Package guardian keeps a traced process safe from the death of its
// tracer. A guardian is a small process started with every attach (by
// Start) that holds the tracer's undo log in memory the two share (a
// memfd); when the tracer dies without detaching, however it dies
// (SIGKILL, an OOM kill, a panic, os.Exit, a fatal error of the Go
// runtime), the guardian seizes the process, puts back every byte of text
// the tracer had changed, in one stop, and detaches. The process runs on,
// its text byte-identical to its files.
//
// It owns the log's layout and the guardian's work. It does not decide
// what to write (package probe records every range before a batch writes
// it), control processes (proc) or patch text (batchpatch): it uses them.
//
// # Starting a guardian
//
// The guardian is the tracer's own executable run again (/proc/self/exe)
// with an environment variable that this package's init function
// recognises: it then serves as a guardian and exits, before the program's
// main runs. So a program that uses the library is guarded without a file
// of ours, and needs nothing but to import the library. It runs in a
// session of its own (a terminal's signals do not reach it) and notices
// the tracer's death as the end of a pipe whose write end only the tracer
// holds (EOF comes when the last descriptor closes, which the kernel does
// for a process that dies of anything). A tracer that detaches cleanly
// says so in the log's header first (Release), and the guardian exits.
//
// # Why the process cannot run an int3 without a tracer
//
// The tracer seizes the process with proc.Options.StopLatch: a SIGSTOP
// whose group stop the tracer resumes at once with PTRACE_CONT. The
// kernel then holds the process's "group stop in effect" state while its
// threads run; when the tracer dies, the kernel detaches each thread and,
// with that state set, puts it back into the group stop (ptrace's
// __ptrace_unlink reinstates JOBCTL_STOP_PENDING). So:
//
//   - a thread in a ptrace stop that the tracer has collected (wait4) when
//     it dies (at an int3 whose trap is not served yet, held for an
//     in-place step, stopped with the world for a batch) goes into the group
//     stop without running: collecting a stop clears its signal, so the
//     SIGTRAP of an unserved int3 is gone and the thread stands just past
//     the int3;
//   - a running thread stops at its next entry into the kernel, and the
//     kernel sends it there at once. A thread that runs an int3 in that
//     instant enters the kernel with a SIGTRAP queued, and the pending stop
//     is taken before the signal: it stops with the SIGTRAP still queued.
//
// No thread runs the program between the tracer's death and the
// guardian's PTRACE_SEIZE, with one exception that ptrace alone cannot
// close: a thread that has entered its trap stop at an int3 that the
// tracer has not collected yet when it dies is given its SIGTRAP by the
// kernel as it is detached (the stop's signal is cleared only by the
// tracer's wait4), and under SIG_DFL it dies. The window is the time
// between a trap and the tracer's wait4, which under a heavy trap load is
// most of the time: measured on Linux 6.18 (AMD EPYC, shared machine), a
// thread left 50 ms in an uncollected trap stop died 2 times in 3, and a
// tracer stopped (SIGSTOP) for 50 ms while two threads hit trap sites,
// then killed, lost 40 targets in 40 (TestGuardianKillFrozen,
// PROBEOPT_LONG=1, load 11-14). Package probe closes it on x86-64 with
// a trap guard (probe/trapguard_linux_amd64.go): a SIGTRAP handler in the
// process, installed where SIGTRAP's disposition is SIG_DFL, that knows
// the trap sites. The thread's SIGTRAP is delivered to it, and the latch
// stops the thread before the handler's first instruction. This package
// finds the thread there, the kernel's signal frame on its stack, and
// returns it from the handler to the site before the handler runs: the
// frame's instruction pointer moved back onto the int3, the thread sent to
// the frame's restorer, whose rt_sigreturn puts back every register (see
// handlerFrame); the text restored, the original instruction is there
// (same test: 0 targets lost in 40, load 15). The handler itself, should
// it run, does the same: it waits for the text and goes back to the site.
// Every other SIGTRAP it passes on to the default action unchanged
// (SIG_DFL again, the same siginfo queued to the same thread).
//
// The frame is the kernel's, whoever's the handler: a program that
// handles SIGTRAP itself is covered the same way. Every Go program is one
// (the Go runtime handles every signal, and would end the program with
// "SIGTRAP: trace trap"): gothreads' goroutines calling main.work, a trap
// site at main.work+11, the tracer stopped 50 ms and then killed, lost 3
// programs in 3 without the frame's return, 0 in 40 with it (one or two
// threads sent back in 38 of them; TestGuardianKillFrozenGo,
// PROBEOPT_LONG=1).
//
// A single step has the same window: a thread whose step's stop the tracer
// has not collected when it dies (an instruction stepped in place, a
// thread stepped out of a slot a batch changes) is given the step's
// SIGTRAP (si_code TRAP_TRACE, or TRAP_BRKPT after a system call), which
// the trap guard would pass on; and a thread the tracer resumed with the
// trap flag just before it died runs the instruction and takes the stop
// latch with that SIGTRAP queued. The tracer names the thread in the
// log's header for the length of each step (proc.StepHandler,
// Guard.Stepping). The guardian, finding that thread stopped at the first
// instruction of a SIGTRAP handler with the kernel's signal frame on its
// stack, returns it from the handler before the handler runs (the frame
// as the step left it); otherwise it discards the step's SIGTRAP when the
// thread takes it (proc.World.DropStepTrap). In TestGuardianKill's churn
// runs (probes removed and added in a loop while threads run through the
// slots) it was 11 targets lost in 160 runs before (Linux 6.18, AMD EPYC,
// PROBEOPT_LONG=1, four campaigns); with the handler's frame unwound
// alone, 7 in 240 under load (each a thread stopped in a slot with the
// step's SIGTRAP queued); with both, 0 in 120 runs, 7 traps discarded,
// and no target damaged at any kill point in 840 runs. A tracer that dies
// while the stepped thread is blocked in a system call leaves no SIGTRAP
// (measured: nothing pending, and the guardian's detach ends the step).
// Remote system calls make no step (see below).
//
// Not covered:
//
//   - a program that ignores SIGTRAP when it is attached (SIG_IGN: the
//     kernel makes a forced SIGTRAP fatal), and one that puts SIGTRAP back
//     to SIG_DFL after the attach: the trap guard is not its disposition
//     then, and an uncollected trap stop kills it.
//   - a single step's stop uncollected in a process whose SIGTRAP
//     disposition is SIG_DFL when the tracer dies: the kernel kills the
//     process as it detaches the thread, before anyone can act. Steps
//     come after the trap guard is armed, except the one that finishes a
//     system call a thread stopped at a clone, fork or exec event is in,
//     before it is borrowed for a remote system call (rare).
//
// A remote system call (proc.World.Syscall: an area mapped or unmapped,
// the trap guard's rt_sigaction) runs under PTRACE_SYSCALL, an entry stop
// and an exit stop, whose SIGTRAP|0x80 is no signal: made as a single
// step, its step's SIGTRAP killed the process when the tracer died
// before the trap guard was armed (once in 160 kills during the install
// of TestGuardianKill). A tracer that dies in the middle of a remote
// system call leaves the borrowed thread holding the call's registers (at
// the tracer's system-call instruction, its arguments in place); run on,
// it crashes. The tracer stores the thread's registers from before
// the call in the log's header while the call lasts
// (proc.SyscallHandler, Guard.Borrow), and the guardian puts them back in
// its stop (the call's effect, if it ran, stays: each is harmless alone).
//
// What a program sees of the trap guard while the tracer is attached: a
// query of SIGTRAP's disposition (sigaction) returns the handler, not
// SIG_DFL (nothing short of intercepting the program's rt_sigaction calls
// would hide it); its own SIGTRAP (raise, kill, an int3 of its own) ends
// it as before. After a clean detach the disposition is SIG_DFL again;
// after the tracer's death the handler stays (harmless: it passes every
// SIGTRAP on) until a later attach unmaps the areas and puts the
// disposition back.
//
// # What the kernel does to a traced thread when its tracer dies
//
// Read from kernel/ptrace.c (exit_ptrace, __ptrace_detach,
// __ptrace_unlink) and kernel/signal.c (ptrace_stop, ptrace_signal,
// get_signal), and measured on Linux 6.18 (a C tracer that exits with the
// tracee's stop collected by wait4 or seen with WNOWAIT only): exit_ptrace
// unlinks every tracee (and reinstates a group stop in effect: the latch)
// and wakes it; unlike PTRACE_DETACH it does not call ptrace_disable, so
// x86's trap flag set by PTRACE_SINGLESTEP stays set. The woken thread
// leaves ptrace_stop with the stop's exit code, which the tracer's wait4
// zeroes when it collects the stop:
//
//   - signal-delivery stop (an int3's SIGTRAP, a single step's SIGTRAP,
//     any signal): uncollected, the signal is delivered as if the tracer
//     had never seen it (SIGTRAP under SIG_DFL: killed, measured; a caught
//     SIGTRAP: the handler runs, measured); collected, it is discarded
//     (an int3's: harmless; a program's signal the tracer held, SIGALRM
//     say: lost, measured with SIGUSR1);
//   - single-step stop: as above, and the trap flag stays set, so even a
//     collected one traps again after the next instruction (killed by
//     SIGTRAP, measured, unless the guardian clears the flag first, which
//     the latch gives it time to do);
//   - system-call stop: ptrace_report_syscall sends the exit code as a
//     signal; with PTRACE_O_TRACESYSGOOD (proc sets it) that is
//     SIGTRAP|0x80, no valid signal, so nothing is sent (uncollected:
//     survived, measured); without it SIGTRAP (killed, measured);
//   - event stop (fork, clone, exec, exit, PTRACE_INTERRUPT's) and group
//     stop: the exit code is not used; nothing is sent (uncollected fork
//     event 0x105 and interrupt stop 0x8005: survived, measured).
//
// # What the guardian does, in one stop
//
//  1. It reads the log (the count of published records, then the records
//     below it: the tracer writes a record before publishing it, and
//     publishes it before the batch that writes its range).
//  2. From the newest record to the oldest, it writes back a record's
//     original bytes where memory holds the bytes the tracer wrote there
//     (as the newer records leave memory): a trap site covered later by a
//     jump, or a jump moved to another slot, is restored once, to the
//     file's bytes; bytes that are neither the tracer's nor the file's (the
//     program rewrote its text, or an exec or a new mapping put other code
//     there) are left alone and counted (Report.Left).
//  3. A thread the kernel sent into a SIGTRAP handler for a trap stop the
//     tracer had not collected returns from it before it runs: to the
//     trap site (an int3's SIGTRAP), or where the tracer's single step
//     left it; the SIGTRAP of a step whose instruction ran after the
//     tracer's end is discarded when it is taken.
//     The thread a remote system call had borrowed gets its registers
//     from before the call back. A thread that stands just past the int3
//     of a trap site executed that int3 and was never served, when the
//     int3 is in memory, or when the site's instruction is longer than one
//     byte (no instruction boundary lies just past it: the site was
//     removed after the thread ran its int3): it is sent back to the site,
//     where the original instruction now is. A thread whose trap flag is
//     set (the tracer died during a single step) has it cleared.
//  4. A thread with a SIGTRAP queued (the instant above) is let run under
//     the guardian until it takes it; a trap at a restored site sends the
//     thread back to the site and discards the signal.
//  5. The guardian detaches and ends the latch's group stop (SIGCONT).
//
// Every interleaving with the tracer's work ends in one of these states:
//
//   - A batch half written: every range of the batch was recorded before
//     the first write, and each is restored or left as the file has it.
//   - A thread inside a trampoline's slot, or in a boosted out-of-line
//     copy: slot areas and the data area are never unmapped by the
//     guardian; the slot runs the displaced instructions and jumps back to
//     the end of the replaced range, where the original code is.
//   - A return trampoline's address on a stack: the return slot and the
//     shadow stack it reads (in the data area, a shared mapping that
//     outlives the tracer) stay, so the frame returns where it should.
//   - A thread held at a site for an in-place step: the tracer moved it
//     back to the site before holding it; it runs the original
//     instruction.
//   - A thread in the middle of an in-place step: the original byte is in
//     memory; the thread is at the site (not stepped yet) or past the
//     instruction (stepped); its trap flag is cleared.
//   - A thread that trapped and was served but not resumed yet: its
//     registers are the served ones (past the emulated instruction, in a
//     boosted copy, or back at the site).
//
// A thread stopped just past a trap site whose original instruction is
// one byte long may have executed the int3 and wait to be served (it is
// sent back to the site) or have been served and not resumed yet: its
// instruction emulated, the tracer dying between the system call that set
// its registers and the one that resumes it, or single-stepped, the
// tracer dying before it resumes the world. That one must be left as it
// is: sent back, its instruction runs twice, and a push run twice made a
// ret return to the pushed value. The tracer stores in the log the
// registers it gives a thread before it sets them, and those a step left
// it with once the step's stop is collected (Guard.Serving); a thread that
// stands with exactly those registers is left as it is.
// TestGuardianKillFrozen on an Intel Xeon lost 3 targets in 1,720 runs
// this way (k_push's push %rbx emulated, then run again) before the
// record. Trampoline sites have no such case.
//
// # What it does not cover
//
// A process started by the tracer (probe.Spawn) has a guardian too, from
// the moment Spawn has started it and armed its latch (proc.Process.Latch);
// before that, while it has not run an instruction, it is killed with its
// tracer (PTRACE_O_EXITKILL). A forked child the tracer follows
// (probe.Options.FollowForks) gets a guardian of its own before it runs,
// whose log holds the sites it inherited; a child forked in the instant
// between its creation and its guardian's start runs unguarded if the
// tracer dies then. The real parent of an attached process sees the latch's stop
// and continue (SIGCHLD with CLD_STOPPED, then CLD_CONTINUED), and the
// program receives one SIGCONT when the tracer detaches or the guardian
// lets it go. The guardian needs the privileges of the tracer over the
// process (the same user, or CAP_SYS_PTRACE; with Yama's ptrace_scope 1,
// CAP_SYS_PTRACE, since it is not an ancestor of the process).
package guardian
