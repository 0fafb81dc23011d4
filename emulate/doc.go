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
// # Intel and AMD
//
// X86.Vendor names the CPU the emulator follows where Intel and AMD CPUs
// execute the same bytes differently (a tracer sets the vendor of the CPU
// its process runs on; the zero value is AMD, as for the decoder). The
// differences, with the evidence for each (the CPU cases are regression
// vectors of package fuzz, tagged with their vendor):
//
//   - A near call (rel32, or through a register or memory) to a
//     non-canonical target raises #GP at the call, after the faults of the
//     push (#SS for a non-canonical stack, a page fault for an unwritable
//     one). Intel has then stored the return address below rsp; AMD has
//     stored nothing. Evidence: an Intel Xeon and an AMD EPYC (family 25)
//     running the same cases. The emulator follows Vendor; for AMD it asks
//     a WriteChecker whether the push would fault (a Memory without one
//     gets #GP where the CPU would report the unwritable stack).
//   - A memory operand with an FS or GS prefix whose offset (base, index
//     and displacement, before the segment base) is not canonical while the
//     linear address is: AMD raises #GP whatever the linear address; Intel
//     checks the linear address only (a page fault for an unmapped one).
//     Evidence: the same two CPUs. The emulator follows Vendor.
//   - movsxd with a 66 prefix and no REX.W (66 63 /r): AMD reads a 32-bit
//     source and writes its low 16 bits; Intel reads a 16-bit source (Intel
//     SDM: MOVSXD r16, r/m16). The result is the same; a read that crosses
//     into a missing page after two bytes faults on AMD only. Evidence: the
//     AMD CPU; the Intel manual. The emulator follows Vendor.
//   - A 66 prefix on a near branch (jmp, jcc, call, ret, loop, jrcxz,
//     indirect jmp and call): AMD makes the branch 16-bit (a rel16
//     displacement, a 2-byte return address pushed or popped, RIP truncated
//     to 16 bits: 66 c3 pops two bytes and jumps to 0xffff on the AMD CPU);
//     Intel ignores the prefix. The decoder flags these instructions
//     vendor-dependent and the emulator refuses them on both vendors:
//     compilers do not emit them and Linux refuses to probe them.
//   - Flags the manuals leave undefined (see X86UndefinedFlags) get
//     different values on the two vendors; they are not compared and a
//     program cannot rely on them.
//
// Both CPUs agree, on the instructions emulated, on everything else the
// campaigns compare: results, defined flags, the order of faults, the
// faulting address and access, and that a faulting instruction changes no
// register.
//
// The package does not decode (see decode), does not access a live process
// (the caller's Memory does), and does not decide which strategy a probe
// uses (see plan).
package emulate
