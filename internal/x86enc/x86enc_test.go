package x86enc

import (
	"errors"
	"fmt"
	"testing"

	"github.com/probeopt/probeopt/decode"
)

// ops are the operands of one instruction, as the test means them and as
// package decode reads them back.
type ops struct {
	mn     string // the decoder's mnemonic
	opSize int
	reg    int // ModRM.reg (or the opcode's register) as a register, -1 if none
	digit  int // ModRM.reg as an opcode extension, -1 if none
	rm     int // ModRM.rm as a register, -1 if none
	mem    *Mem
	imm    uint64
	immLen int
	target uint64 // branch target
	lock   bool
}

const testBase = 0x7f00_0040_1000

// got reads the operands of inst the way want describes them.
func got(inst *decode.X86Inst, want ops) ops {
	b2 := func(b bool) int {
		if b {
			return 8
		}
		return 0
	}
	g := ops{mn: inst.Mnemonic, opSize: inst.OpSize, reg: -1, digit: -1, rm: -1,
		imm: inst.Imm, immLen: inst.ImmSize, lock: inst.Prefixes&decode.PrefixLock != 0}
	if inst.Branch != 0 && inst.RelSize != 0 {
		g.target = inst.Target
		g.imm, g.immLen = 0, 0
	}
	switch {
	case !inst.HasModRM:
		if want.reg >= 0 {
			g.reg = int(inst.Opcode&7) + b2(inst.B)
		}
		return g
	case want.digit >= 0:
		g.digit = int(inst.Reg)
	default:
		g.reg = int(inst.Reg) + b2(inst.R)
	}
	if inst.Mod == 3 {
		g.rm = int(inst.RM) + b2(inst.B)
		return g
	}
	m := Mem{disp: int32(inst.Disp), seg: inst.LastSeg}
	switch {
	case inst.RIPRel:
		m = Mem{kind: memRIP, target: inst.Target, seg: inst.LastSeg}
	case inst.HasSIB && inst.SIB&7 == 5 && inst.Mod == 0:
		m.kind = memAbs
	case inst.HasSIB:
		m.base = Reg(inst.SIB&7) + Reg(b2(inst.B))
		if idx := Reg(inst.SIB>>3&7) + Reg(b2(inst.X)); idx != RSP {
			m.index, m.hasIndex, m.scale = idx, true, 1<<(inst.SIB>>6)
		}
	default:
		m.base = Reg(inst.RM) + Reg(b2(inst.B))
	}
	g.mem = &m
	return g
}

func (o ops) String() string {
	s := fmt.Sprintf("%s/%d reg=%d digit=%d rm=%d imm=%#x/%d target=%#x lock=%v", o.mn, o.opSize, o.reg, o.digit, o.rm, o.imm, o.immLen, o.target, o.lock)
	if o.mem != nil {
		s += fmt.Sprintf(" mem=%+v", *o.mem)
	}
	return s
}

func sameOps(a, b ops) bool {
	if (a.mem == nil) != (b.mem == nil) || a.mem != nil && *a.mem != *b.mem {
		return false
	}
	a.mem, b.mem = nil, nil
	return a == b
}

// testMems are memory operands that exercise every addressing form: each
// base (rsp/r12 need a SIB, rbp/r13 a displacement), no, 8- and 32-bit
// displacements, indexes with every scale, RIP-relative and absolute
// operands and the segment overrides.
func testMems() []Mem {
	var ms []Mem
	for b := RAX; b <= R15; b++ {
		for _, d := range []int32{0, 1, -128, 127, 128, -129, 0x12345678} {
			ms = append(ms, At(b, d))
		}
		for _, x := range []Reg{RAX, RBP, R12, R13, R15} {
			ms = append(ms, Indexed(b, x, 1<<(uint(b+x)&3), int32(b)*0x40-0x100))
		}
	}
	ms = append(ms, RIP(testBase+0x1000), RIP(testBase-0x1000_0000), Abs(0), Abs(-8), Abs(0x1000).FS(),
		Abs(0).FS(), At(RAX, 8).GS(), Indexed(R11, RCX, 8, 0).FS())
	return ms
}

