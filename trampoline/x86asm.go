package trampoline

import (
	"encoding/binary"
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// x86Reg is a general-purpose register by encoding number (the numbering of
// package decode: rax rcx rdx rbx rsp rbp rsi rdi r8..r15).
type x86Reg uint8

const (
	rax x86Reg = decode.RAX
	rcx x86Reg = decode.RCX
	rdx x86Reg = decode.RDX
	rbx x86Reg = decode.RBX
	rsp x86Reg = decode.RSP
	rbp x86Reg = decode.RBP
	rsi x86Reg = decode.RSI
	rdi x86Reg = decode.RDI
	r8  x86Reg = decode.R8
	r9  x86Reg = decode.R9
	r10 x86Reg = decode.R10
	r11 x86Reg = decode.R11
)

// x86 condition codes (the low nibble of jcc).
const (
	ccB  = 0x2 // below (unsigned <)
	ccAE = 0x3 // above or equal
	ccE  = 0x4
	ccNE = 0x5
	ccBE = 0x6 // below or equal (unsigned <=)
	ccA  = 0x7 // above (unsigned >)
)

// x86Mem is a memory operand: [base + index*scale + disp], [rip + target]
// or an absolute disp32 (no base, no index).
type x86Mem struct {
	base     x86Reg
	index    x86Reg
	hasIndex bool
	scale    uint8 // 1, 2, 4 or 8 with an index
	disp     int32
	rip      bool   // RIP-relative: the operand is at target
	target   uint64 // for rip
	abs      bool   // absolute disp32, no base
}

func memAt(base x86Reg, disp int32) x86Mem { return x86Mem{base: base, disp: disp} }

func memIdx(base, index x86Reg, disp int32) x86Mem {
	return x86Mem{base: base, index: index, hasIndex: true, scale: 1, disp: disp}
}

func memRIP(target uint64) x86Mem { return x86Mem{rip: true, target: target} }

// x86Label is a position in the code, bound once.
type x86Label int

type x86LabelFix struct {
	at    int // offset of the rel32
	end   int // offset of the end of the instruction
	label x86Label
}

type x86RIPFix struct {
	at     int
	target uint64
}

// x86Emitter appends x86-64 instructions for a known address, records
// where each instruction starts (so that the result can be checked against
// a decoder), and resolves labels and RIP-relative operands.
type x86Emitter struct {
	base   uint64 // address of b[0]
	b      []byte
	starts []int // offsets where an instruction of the emitter starts
	// foreign are byte ranges copied from elsewhere (relocated
	// instructions); they are checked separately.
	foreign [][2]int
	labels  []int
	fixes   []x86LabelFix
	ripFix  []x86RIPFix
	err     error
}

func newX86Emitter(base uint64) *x86Emitter { return &x86Emitter{base: base} }

func (e *x86Emitter) pc() uint64 { return e.base + uint64(len(e.b)) }

func (e *x86Emitter) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// begin marks the start of an instruction.
func (e *x86Emitter) begin() { e.starts = append(e.starts, len(e.b)) }

// end completes an instruction: RIP-relative displacements are computed
// against its end.
func (e *x86Emitter) end() {
	for _, f := range e.ripFix {
		d := int64(f.target - e.pc())
		if d != int64(int32(d)) {
			e.fail(fmt.Errorf("operand %#x from %#x: %w", f.target, e.pc(), ErrOutOfReach))
		}
		binary.LittleEndian.PutUint32(e.b[f.at:], uint32(int32(d)))
	}
	e.ripFix = e.ripFix[:0]
}

func (e *x86Emitter) byte1(b ...byte) { e.b = append(e.b, b...) }

func (e *x86Emitter) imm32(v int32) { e.b = binary.LittleEndian.AppendUint32(e.b, uint32(v)) }

func (e *x86Emitter) imm64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

// rex emits a REX prefix when needed: w for 64-bit operand size, r the
// ModRM.reg register, x the SIB index, b the ModRM.rm or SIB base.
func (e *x86Emitter) rex(w bool, r, x, b x86Reg) {
	v := byte(0x40)
	if w {
		v |= 8
	}
	v |= byte(r>>3&1) << 2
	v |= byte(x>>3&1) << 1
	v |= byte(b >> 3 & 1)
	if v != 0x40 {
		e.byte1(v)
	}
}

// rexMem emits the REX prefix for a register and a memory operand.
func (e *x86Emitter) rexMem(w bool, reg x86Reg, m x86Mem) {
	var x, b x86Reg
	if !m.rip && !m.abs {
		b = m.base
		if m.hasIndex {
			x = m.index
		}
	}
	e.rex(w, reg, x, b)
}

// modrmMem emits ModRM, SIB and displacement for reg and memory operand m.
func (e *x86Emitter) modrmMem(reg x86Reg, m x86Mem) {
	r := byte(reg&7) << 3
	switch {
	case m.rip:
		e.byte1(0x05 | r)
		e.ripFix = append(e.ripFix, x86RIPFix{at: len(e.b), target: m.target})
		e.imm32(0)
		return
	case m.abs:
		e.byte1(0x04|r, 0x25)
		e.imm32(m.disp)
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
			if m.index == rsp {
				e.fail(fmt.Errorf("rsp as an index: %w", ErrEncode))
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
				e.fail(fmt.Errorf("scale %d: %w", m.scale, ErrEncode))
			}
		}
		e.byte1(mod<<6|r|4, scale<<6|idx<<3|byte(m.base&7))
	} else {
		e.byte1(mod<<6 | r | byte(m.base&7))
	}
	switch mod {
	case 1:
		e.byte1(byte(int8(m.disp)))
	case 2:
		e.imm32(m.disp)
	}
}

