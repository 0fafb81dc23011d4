// Package x86enc is the project's one x86-64 encoder: the general-purpose
// instruction forms that the trampoline slots (package trampoline), the
// branches and stubs of relocated copies (package xol) and the in-child
// harnesses of the CPU oracles and the eBPF JIT (package bpf/jit) are
// written in.
//
// An Asm appends instructions for a known address: memory operands are
// [base + index*scale + disp] (the shortest displacement), RIP-relative to
// an absolute address, or an absolute disp32, with an optional FS or GS
// override; branches are rel32, to a Label of the same code or to an
// absolute address (and JccShort, a rel8 jcc to an absolute address). It
// records where each of its instructions starts and ends, so that the
// result can be decoded again (Verify), and the first error stays until
// Finish: an operand beyond the reach of its rel8, rel32 or disp32
// (ErrOutOfReach), or one x86-64 cannot encode (ErrInvalid).
//
// The encoding of each form is fixed: the same calls give the same bytes,
// byte for byte, which the slots' layout relies on. Where two encodings
// exist the name says which (ALUImm8 and ALUImm32, MovAbs and MovImm32);
// only MovImm chooses, by the value.
//
// It does not decode: Verify takes the length decoder from its caller (the
// tests check every form against package decode and against objdump), so
// that the encoder depends on nothing. It has no vector, x87 or system
// forms beyond the few the callers use; its 8- and 16-bit forms are Setcc,
// ALUAL and those the eBPF JIT needs (byte and word loads, stores, zero
// and sign extensions, Rol16).
package x86enc
