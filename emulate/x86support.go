package emulate

import "github.com/probeopt/probeopt/decode"

// x86Kind is what an emulated instruction does.
type x86Kind uint8

const (
	kNone    x86Kind = iota
	kNop             // every NOP form, pause, endbr64, endbr32
	kALU             // add or adc sbb and sub xor cmp; sub = ALU operation
	kTest            // test
	kIncDec          // inc (sub 0), dec (sub 1)
	kNot             // not
	kNeg             // neg
	kShift           // rol ror shl shr sar; sub = /reg
	kIMul            // imul, 2 or 3 operands
	kMov             // mov, all forms
	kMovZX           // movzx; sub = source size
	kMovSX           // movsx, movsxd; sub = source size
	kLea             // lea
	kXchg            // xchg
	kCmov            // cmovcc; sub = condition
	kSetcc           // setcc; sub = condition
	kCwd             // cbw cwde cdqe
	kCdq             // cwd cdq cqo
	kPush            // push register, immediate or memory
	kPop             // pop register or memory
	kLeave           // leave
	kJmp             // jmp rel8/rel32
	kJcc             // jcc rel8/rel32; sub = condition
	kCall            // call rel32
	kJmpInd          // jmp r/m64
	kCallInd         // call r/m64
	kRet             // ret, ret imm16
	kLoop            // loopne (sub 0), loope (1), loop (2), jrcxz (3)
)

// Operand forms.
const (
	formNone = iota
	formEG   // destination ModRM.rm, source ModRM.reg
	formGE   // destination ModRM.reg, source ModRM.rm
	formEI   // destination ModRM.rm, source an immediate
	formAI   // destination rAX, source an immediate
	formZ    // a register in the low three bits of the opcode
	formZI   // the same, with an immediate source
	formE    // one operand, ModRM.rm
	formI    // an immediate operand
	formGEI  // destination ModRM.reg, sources ModRM.rm and an immediate
	formAO   // rAX and a moffs absolute address (sub 0: load, 1: store)
	formE1   // ModRM.rm, by one (the shifts D0, D1; C0, C1 are formEI)
	formECL  // ModRM.rm, by cl (the shifts D2, D3)
)

// x86Op is the classification of an emulated instruction. It has four
// fields, so that the compiler keeps it in registers (a larger struct is
// copied through memory between the classifiers and the executors).
type x86Op struct {
	kind x86Kind
	sub  uint8 // meaning depends on kind
	size uint8 // operand size in bytes: 1, 2, 4 or 8
	form uint8 // operand form; for a shift, where its count comes from
}

// X86Supported reports whether inst is emulated exactly: nil if so, else an
// error wrapping ErrNotEmulated that says why. It is the one list of what
// the emulator executes: X86.Step accepts exactly the instructions it
// accepts.
func X86Supported(inst *decode.X86Inst) error {
	return X86{}.Supported(inst)
}

// Supported reports whether x executes inst exactly: nil if so, else an
// error wrapping ErrNotEmulated that says why. Step accepts exactly the
// instructions it accepts. The emulated set is the same for every vendor
// today; the method exists so that a caller asks about the CPU it
// emulates.
func (x X86) Supported(inst *decode.X86Inst) error {
	_, err := classifyX86(inst, x.Vendor)
	return err
}

// notEmulated builds the error for an instruction outside the emulated
// set. The text is made only when asked for: the planner asks about every
// probe site and mostly needs errors.Is.
func notEmulated(inst *decode.X86Inst, why string) error {
	return &notEmulatedError{mnem: inst.Mnemonic, why: why}
}

// notEmulatedError says why an instruction is not emulated; it wraps
// ErrNotEmulated.
type notEmulatedError struct {
	mnem, why string
}

func (e *notEmulatedError) Error() string {
	return e.mnem + ": " + e.why + ": " + ErrNotEmulated.Error()
}

func (e *notEmulatedError) Unwrap() error { return ErrNotEmulated }

// Prefix sets used by the classification.
const (
	pfxRep    = decode.PrefixREP | decode.PrefixREPNE
	pfxSegs   = decode.PrefixCS | decode.PrefixSS | decode.PrefixDS | decode.PrefixES | decode.PrefixFS | decode.PrefixGS
	pfxIgnore = pfxSegs | decode.PrefixAddr // prefixes the branches ignore
)