// opMem emits [prefix] [REX] opcode ModRM(reg, m) and an optional
// immediate.
func (e *x86Emitter) opMem(prefix []byte, w bool, op []byte, reg x86Reg, m x86Mem, imm []byte) {
	e.begin()
	e.byte1(prefix...)
	e.rexMem(w, reg, m)
	e.byte1(op...)
	e.modrmMem(reg, m)
	e.byte1(imm...)
	e.end()
}

// opReg emits [prefix] [REX] opcode ModRM(reg, rm register) [imm].
func (e *x86Emitter) opReg(prefix []byte, w bool, op []byte, reg, rm x86Reg, imm []byte) {
	e.begin()
	e.byte1(prefix...)
	e.rex(w, reg, 0, rm)
	e.byte1(op...)
	e.byte1(0xC0 | byte(reg&7)<<3 | byte(rm&7))
	e.byte1(imm...)
	e.end()
}

func le32(v int32) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(v)) }

// Instructions. Names follow AT&T order in comments.

// lea m, r
func (e *x86Emitter) lea(r x86Reg, m x86Mem) { e.opMem(nil, true, []byte{0x8D}, r, m, nil) }

// mov r, m (64-bit store)
func (e *x86Emitter) store(m x86Mem, r x86Reg) { e.opMem(nil, true, []byte{0x89}, r, m, nil) }

// mov m, r (64-bit load)
func (e *x86Emitter) load(r x86Reg, m x86Mem) { e.opMem(nil, true, []byte{0x8B}, r, m, nil) }

// movl r32, m
func (e *x86Emitter) store32(m x86Mem, r x86Reg) { e.opMem(nil, false, []byte{0x89}, r, m, nil) }

// movl m, r32 (zero-extends)
func (e *x86Emitter) load32(r x86Reg, m x86Mem) { e.opMem(nil, false, []byte{0x8B}, r, m, nil) }

// movq $imm32 (sign-extended), m
func (e *x86Emitter) storeImm(m x86Mem, v int32) {
	e.opMem(nil, true, []byte{0xC7}, 0, m, le32(v))
}

// movl $imm32, m
func (e *x86Emitter) storeImm32(m x86Mem, v int32) {
	e.opMem(nil, false, []byte{0xC7}, 0, m, le32(v))
}

// mov src, dst (64-bit)
func (e *x86Emitter) movRR(dst, src x86Reg) { e.opReg(nil, true, []byte{0x89}, src, dst, nil) }

// mov src32, dst32 (zero-extends)
func (e *x86Emitter) movRR32(dst, src x86Reg) { e.opReg(nil, false, []byte{0x89}, src, dst, nil) }

// movImm loads a 64-bit constant: movl $imm32 (zero-extending) when it
// fits, else movabs.
func (e *x86Emitter) movImm(r x86Reg, v uint64) {
	e.begin()
	if v <= 0xFFFFFFFF {
		e.rex(false, 0, 0, r)
		e.byte1(0xB8 + byte(r&7))
		e.imm32(int32(uint32(v)))
	} else {
		e.rex(true, 0, 0, r)
		e.byte1(0xB8 + byte(r&7))
		e.imm64(v)
	}
	e.end()
}

// addr loads the address a into r: lea a(%rip) when it reaches, else a
// constant.
func (e *x86Emitter) addr(r x86Reg, a uint64) {
	if reachRIP(e.pc()+7, a) {
		e.lea(r, memRIP(a))
		return
	}
	e.movImm(r, a)
}

func (e *x86Emitter) push(r x86Reg) {
	e.begin()
	e.rex(false, 0, 0, r)
	e.byte1(0x50 + byte(r&7))
	e.end()
}

func (e *x86Emitter) pop(r x86Reg) {
	e.begin()
	e.rex(false, 0, 0, r)
	e.byte1(0x58 + byte(r&7))
	e.end()
}