// forms calls emit once for every instruction the encoder can emit, with
// the operands it should decode back to.
func forms(emit func(f func(a *Asm), want ops)) {
	fs := &formSet{emit: emit, regs: make([]Reg, 16), mems: testMems(), sizes: []Size{S32, S64}}
	for i := range fs.regs {
		fs.regs[i] = Reg(i)
	}
	fs.sizedForms()
	fs.regForms()
	fs.branchForms()
	fs.jitSizedForms()
	fs.jitRegForms()
	fs.fixedForms()
}

// formSet is what the generators of forms share: emit, and the registers,
// memory operands and sizes they take.
type formSet struct {
	emit  func(f func(a *Asm), want ops)
	regs  []Reg
	mems  []Mem
	sizes []Size
}

// n returns the operands of a form with mnemonic mn and size s and no
// register, ModRM digit or memory operand yet.
func (fs *formSet) n(mn string, s Size) ops {
	return ops{mn: mn, opSize: int(s), reg: -1, digit: -1, rm: -1}
}

// aluNames and ccNames are the decoder's mnemonics of the ALU operations
// and of the condition codes, in encoding order.
var (
	aluNames = []string{"add", "or", "adc", "sbb", "and", "sub", "xor", "cmp"}
	ccNames  = []string{"o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le", "g"}
)

// sizedForms emits the forms with an operand size, in each size: register and memory operands, immediates, shifts, inc and dec.
func (fs *formSet) sizedForms() {
	emit, n, regs, mems, sizes := fs.emit, fs.n, fs.regs, fs.mems, fs.sizes
	for _, s := range sizes {
		for _, r := range regs {
			for _, q := range regs {
				o := n("mov", s)
				o.reg, o.rm = int(q), int(r)
				emit(func(a *Asm) { a.Mov(s, r, q) }, o)
				o.mn = "test"
				emit(func(a *Asm) { a.Test(s, r, q) }, o)
				for op := Add; op <= Cmp; op++ {
					o.mn = aluNames[op]
					emit(func(a *Asm) { a.ALU(op, s, r, q) }, o)
				}
				o.mn, o.reg, o.rm = "imul", int(r), int(q)
				emit(func(a *Asm) { a.Imul(s, r, q) }, o)
			}
			for _, m := range mems {
				mm := m
				o := n("mov", s)
				o.reg, o.mem = int(r), &mm
				emit(func(a *Asm) { a.Load(s, r, m) }, o)
				emit(func(a *Asm) { a.Store(s, m, r) }, o)
				for op := Add; op <= Cmp; op++ {
					o.mn = aluNames[op]
					emit(func(a *Asm) { a.ALULoad(op, s, r, m) }, o)
					emit(func(a *Asm) { a.ALUStore(op, s, m, r) }, o)
				}
				o.mn = "cmpxchg"
				emit(func(a *Asm) { a.Cmpxchg(s, m, r, false) }, o)
				o.lock = true
				emit(func(a *Asm) { a.Cmpxchg(s, m, r, true) }, o)
				if s == S64 {
					o = n("lea", s)
					o.reg, o.mem = int(r), &mm
					emit(func(a *Asm) { a.Lea(r, m) }, o)
				}
			}
			for _, v := range []int32{0, 1, -1, 0x7f, -0x80, 0x12345678, -0x80000000} {
				o := n("", s)
				o.rm = int(r)
				o.imm, o.immLen = uint64(uint32(v)), 4
				for op := Add; op <= Cmp; op++ {
					o.mn, o.digit = aluNames[op], int(op)
					emit(func(a *Asm) { a.ALUImm32(op, s, r, v) }, o)
				}
				if v != int32(int8(v)) {
					continue
				}
				o.imm, o.immLen = uint64(uint8(v)), 1
				for op := Add; op <= Cmp; op++ {
					o.mn, o.digit = aluNames[op], int(op)
					emit(func(a *Asm) { a.ALUImm8(op, s, r, int8(v)) }, o)
				}
			}
			for _, sh := range []uint8{1, 7, 63} {
				o := n("shl", s)
				o.rm, o.digit, o.imm, o.immLen = int(r), 4, uint64(sh), 1
				emit(func(a *Asm) { a.Shl(s, r, sh) }, o)
				o.mn, o.digit = "shr", 5
				emit(func(a *Asm) { a.Shr(s, r, sh) }, o)
			}
			o := n("inc", s)
			o.rm, o.digit = int(r), 0
			emit(func(a *Asm) { a.Inc(s, r) }, o)
			o.mn, o.digit = "dec", 1
			emit(func(a *Asm) { a.Dec(s, r) }, o)
		}
		for _, m := range mems {
			mm := m
			for _, v := range []int32{0, -1, 0x100, -0x80000000} {
				o := n("mov", s)
				o.digit, o.mem, o.imm, o.immLen = 0, &mm, uint64(uint32(v)), 4
				emit(func(a *Asm) { a.StoreImm(s, m, v) }, o)
				o.mn = "test"
				emit(func(a *Asm) { a.TestMemImm32(s, m, v) }, o)
				for op := Add; op <= Cmp; op++ {
					o.mn, o.digit = aluNames[op], int(op)
					emit(func(a *Asm) { a.ALUMemImm32(op, s, m, v) }, o)
					if v == int32(int8(v)) {
						o8 := o
						o8.imm, o8.immLen = uint64(uint8(v)), 1
						emit(func(a *Asm) { a.ALUMemImm8(op, s, m, int8(v)) }, o8)
					}
				}
			}
			o := n("inc", s)
			o.digit, o.mem = 0, &mm
			emit(func(a *Asm) { a.IncMem(s, m) }, o)
			o.lock = true
			emit(func(a *Asm) { a.LockIncMem(s, m) }, o)
		}
	}
}

