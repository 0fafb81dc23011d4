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
// guardian's PTRACE_SEIZE. One instant is not covered, and no arrangement
// of ptrace covers it: a thread that has entered its trap stop at an int3
// that the tracer has not collected yet when it dies is given its SIGTRAP
// by the kernel as it is detached (the stop's signal is cleared only by
// the tracer's wait4), and dies. The window is the time between a trap
// and the tracer's wait4, which under a heavy trap load is most of the
// time: measured on Linux 6.18 (AMD EPYC, shared machine), a thread left
// 50 ms in an uncollected trap stop died 2 times in 3, one in a collected
// stop never; the kill campaign (trampoline, return, emulated and stepped
// sites, two threads) lost 1 target in 240 kills; but "probeopt trace
// --traps -p" on 15 trap sites hit in a loop by two threads, killed with
// SIGKILL, lost 4 targets in 6. Trampoline sites have no such window;
// closing it for traps needs a trap that does not depend on a tracer (a
// SIGTRAP handler in the process), which this package does not install.
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
//  3. A thread that stands just past the int3 of a trap site executed that
//     int3 and was never served, when the int3 is in memory, or when the
//     site's instruction is longer than one byte (no instruction boundary
//     lies just past it: the site was removed after the thread ran its
//     int3): it is sent back to the site, where the original instruction
//     now is. A thread whose
//     trap flag is set (the tracer died during a single step) has it
//     cleared.
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
// One case is ambiguous, and resolved towards the more likely: a thread
// stopped just past a trap site whose original instruction is one byte
// long may have executed the int3 (it is sent back: right) or have been
// served by emulation or a step and not resumed yet, the tracer dying in
// the few system calls between the two (sent back too, the instruction
// runs twice). Trampoline sites have no such case.
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
