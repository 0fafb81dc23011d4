package fuzz

import (
	"encoding/binary"
	"fmt"
)

// Register numbers for emuAsm, in encoding order.
const (
	emuRegRAX = iota
	emuRegRCX
	emuRegRDX
	emuRegRBX
	emuRegRSP
	emuRegRBP
	emuRegRSI
	emuRegRDI
	emuRegR8
	emuRegR9
	emuRegR10
	emuRegR11
	emuRegR12
	emuRegR13
	emuRegR14
	emuRegR15
)

// emuAsm is a minimal x86-64 encoder for the few instruction forms the
// emulator oracle's in-child harness uses: 32- and 64-bit operations
// between registers, memory at [base+disp] and immediates, and rel32
// branches to labels. Each method appends one instruction.
type emuAsm struct {
	b      []byte
	labels map[string]int
	fixups []emuFixup
}

// emuFixup is a rel32 field to fill with the distance to a label.
type emuFixup struct {
	at    int // offset of the rel32 field
	label string
}

// rex emits a REX prefix when any of its bits is needed.
func (a *emuAsm) rex(w bool, reg, index, base int) {
	p := byte(0x40)
	if w {
		p |= 8
	}
	if reg&8 != 0 {
		p |= 4
	}
	if index&8 != 0 {
		p |= 2
	}
	if base&8 != 0 {
		p |= 1
	}
	if p != 0x40 {
		a.b = append(a.b, p)
	}
}

// opReg emits opcode with a register-direct ModRM: reg and rm.
func (a *emuAsm) opReg(w bool, opcode []byte, reg, rm int) {
	a.rex(w, reg, 0, rm)
	a.b = append(a.b, opcode...)
	a.b = append(a.b, 0xc0|byte(reg&7)<<3|byte(rm&7))
}

// opMem emits opcode with a memory ModRM for [base+disp].
func (a *emuAsm) opMem(w bool, opcode []byte, reg, base int, disp int32) {
	a.rex(w, reg, 0, base)
	a.b = append(a.b, opcode...)
	var mod byte
	switch {
	case disp == 0 && base&7 != emuRegRBP:
		mod = 0
	case disp >= -128 && disp <= 127:
		mod = 1
	default:
		mod = 2
	}
	a.b = append(a.b, mod<<6|byte(reg&7)<<3|byte(base&7))
	if base&7 == emuRegRSP {
		a.b = append(a.b, 0x24) // SIB: no index, base rsp/r12
	}
	switch mod {
	case 1:
		a.b = append(a.b, byte(int8(disp)))
	case 2:
		a.b = binary.LittleEndian.AppendUint32(a.b, uint32(disp))
	}
}

// movabs: mov r64, imm64.
func (a *emuAsm) movabs(r int, v uint64) {
	a.rex(true, 0, 0, r)
	a.b = append(a.b, 0xb8|byte(r&7))
	a.b = binary.LittleEndian.AppendUint64(a.b, v)
}

// movImm32: mov r32, imm32 (zero-extends).
func (a *emuAsm) movImm32(r int, v uint32) {
	a.rex(false, 0, 0, r)
	a.b = append(a.b, 0xb8|byte(r&7))
	a.b = binary.LittleEndian.AppendUint32(a.b, v)
}

// load: mov r, [base+disp], 64 bits (w) or 32 bits.
func (a *emuAsm) load(w bool, r, base int, disp int32) { a.opMem(w, []byte{0x8b}, r, base, disp) }

// store: mov [base+disp], r, 64 bits (w) or 32 bits.
func (a *emuAsm) store(w bool, base int, disp int32, r int) { a.opMem(w, []byte{0x89}, r, base, disp) }

// storeImm: mov qword [base+disp], simm32.
func (a *emuAsm) storeImm(base int, disp int32, v int32) {
	a.opMem(true, []byte{0xc7}, 0, base, disp)
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(v))
}

// orImm: or qword [base+disp], simm32.
func (a *emuAsm) orImm(base int, disp int32, v int32) {
	a.opMem(true, []byte{0x81}, 1, base, disp)
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(v))
}

