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