// regForms emits the 64-bit register forms: immediates, push and pop, rdfsbase, setcc, lea of a label.
func (fs *formSet) regForms() {
	emit, n, regs := fs.emit, fs.n, fs.regs
	for _, r := range regs {
		for _, v := range []uint64{0, 1, 0xffffffff, 1 << 32, 0x7f00_0000_1000, 1<<64 - 1} {
			o := n("mov", S64)
			o.reg, o.imm, o.immLen = int(r), v, 8
			emit(func(a *Asm) { a.MovAbs(r, v) }, o)
			if v <= 0xffffffff {
				o.opSize, o.immLen = 32, 4
				emit(func(a *Asm) { a.MovImm32(r, uint32(v)) }, o)
			}
			emit(func(a *Asm) { a.MovImm(r, v) }, o)
		}
		o := n("push", S64)
		o.reg = int(r)
		emit(func(a *Asm) { a.Push(r) }, o)
		o.mn = "pop"
		emit(func(a *Asm) { a.Pop(r) }, o)
		o = n("rdfsbase", S64)
		o.rm, o.digit = int(r), 0
		emit(func(a *Asm) { a.Rdfsbase(r) }, o)
		for c := CondO; c <= CondG; c++ {
			o := n("set"+ccNames[c], S32)
			o.rm, o.digit = int(r), 0
			emit(func(a *Asm) { a.Setcc(c, r) }, o)
		}
		o = n("lea", S64)
		o.reg, o.mem = int(r), &Mem{kind: memRIP, target: testBase}
		emit(func(a *Asm) { l := a.NewLabel(); a.Bind(l); a.LeaLabel(r, l) }, o)
	}
}

