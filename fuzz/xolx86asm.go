package fuzz

import (
	"encoding/binary"
	"fmt"
)

// Register numbers for xolAsm, in encoding order.
const (
	xaRAX = iota
	xaRCX
	xaRDX
	xaRBX
	xaRSP
	xaRBP
	xaRSI
	xaRDI
	xaR8
	xaR9
	xaR10
	xaR11
	xaR12
	xaR13
	xaR14
	xaR15
)

// Condition codes of xolAsm.jcc.
const (
	xaCCB  = 0x2 // below (unsigned <)
	xaCCAE = 0x3 // above or equal (unsigned >=)
	xaCCE  = 0x4
	xaCCNE = 0x5
	xaCCBE = 0x6 // below or equal (unsigned <=)
)

// xolAsm is the small x86-64 encoder of the relocation oracle's in-child
// harness. Memory operands are [base+disp32]; branches are rel32 to labels.
// Each method appends one instruction.
type xolAsm struct {
	b      []byte
	labels map[string]int
	fixups []xolAsmFixup
}

// xolAsmFixup is a rel32 field to fill with the distance to a label.
type xolAsmFixup struct {
	at    int
	label string
}

// op emits [REX] opcode ModRM for a register reg and either a register rm
// (mem false) or the memory operand [rm+disp32] (mem true).
func (a *xolAsm) op(w bool, opcode []byte, reg, rm int, mem bool, disp int32) {
	rex := byte(0x40)
	if w {
		rex |= 8
	}
	if reg&8 != 0 {
		rex |= 4
	}
	if rm&8 != 0 {
		rex |= 1
	}
	if rex != 0x40 {
		a.b = append(a.b, rex)
	}
	a.b = append(a.b, opcode...)
	if !mem {
		a.b = append(a.b, 0xC0|byte(reg&7)<<3|byte(rm&7))
		return
	}
	a.b = append(a.b, 0x80|byte(reg&7)<<3|byte(rm&7))
	if rm&7 == xaRSP {
		a.b = append(a.b, 0x24) // SIB: base rsp/r12, no index
	}
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(disp))
}

func (a *xolAsm) imm32(v int32) { a.b = binary.LittleEndian.AppendUint32(a.b, uint32(v)) }

// movabs: mov $v, r64.
func (a *xolAsm) movabs(r int, v uint64) {
	rex := byte(0x48)
	if r&8 != 0 {
		rex |= 1
	}
	a.b = append(a.b, rex, 0xB8|byte(r&7))
	a.b = binary.LittleEndian.AppendUint64(a.b, v)
}

// movImm32: mov $v, r32 (zero-extends).
func (a *xolAsm) movImm32(r int, v uint32) {
	if r&8 != 0 {
		a.b = append(a.b, 0x41)
	}
	a.b = append(a.b, 0xB8|byte(r&7))
	a.b = binary.LittleEndian.AppendUint32(a.b, v)
}

// load: mov disp(base), r (64 bits with w, else 32).
func (a *xolAsm) load(w bool, r, base int, disp int32) { a.op(w, []byte{0x8B}, r, base, true, disp) }

// store: mov r, disp(base) (64 bits with w, else 32).
func (a *xolAsm) store(w bool, base int, disp int32, r int) {
	a.op(w, []byte{0x89}, r, base, true, disp)
}

// storeImm: movq $v, disp(base).
func (a *xolAsm) storeImm(base int, disp int32, v int32) {
	a.op(true, []byte{0xC7}, 0, base, true, disp)
	a.imm32(v)
}

// orMemImm: orq $v, disp(base).
func (a *xolAsm) orMemImm(base int, disp int32, v int32) {
	a.op(true, []byte{0x81}, 1, base, true, disp)
	a.imm32(v)
}

// cmpMemImm: cmp $v, disp(base), 64 bits with w, else 32.
func (a *xolAsm) cmpMemImm(w bool, base int, disp int32, v int32) {
	a.op(w, []byte{0x81}, 7, base, true, disp)
	a.imm32(v)
}