// classifyX86 decides whether inst is emulated and how.
//
// Prefix rules: LOCK is never emulated. 66 selects 16-bit operands where it
// does so on every CPU, and is refused on near branches (Intel and AMD
// differ). 67 gives 32-bit addresses (and ecx for loop and jrcxz). Segment
// prefixes ES, CS, SS and DS are ignored (as in 64-bit mode); FS or GS
// adds its base, and both together are refused. F2 and F3 are refused except where they are ignored or
// select the form: F3 90 (pause), F3 0F 1E FA/FB (endbr64/endbr32), F3 on
// ret (the "rep ret" idiom), F2 on near branches (the MPX BND prefix, a
// no-op without MPX).
func classifyX86(inst *decode.X86Inst, vendor decode.Vendor) (x86Op, error) {
	if inst.Len == 0 {
		return x86Op{}, notEmulated(inst, "not decoded")
	}
	if inst.Encoding != decode.EncLegacy {
		return x86Op{}, notEmulated(inst, "only legacy encodings are emulated")
	}
	if inst.Prefixes&decode.PrefixLock != 0 {
		return x86Op{}, notEmulated(inst, "lock prefix")
	}
	if inst.Prefixes&(decode.PrefixFS|decode.PrefixGS) == decode.PrefixFS|decode.PrefixGS {
		return x86Op{}, notEmulated(inst, "both fs and gs prefixes")
	}
	if inst.VendorDependent {
		return x86Op{}, notEmulated(inst, "intel and amd cpus execute it differently")
	}
	var op x86Op
	var ok bool
	switch inst.Map {
	case decode.Map1Byte:
		op, ok = classify1(inst, vendor)
	case decode.Map0F:
		op, ok = classify0F(inst)
	}
	if !ok || op.kind == kNone {
		return x86Op{}, notEmulated(inst, "instruction not in the emulated set")
	}
	// Prefix checks that depend on the kind.
	rep := inst.Prefixes & pfxRep
	switch op.kind {
	case kNop:
		// The forms themselves checked F2/F3.
	case kJmp, kJcc, kCall, kJmpInd, kCallInd, kRet, kLoop:
		if inst.Prefixes&decode.PrefixData != 0 {
			return x86Op{}, notEmulated(inst, "operand-size prefix on a near branch")
		}
		switch {
		case rep == 0:
		case op.kind == kRet && rep == decode.PrefixREP:
		case op.kind != kLoop && rep == decode.PrefixREPNE:
		default:
			return x86Op{}, notEmulated(inst, "repeat prefix on a branch")
		}
	default:
		if rep != 0 {
			return x86Op{}, notEmulated(inst, "repeat prefix")
		}
	}
	return op, nil
}

// byteOrV returns 1 for the byte form of an opcode pair (low bit clear),
// else the operand size.
func byteOrV(inst *decode.X86Inst, opcode byte) uint8 {
	if opcode&1 == 0 {
		return 1
	}
	return uint8(inst.OpSize / 8)
}

// classify1 classifies the one-byte opcode map: the rows of opcodes that
// differ by an operation, a register or a condition in their low bits,
// the groups whose ModRM.reg selects the operation, and single opcodes.
func classify1(inst *decode.X86Inst, vendor decode.Vendor) (x86Op, bool) {
	c := inst.Opcode
	switch {
	case c < 0x40 && c&7 < 6:
		return classify1ALU(inst), true
	case c >= 0x50 && c <= 0x5f, c >= 0x70 && c <= 0x7f, c >= 0x91 && c <= 0x97, c >= 0xb0 && c <= 0xbf:
		return classify1Row(inst), true
	}
	switch c {
	case 0x63:
		return classifyMovsxd(inst, vendor), true
	case 0x80, 0x81, 0x83, 0x8f, 0xc0, 0xc1, 0xc6, 0xc7, 0xd0, 0xd1, 0xd2, 0xd3, 0xf6, 0xf7, 0xfe, 0xff:
		return classify1Group(inst)
	case 0x90:
		return classify90(inst)
	}
	return classify1Single(inst)
}

// classify1ALU classifies the arithmetic block 00-3F: add or adc sbb and
// sub xor cmp with the forms Eb,Gb Ev,Gv Gb,Eb Gv,Ev AL,Ib rAX,Iz.
func classify1ALU(inst *decode.X86Inst) x86Op {
	c := inst.Opcode
	op := x86Op{kind: kALU, sub: c >> 3, size: byteOrV(inst, c)}
	switch c & 7 {
	case 0, 1:
		op.form = formEG
	case 2, 3:
		op.form = formGE
	default:
		op.form = formAI
	}
	return op
}

