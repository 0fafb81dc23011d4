// Package xol is about executing a probed instruction out of line: a copy
// of it runs (is single-stepped) in a slot at another address, then the
// registers are fixed up as if the original had run.
//
// The eligibility analysis the planner needs is CheckX86 and CheckARM64:
// they say whether an instruction can be executed from another address and
// which fixups that takes (instruction pointer, return address,
// RIP-relative operand through a scratch register or a recomputed
// displacement, TF handling of pushf/popf, PC-relative arm64 forms), or
// refuse it with a *RefusalError wrapping ErrNotRelocatable that names the
// reason. The Refuse* codes are of the project's one reason-code type, the
// one plan.Reason names: plan passes them on as its decision reasons.
// BoostableX86 says which x86-64 instructions can run from a slot without
// a trap and without ever raising an exception there.
//
// The package does not decode (see decode), emulate (see emulate) or choose
// a strategy (see plan).
package xol
