package x86enc

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors of Finish and Verify; an *Error wraps one of them.
var (
	// ErrOutOfReach means a rel32 branch or a RIP-relative disp32 does
	// not reach its target from where the instruction ends.
	ErrOutOfReach = errors.New("beyond the reach of a rel32")
	// ErrInvalid means an operand x86-64 cannot encode (rsp as an index,
	// a scale other than 1, 2, 4 or 8), a label bound twice or never, or
	// an instruction that does not decode back to what was emitted.
	ErrInvalid = errors.New("not an encodable instruction")
)

// An Error is the first failure of an Asm: Msg says what failed, Err is
// ErrOutOfReach or ErrInvalid.
type Error struct {
	Msg string
	Err error
}

func (e *Error) Error() string { return e.Msg + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Reg is a general-purpose register by encoding number (the numbering of
// package decode).
type Reg uint8

// The registers.
const (
	RAX Reg = iota
	RCX
	RDX
	RBX
	RSP
	RBP
	RSI
	RDI
	R8
	R9
	R10
	R11
	R12
	R13
	R14
	R15
)

// Size is an operand size.
type Size uint8

// The operand sizes of the general-purpose forms. A 32-bit result
// zero-extends into the 64-bit register.
const (
	S32 Size = 32
	S64 Size = 64
)

// Cond is a condition code, the low nibble of jcc and setcc.
type Cond uint8

// The condition codes.
const (
	CondO  Cond = 0x0 // overflow
	CondNO Cond = 0x1
	CondB  Cond = 0x2 // below (unsigned <)
	CondAE Cond = 0x3 // above or equal (unsigned >=)
	CondE  Cond = 0x4
	CondNE Cond = 0x5
	CondBE Cond = 0x6 // below or equal (unsigned <=)
	CondA  Cond = 0x7 // above (unsigned >)
	CondS  Cond = 0x8
	CondNS Cond = 0x9
	CondP  Cond = 0xA
	CondNP Cond = 0xB
	CondL  Cond = 0xC // less (signed <)
	CondGE Cond = 0xD
	CondLE Cond = 0xE
	CondG  Cond = 0xF
)

// ALU is one of the eight arithmetic operations of opcodes 00-3F and the
// immediate group 80-83 (the ModRM.reg digit).
type ALU uint8

// The arithmetic operations.
const (
	Add ALU = iota
	Or
	Adc
	Sbb
	And
	Sub
	Xor
	Cmp
)

// Mem is a memory operand.
type Mem struct {
	kind     memKind
	base     Reg
	index    Reg
	hasIndex bool
	scale    uint8 // 1, 2, 4 or 8 with an index
	disp     int32
	target   uint64 // memRIP
	seg      byte   // segment-override prefix, 0 if none
}

type memKind uint8

const (
	memBase memKind = iota // [base + index*scale + disp]
	memRIP                 // [rip + target - end]
	memAbs                 // [disp32], no base, no index
)

// At is [base + disp].
func At(base Reg, disp int32) Mem { return Mem{base: base, disp: disp} }

// Indexed is [base + index*scale + disp]; scale is 1, 2, 4 or 8.
func Indexed(base, index Reg, scale uint8, disp int32) Mem {
	return Mem{base: base, index: index, hasIndex: true, scale: scale, disp: disp}
}

// RIP is the RIP-relative operand at the absolute address target.
func RIP(target uint64) Mem { return Mem{kind: memRIP, target: target} }

// Abs is the absolute address disp (sign-extended), without a base.
func Abs(disp int32) Mem { return Mem{kind: memAbs, disp: disp} }

// FS returns m with an FS segment override.
func (m Mem) FS() Mem { m.seg = 0x64; return m }

// GS returns m with a GS segment override.
func (m Mem) GS() Mem { m.seg = 0x65; return m }

// Label is a position in the code of one Asm, bound once.
type Label int

// Span is where one instruction of the encoder lies: [Start, End) as
// offsets in the code.
type Span struct{ Start, End int }

type labelFix struct {
	at, end int // offsets of the rel32 and of the end of the instruction
	label   Label
}

type ripFix struct {
	at     int
	target uint64
}

// Asm appends x86-64 instructions to code that will run at a known
// address. The zero value is not usable; New makes one.
type Asm struct {
	base   uint64
	b      []byte
	spans  []Span
	start  int // offset of the instruction being emitted
	labels []int
	fixes  []labelFix
	ripFix []ripFix
	err    *Error
}

// New returns an Asm for code at address base.
func New(base uint64) *Asm { return &Asm{base: base} }

// Base is the address of the code.
func (a *Asm) Base() uint64 { return a.base }

// PC is the address of the next instruction.
func (a *Asm) PC() uint64 { return a.base + uint64(len(a.b)) }

// Len is the number of bytes emitted.
func (a *Asm) Len() int { return len(a.b) }

// Bytes returns the code so far. Label references are resolved by Finish
// only; the slice aliases the encoder's buffer until then.
func (a *Asm) Bytes() []byte { return a.b }

// Spans returns where each instruction of the encoder lies, in order; the
// bytes Raw appends are in none.
func (a *Asm) Spans() []Span { return a.spans }

// Starts returns the offset of each instruction of the encoder, in order.
func (a *Asm) Starts() []int {
	s := make([]int, len(a.spans))
	for i, sp := range a.spans {
		s[i] = sp.Start
	}
	return s
}

// Err returns the first error, or nil.
func (a *Asm) Err() error {
	if a.err == nil {
		return nil
	}
	return a.err
}

func (a *Asm) fail(kind error, format string, args ...any) {
	if a.err == nil {
		a.err = &Error{Msg: fmt.Sprintf(format, args...), Err: kind}
	}
}

// begin marks the start of an instruction.
func (a *Asm) begin() { a.start = len(a.b) }

// end completes an instruction: RIP-relative displacements are computed
// against its end.
func (a *Asm) end() {
	for _, f := range a.ripFix {
		d := int64(f.target - a.PC())
		if d != int64(int32(d)) {
			a.fail(ErrOutOfReach, "operand %#x from %#x", f.target, a.PC())
		}
		binary.LittleEndian.PutUint32(a.b[f.at:], uint32(int32(d)))
	}
	a.ripFix = a.ripFix[:0]
	a.spans = append(a.spans, Span{a.start, len(a.b)})
}

func (a *Asm) bytes(b ...byte) { a.b = append(a.b, b...) }
func (a *Asm) imm8(v int8)     { a.b = append(a.b, byte(v)) }
func (a *Asm) imm32(v int32)   { a.b = binary.LittleEndian.AppendUint32(a.b, uint32(v)) }
func (a *Asm) imm64(v uint64)  { a.b = binary.LittleEndian.AppendUint64(a.b, v) }

// rex emits a REX prefix when needed: w for 64-bit operand size, r the
// ModRM.reg register, x the SIB index, b the ModRM.rm or SIB base.
func (a *Asm) rex(w bool, r, x, b Reg) {
	v := byte(0x40)
	if w {
		v |= 8
	}
	v |= byte(r>>3&1) << 2
	v |= byte(x>>3&1) << 1
	v |= byte(b >> 3 & 1)
	if v != 0x40 {
		a.bytes(v)
	}
}

// modrmMem emits ModRM, SIB and displacement for reg and memory operand m.
func (a *Asm) modrmMem(reg Reg, m Mem) {
	r := byte(reg&7) << 3
	switch m.kind {
	case memRIP:
		a.bytes(0x05 | r)
		a.ripFix = append(a.ripFix, ripFix{at: len(a.b), target: m.target})
		a.imm32(0)
		return
	case memAbs:
		a.bytes(0x04|r, 0x25)
		a.imm32(m.disp)
		return
	}
	var mod byte
	switch {
	case m.disp == 0 && m.base&7 != 5:
		mod = 0
	case m.disp == int32(int8(m.disp)):
		mod = 1
	default:
		mod = 2
	}
	if m.hasIndex || m.base&7 == 4 {
		idx := byte(4) // none
		scale := byte(0)
		if m.hasIndex {
			if m.index == RSP {
				a.fail(ErrInvalid, "rsp as an index")
			}
			idx = byte(m.index & 7)
			switch m.scale {
			case 1:
			case 2:
				scale = 1
			case 4:
				scale = 2
			case 8:
				scale = 3
			default:
				a.fail(ErrInvalid, "scale %d", m.scale)
			}
		}
		a.bytes(mod<<6|r|4, scale<<6|idx<<3|byte(m.base&7))
	} else {
		a.bytes(mod<<6 | r | byte(m.base&7))
	}
	switch mod {
	case 1:
		a.imm8(int8(m.disp))
	case 2:
		a.imm32(m.disp)
	}
}

// opMem emits [prefix] [segment] [REX] opcode ModRM(reg, m) and then
// immSize bytes of imm.
func (a *Asm) opMem(prefix byte, w bool, op []byte, reg Reg, m Mem, immSize int, imm int64) {
	a.opMemX(prefix, w, false, op, reg, m, immSize, imm)
}

// opMemX is opMem where reg may be a byte register (byteReg): spl, bpl,
// sil and dil need a REX prefix even without any of its bits.
func (a *Asm) opMemX(prefix byte, w, byteReg bool, op []byte, reg Reg, m Mem, immSize int, imm int64) {
	a.begin()
	if prefix != 0 {
		a.bytes(prefix)
	}
	if m.seg != 0 {
		a.bytes(m.seg)
	}
	var x, b Reg
	if m.kind == memBase {
		b = m.base
		if m.hasIndex {
			x = m.index
		}
	}
	if byteReg {
		a.rexByte(reg, x, b)
	} else {
		a.rex(w, reg, x, b)
	}
	a.bytes(op...)
	a.modrmMem(reg, m)
	a.immN(immSize, imm)
	a.end()
}

// opReg emits [prefix] [REX] opcode ModRM(reg, rm register) and then
// immSize bytes of imm.
func (a *Asm) opReg(prefix byte, w bool, op []byte, reg, rm Reg, immSize int, imm int64) {
	a.begin()
	if prefix != 0 {
		a.bytes(prefix)
	}
	a.rex(w, reg, 0, rm)
	a.bytes(op...)
	a.bytes(0xC0 | byte(reg&7)<<3 | byte(rm&7))
	a.immN(immSize, imm)
	a.end()
}

func (a *Asm) immN(size int, v int64) {
	switch size {
	case 1:
		a.imm8(int8(v))
	case 2:
		a.b = binary.LittleEndian.AppendUint16(a.b, uint16(v))
	case 4:
		a.imm32(int32(v))
	}
}

// one emits an instruction of fixed bytes.
func (a *Asm) one(b ...byte) {
	a.begin()
	a.bytes(b...)
	a.end()
}

func w(s Size) bool { return s == S64 }

// Instructions. The comments give the AT&T form (source first).

// Mov: mov src, dst.
func (a *Asm) Mov(s Size, dst, src Reg) { a.opReg(0, w(s), []byte{0x89}, src, dst, 0, 0) }

// Load: mov m, r.
func (a *Asm) Load(s Size, r Reg, m Mem) { a.opMem(0, w(s), []byte{0x8B}, r, m, 0, 0) }

// Store: mov r, m.
func (a *Asm) Store(s Size, m Mem, r Reg) { a.opMem(0, w(s), []byte{0x89}, r, m, 0, 0) }

// StoreImm: mov $v, m (sign-extended to 64 bits with S64).
func (a *Asm) StoreImm(s Size, m Mem, v int32) {
	a.opMem(0, w(s), []byte{0xC7}, 0, m, 4, int64(v))
}

// MovImm32: mov $v, r32 (zero-extends).
func (a *Asm) MovImm32(r Reg, v uint32) {
	a.begin()
	a.rex(false, 0, 0, r)
	a.bytes(0xB8 + byte(r&7))
	a.imm32(int32(v))
	a.end()
}

// MovAbs: movabs $v, r (always the 10-byte form).
func (a *Asm) MovAbs(r Reg, v uint64) {
	a.begin()
	a.rex(true, 0, 0, r)
	a.bytes(0xB8 + byte(r&7))
	a.imm64(v)
	a.end()
}

// MovImm loads a 64-bit constant: MovImm32 when it fits, else MovAbs.
func (a *Asm) MovImm(r Reg, v uint64) {
	if v <= 0xFFFFFFFF {
		a.MovImm32(r, uint32(v))
		return
	}
	a.MovAbs(r, v)
}

// Lea: lea m, r (64 bits).
func (a *Asm) Lea(r Reg, m Mem) { a.opMem(0, true, []byte{0x8D}, r, m, 0, 0) }

// LeaLabel: lea l(%rip), r (64 bits).
func (a *Asm) LeaLabel(r Reg, l Label) {
	a.begin()
	a.rex(true, r, 0, 0)
	a.bytes(0x8D, 0x05|byte(r&7)<<3)
	a.rel32(l)
	a.end()
}

// ALU: op src, dst (dst = dst op src; Cmp only sets the flags).
func (a *Asm) ALU(op ALU, s Size, dst, src Reg) {
	a.opReg(0, w(s), []byte{byte(op)<<3 | 1}, src, dst, 0, 0)
}

// ALULoad: op m, r (r = r op m).
func (a *Asm) ALULoad(op ALU, s Size, r Reg, m Mem) {
	a.opMem(0, w(s), []byte{byte(op)<<3 | 3}, r, m, 0, 0)
}

// ALUStore: op r, m (m = m op r).
func (a *Asm) ALUStore(op ALU, s Size, m Mem, r Reg) {
	a.opMem(0, w(s), []byte{byte(op)<<3 | 1}, r, m, 0, 0)
}

// ALUImm8: op $v, r with a sign-extended imm8 (opcode 83).
func (a *Asm) ALUImm8(op ALU, s Size, r Reg, v int8) {
	a.opReg(0, w(s), []byte{0x83}, Reg(op), r, 1, int64(v))
}

// ALUImm32: op $v, r with an imm32, sign-extended with S64 (opcode 81).
func (a *Asm) ALUImm32(op ALU, s Size, r Reg, v int32) {
	a.opReg(0, w(s), []byte{0x81}, Reg(op), r, 4, int64(v))
}

// ALUMemImm8: op $v, m with a sign-extended imm8 (opcode 83).
func (a *Asm) ALUMemImm8(op ALU, s Size, m Mem, v int8) {
	a.opMem(0, w(s), []byte{0x83}, Reg(op), m, 1, int64(v))
}

// ALUMemImm32: op $v, m with an imm32, sign-extended with S64 (opcode 81).
func (a *Asm) ALUMemImm32(op ALU, s Size, m Mem, v int32) {
	a.opMem(0, w(s), []byte{0x81}, Reg(op), m, 4, int64(v))
}

// ALUAL: op $v, %al (the short form, opcodes 04, 0C, ... 3C).
func (a *Asm) ALUAL(op ALU, v int8) { a.one(byte(op)<<3|4, byte(v)) }

// Test: test src, dst (the flags of dst & src).
func (a *Asm) Test(s Size, dst, src Reg) { a.opReg(0, w(s), []byte{0x85}, src, dst, 0, 0) }

// TestMemImm32: test $v, m.
func (a *Asm) TestMemImm32(s Size, m Mem, v int32) {
	a.opMem(0, w(s), []byte{0xF7}, 0, m, 4, int64(v))
}

// Imul: imul src, dst (dst *= src).
func (a *Asm) Imul(s Size, dst, src Reg) { a.opReg(0, w(s), []byte{0x0F, 0xAF}, dst, src, 0, 0) }

// Shl: shl $n, r.
func (a *Asm) Shl(s Size, r Reg, n uint8) { a.opReg(0, w(s), []byte{0xC1}, 4, r, 1, int64(n)) }

// Shr: shr $n, r.
func (a *Asm) Shr(s Size, r Reg, n uint8) { a.opReg(0, w(s), []byte{0xC1}, 5, r, 1, int64(n)) }

// Inc: inc r.
func (a *Asm) Inc(s Size, r Reg) { a.opReg(0, w(s), []byte{0xFF}, 0, r, 0, 0) }

// Dec: dec r.
func (a *Asm) Dec(s Size, r Reg) { a.opReg(0, w(s), []byte{0xFF}, 1, r, 0, 0) }

// IncMem: inc m.
func (a *Asm) IncMem(s Size, m Mem) { a.opMem(0, w(s), []byte{0xFF}, 0, m, 0, 0) }

// LockIncMem: lock inc m.
func (a *Asm) LockIncMem(s Size, m Mem) { a.opMem(0xF0, w(s), []byte{0xFF}, 0, m, 0, 0) }

// Cmpxchg: [lock] cmpxchg r, m (compares with rax).
func (a *Asm) Cmpxchg(s Size, m Mem, r Reg, lock bool) {
	var p byte
	if lock {
		p = 0xF0
	}
	a.opMem(p, w(s), []byte{0x0F, 0xB1}, r, m, 0, 0)
}

// Setcc: setcc r8, the low byte of r.
func (a *Asm) Setcc(cc Cond, r Reg) {
	a.begin()
	if r >= RSP && r <= RDI {
		a.bytes(0x40) // spl, bpl, sil, dil rather than ah, ch, dh, bh
	} else {
		a.rex(false, 0, 0, r)
	}
	a.bytes(0x0F, 0x90|byte(cc&15), 0xC0|byte(r&7))
	a.end()
}

// Rdfsbase: rdfsbase r (64 bits).
func (a *Asm) Rdfsbase(r Reg) { a.opReg(0xF3, true, []byte{0x0F, 0xAE}, 0, r, 0, 0) }

// Push: push r.
func (a *Asm) Push(r Reg) {
	a.begin()
	a.rex(false, 0, 0, r)
	a.bytes(0x50 + byte(r&7))
	a.end()
}

// Pop: pop r.
func (a *Asm) Pop(r Reg) {
	a.begin()
	a.rex(false, 0, 0, r)
	a.bytes(0x58 + byte(r&7))
	a.end()
}

// JmpMem: jmp *m.
func (a *Asm) JmpMem(m Mem) { a.opMem(0, false, []byte{0xFF}, 4, m, 0, 0) }

// CallMem: call *m.
func (a *Asm) CallMem(m Mem) { a.opMem(0, false, []byte{0xFF}, 2, m, 0, 0) }

// Instructions without operands.

func (a *Asm) Pushfq()   { a.one(0x9C) }
func (a *Asm) Popfq()    { a.one(0x9D) }
func (a *Asm) Lahf()     { a.one(0x9F) }
func (a *Asm) Sahf()     { a.one(0x9E) }
func (a *Asm) Ret()      { a.one(0xC3) }
func (a *Asm) Ud2()      { a.one(0x0F, 0x0B) }
func (a *Asm) Rdtsc()    { a.one(0x0F, 0x31) }
func (a *Asm) Lfence()   { a.one(0x0F, 0xAE, 0xE8) }
func (a *Asm) Cpuid()    { a.one(0x0F, 0xA2) }
func (a *Asm) Syscall()  { a.one(0x0F, 0x05) }
func (a *Asm) Int3()     { a.one(0xCC) }
func (a *Asm) Nop()      { a.one(0x90) }
func (a *Asm) RepMovsb() { a.one(0xF3, 0xA4) }
func (a *Asm) RepMovsq() { a.one(0xF3, 0x48, 0xA5) }

// Labels and branches.

// NewLabel returns an unbound label.
func (a *Asm) NewLabel() Label {
	a.labels = append(a.labels, -1)
	return Label(len(a.labels) - 1)
}

// Bind binds l to the current position.
func (a *Asm) Bind(l Label) {
	if a.labels[l] >= 0 {
		a.fail(ErrInvalid, "label %d bound twice", l)
	}
	a.labels[l] = len(a.b)
}

// Offset returns the offset l is bound to, or -1.
func (a *Asm) Offset(l Label) int { return a.labels[l] }

// rel32 emits a rel32 field for l, the last field of its instruction.
func (a *Asm) rel32(l Label) {
	a.fixes = append(a.fixes, labelFix{at: len(a.b), end: len(a.b) + 4, label: l})
	a.imm32(0)
}

// Jmp: jmp rel32 to a label.
func (a *Asm) Jmp(l Label) {
	a.begin()
	a.bytes(0xE9)
	a.rel32(l)
	a.end()
}

// Jcc: jcc rel32 to a label.
func (a *Asm) Jcc(cc Cond, l Label) {
	a.begin()
	a.bytes(0x0F, 0x80|byte(cc&15))
	a.rel32(l)
	a.end()
}

// JmpTo: jmp rel32 to an absolute address; ErrOutOfReach when it is
// beyond +-2 GiB.
func (a *Asm) JmpTo(to uint64) {
	a.begin()
	a.bytes(0xE9)
	d := int64(to - (a.PC() + 4))
	if d != int64(int32(d)) {
		a.fail(ErrOutOfReach, "jump from %#x to %#x", a.PC()-1, to)
	}
	a.imm32(int32(d))
	a.end()
}

// JccTo: jcc rel32 to an absolute address; ErrOutOfReach when it is
// beyond +-2 GiB.
func (a *Asm) JccTo(cc Cond, to uint64) {
	a.begin()
	a.bytes(0x0F, 0x80|byte(cc&15))
	a.relTo(to, 4, "jcc")
	a.end()
}

// JccShort: jcc rel8 to an absolute address; ErrOutOfReach when it is
// beyond -128..+127 bytes of the instruction's end.
func (a *Asm) JccShort(cc Cond, to uint64) {
	a.begin()
	a.bytes(0x70 | byte(cc&15))
	a.relTo(to, 1, "short jcc")
	a.end()
}

// CallTo: call rel32 to an absolute address; ErrOutOfReach when it is
// beyond +-2 GiB.
func (a *Asm) CallTo(to uint64) {
	a.begin()
	a.bytes(0xE8)
	a.relTo(to, 4, "call")
	a.end()
}

// PushImm32: push $v (the imm32 form, sign-extended to 64 bits).
func (a *Asm) PushImm32(v int32) {
	a.begin()
	a.bytes(0x68)
	a.imm32(v)
	a.end()
}

// relTo emits the rel8 (size 1) or rel32 (size 4) field that reaches to
// from the end of the instruction, the field being its last.
func (a *Asm) relTo(to uint64, size int, what string) {
	from := a.base + uint64(a.start)
	d := int64(to - (a.PC() + uint64(size)))
	if size == 1 {
		if d != int64(int8(d)) {
			a.fail(ErrOutOfReach, "%s from %#x to %#x", what, from, to)
		}
		a.imm8(int8(d))
		return
	}
	if d != int64(int32(d)) {
		a.fail(ErrOutOfReach, "%s from %#x to %#x", what, from, to)
	}
	a.imm32(int32(d))
}

// Raw appends bytes made elsewhere (a relocated instruction): they are
// in no Span, and Verify does not decode them.
func (a *Asm) Raw(b []byte) { a.b = append(a.b, b...) }

// Reaches reports whether an instruction ending at end reaches target
// with a rel32 or a RIP-relative disp32.
func Reaches(end, target uint64) bool {
	d := int64(target - end)
	return d == int64(int32(d))
}

// Finish resolves the labels and returns the code, or the first error.
func (a *Asm) Finish() ([]byte, error) {
	if a.err != nil {
		return nil, a.err
	}
	for _, f := range a.fixes {
		to := a.labels[f.label]
		if to < 0 {
			a.fail(ErrInvalid, "label %d not bound", f.label)
			return nil, a.err
		}
		binary.LittleEndian.PutUint32(a.b[f.at:], uint32(int32(to-f.end)))
	}
	a.fixes = nil
	return a.b, nil
}

// Verify decodes every instruction of the encoder with lenOf, which
// returns the length of the instruction at the start of code (at address
// addr), and requires the length emitted. Call it after Finish.
func (a *Asm) Verify(lenOf func(code []byte, addr uint64) (int, error)) error {
	for _, s := range a.spans {
		n, err := lenOf(a.b[s.Start:], a.base+uint64(s.Start))
		if err != nil {
			return &Error{Msg: fmt.Sprintf("at +%d (% x): %v", s.Start, a.b[s.Start:s.End], err), Err: ErrInvalid}
		}
		if n != s.End-s.Start {
			return &Error{Msg: fmt.Sprintf("at +%d (% x): decodes as %d bytes, emitted %d", s.Start, a.b[s.Start:s.End], n, s.End-s.Start), Err: ErrInvalid}
		}
	}
	return nil
}

// The forms below are those the eBPF JIT (package bpf/jit) needs beyond
// the slots': shifts by %cl, division, sign and zero extension, byte and
// word loads and stores, byte swaps, the locked read-modify-write forms
// and calls to a label or through a register.

// rexByte emits a REX prefix for an instruction with a byte register
// operand r8 (ModRM.reg): spl, bpl, sil and dil need one even without
// any of its bits.
func (a *Asm) rexByte(r8, x, b Reg) {
	v := byte(0x40) | byte(r8>>3&1)<<2 | byte(x>>3&1)<<1 | byte(b>>3&1)
	if v != 0x40 || (r8 >= RSP && r8 <= RDI) {
		a.bytes(v)
	}
}

// Neg: neg r.
func (a *Asm) Neg(s Size, r Reg) { a.opReg(0, w(s), []byte{0xF7}, 3, r, 0, 0) }

// Sar: sar $n, r.
func (a *Asm) Sar(s Size, r Reg, n uint8) { a.opReg(0, w(s), []byte{0xC1}, 7, r, 1, int64(n)) }

// ShlCL: shl %cl, r.
func (a *Asm) ShlCL(s Size, r Reg) { a.opReg(0, w(s), []byte{0xD3}, 4, r, 0, 0) }

// ShrCL: shr %cl, r.
func (a *Asm) ShrCL(s Size, r Reg) { a.opReg(0, w(s), []byte{0xD3}, 5, r, 0, 0) }

// SarCL: sar %cl, r.
func (a *Asm) SarCL(s Size, r Reg) { a.opReg(0, w(s), []byte{0xD3}, 7, r, 0, 0) }

// Div: div r (unsigned rdx:rax / r; quotient in rax, remainder in rdx).
func (a *Asm) Div(s Size, r Reg) { a.opReg(0, w(s), []byte{0xF7}, 6, r, 0, 0) }

// Idiv: idiv r (signed rdx:rax / r).
func (a *Asm) Idiv(s Size, r Reg) { a.opReg(0, w(s), []byte{0xF7}, 7, r, 0, 0) }

// SignExtendAX: cqo with S64 (rdx = sign of rax), cdq with S32.
func (a *Asm) SignExtendAX(s Size) {
	if s == S64 {
		a.one(0x48, 0x99)
		return
	}
	a.one(0x99)
}

// Bswap: bswap r.
func (a *Asm) Bswap(s Size, r Reg) {
	a.begin()
	a.rex(w(s), 0, 0, r)
	a.bytes(0x0F, 0xC8+byte(r&7))
	a.end()
}

// Rol16: rol $n, r16 (the low word of r; the rest is kept).
func (a *Asm) Rol16(r Reg, n uint8) { a.opReg(0x66, false, []byte{0xC1}, 0, r, 1, int64(n)) }

// MovzxB: movzbl/movzbq src8, dst (the low byte of src, zero-extended).
func (a *Asm) MovzxB(s Size, dst, src Reg) { a.opReg8(w(s), []byte{0x0F, 0xB6}, dst, src) }

// MovzxW: movzwl/movzwq src16, dst.
func (a *Asm) MovzxW(s Size, dst, src Reg) { a.opReg(0, w(s), []byte{0x0F, 0xB7}, dst, src, 0, 0) }

// MovsxB: movsbl/movsbq src8, dst (the low byte of src, sign-extended).
func (a *Asm) MovsxB(s Size, dst, src Reg) { a.opReg8(w(s), []byte{0x0F, 0xBE}, dst, src) }

// opReg8 emits [REX] opcode ModRM(reg, rm) where rm is a byte register:
// spl, bpl, sil and dil need a REX prefix even without any of its bits.
func (a *Asm) opReg8(w bool, op []byte, reg, rm Reg) {
	a.begin()
	v := byte(0x40) | byte(reg>>3&1)<<2 | byte(rm>>3&1)
	if w {
		v |= 8
	}
	if v != 0x40 || (rm >= RSP && rm <= RDI) {
		a.bytes(v)
	}
	a.bytes(op...)
	a.bytes(0xC0 | byte(reg&7)<<3 | byte(rm&7))
	a.end()
}

// MovsxW: movswl/movswq src16, dst.
func (a *Asm) MovsxW(s Size, dst, src Reg) { a.opReg(0, w(s), []byte{0x0F, 0xBF}, dst, src, 0, 0) }

// Movsxd: movslq src32, dst.
func (a *Asm) Movsxd(dst, src Reg) { a.opReg(0, true, []byte{0x63}, dst, src, 0, 0) }

// LoadZxB: movzbl m, r32 (zero-extends into r).
func (a *Asm) LoadZxB(r Reg, m Mem) { a.opMem(0, false, []byte{0x0F, 0xB6}, r, m, 0, 0) }

// LoadZxW: movzwl m, r32.
func (a *Asm) LoadZxW(r Reg, m Mem) { a.opMem(0, false, []byte{0x0F, 0xB7}, r, m, 0, 0) }

// LoadSxB: movsbl/movsbq m, r.
func (a *Asm) LoadSxB(s Size, r Reg, m Mem) { a.opMem(0, w(s), []byte{0x0F, 0xBE}, r, m, 0, 0) }

// LoadSxW: movswl/movswq m, r.
func (a *Asm) LoadSxW(s Size, r Reg, m Mem) { a.opMem(0, w(s), []byte{0x0F, 0xBF}, r, m, 0, 0) }

// LoadSxd: movslq m, r.
func (a *Asm) LoadSxd(r Reg, m Mem) { a.opMem(0, true, []byte{0x63}, r, m, 0, 0) }

// StoreB: mov r8, m (the low byte of r).
func (a *Asm) StoreB(m Mem, r Reg) { a.opMemX(0, false, true, []byte{0x88}, r, m, 0, 0) }

// StoreW: mov r16, m (the low word of r).
func (a *Asm) StoreW(m Mem, r Reg) { a.opMem(0x66, false, []byte{0x89}, r, m, 0, 0) }

// StoreImmB: movb $v, m.
func (a *Asm) StoreImmB(m Mem, v int8) { a.opMem(0, false, []byte{0xC6}, 0, m, 1, int64(v)) }

// StoreImmW: movw $v, m.
func (a *Asm) StoreImmW(m Mem, v int16) { a.opMem(0x66, false, []byte{0xC7}, 0, m, 2, int64(v)) }

// LockALUStore: lock op r, m (m = m op r, atomically).
func (a *Asm) LockALUStore(op ALU, s Size, m Mem, r Reg) {
	a.opMem(0xF0, w(s), []byte{byte(op)<<3 | 1}, r, m, 0, 0)
}

// Xadd: [lock] xadd r, m (m += r; r = the old m).
func (a *Asm) Xadd(s Size, m Mem, r Reg, lock bool) {
	var p byte
	if lock {
		p = 0xF0
	}
	a.opMem(p, w(s), []byte{0x0F, 0xC1}, r, m, 0, 0)
}

// Xchg: xchg r, m (locked by the CPU).
func (a *Asm) Xchg(s Size, m Mem, r Reg) { a.opMem(0, w(s), []byte{0x87}, r, m, 0, 0) }

// CallLabel: call rel32 to a label.
func (a *Asm) CallLabel(l Label) {
	a.begin()
	a.bytes(0xE8)
	a.rel32(l)
	a.end()
}

// CallReg: call *r.
func (a *Asm) CallReg(r Reg) { a.opReg(0, false, []byte{0xFF}, 2, r, 0, 0) }

// Pause: pause (a spin-wait hint).
func (a *Asm) Pause() { a.one(0xF3, 0x90) }

// RepStosb: rep stosb (fills rcx bytes at rdi with al).
func (a *Asm) RepStosb() { a.one(0xF3, 0xAA) }