// classify1Row classifies the rows 50-5F (push, pop), 70-7F (jcc), 91-97
// (xchg with rAX) and B0-BF (mov of an immediate to a register).
func classify1Row(inst *decode.X86Inst) x86Op {
	c := inst.Opcode
	v := uint8(inst.OpSize / 8)
	switch {
	case c <= 0x57:
		return x86Op{kind: kPush, size: v, form: formZ}
	case c <= 0x5f:
		return x86Op{kind: kPop, size: v, form: formZ}
	case c <= 0x7f:
		return x86Op{kind: kJcc, sub: c & 0xf}
	case c <= 0x97:
		return x86Op{kind: kXchg, size: v, form: formZ}
	case c <= 0xb7:
		return x86Op{kind: kMov, size: 1, form: formZI}
	}
	return x86Op{kind: kMov, size: v, form: formZI}
}

// classifyMovsxd classifies opcode 63.
func classifyMovsxd(inst *decode.X86Inst, vendor decode.Vendor) x86Op {
	v := uint8(inst.OpSize / 8)
	if v == 2 && vendor == decode.VendorAMD {
		// movsxd with a 66 prefix: AMD reads a 32-bit source and
		// writes its low 16 bits; Intel reads 16 bits.
		return x86Op{kind: kMovSX, sub: 4, size: 2, form: formGE}
	}
	if !inst.W {
		// Without REX.W this is a plain 32-bit (or 16-bit) move.
		return x86Op{kind: kMov, size: v, form: formGE}
	}
	return x86Op{kind: kMovSX, sub: 4, size: 8, form: formGE}
}

// classify1Group classifies the opcodes whose ModRM.reg selects the
// operation: the immediate ALU group 80-83, pop 8F, the shifts C0-C1 and
// D0-D3, mov C6-C7, the unary group F6-F7 and the inc/dec group FE-FF.
func classify1Group(inst *decode.X86Inst) (x86Op, bool) {
	c := inst.Opcode
	v := uint8(inst.OpSize / 8)
	switch c {
	case 0x80, 0x81, 0x83:
		return x86Op{kind: kALU, sub: inst.Reg, size: byteOrV(inst, c), form: formEI}, true
	case 0x8f:
		if inst.Reg != 0 {
			return x86Op{}, false
		}
		return x86Op{kind: kPop, size: v, form: formE}, true
	case 0xc0, 0xc1, 0xd0, 0xd1, 0xd2, 0xd3:
		return classifyShift(inst)
	case 0xc6, 0xc7:
		if inst.Reg != 0 {
			return x86Op{}, false
		}
		return x86Op{kind: kMov, size: byteOrV(inst, c), form: formEI}, true
	case 0xf6, 0xf7:
		size := byteOrV(inst, c)
		switch inst.Reg {
		case 0:
			return x86Op{kind: kTest, size: size, form: formEI}, true
		case 2:
			return x86Op{kind: kNot, size: size, form: formE}, true
		case 3:
			return x86Op{kind: kNeg, size: size, form: formE}, true
		}
	case 0xfe:
		if inst.Reg <= 1 {
			return x86Op{kind: kIncDec, sub: inst.Reg, size: 1, form: formE}, true
		}
	case 0xff:
		switch inst.Reg {
		case 0, 1:
			return x86Op{kind: kIncDec, sub: inst.Reg, size: v, form: formE}, true
		case 2:
			return x86Op{kind: kCallInd, size: 8, form: formE}, true
		case 4:
			return x86Op{kind: kJmpInd, size: 8, form: formE}, true
		case 6:
			return x86Op{kind: kPush, size: v, form: formE}, true
		}
	}
	return x86Op{}, false
}

// classifyShift classifies the shift group C0-C1, D0-D3: rol, ror, shl,
// shr and sar by an immediate, by one or by cl.
func classifyShift(inst *decode.X86Inst) (x86Op, bool) {
	c := inst.Opcode
	switch inst.Reg {
	case shRol, shRor, shShl, shShr, shSar:
	default:
		return x86Op{}, false // rcl, rcr, the /6 alias of shl
	}
	op := x86Op{kind: kShift, sub: inst.Reg, size: byteOrV(inst, c)}
	switch c {
	case 0xc0, 0xc1:
		op.form = formEI
	case 0xd0, 0xd1:
		op.form = formE1
	default:
		op.form = formECL
	}
	return op, true
}