// branchForms emits the branches, the ALU forms on al and push of an immediate.
func (fs *formSet) branchForms() {
	emit, n, mems := fs.emit, fs.n, fs.mems
	for _, m := range mems {
		mm := m
		o := n("jmp", S64)
		o.digit, o.mem = 4, &mm
		emit(func(a *Asm) { a.JmpMem(m) }, o)
		o.mn, o.digit = "call", 2
		emit(func(a *Asm) { a.CallMem(m) }, o)
	}
	for op := Add; op <= Cmp; op++ {
		o := n(aluNames[op], S32)
		o.imm, o.immLen = 0x80, 1
		emit(func(a *Asm) { a.ALUAL(op, -128) }, o)
	}
	for c := CondO; c <= CondG; c++ {
		o := n("j"+ccNames[c], S64)
		o.target = testBase
		emit(func(a *Asm) { l := a.NewLabel(); a.Bind(l); a.Jcc(c, l) }, o)
	}
	o := n("jmp", S64)
	o.target = testBase
	emit(func(a *Asm) { l := a.NewLabel(); a.Bind(l); a.Jmp(l) }, o)
	o.target = testBase + 0x7fff_0000
	emit(func(a *Asm) { a.JmpTo(testBase + 0x7fff_0000) }, o)
	for c := CondO; c <= CondG; c++ {
		o := n("j"+ccNames[c], S64)
		o.target = testBase - 0x1000_0000
		emit(func(a *Asm) { a.JccTo(c, testBase-0x1000_0000) }, o)
		o.target = testBase + 2 + 127
		emit(func(a *Asm) { a.JccShort(c, a.PC()+2+127) }, o)
		o.target = testBase + 2 - 128
		emit(func(a *Asm) { a.JccShort(c, a.PC()+2-128) }, o)
	}
	o = n("call", S64)
	o.target = testBase + 0x7fff_0000
	emit(func(a *Asm) { a.CallTo(testBase + 0x7fff_0000) }, o)
	o = n("push", S64)
	o.imm, o.immLen = 0x8000_0000, 4 // as encoded
	emit(func(a *Asm) { a.PushImm32(-0x8000_0000) }, o)
}

// jitSizedForms emits the forms of the eBPF JIT that have an operand size, in each size.
func (fs *formSet) jitSizedForms() {
	emit, n, regs, mems, sizes := fs.emit, fs.n, fs.regs, fs.mems, fs.sizes
	for _, s := range sizes {
		for _, r := range regs {
			for _, f := range []struct {
				mn    string
				digit int
				emit  func(a *Asm)
			}{
				{"neg", 3, func(a *Asm) { a.Neg(s, r) }},
				{"shl", 4, func(a *Asm) { a.ShlCL(s, r) }},
				{"shr", 5, func(a *Asm) { a.ShrCL(s, r) }},
				{"sar", 7, func(a *Asm) { a.SarCL(s, r) }},
				{"div", 6, func(a *Asm) { a.Div(s, r) }},
				{"idiv", 7, func(a *Asm) { a.Idiv(s, r) }},
			} {
				o := n(f.mn, s)
				o.rm, o.digit = int(r), f.digit
				emit(f.emit, o)
			}
			o := n("sar", s)
			o.rm, o.digit, o.imm, o.immLen = int(r), 7, 63, 1
			emit(func(a *Asm) { a.Sar(s, r, 63) }, o)
			o = n("bswap", s)
			o.reg = int(r)
			emit(func(a *Asm) { a.Bswap(s, r) }, o)
			for _, q := range regs {
				for _, f := range []struct {
					mn   string
					emit func(a *Asm)
				}{
					{"movzx", func(a *Asm) { a.MovzxB(s, r, q) }},
					{"movzx", func(a *Asm) { a.MovzxW(s, r, q) }},
					{"movsx", func(a *Asm) { a.MovsxB(s, r, q) }},
					{"movsx", func(a *Asm) { a.MovsxW(s, r, q) }},
				} {
					o := n(f.mn, s)
					o.reg, o.rm = int(r), int(q)
					emit(f.emit, o)
				}
			}
			for _, m := range mems {
				mm := m
				o := n("movsx", s)
				o.reg, o.mem = int(r), &mm
				emit(func(a *Asm) { a.LoadSxB(s, r, m) }, o)
				emit(func(a *Asm) { a.LoadSxW(s, r, m) }, o)
				for op := Add; op <= Cmp; op++ {
					if op == Adc || op == Sbb || op == Cmp {
						continue // not locked by the JIT
					}
					o := n(aluNames[op], s)
					o.reg, o.mem, o.lock = int(r), &mm, true
					emit(func(a *Asm) { a.LockALUStore(op, s, m, r) }, o)
				}
				o = n("xadd", s)
				o.reg, o.mem = int(r), &mm
				emit(func(a *Asm) { a.Xadd(s, m, r, false) }, o)
				o.lock = true
				emit(func(a *Asm) { a.Xadd(s, m, r, true) }, o)
				o = n("xchg", s)
				o.reg, o.mem = int(r), &mm
				emit(func(a *Asm) { a.Xchg(s, m, r) }, o)
			}
		}
		o := n("cdq", s) // the decoder's one name for 99, with its size
		emit(func(a *Asm) { a.SignExtendAX(s) }, o)
	}
}