func (e *x86Emitter) one(b ...byte) {
	e.begin()
	e.byte1(b...)
	e.end()
}

func (e *x86Emitter) pushfq()      { e.one(0x9C) }
func (e *x86Emitter) popfq()       { e.one(0x9D) }
func (e *x86Emitter) lahf()        { e.one(0x9F) }
func (e *x86Emitter) sahf()        { e.one(0x9E) }
func (e *x86Emitter) setoAL()      { e.one(0x0F, 0x90, 0xC0) }
func (e *x86Emitter) addAL(v int8) { e.one(0x04, byte(v)) }
func (e *x86Emitter) ret()         { e.one(0xC3) }
func (e *x86Emitter) ud2()         { e.one(0x0F, 0x0B) }
func (e *x86Emitter) rdtsc()       { e.one(0x0F, 0x31) }

// lock incq m
func (e *x86Emitter) lockInc(m x86Mem) { e.opMem([]byte{0xF0}, true, []byte{0xFF}, 0, m, nil) }

// incq m (not atomic)
func (e *x86Emitter) incMem(m x86Mem) { e.opMem(nil, true, []byte{0xFF}, 0, m, nil) }

// [lock] cmpxchg r, m
func (e *x86Emitter) cmpxchg(m x86Mem, r x86Reg, lock bool) {
	var p []byte
	if lock {
		p = []byte{0xF0}
	}
	e.opMem(p, true, []byte{0x0F, 0xB1}, r, m, nil)
}

// cmp r, m: flags of m - r
func (e *x86Emitter) cmpMemReg(m x86Mem, r x86Reg) { e.opMem(nil, true, []byte{0x39}, r, m, nil) }

// cmp src, dst: flags of dst - src
func (e *x86Emitter) cmpRR(dst, src x86Reg) { e.opReg(nil, true, []byte{0x39}, src, dst, nil) }

// cmpq $imm8, m
func (e *x86Emitter) cmpMemImm8(m x86Mem, v int8) {
	e.opMem(nil, true, []byte{0x83}, 7, m, []byte{byte(v)})
}

// cmp $imm32, r (64-bit when w)
func (e *x86Emitter) cmpImm(r x86Reg, v int32, w bool) {
	e.opReg(nil, w, []byte{0x81}, 7, r, le32(v))
}

// sub m, r: r -= m
func (e *x86Emitter) subMem(r x86Reg, m x86Mem) { e.opMem(nil, true, []byte{0x2B}, r, m, nil) }

// add $imm8, r32 / sub $imm8, r32
func (e *x86Emitter) add32(r x86Reg, v int8) {
	e.opReg(nil, false, []byte{0x83}, 0, r, []byte{byte(v)})
}
func (e *x86Emitter) sub32(r x86Reg, v int8) {
	e.opReg(nil, false, []byte{0x83}, 5, r, []byte{byte(v)})
}

// add $imm32, r (64-bit, sign-extended)
func (e *x86Emitter) add(r x86Reg, v int32) { e.opReg(nil, true, []byte{0x81}, 0, r, le32(v)) }

// and $imm32, r (64-bit, sign-extended)
func (e *x86Emitter) andImm(r x86Reg, v int32) { e.opReg(nil, true, []byte{0x81}, 4, r, le32(v)) }

// shl $n, r / shr $n, r (64-bit)
func (e *x86Emitter) shl(r x86Reg, n uint8) { e.opReg(nil, true, []byte{0xC1}, 4, r, []byte{n}) }
func (e *x86Emitter) shr(r x86Reg, n uint8) { e.opReg(nil, true, []byte{0xC1}, 5, r, []byte{n}) }

// or src, dst (64-bit)
func (e *x86Emitter) orRR(dst, src x86Reg) { e.opReg(nil, true, []byte{0x09}, src, dst, nil) }

// add src, dst (64-bit)
func (e *x86Emitter) addRR(dst, src x86Reg) { e.opReg(nil, true, []byte{0x01}, src, dst, nil) }

// xor r32, r32
func (e *x86Emitter) zero32(r x86Reg) { e.opReg(nil, false, []byte{0x31}, r, r, nil) }

// test r, r (64-bit when w)
func (e *x86Emitter) test(r x86Reg, w bool) { e.opReg(nil, w, []byte{0x85}, r, r, nil) }

// testl $imm32, m
func (e *x86Emitter) testMemImm32(m x86Mem, v int32) {
	e.opMem(nil, false, []byte{0xF7}, 0, m, le32(v))
}

// imul src, dst (64-bit)
func (e *x86Emitter) imulRR(dst, src x86Reg) { e.opReg(nil, true, []byte{0x0F, 0xAF}, dst, src, nil) }

// inc r (64-bit)
func (e *x86Emitter) inc(r x86Reg) { e.opReg(nil, true, []byte{0xFF}, 0, r, nil) }