// cmpMemImm8: cmp qword [base+disp], simm8.
func (a *emuAsm) cmpMemImm8(base int, disp int32, v int8) {
	a.opMem(true, []byte{0x83}, 7, base, disp)
	a.b = append(a.b, byte(v))
}

// cmpRegImm8: cmp r64, simm8.
func (a *emuAsm) cmpRegImm8(r int, v int8) {
	a.opReg(true, []byte{0x83}, 7, r)
	a.b = append(a.b, byte(v))
}

// cmpLoad: cmp r, [base+disp], 64 bits (w) or 32 bits.
func (a *emuAsm) cmpLoad(w bool, r, base int, disp int32) { a.opMem(w, []byte{0x3b}, r, base, disp) }

// lea: lea r64, [base+disp].
func (a *emuAsm) lea(r, base int, disp int32) { a.opMem(true, []byte{0x8d}, r, base, disp) }

// mov32: mov dst, src (32 bits).
func (a *emuAsm) mov32(dst, src int) { a.opReg(false, []byte{0x89}, src, dst) }

// addReg: add dst, src (64 bits).
func (a *emuAsm) addReg(dst, src int) { a.opReg(true, []byte{0x01}, src, dst) }

// addImm8: add r64, simm8.
func (a *emuAsm) addImm8(r int, v int8) {
	a.opReg(true, []byte{0x83}, 0, r)
	a.b = append(a.b, byte(v))
}

// shlImm: shl r64, imm8.
func (a *emuAsm) shlImm(r int, n uint8) {
	a.opReg(true, []byte{0xc1}, 4, r)
	a.b = append(a.b, n)
}

// xor32: xor r32, r32 (zeroes the register).
func (a *emuAsm) xor32(dst, src int) { a.opReg(false, []byte{0x31}, src, dst) }

// inc: inc r64.
func (a *emuAsm) inc(r int) { a.opReg(true, []byte{0xff}, 0, r) }

// dec32: dec r32.
func (a *emuAsm) dec32(r int) { a.opReg(false, []byte{0xff}, 1, r) }

// incMem: inc qword [base+disp].
func (a *emuAsm) incMem(base int, disp int32) { a.opMem(true, []byte{0xff}, 0, base, disp) }

// repMovsq: rep movsq.
func (a *emuAsm) repMovsq() { a.b = append(a.b, 0xf3, 0x48, 0xa5) }

// syscall, int3 and ret.
func (a *emuAsm) syscall() { a.b = append(a.b, 0x0f, 0x05) }
func (a *emuAsm) int3()    { a.b = append(a.b, 0xcc) }
func (a *emuAsm) ret()     { a.b = append(a.b, 0xc3) }

// Condition codes for jcc.
const (
	emuCCE  = 0x4
	emuCCNE = 0x5
	emuCCAE = 0x3
)

// jcc: jcc rel32 to label.
func (a *emuAsm) jcc(cc byte, label string) {
	a.b = append(a.b, 0x0f, 0x80|cc)
	a.rel32(label)
}

// jmp: jmp rel32 to label.
func (a *emuAsm) jmp(label string) {
	a.b = append(a.b, 0xe9)
	a.rel32(label)
}

// rel32 emits a rel32 field to be resolved by finish.
func (a *emuAsm) rel32(label string) {
	a.fixups = append(a.fixups, emuFixup{at: len(a.b), label: label})
	a.b = append(a.b, 0, 0, 0, 0)
}

// label defines label at the current offset.
func (a *emuAsm) label(name string) {
	if a.labels == nil {
		a.labels = make(map[string]int)
	}
	a.labels[name] = len(a.b)
}

// finish resolves the branches and returns the code.
func (a *emuAsm) finish() ([]byte, error) {
	for _, f := range a.fixups {
		to, ok := a.labels[f.label]
		if !ok {
			return nil, fmt.Errorf("harness: undefined label %q", f.label)
		}
		binary.LittleEndian.PutUint32(a.b[f.at:], uint32(int32(to-(f.at+4))))
	}
	return a.b, nil
}
