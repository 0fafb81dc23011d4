// Package emulate executes one decoded instruction on a register file and a
// memory interface, bit-exact with the CPU (flags included), or says that
// it cannot. A probe whose instruction is emulated costs one trap instead of
// the two of an out-of-line single step.
//
// The package does not decode (see decode) nor decide which strategy a
// probe uses (see plan); plan asks X86Supported whether emulation is
// possible, so the list of emulated forms lives here only.
package emulate
