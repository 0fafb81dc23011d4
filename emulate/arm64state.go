package emulate

import (
	"fmt"
	"strings"
)

// ARM64State is the arm64 user register file the emulator reads and
// writes: the general-purpose registers, the stack pointer, the program
// counter, the condition flags and the FP/SIMD registers.
type ARM64State struct {
	// X holds x0..x30. Register number 31 is not here: it is the stack
	// pointer (SP) or the zero register, depending on the operand.
	X [31]uint64
	// SP is the stack pointer (sp_el0).
	SP uint64
	// PC is the address of the instruction to execute; after a step it is
	// the address of the next one.
	PC uint64
	// NZCV holds the condition flags in bits 31 (N), 30 (Z), 29 (C) and 28
	// (V), the layout of the NZCV system register and of pstate in the
	// signal context. The emulator changes only those four bits and
	// carries every other bit through.
	NZCV uint64
	// V holds the low 128 bits of the FP/SIMD registers v0..v31: V[n][0]
	// is bits 63:0, V[n][1] bits 127:64. A scalar write (b, h, s, d) zeroes
	// the bits above it, as the CPU does (and the CPU also zeroes any SVE
	// bits above 127, which are not modelled).
	V [32][2]uint64
}

// NZCV flag bits.
const (
	NZCVN uint64 = 1 << 31 // negative
	NZCVZ uint64 = 1 << 30 // zero
	NZCVC uint64 = 1 << 29 // carry (no borrow, for subtraction)
	NZCVV uint64 = 1 << 28 // signed overflow

	// NZCVMask is the four condition flags.
	NZCVMask = NZCVN | NZCVZ | NZCVC | NZCVV
)

// String renders the registers, four to a line, then sp, pc and the flags
// (upper case for a set flag, as in "nZCv").
func (s *ARM64State) String() string {
	var b strings.Builder
	for r := 0; r < 31; r++ {
		switch {
		case r == 0:
		case r%4 == 0:
			b.WriteByte('\n')
		default:
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "x%d=%#x", r, s.X[r])
	}
	fl := []byte("nzcv")
	for i, m := range [4]uint64{NZCVN, NZCVZ, NZCVC, NZCVV} {
		if s.NZCV&m != 0 {
			fl[i] -= 'a' - 'A'
		}
	}
	fmt.Fprintf(&b, "\nsp=%#x pc=%#x nzcv=%s", s.SP, s.PC, fl)
	for r := 0; r < 32; r++ {
		if s.V[r] != [2]uint64{} {
			fmt.Fprintf(&b, " v%d=%#016x%016x", r, s.V[r][1], s.V[r][0])
		}
	}
	return b.String()
}

// reg reads general-purpose register n (0-31) with 31 as the zero
// register.
func (s *ARM64State) reg(n uint32) uint64 {
	if n == 31 {
		return 0
	}
	return s.X[n]
}

// regSP reads general-purpose register n (0-31) with 31 as the stack
// pointer.
func (s *ARM64State) regSP(n uint32) uint64 {
	if n == 31 {
		return s.SP
	}
	return s.X[n]
}

// setReg writes register n (0-31) with 31 as the zero register: the write
// is discarded. A 32-bit result is zero-extended.
func (s *ARM64State) setReg(n uint32, v uint64, width int) {
	if width == 32 {
		v = uint64(uint32(v))
	}
	if n != 31 {
		s.X[n] = v
	}
}

// setRegSP writes register n (0-31) with 31 as the stack pointer. A 32-bit
// result is zero-extended.
func (s *ARM64State) setRegSP(n uint32, v uint64, width int) {
	if width == 32 {
		v = uint64(uint32(v))
	}
	if n == 31 {
		s.SP = v
		return
	}
	s.X[n] = v
}