// jitRegForms emits the other register and memory forms of the eBPF JIT.
func (fs *formSet) jitRegForms() {
	emit, n, regs, mems := fs.emit, fs.n, fs.regs, fs.mems
	for _, r := range regs {
		for _, q := range regs {
			o := n("movsxd", S64)
			o.reg, o.rm = int(r), int(q)
			emit(func(a *Asm) { a.Movsxd(r, q) }, o)
		}
		o := n("rol", 16)
		o.rm, o.digit, o.imm, o.immLen = int(r), 0, 8, 1
		emit(func(a *Asm) { a.Rol16(r, 8) }, o)
		o = n("call", S64)
		o.rm, o.digit = int(r), 2
		emit(func(a *Asm) { a.CallReg(r) }, o)
		for _, m := range mems {
			mm := m
			o := n("movzx", S32)
			o.reg, o.mem = int(r), &mm
			emit(func(a *Asm) { a.LoadZxB(r, m) }, o)
			emit(func(a *Asm) { a.LoadZxW(r, m) }, o)
			o.mn, o.opSize = "movsxd", 64
			emit(func(a *Asm) { a.LoadSxd(r, m) }, o)
			o = n("mov", 32) // the decoder gives a byte operand's size as 32, as for setcc
			o.reg, o.mem = int(r), &mm
			emit(func(a *Asm) { a.StoreB(m, r) }, o)
			o.opSize = 16
			emit(func(a *Asm) { a.StoreW(m, r) }, o)
		}
	}
	for _, m := range mems {
		mm := m
		o := n("mov", 32) // a byte operand's size, as the decoder gives it
		o.digit, o.mem, o.imm, o.immLen = 0, &mm, 0x80, 1
		emit(func(a *Asm) { a.StoreImmB(m, -128) }, o)
		o.opSize, o.imm, o.immLen = 16, 0x8001, 2
		emit(func(a *Asm) { a.StoreImmW(m, -0x7fff) }, o)
	}
}

// fixedForms emits the call to a label and the forms without operands.
func (fs *formSet) fixedForms() {
	emit, n := fs.emit, fs.n
	o := n("call", S64)
	o.target = testBase
	emit(func(a *Asm) { l := a.NewLabel(); a.Bind(l); a.CallLabel(l) }, o)
	emit((*Asm).Pause, n("pause", S32))
	// 0f ae /5 with a register form: the decoder names the ModRM fields.
	lf := n("lfence", S32)
	lf.reg, lf.rm = 5, 0
	emit((*Asm).Lfence, lf)
	emit((*Asm).RepStosb, n("stos", S32))
	for _, f := range []struct {
		mn   string
		size Size
		emit func(a *Asm)
	}{
		{"pushf", S64, (*Asm).Pushfq}, {"popf", S64, (*Asm).Popfq}, {"lahf", S32, (*Asm).Lahf},
		{"sahf", S32, (*Asm).Sahf}, {"ret", S64, (*Asm).Ret}, {"ud2", S32, (*Asm).Ud2},
		{"rdtsc", S32, (*Asm).Rdtsc}, {"cpuid", S32, (*Asm).Cpuid}, {"syscall", S32, (*Asm).Syscall},
		{"int3", S32, (*Asm).Int3}, {"nop", S32, (*Asm).Nop}, {"movs", S32, (*Asm).RepMovsb},
		{"movs", S64, (*Asm).RepMovsq},
	} {
		emit(f.emit, n(f.mn, f.size))
	}
}