// classify90 classifies opcode 90: nop, xchg ax,ax (66 90), pause (F3 90),
// or xchg r8, rAX with REX.B.
func classify90(inst *decode.X86Inst) (x86Op, bool) {
	switch {
	case inst.B:
		// xchg r8, rAX (REX.B); with F3 the CPU's choice is unclear.
		if inst.Prefixes&pfxRep != 0 {
			return x86Op{}, false
		}
		return x86Op{kind: kXchg, size: uint8(inst.OpSize / 8), form: formZ}, true
	case inst.Prefixes&decode.PrefixREPNE != 0:
		return x86Op{}, false
	}
	return x86Op{kind: kNop}, true
}

// classify1Single classifies the one-byte opcodes that are one
// instruction each (given the operand size).
func classify1Single(inst *decode.X86Inst) (x86Op, bool) {
	c := inst.Opcode
	v := uint8(inst.OpSize / 8)
	switch c {
	case 0x68, 0x6a:
		return x86Op{kind: kPush, size: v, form: formI}, true
	case 0x69, 0x6b:
		return x86Op{kind: kIMul, size: v, form: formGEI}, true
	case 0x84, 0x85:
		return x86Op{kind: kTest, size: byteOrV(inst, c), form: formEG}, true
	case 0x86, 0x87:
		return x86Op{kind: kXchg, size: byteOrV(inst, c), form: formEG}, true
	case 0x88, 0x89:
		return x86Op{kind: kMov, size: byteOrV(inst, c), form: formEG}, true
	case 0x8a, 0x8b:
		return x86Op{kind: kMov, size: byteOrV(inst, c), form: formGE}, true
	case 0x8d:
		if inst.Mod == 3 {
			return x86Op{}, false
		}
		return x86Op{kind: kLea, size: v, form: formGE}, true
	case 0x98:
		return x86Op{kind: kCwd, size: v}, true
	case 0x99:
		return x86Op{kind: kCdq, size: v}, true
	case 0xa0, 0xa1:
		return x86Op{kind: kMov, size: byteOrV(inst, c), form: formAO, sub: 0}, true
	case 0xa2, 0xa3:
		return x86Op{kind: kMov, size: byteOrV(inst, c), form: formAO, sub: 1}, true
	case 0xa8, 0xa9:
		return x86Op{kind: kTest, size: byteOrV(inst, c), form: formAI}, true
	case 0xc2, 0xc3:
		return x86Op{kind: kRet, size: 8}, true
	case 0xc9:
		return x86Op{kind: kLeave, size: v}, true
	case 0xe0, 0xe1, 0xe2, 0xe3:
		return x86Op{kind: kLoop, sub: c & 3}, true
	case 0xe8:
		return x86Op{kind: kCall, size: 8}, true
	case 0xe9, 0xeb:
		return x86Op{kind: kJmp}, true
	}
	return x86Op{}, false
}

// classify0F classifies the 0F opcode map.
func classify0F(inst *decode.X86Inst) (x86Op, bool) {
	c := inst.Opcode
	v := uint8(inst.OpSize / 8)
	rep := inst.Prefixes & pfxRep
	switch {
	case c >= 0x40 && c <= 0x4f:
		return x86Op{kind: kCmov, sub: c & 0xf, size: v, form: formGE}, true
	case c >= 0x80 && c <= 0x8f:
		return x86Op{kind: kJcc, sub: c & 0xf}, true
	case c >= 0x90 && c <= 0x9f:
		return x86Op{kind: kSetcc, sub: c & 0xf, size: 1, form: formE}, true
	}
	switch c {
	case 0x19, 0x1d, 0x1f:
		// Reserved-NOP space: no architectural effect, no memory access.
		if rep != 0 {
			return x86Op{}, false
		}
		return x86Op{kind: kNop}, true
	case 0x1e:
		switch {
		case rep == 0:
			return x86Op{kind: kNop}, true
		case rep == decode.PrefixREP && inst.Prefixes&^decode.PrefixREP == 0 &&
			(inst.ModRM == 0xfa || inst.ModRM == 0xfb) && inst.REX == 0:
			return x86Op{kind: kNop}, true // endbr64, endbr32
		}
	case 0xaf:
		return x86Op{kind: kIMul, size: v, form: formGE}, true
	case 0xb6:
		return x86Op{kind: kMovZX, sub: 1, size: v, form: formGE}, true
	case 0xb7:
		return x86Op{kind: kMovZX, sub: 2, size: v, form: formGE}, true
	case 0xbe:
		return x86Op{kind: kMovSX, sub: 1, size: v, form: formGE}, true
	case 0xbf:
		return x86Op{kind: kMovSX, sub: 2, size: v, form: formGE}, true
	}
	return x86Op{}, false
}
