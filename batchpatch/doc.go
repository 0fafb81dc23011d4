// Package batchpatch applies a set of text patches — each an address, the
// bytes expected there and the bytes to put instead — as one transaction:
// to a copy of a file, or to a live process in one stop-the-world pass.
//
// A batch is validated first: patches sorted by address, none overlapping,
// old and new bytes of equal non-zero length, and the old bytes equal to
// what the target holds now (a compare-and-swap on text). A live pass then
//
//  1. stops every thread of the process (proc.Process.Stopped);
//  2. checks that no thread's PC lies strictly inside a replaced range
//     (Addr, Addr+len) — a thread exactly at Addr runs the new bytes from
//     their start, which is fine — nor, for a patch that removes displaced
//     code, anywhere inside that code (Patch.Guard). The PC a restarted
//     system call will resume at counts too;
//  3. single-steps each blocking thread alone, the others staying stopped,
//     until neither of its PCs blocks any patch, up to a bound
//     (Options.MaxSteps and Options.StepTimeout). A thread that could not
//     be moved holds back every patch it blocks — all those whose guard
//     holds its PC, and the ones its PC and its restart PC fall in — each
//     refused with the reason and never written (a Set keeps them pending
//     for the next pass). A thread that exits meanwhile blocks nothing;
//  4. writes the accepted patches through /proc/PID/mem, one write per page
//     (nearby patches are coalesced), reads every page back and compares;
//  5. on any failure restores every byte already written, verifies the
//     restore, and reports which patch failed;
//  6. resumes the world.
//
// No mapping changes protection: text is written through /proc/PID/mem, so
// the process never holds a writable and executable mapping.
//
// # Bounded pauses
//
// One pass of a large batch is one long freeze. Options.MaxPause bounds
// each pass (from the first thread stopped to the last resumed, checks and
// single steps included; Options.MaxPassPatches caps its patches), and
// Apply then writes the batch in as many passes as it takes, the process
// running between them (Options.PassGap). Patches that must change at
// once share a Patch.Unit: a unit is never split between passes, a thread
// that blocks one of its patches holds back all of them, and a site is
// live only once its whole unit is written. A unit held back is tried
// again in a later pass (up to three more), then refused. A pass that
// fails rolls back its own units only: the earlier passes stay, listed in
// Result.Applied and Result.Passes, and a child forked at any time holds
// every unit either old or new. Removals go the same way: a Set commits
// staged removals in passes too.
//
// The size of a pass is predicted from the passes before it. A pass
// costs a fixed part (interrupting every thread until all are stopped,
// listing them and checking their PCs, resuming them: it depends on the
// threads and on the machine's load, not on the patches) plus a part per
// page it writes (a read, a write and a read back through /proc/PID/mem,
// however many patches the page holds). Each pass measures its phases
// (PassStats), and the next one takes the units whose pages fit, at the
// median cost per page of the last five passes, in 75 % of the bound
// less their median fixed part, and at most twice the pages the previous
// pass was given. The first pass counts a page as four reads of a page,
// timed on a sample of the batch's pages while the process runs, and a
// fixed part of a quarter of that budget. Then each pass watches its own
// clock (proc.World.Paused): once the text is read and the threads are
// checked, the units whose pages would not be written and read back
// within 90 % of the bound, the threads resumed, are left for the next
// pass (PassStats.Deferred), whole, and the first unit is always written.
// No clock can shorten a stop that is already slow: a thread that waits
// for a CPU to stop, or a tracer preempted while the world is stopped, on
// a busy machine, lengthens the pass it happens in. Nor may this
// program's own garbage collector run then: with a time bound, Apply
// holds it from the first pass to the last (proc.HoldGC).
// DefaultMaxPause (2 ms) and DefaultPassGap (500 us) come from the
// measurements in docs/BENCHMARKS.md.
//
// A Set stages additions and removals and commits them in one pass; a
// patch removed and added again before the commit (or the reverse) costs
// no text write at all.
//
// StopFree applies a batch without stopping the world, in the order the
// Linux kernel uses for its own text: an int3 at every site, then the tail
// bytes, then the first bytes, with a synchronisation between stages and
// threads that hit a site meanwhile held and re-run once it is complete.
//
// The package does not decide what to patch (see plan and trampoline), or
// handle the traps of probes (probe). It does not decode instructions:
// a caller that does can say which threads no step will move out of a
// range (a jump to itself, Options.Stuck).
package batchpatch