// TestFormsDecode emits every form with every register and the memory
// operands of testMems, one instruction at a time, and decodes it with
// package decode: one instruction of the emitted length, with the
// mnemonic, operand size, registers, memory operand, immediate and branch
// target meant.
func TestFormsDecode(t *testing.T) {
	n := 0
	forms(func(f func(a *Asm), want ops) {
		n++
		a := New(testBase)
		f(a)
		code, err := a.Finish()
		if err != nil {
			t.Fatalf("%v: %v", want, err)
		}
		sp := a.Spans()
		last := sp[len(sp)-1]
		var inst decode.X86Inst
		if err := (decode.X86Decoder{}).Decode(code[last.Start:], testBase+uint64(last.Start), &inst); err != nil {
			t.Fatalf("% x (%v): %v", code, want, err)
		}
		if inst.Len != last.End-last.Start {
			t.Errorf("% x: decodes as %d bytes, emitted %d", code[last.Start:], inst.Len, last.End-last.Start)
		}
		if g := got(&inst, want); !sameOps(g, want) {
			t.Errorf("% x:\n decodes as %v\n want      %v", code[last.Start:], g, want)
		}
		if err := a.Verify(decode.X86Len); err != nil {
			t.Errorf("% x: %v", code, err)
		}
	})
	t.Logf("%d instructions", n)
}

// TestDeterministic checks that the same calls give the same bytes
// whatever was emitted before (the slots' layout relies on it): every
// form, appended to one long run of code, gives the bytes it gives alone.
func TestDeterministic(t *testing.T) {
	long := New(testBase)
	var alone [][]byte
	forms(func(f func(a *Asm), _ ops) {
		a := New(long.PC())
		f(a)
		f(long)
		code, err := a.Finish()
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, code)
	})
	code, err := long.Finish()
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for i, b := range alone {
		if got := code[off : off+len(b)]; string(got) != string(b) {
			t.Fatalf("form %d at +%d: % x in a run, % x alone", i, off, got, b)
		}
		off += len(b)
	}
	if err := long.Verify(decode.X86Len); err != nil {
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		emit func(a *Asm)
		want error
	}{
		{"jump beyond 2 GiB", func(a *Asm) { a.JmpTo(testBase + 1<<32) }, ErrOutOfReach},
		{"jcc beyond 2 GiB", func(a *Asm) { a.JccTo(CondE, testBase-1<<32) }, ErrOutOfReach},
		{"call beyond 2 GiB", func(a *Asm) { a.CallTo(testBase + 1<<31 + 5) }, ErrOutOfReach},
		{"short jcc beyond 127 bytes", func(a *Asm) { a.JccShort(CondE, testBase+2+128) }, ErrOutOfReach},
		{"short jcc beyond -128 bytes", func(a *Asm) { a.JccShort(CondE, testBase+2-129) }, ErrOutOfReach},
		{"operand beyond 2 GiB", func(a *Asm) { a.LockIncMem(S64, RIP(testBase+1<<31+100)) }, ErrOutOfReach},
		{"unbound label", func(a *Asm) { a.Jmp(a.NewLabel()) }, ErrInvalid},
		{"label bound twice", func(a *Asm) { l := a.NewLabel(); a.Bind(l); a.Bind(l) }, ErrInvalid},
		{"rsp index", func(a *Asm) { a.Lea(RAX, Indexed(RAX, RSP, 1, 0)) }, ErrInvalid},
		{"scale 3", func(a *Asm) { a.Lea(RAX, Indexed(RAX, RCX, 3, 0)) }, ErrInvalid},
	} {
		a := New(testBase)
		c.emit(a)
		_, err := a.Finish()
		var ee *Error
		if !errors.Is(err, c.want) || !errors.As(err, &ee) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	a := New(testBase)
	a.Nop()
	a.Finish()
	if err := a.Verify(func([]byte, uint64) (int, error) { return 2, nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("a length that differs: %v", err)
	}
}