// cmpLoad: cmp disp(base), r (64 bits).
func (a *xolAsm) cmpLoad(r, base int, disp int32) { a.op(true, []byte{0x3B}, r, base, true, disp) }

// cmpLoad32: cmp disp(base), r32.
func (a *xolAsm) cmpLoad32(r, base int, disp int32) { a.op(false, []byte{0x3B}, r, base, true, disp) }

// cmpRegImm: cmp $v, r64.
func (a *xolAsm) cmpRegImm(r int, v int32) {
	a.op(true, []byte{0x81}, 7, r, false, 0)
	a.imm32(v)
}

// lea: lea disp(base), r64.
func (a *xolAsm) lea(r, base int, disp int32) { a.op(true, []byte{0x8D}, r, base, true, disp) }

// addReg: add src, dst (64 bits).
func (a *xolAsm) addReg(dst, src int) { a.op(true, []byte{0x01}, src, dst, false, 0) }

// addImm: add $v, r64.
func (a *xolAsm) addImm(r int, v int32) {
	a.op(true, []byte{0x81}, 0, r, false, 0)
	a.imm32(v)
}

// shlImm: shl $n, r64.
func (a *xolAsm) shlImm(r int, n byte) {
	a.op(true, []byte{0xC1}, 4, r, false, 0)
	a.b = append(a.b, n)
}

// mov32: mov src, dst (32 bits).
func (a *xolAsm) mov32(dst, src int) { a.op(false, []byte{0x89}, src, dst, false, 0) }

// xor32: xor r32, r32.
func (a *xolAsm) xor32(dst, src int) { a.op(false, []byte{0x31}, src, dst, false, 0) }

// incReg: inc r64.
func (a *xolAsm) incReg(r int) { a.op(true, []byte{0xFF}, 0, r, false, 0) }

// decReg32: dec r32.
func (a *xolAsm) decReg32(r int) { a.op(false, []byte{0xFF}, 1, r, false, 0) }

// incMem: incq disp(base).
func (a *xolAsm) incMem(base int, disp int32) { a.op(true, []byte{0xFF}, 0, base, true, disp) }

// Instructions without operands.
func (a *xolAsm) repMovsq() { a.b = append(a.b, 0xF3, 0x48, 0xA5) }
func (a *xolAsm) repMovsb() { a.b = append(a.b, 0xF3, 0xA4) }
func (a *xolAsm) syscall()  { a.b = append(a.b, 0x0F, 0x05) }
func (a *xolAsm) cpuid()    { a.b = append(a.b, 0x0F, 0xA2) }
func (a *xolAsm) int3()     { a.b = append(a.b, 0xCC) }
func (a *xolAsm) ret()      { a.b = append(a.b, 0xC3) }

// jcc: jcc rel32 to label.
func (a *xolAsm) jcc(cc byte, label string) {
	a.b = append(a.b, 0x0F, 0x80|cc)
	a.rel(label)
}

// jmp: jmp rel32 to label.
func (a *xolAsm) jmp(label string) {
	a.b = append(a.b, 0xE9)
	a.rel(label)
}

func (a *xolAsm) rel(label string) {
	a.fixups = append(a.fixups, xolAsmFixup{at: len(a.b), label: label})
	a.b = append(a.b, 0, 0, 0, 0)
}

// label defines label at the current offset.
func (a *xolAsm) label(name string) {
	if a.labels == nil {
		a.labels = make(map[string]int)
	}
	a.labels[name] = len(a.b)
}

// finish resolves the branches and returns the code.
func (a *xolAsm) finish() ([]byte, error) {
	for _, f := range a.fixups {
		to, ok := a.labels[f.label]
		if !ok {
			return nil, fmt.Errorf("xol harness: undefined label %q", f.label)
		}
		binary.LittleEndian.PutUint32(a.b[f.at:], uint32(int32(to-(f.at+4))))
	}
	return a.b, nil
}
