package emulate

import (
	"math/bits"

	"github.com/probeopt/probeopt/decode"
)

// sizeMask returns the mask of an operand of size bytes (1, 2, 4 or 8).
func sizeMask(size int) uint64 {
	return ^uint64(0) >> (64 - 8*uint(size))
}

// signBit returns the sign bit of an operand of size bytes.
func signBit(size int) uint64 {
	return 1 << (8*uint(size) - 1)
}

// signExtend sign-extends the low size bytes of v to 64 bits.
func signExtend(v uint64, size int) uint64 {
	sh := 64 - 8*uint(size)
	return uint64(int64(v<<sh) >> sh)
}

// parityFlag returns FlagPF when the low byte of v has an even number of
// set bits.
func parityFlag(v uint64) uint64 {
	if bits.OnesCount8(uint8(v))&1 == 0 {
		return FlagPF
	}
	return 0
}

// szpFlags returns SF, ZF and PF for a result of size bytes.
func szpFlags(res uint64, size int) uint64 {
	f := parityFlag(res)
	if res&sizeMask(size) == 0 {
		f |= FlagZF
	}
	if res&signBit(size) != 0 {
		f |= FlagSF
	}
	return f
}

// addFlags computes a + b + carry on size bytes and every status flag.
func addFlags(a, b, carry uint64, size int) (res, flags uint64) {
	m := sizeMask(size)
	a, b = a&m, b&m
	var cf uint64
	if size == 8 {
		var c1, c2 uint64
		res, c1 = bits.Add64(a, b, 0)
		res, c2 = bits.Add64(res, carry, 0)
		cf = c1 | c2
	} else {
		full := a + b + carry
		res = full & m
		cf = full >> (8 * uint(size)) & 1
	}
	flags = szpFlags(res, size) | (a^b^res)&FlagAF
	if cf != 0 {
		flags |= FlagCF
	}
	if (a^res)&(b^res)&signBit(size) != 0 {
		flags |= FlagOF
	}
	return res, flags
}

// subFlags computes a - b - borrow on size bytes and every status flag.
func subFlags(a, b, borrow uint64, size int) (res, flags uint64) {
	m := sizeMask(size)
	a, b = a&m, b&m
	var cf uint64
	if size == 8 {
		var c1, c2 uint64
		res, c1 = bits.Sub64(a, b, 0)
		res, c2 = bits.Sub64(res, borrow, 0)
		cf = c1 | c2
	} else {
		res = (a - b - borrow) & m
		if a < b+borrow {
			cf = 1
		}
	}
	flags = szpFlags(res, size) | (a^b^res)&FlagAF
	if cf != 0 {
		flags |= FlagCF
	}
	if (a^b)&(a^res)&signBit(size) != 0 {
		flags |= FlagOF
	}
	return res, flags
}

// logicFlags returns the flags of and, or, xor and test: OF and CF clear,
// SF, ZF and PF from the result. AF is undefined; it is left clear.
func logicFlags(res uint64, size int) uint64 {
	return szpFlags(res, size)
}

// ALU operations in the order of their opcodes (and of the /reg field of
// opcodes 80, 81 and 83).
const (
	aluAdd = iota
	aluOr
	aluAdc
	aluSbb
	aluAnd
	aluSub
	aluXor
	aluCmp
)

// aluOp applies ALU operation op to a and b on size bytes, with the carry
// flag cf as input. It returns the result, the status flags it produces,
// and whether the result is written back (all but cmp).
func aluOp(op int, a, b, cf uint64, size int) (res, flags uint64, write bool) {
	m := sizeMask(size)
	switch op {
	case aluAdd:
		res, flags = addFlags(a, b, 0, size)
	case aluOr:
		res = (a | b) & m
		flags = logicFlags(res, size)
	case aluAdc:
		res, flags = addFlags(a, b, cf, size)
	case aluSbb:
		res, flags = subFlags(a, b, cf, size)
	case aluAnd:
		res = a & b & m
		flags = logicFlags(res, size)
	case aluSub, aluCmp:
		res, flags = subFlags(a, b, 0, size)
	case aluXor:
		res = (a ^ b) & m
		flags = logicFlags(res, size)
	}
	return res, flags, op != aluCmp
}

// Shift and rotate operations, by the /reg field of opcodes C0, C1, D0-D3.
const (
	shRol = 0
	shRor = 1
	shShl = 4
	shShr = 5
	shSar = 7
)

// shiftCount masks a shift or rotate count as the CPU does: to 6 bits for
// 64-bit operands, to 5 bits otherwise.
func shiftCount(count uint64, size int) uint {
	if size == 8 {
		return uint(count & 0x3f)
	}
	return uint(count & 0x1f)
}

// shiftSource returns the unmasked count of shift op (of inst, from
// state st): one, cl or the immediate, as its form says.
func shiftSource(op x86Op, inst *decode.X86Inst, st *X86State) uint64 {
	switch op.form {
	case formE1:
		return 1
	case formECL:
		return st.GPR[decode.RCX] & 0xff
	}
	return inst.Imm
}