// dec r32
func (e *x86Emitter) dec32(r x86Reg) { e.opReg(nil, false, []byte{0xFF}, 1, r, nil) }

// rdfsbase r (64-bit)
func (e *x86Emitter) rdfsbase(r x86Reg) {
	e.opReg([]byte{0xF3}, true, []byte{0x0F, 0xAE}, 0, r, nil)
}

// jmp *m
func (e *x86Emitter) jmpMem(m x86Mem) { e.opMem(nil, false, []byte{0xFF}, 4, m, nil) }

// call *m
func (e *x86Emitter) callMem(m x86Mem) { e.opMem(nil, false, []byte{0xFF}, 2, m, nil) }

// leaL: lea label(%rip), r (64-bit).
func (e *x86Emitter) leaL(r x86Reg, l x86Label) {
	e.begin()
	e.rex(true, r, 0, 0)
	e.byte1(0x8D, 0x05|byte(r&7)<<3)
	e.fixes = append(e.fixes, x86LabelFix{at: len(e.b), end: len(e.b) + 4, label: l})
	e.imm32(0)
	e.end()
}

// mov %fs:0, r
func (e *x86Emitter) loadFS0(r x86Reg) {
	e.opMem([]byte{0x64}, true, []byte{0x8B}, r, x86Mem{abs: true}, nil)
}

// newLabel returns an unbound label.
func (e *x86Emitter) newLabel() x86Label {
	e.labels = append(e.labels, -1)
	return x86Label(len(e.labels) - 1)
}

// bind binds l to the current position.
func (e *x86Emitter) bind(l x86Label) {
	if e.labels[l] >= 0 {
		e.fail(fmt.Errorf("label %d bound twice: %w", l, ErrEncode))
	}
	e.labels[l] = len(e.b)
}

// jmpL: jmp rel32 to a label.
func (e *x86Emitter) jmpL(l x86Label) {
	e.begin()
	e.byte1(0xE9)
	e.fixes = append(e.fixes, x86LabelFix{at: len(e.b), end: len(e.b) + 4, label: l})
	e.imm32(0)
	e.end()
}

// jccL: jcc rel32 to a label.
func (e *x86Emitter) jccL(cc byte, l x86Label) {
	e.begin()
	e.byte1(0x0F, 0x80|cc)
	e.fixes = append(e.fixes, x86LabelFix{at: len(e.b), end: len(e.b) + 4, label: l})
	e.imm32(0)
	e.end()
}

// jmpTo: jmp rel32 to an absolute address; fails with ErrOutOfReach when
// it is beyond +-2 GiB.
func (e *x86Emitter) jmpTo(to uint64) {
	e.begin()
	e.byte1(0xE9)
	d := int64(to - (e.pc() + 4))
	if d != int64(int32(d)) {
		e.fail(fmt.Errorf("jump from %#x to %#x: %w", e.pc()-1, to, ErrOutOfReach))
	}
	e.imm32(int32(d))
	e.end()
}

// foreignCode appends bytes produced elsewhere (a relocated instruction).
func (e *x86Emitter) foreignCode(b []byte) {
	e.foreign = append(e.foreign, [2]int{len(e.b), len(e.b) + len(b)})
	e.b = append(e.b, b...)
}

// finish resolves the labels and checks every instruction the emitter
// wrote by decoding it again: same start, same length. It returns the code.
func (e *x86Emitter) finish() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	for _, f := range e.fixes {
		to := e.labels[f.label]
		if to < 0 {
			return nil, fmt.Errorf("label %d not bound: %w", f.label, ErrEncode)
		}
		binary.LittleEndian.PutUint32(e.b[f.at:], uint32(int32(to-f.end)))
	}
	e.fixes = nil
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.b, nil
}

// check decodes every instruction the emitter wrote.
func (e *x86Emitter) check() error {
	var inst decode.X86Inst
	dec := decode.X86Decoder{}
	for i, s := range e.starts {
		next := len(e.b)
		if i+1 < len(e.starts) {
			next = e.starts[i+1]
		}
		for _, f := range e.foreign {
			if f[0] >= s && f[0] < next {
				next = f[0]
			}
		}
		if err := dec.Decode(e.b[s:], e.base+uint64(s), &inst); err != nil {
			return fmt.Errorf("%w: at +%d (% x): %v", ErrEncode, s, e.b[s:next], err)
		}
		if inst.Len != next-s {
			return fmt.Errorf("%w: at +%d (% x): decodes as %d bytes, emitted %d", ErrEncode, s, e.b[s:next], inst.Len, next-s)
		}
	}
	return nil
}

// reachRIP reports whether an instruction ending at end reaches target
// with a rel32.
func reachRIP(end, target uint64) bool {
	d := int64(target - end)
	return d == int64(int32(d))
}
