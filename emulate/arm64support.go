package emulate

import (
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// a64Kind is what an emulated arm64 instruction does.
type a64Kind uint8

const (
	a64None     a64Kind = iota
	a64Nop              // nop, yield, bti, prfm; the PAC hints on a CPU without PAuth
	a64B                // b, bl
	a64BCond            // b.cond, bc.cond
	a64CB               // cbz, cbnz
	a64TB               // tbz, tbnz
	a64BR               // br, blr, ret
	a64Adr              // adr, adrp
	a64LdrLit           // ldr, ldrsw (literal), FP/SIMD ldr (literal)
	a64AddImm           // add, adds, sub, subs (immediate)
	a64AddShift         // add, adds, sub, subs (shifted register)
	a64AddExt           // add, adds, sub, subs (extended register)
	a64LogImm           // and, orr, eor, ands (immediate)
	a64LogShift         // and, bic, orr, orn, eor, eon, ands, bics (shifted register)
	a64MovWide          // movn, movz, movk
	a64LdSt             // one-register load or store addressed from a base register
	a64LdStPair         // ldp, stp, ldnp, stnp, ldpsw
	a64Bitfield         // sbfm, bfm, ubfm (asr, lsl, lsr, sxtw, ubfx, bfi...)
	a64Extr             // extr (ror immediate)
	a64CSel             // csel, csinc, csinv, csneg (cset, cinc, cneg...)
	a64CCmp             // ccmp, ccmn (immediate and register)
	a64Mul              // madd, msub, smaddl, smsubl, umaddl, umsubl, smulh, umulh (mul, mneg...)
	a64Div              // udiv, sdiv
	a64ShiftV           // lslv, lsrv, asrv, rorv
	a64BitOp            // rbit, rev16, rev32, rev, clz, cls
)

// Addressing modes of a64LdSt and a64LdStPair.
const (
	a64AddrOffset = iota // [base, #imm]: unsigned offset, unscaled, unprivileged, signed pair offset
	a64AddrPre           // [base, #imm]!
	a64AddrPost          // [base], #imm
	a64AddrReg           // [base, Rm{, extend {#amount}}]
)

// a64Op is the classification of an emulated arm64 instruction.
type a64Op struct {
	kind   a64Kind
	width  int   // data-processing width, or the width of a general-purpose load destination (32 or 64)
	size   int   // bytes accessed per data register (1, 2, 4, 8 or 16)
	vec    bool  // the data registers are FP/SIMD registers
	load   bool  // a load (else a store)
	signed bool  // a sign-extending load
	mode   int   // addressing mode of loads and stores
	imm    int64 // byte offset of immediate load/store forms, scaled
}

// ARM64 executes decoded arm64 instructions on an ARM64State and a Memory,
// exactly as an EL0 (user) thread on a Linux arm64 CPU would, or refuses
// them with ErrNotEmulated. The zero value is ready to use.
//
// The emulated set is what ARM64Supported accepts: nop, yield and bti;
// b, bl, b.cond, bc.cond, cbz, cbnz, tbz, tbnz, br, blr and ret; adr and
// adrp; ldr, ldrsw and prfm (literal), FP/SIMD ldr (literal) of s, d and q
// registers; add, adds, sub, subs (immediate, shifted register, extended
// register), hence mov to and from sp, cmp and cmn; and, orr, eor, ands
// (immediate) and and, bic, orr, orn, eor, eon, ands, bics (shifted
// register), hence mov (register), mvn and tst; movz, movn, movk; the
// bitfield moves sbfm, bfm, ubfm (asr, lsl, lsr, sxtb/h/w, uxtb/h, sbfx,
// ubfx, bfi, bfxil...) and extr (ror); csel, csinc, csinv, csneg (cset,
// cinc, cneg...); ccmp and ccmn; madd, msub, smaddl, smsubl, umaddl,
// umsubl, smulh, umulh (mul, mneg, smull, umull...); udiv and sdiv; lslv,
// lsrv, asrv, rorv; rbit, rev16, rev32, rev, clz and cls; loads and
// stores of one register (general-purpose and FP/SIMD, every size, signed
// and unsigned, zero register included) with an unsigned offset, an
// unscaled offset, pre- and post-indexing, a register offset, and the
// unprivileged forms, and prfm; ldp, stp, ldnp, stnp and ldpsw in every
// addressing form, general-purpose and FP/SIMD.
//
// Not emulated, with the reason in the error: the PAC instructions (unless
// NoPAuth), whose results depend on keys the kernel holds; exclusives and
// atomics; the hints with an effect (wfe, sev, esb, csdb...); system
// instructions; every form the architecture leaves CONSTRAINED
// UNPREDICTABLE (a load that writes back into its own data register, ldp
// of one register twice), since CPUs differ there; and everything else.
//
// Two rules depend on the state and are checked by Step: a load or store
// based on sp while sp is not 16-byte aligned raises an SP alignment fault
// on Linux (SCTLR_EL1.SA0 is set), and a br, blr or ret to an address
// with a non-zero top byte jumps to an address that depends on
// TCR_EL1.TBID0; Step refuses both with ErrNotEmulated, so that the
// caller lets the CPU execute the instruction.
//
// Data addresses follow Linux's top-byte-ignore rule for user space
// (TCR_EL1.TBI0): when bit 55 is clear the top byte is cleared before the
// Memory sees the address, when it is set the top byte is set (a kernel
// address, which the Memory refuses). Branches do not set PSTATE.BTYPE:
// in pages guarded by BTI, the landing-pad check of the branch target is
// not made.
type ARM64 struct {
	// NoPAuth says the CPU lacks pointer authentication (FEAT_PAuth; for
	// example Neoverse N1, Graviton2, Ampere Altra). The PAC instructions
	// in the hint space (paciasp, autiasp, pacibsp, xpaclri, pacia1716...)
	// then execute as NOPs, which the emulator reproduces exactly. When
	// false, every PAC instruction is refused.
	NoPAuth bool
}

// ARM64Supported reports whether inst is emulated exactly by the zero ARM64
// (a CPU that may have pointer authentication): nil if so, else an error
// wrapping ErrNotEmulated that says why. It is the one list of what the
// emulator executes: ARM64.Step accepts exactly the instructions it
// accepts, though it may still refuse a state (see ARM64).
func ARM64Supported(inst *decode.ARM64Inst) error {
	return ARM64{}.Supported(inst)
}

// Supported is ARM64Supported for this configuration of the emulator.
func (a ARM64) Supported(inst *decode.ARM64Inst) error {
	_, err := a.classify(inst)
	return err
}

// a64NotEmulated builds the error for an instruction outside the emulated
// set.
func a64NotEmulated(inst *decode.ARM64Inst, why string) error {
	name := inst.Mnemonic
	if name == "" {
		name = fmt.Sprintf("%#08x", inst.Word)
	}
	return fmt.Errorf("%s: %s: %w", name, why, ErrNotEmulated)
}

// a64Hints are the hint numbers (CRm:op2) that are emulated as NOPs on
// every CPU: nop, yield and the four bti forms.
var a64Hints = map[uint32]bool{0: true, 1: true, 32: true, 34: true, 36: true, 38: true}

// a64PACHints are the PAC hints (xpaclri, pac/aut ia/ib 1716, z, sp),
// NOPs on a CPU without PAuth.
var a64PACHints = map[uint32]bool{7: true, 8: true, 10: true, 12: true, 14: true,
	24: true, 25: true, 26: true, 27: true, 28: true, 29: true, 30: true, 31: true}

// classify decides whether inst is emulated and how. It reads the word
// itself: the decoder classifies data processing as "other".
func (a ARM64) classify(inst *decode.ARM64Inst) (a64Op, error) {
	if inst.Len != 4 {
		return a64Op{}, a64NotEmulated(inst, "not decoded")
	}
	w := inst.Word
	switch inst.Class {
	case decode.ARM64ClassExclusive:
		return a64Op{}, a64NotEmulated(inst, "load/store exclusive")
	case decode.ARM64ClassAtomic:
		return a64Op{}, a64NotEmulated(inst, "atomic memory operation")
	case decode.ARM64ClassBarrier:
		return a64Op{}, a64NotEmulated(inst, "barrier")
	case decode.ARM64ClassSystem:
		return a64Op{}, a64NotEmulated(inst, "system instruction")
	case decode.ARM64ClassException:
		return a64Op{}, a64NotEmulated(inst, "exception-generating instruction")
	case decode.ARM64ClassHint:
		n := a64Field(w, 11, 5)
		switch {
		case a64Hints[n]:
			return a64Op{kind: a64Nop}, nil
		case a64PACHints[n] && a.NoPAuth:
			return a64Op{kind: a64Nop}, nil
		case a64PACHints[n]:
			return a64Op{}, a64NotEmulated(inst, "pointer authentication: the result depends on keys the kernel holds")
		}
		return a64Op{}, a64NotEmulated(inst, "hint with an effect")
	case decode.ARM64ClassBranch:
		if inst.PAC {
			return a64Op{}, a64NotEmulated(inst, "pointer-authenticated branch")
		}
		switch {
		case w&0x7C000000 == 0x14000000:
			return a64Op{kind: a64B}, nil
		case w&0xFF000000 == 0x54000000:
			return a64Op{kind: a64BCond}, nil
		case w&0x7E000000 == 0x34000000:
			return a64Op{kind: a64CB, width: a64Width(w)}, nil
		case w&0x7E000000 == 0x36000000:
			return a64Op{kind: a64TB}, nil
		case w&0xFF9FFC1F == 0xD61F0000: // br, blr, ret (opc 0, 1, 2)
			return a64Op{kind: a64BR}, nil
		}
		return a64Op{}, a64NotEmulated(inst, "branch not emulated")
	case decode.ARM64ClassAdr:
		return a64Op{kind: a64Adr}, nil
	case decode.ARM64ClassLiteral:
		opc, v := w>>30, w>>26&1 != 0
		switch {
		case v && opc < 3:
			return a64Op{kind: a64LdrLit, vec: true, size: 4 << opc, load: true}, nil
		case v:
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		case opc == 3:
			return a64Op{kind: a64Nop}, nil // prfm (literal): a hint, never faults
		case opc == 2:
			return a64Op{kind: a64LdrLit, width: 64, size: 4, signed: true, load: true}, nil
		}
		return a64Op{kind: a64LdrLit, width: 32 << opc, size: 4 << opc, load: true}, nil
	case decode.ARM64ClassLoadStore:
		if inst.PAC {
			return a64Op{}, a64NotEmulated(inst, "pointer-authenticated load")
		}
		switch {
		case w&0x3A000000 == 0x38000000:
			return a64ClassifyLdSt(inst)
		case w&0x3A000000 == 0x28000000:
			return a64ClassifyPair(inst)
		}
		return a64Op{}, a64NotEmulated(inst, "load/store form not emulated")
	case decode.ARM64ClassOther:
		return a64ClassifyDP(inst)
	}
	return a64Op{}, a64NotEmulated(inst, "instruction not in the emulated set")
}

// a64Field returns bits hi:lo of w.
func a64Field(w uint32, hi, lo uint) uint32 { return (w >> lo) & (1<<(hi-lo+1) - 1) }

// a64Width returns 64 when the sf bit (31) is set, else 32.
func a64Width(w uint32) int {
	if w>>31 != 0 {
		return 64
	}
	return 32
}

// a64SignExt sign-extends the low n bits of v.
func a64SignExt(v uint64, n uint) int64 { return int64(v<<(64-n)) >> (64 - n) }

// a64ClassifyDP classifies the data-processing forms the decoder leaves
// as "other".
func a64ClassifyDP(inst *decode.ARM64Inst) (a64Op, error) {
	w := inst.Word
	width := a64Width(w)
	switch {
	case w&0x1F800000 == 0x11000000: // add/sub (immediate)
		return a64Op{kind: a64AddImm, width: width}, nil
	case w&0x1F800000 == 0x12000000: // logical (immediate)
		n := w >> 22 & 1
		if width == 32 && n != 0 {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		if _, ok := a64DecodeBitMasks(n, a64Field(w, 15, 10), a64Field(w, 21, 16), width); !ok {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64LogImm, width: width}, nil
	case w&0x1F800000 == 0x12800000: // move wide (immediate)
		opc, hw := a64Field(w, 30, 29), a64Field(w, 22, 21)
		if opc == 1 || (width == 32 && hw >= 2) {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64MovWide, width: width}, nil
	case w&0x1F000000 == 0x0A000000: // logical (shifted register)
		if width == 32 && w>>15&1 != 0 {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64LogShift, width: width}, nil
	case w&0x1F200000 == 0x0B000000: // add/sub (shifted register)
		if a64Field(w, 23, 22) == 3 || (width == 32 && w>>15&1 != 0) {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64AddShift, width: width}, nil
	case w&0x1F200000 == 0x0B200000: // add/sub (extended register)
		if a64Field(w, 23, 22) != 0 || a64Field(w, 12, 10) > 4 {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64AddExt, width: width}, nil
	case w&0x1F800000 == 0x13000000: // bitfield
		n, immr, imms := w>>22&1, a64Field(w, 21, 16), a64Field(w, 15, 10)
		if a64Field(w, 30, 29) == 3 || n != w>>31 || (width == 32 && (immr|imms)&0x20 != 0) {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64Bitfield, width: width}, nil
	case w&0x1F800000 == 0x13800000: // extract
		if a64Field(w, 30, 29) != 0 || w>>21&1 != 0 || w>>22&1 != w>>31 || (width == 32 && w>>15&1 != 0) {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64Extr, width: width}, nil
	case w&0x1FE00000 == 0x1A800000: // conditional select
		if w>>29&1 != 0 || a64Field(w, 11, 10) > 1 {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64CSel, width: width}, nil
	case w&0x1FE00000 == 0x1A400000: // conditional compare
		if w>>29&1 == 0 || w>>10&1 != 0 || w>>4&1 != 0 {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64CCmp, width: width}, nil
	case w&0x1F000000 == 0x1B000000: // data processing (3 source)
		op := a64Field(w, 30, 29)<<4 | a64Field(w, 23, 21)<<1 | w>>15&1
		switch {
		case op == 0 || op == 1: // madd, msub
		case width == 64 && (op == 2 || op == 3 || op == 10 || op == 11): // smaddl, smsubl, umaddl, umsubl
		case width == 64 && (op == 4 || op == 12) && a64Field(w, 14, 10) == 31: // smulh, umulh
		default:
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		return a64Op{kind: a64Mul, width: width}, nil
	case w&0x5FE00000 == 0x1AC00000 && w>>29&1 == 0: // data processing (2 source)
		switch a64Field(w, 15, 10) {
		case 2, 3:
			return a64Op{kind: a64Div, width: width}, nil
		case 8, 9, 10, 11:
			return a64Op{kind: a64ShiftV, width: width}, nil
		}
		return a64Op{}, a64NotEmulated(inst, "data processing (2 source) form not emulated")
	case w&0x5FE00000 == 0x5AC00000 && w>>29&1 == 0 && a64Field(w, 20, 16) == 0: // data processing (1 source)
		switch op := a64Field(w, 15, 10); {
		case op <= 2, op == 4, op == 5, op == 3 && width == 64:
			return a64Op{kind: a64BitOp, width: width}, nil
		}
		return a64Op{}, a64NotEmulated(inst, "data processing (1 source) form not emulated")
	}
	return a64Op{}, a64NotEmulated(inst, "instruction not in the emulated set")
}

// a64ClassifyLdSt classifies the load/store register forms (bits 29:27 =
// 111, bit 25 = 0): unsigned offset, unscaled, pre/post-indexed,
// unprivileged and register offset.
func a64ClassifyLdSt(inst *decode.ARM64Inst) (a64Op, error) {
	w := inst.Word
	size, v, opc := a64Field(w, 31, 30), w>>26&1 != 0, a64Field(w, 23, 22)
	op := a64Op{kind: a64LdSt, vec: v}
	unpriv := false
	switch {
	case w>>24&1 != 0:
		op.mode = a64AddrOffset
	case w>>21&1 == 0:
		op.imm = a64SignExt(uint64(a64Field(w, 20, 12)), 9)
		switch a64Field(w, 11, 10) {
		case 0:
			op.mode = a64AddrOffset
		case 1:
			op.mode = a64AddrPost
		case 2:
			op.mode, unpriv = a64AddrOffset, true
		case 3:
			op.mode = a64AddrPre
		}
	case a64Field(w, 11, 10) == 2:
		if a64Field(w, 15, 13)&2 == 0 {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		op.mode = a64AddrReg
	default:
		return a64Op{}, a64NotEmulated(inst, "load/store form not emulated")
	}
	if v {
		switch {
		case opc < 2:
			op.size = 1 << size
		case size == 0:
			op.size = 16
		default:
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		if unpriv {
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
		op.load = opc&1 != 0
	} else {
		op.size = 1 << size
		switch {
		case opc == 0:
			op.width = 32
			if size == 3 {
				op.width = 64
			}
		case opc == 1:
			op.load, op.width = true, 32
			if size == 3 {
				op.width = 64
			}
		case opc == 2 && size == 3: // prfm, prfum: hints, never fault
			if op.mode == a64AddrPre || op.mode == a64AddrPost || unpriv {
				return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
			}
			return a64Op{kind: a64Nop}, nil
		case opc == 2:
			op.load, op.signed, op.width = true, true, 64
		case size < 2: // opc == 3: ldrsb, ldrsh to a w register
			op.load, op.signed, op.width = true, true, 32
		default:
			return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
		}
	}
	if w>>24&1 != 0 {
		op.imm = int64(a64Field(w, 21, 10)) * int64(op.size)
	}
	rn, rt := a64Field(w, 9, 5), a64Field(w, 4, 0)
	if (op.mode == a64AddrPre || op.mode == a64AddrPost) && !v && rn == rt && rn != 31 {
		return a64Op{}, a64NotEmulated(inst, "writeback into the data register is constrained unpredictable")
	}
	return op, nil
}

// a64ClassifyPair classifies ldp, stp, ldnp, stnp and ldpsw.
func a64ClassifyPair(inst *decode.ARM64Inst) (a64Op, error) {
	w := inst.Word
	opc, v, typ, l := a64Field(w, 31, 30), w>>26&1 != 0, a64Field(w, 24, 23), w>>22&1 != 0
	op := a64Op{kind: a64LdStPair, vec: v, load: l}
	switch typ {
	case 0, 2:
		op.mode = a64AddrOffset
	case 1:
		op.mode = a64AddrPost
	case 3:
		op.mode = a64AddrPre
	}
	switch {
	case opc == 3:
		return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
	case v:
		op.size = 4 << opc
	case opc == 0:
		op.size, op.width = 4, 32
	case opc == 2:
		op.size, op.width = 8, 64
	case typ == 0: // opc == 1
		return a64Op{}, a64NotEmulated(inst, "unallocated encoding")
	case l:
		op.size, op.width, op.signed = 4, 64, true // ldpsw
	default:
		return a64Op{}, a64NotEmulated(inst, "stgp: memory tagging")
	}
	op.imm = a64SignExt(uint64(a64Field(w, 21, 15)), 7) * int64(op.size)
	rn, rt, rt2 := a64Field(w, 9, 5), a64Field(w, 4, 0), a64Field(w, 14, 10)
	if l && rt == rt2 {
		return a64Op{}, a64NotEmulated(inst, "ldp of one register twice is constrained unpredictable")
	}
	if op.mode != a64AddrOffset && !v && rn != 31 && (rn == rt || rn == rt2) {
		return a64Op{}, a64NotEmulated(inst, "writeback into a data register is constrained unpredictable")
	}
	return op, nil
}

// a64DecodeBitMasks decodes the bitmask immediate of the logical
// (immediate) instructions (N:immr:imms), as the architecture's
// DecodeBitMasks does for an immediate operand. ok is false for the
// reserved encodings.
func a64DecodeBitMasks(n, imms, immr uint32, width int) (uint64, bool) {
	// The element size is given by the highest set bit of N:NOT(imms).
	combined := n<<6 | (^imms & 0x3F)
	if combined == 0 {
		return 0, false
	}
	length := 31 - a64Clz32(combined)
	if length < 1 {
		return 0, false
	}
	esize := uint(1) << length
	if int(esize) > width {
		return 0, false
	}
	levels := uint32(esize - 1)
	if imms&levels == levels {
		return 0, false // an all-ones element is reserved
	}
	s, r := uint(imms&levels), uint(immr&levels)
	welem := uint64(1)<<(s+1) - 1 // s+1 ones (s+1 <= 63 here)
	// Rotate right by r within the element.
	var elem uint64
	emask := ^uint64(0)
	if esize < 64 {
		emask = uint64(1)<<esize - 1
	}
	if r == 0 {
		elem = welem
	} else {
		elem = (welem>>r | welem<<(esize-r)) & emask
	}
	// Replicate to the register width.
	var out uint64
	for i := uint(0); i < uint(width); i += esize {
		out |= elem << i
	}
	if width == 32 {
		out &= 0xFFFFFFFF
	}
	return out, true
}

// a64Clz32 counts the leading zero bits of x (32 for 0).
func a64Clz32(x uint32) int {
	n := 0
	for i := 31; i >= 0; i-- {
		if x>>uint(i)&1 != 0 {
			return n
		}
		n++
	}
	return n
}