// shiftOp applies shift or rotate op to a (size bytes) by the masked count
// n, given the old flags. It returns the result and the new flags. With
// n == 0 the flags are unchanged.
func shiftOp(op int, a uint64, n uint, size int, old uint64) (res, flags uint64) {
	m := sizeMask(size)
	w := 8 * uint(size)
	a &= m
	flags = old
	if n == 0 {
		return a, flags
	}
	switch op {
	case shRol, shRor:
		r := n % w
		if op == shRol {
			res = (a<<r | a>>((w-r)%w)) & m
		} else {
			res = (a>>r | a<<((w-r)%w)) & m
		}
		flags &^= FlagCF | FlagOF
		msb := res&signBit(size) != 0
		var cf, of bool
		if op == shRol {
			cf = res&1 != 0
			of = msb != cf
		} else {
			cf = msb
			of = msb != (res&(signBit(size)>>1) != 0)
		}
		if cf {
			flags |= FlagCF
		}
		if of && n == 1 {
			flags |= FlagOF
		}
		return res, flags
	}
	var cf bool
	switch op {
	case shShl:
		if n < 64 {
			res = (a << n) & m
		}
		if n <= w {
			cf = (a>>(w-n))&1 != 0
		}
	case shShr:
		if n < 64 {
			res = a >> n
		}
		cf = (a>>(n-1))&1 != 0
	case shSar:
		sa := int64(signExtend(a, size))
		res = uint64(sa>>n) & m
		cf = (sa>>(n-1))&1 != 0
	}
	flags &^= FlagsStatus
	flags |= szpFlags(res, size)
	if cf {
		flags |= FlagCF
	}
	if n == 1 {
		msb := res&signBit(size) != 0
		switch {
		case op == shShl && msb != cf:
			flags |= FlagOF
		case op == shShr && a&signBit(size) != 0:
			flags |= FlagOF
		}
	}
	return res, flags
}

// imulOp multiplies a and b as signed size-byte values. It returns the
// product truncated to size bytes and whether it differs from the full
// product (the CF and OF of imul).
func imulOp(a, b uint64, size int) (res uint64, overflow bool) {
	sa, sb := int64(signExtend(a, size)), int64(signExtend(b, size))
	if size == 8 {
		hi, lo := bits.Mul64(uint64(sa), uint64(sb))
		// Signed high half: correct the unsigned one.
		if sa < 0 {
			hi -= uint64(sb)
		}
		if sb < 0 {
			hi -= uint64(sa)
		}
		return lo, hi != uint64(int64(lo)>>63)
	}
	p := sa * sb // exact: both fit in 32 bits
	res = uint64(p) & sizeMask(size)
	return res, int64(signExtend(res, size)) != p
}

// condition evaluates condition code cc (the low four bits of jcc, setcc
// and cmovcc opcodes) on flags f.
func condition(cc uint8, f uint64) bool {
	var r bool
	switch cc >> 1 {
	case 0: // o
		r = f&FlagOF != 0
	case 1: // b
		r = f&FlagCF != 0
	case 2: // e
		r = f&FlagZF != 0
	case 3: // be
		r = f&(FlagCF|FlagZF) != 0
	case 4: // s
		r = f&FlagSF != 0
	case 5: // p
		r = f&FlagPF != 0
	case 6: // l
		r = (f&FlagSF != 0) != (f&FlagOF != 0)
	case 7: // le
		r = f&FlagZF != 0 || (f&FlagSF != 0) != (f&FlagOF != 0)
	}
	return r != (cc&1 != 0)
}

// X86UndefinedFlags returns the RFLAGS bits that the Intel and AMD manuals
// leave undefined after inst executes from state st: their value after the
// instruction is not architectural, so a comparison with a CPU must ignore
// them. It is 0 for instructions that are not emulated.
//
//   - and, or, xor, test: AF.
//   - shl, shr, sar with a masked count other than 0: AF; OF unless the
//     count is 1; for shl and shr, CF when the count is at least the
//     operand width (possible for 8- and 16-bit operands).
//   - rol, ror with a masked count other than 0 or 1: OF.
//   - imul with two or three operands: SF, ZF, AF, PF.
func X86UndefinedFlags(inst *decode.X86Inst, st *X86State) uint64 {
	op, err := classifyX86(inst, decode.VendorAMD) // the undefined flags are the same on Intel
	if err != nil {
		return 0
	}
	size := int(op.size)
	switch op.kind {
	case kTest:
		return FlagAF
	case kALU:
		switch op.sub {
		case aluAnd, aluOr, aluXor:
			return FlagAF
		}
	case kIMul:
		return FlagSF | FlagZF | FlagAF | FlagPF
	case kShift:
		n := shiftCount(shiftSource(op, inst, st), size)
		if n == 0 {
			return 0
		}
		var u uint64
		if n != 1 {
			u |= FlagOF
		}
		switch op.sub {
		case shRol, shRor:
			return u
		case shShl, shShr:
			if n >= 8*uint(size) {
				u |= FlagCF
			}
		}
		return u | FlagAF
	}
	return 0
}
