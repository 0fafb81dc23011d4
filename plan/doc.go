// Package plan decides how to probe an instruction: the strategy (reject,
// emulate, xol, trampoline-nop, trampoline-detour), a stable reason code
// and a sentence a person can read, under a policy:
//
//   - linux-uprobes predicts what the Linux 6.18 kernel's uprobes do with
//     the instruction, quirks included: which instructions it refuses,
//     emulates, single-steps out of line or, for a nop5, rewrites into a
//     call to its trampoline. A live-kernel test checks the prediction.
//   - probeopt is the best correct strategy that the emulate, xol and
//     trampoline packages support today. It asks those packages (it keeps
//     no copy of their tables) and says so when a capability is missing.
//     On arm64 a trampoline is a b that displaces one instruction; the
//     engine (package probe) installs it for entry counts (not yet with
//     events or for return probes, where the site takes its fallback).
//
// The package also owns the function-wide checks: the instruction-boundary
// map of a function (a probe address is accepted only where a decode from
// the function start lands), the direct branch targets and indirect jumps
// a detour must respect (an x86-64 jump table is recovered from the code
// before its jump and its entries read from the file, and its targets
// count as the function's branch targets: Function.ResolveJumpTables), and
// the arm64 load/store-exclusive windows; and
// the file-wide index of direct branch targets and exception landing pads
// (BranchIndex), for the ways into a function from outside it that a
// detour must respect too. A Site without that index (Branches nil) takes
// no trampoline the index could refuse; NoBranches is the explicit empty
// index.
//
// File is the one pipeline from an opened elfscan.File to a decision per
// site, used by the scan and explain commands and by the live engine
// alike: NewFile, then Decide (or Site, to decide under several policies)
// for each elfscan.Site. It sweeps each function once and keeps the
// sweep (Analyze sweeps without keeping, for a scan of every function),
// makes the file's branch index once, and is safe for concurrent use.
// With Options.Fallback a trampoline decision carries the trap decision
// a tracer falls back on when it cannot place the trampoline.
//
// It does not read ELF files or their exception tables (elfscan gives it
// the executable sections, functions and landing pads), decode (see
// decode), emulate (see emulate) or relocate (see xol).
package plan
