// Package emulate executes one decoded instruction on a register file and a
// memory interface, bit-exact with the CPU (flags included), or says that
// it cannot. A probe whose instruction is emulated costs one trap instead of
// the two of an out-of-line single step.
//
// For x86-64, X86.Step (or EmulateX86) executes a decode.X86Inst on an
// X86State (the 16 general-purpose registers, RIP, RFLAGS, the FS and GS
// bases) and a Memory. X86Supported is the one list of what is emulated:
// the planner asks it about every probe site, and Step accepts exactly what
// it accepts; everything else is refused with ErrNotEmulated, never
// guessed. X86UndefinedFlags names the flags the manuals leave undefined
// after an instruction. A faulting instruction returns a *Fault (address,
// access, exception) and leaves the state unchanged. The arm64 side
// (ARM64.Step, ARM64Supported) follows the same pattern.
//
// The emulation is checked against the CPU itself by package fuzz
// (`probeopt fuzz emulate`), which runs the same instructions and states
// on the host and compares every register, flag and byte written.
//
// The package does not decode (see decode), does not access a live process
// (the caller's Memory does), and does not decide which strategy a probe
// uses (see plan).
package emulate
