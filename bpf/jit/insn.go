package jit

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/internal/x86enc"
)

func reg(r asm.Register) (x86enc.Reg, error) {
	if r > asm.R10 {
		return 0, fmt.Errorf("register %v: %w", r, ErrInvalid)
	}
	return regs[r], nil
}

// insn compiles instruction i.
func (c *compiler) insn(i int, ins *asm.Instruction) error {
	op := ins.OpCode
	dst, err := reg(ins.Dst)
	if err != nil {
		return err
	}
	src, err := reg(ins.Src)
	if err != nil && op.Class() != asm.LdClass && !(op.Class().IsJump() && op.JumpOp() == asm.Call) {
		return err
	}
	switch cls := op.Class(); {
	case cls.IsALU():
		return c.alu(ins, dst, src)
	case cls.IsJump():
		return c.jump(i, ins, dst, src)
	case cls == asm.LdClass:
		return c.ld(ins, dst)
	case cls == asm.LdXClass:
		return c.ldx(ins, dst, src)
	case cls == asm.StClass:
		return c.st(ins, dst)
	case cls == asm.StXClass:
		return c.stx(ins, dst, src)
	}
	return fmt.Errorf("opcode %v: %w", op, ErrUnsupported)
}

func unsupported(ins *asm.Instruction) error {
	return fmt.Errorf("%v: %w", ins.OpCode, ErrUnsupported)
}

var aluOps = map[asm.ALUOp]x86enc.ALU{
	asm.Add: x86enc.Add, asm.Sub: x86enc.Sub, asm.And: x86enc.And,
	asm.Or: x86enc.Or, asm.Xor: x86enc.Xor,
}

func (c *compiler) alu(ins *asm.Instruction, dst, src x86enc.Reg) error {
	a := c.a
	op := ins.OpCode
	s := x86enc.S32
	if op.Class() == asm.ALU64Class {
		s = x86enc.S64
	}
	k := op.Source() == asm.ImmSource
	imm := int32(ins.Constant)
	// immediate loads the constant into tmp2 for the forms without one:
	// sign-extended for 64-bit operations, as BPF extends it.
	immediate := func() x86enc.Reg {
		if s == x86enc.S64 {
			a.MovImm(tmp2, uint64(int64(imm)))
		} else {
			a.MovImm32(tmp2, uint32(imm))
		}
		return tmp2
	}
	switch aop := op.ALUOp(); aop {
	case asm.Add, asm.Sub, asm.And, asm.Or, asm.Xor:
		if k {
			a.ALUImm32(aluOps[aop], s, dst, imm)
		} else {
			a.ALU(aluOps[aop], s, dst, src)
		}
	case asm.Mul:
		if k {
			src = immediate()
		}
		a.Imul(s, dst, src)
	case asm.Mov:
		switch {
		case k && s == x86enc.S64:
			a.MovImm(dst, uint64(int64(imm)))
		case k:
			a.MovImm32(dst, uint32(imm))
		default:
			a.Mov(s, dst, src)
		}
	case asm.MovSX8, asm.MovSX16, asm.MovSX32:
		if k {
			return unsupported(ins)
		}
		switch {
		case aop == asm.MovSX8:
			a.MovsxB(s, dst, src)
		case aop == asm.MovSX16:
			a.MovsxW(s, dst, src)
		case s == x86enc.S64:
			a.Movsxd(dst, src)
		default:
			return unsupported(ins)
		}
	case asm.Neg:
		a.Neg(s, dst)
	case asm.LSh, asm.RSh, asm.ArSh:
		if k {
			n := uint8(imm) & uint8(int(s)-1)
			switch aop {
			case asm.LSh:
				a.Shl(s, dst, n)
			case asm.RSh:
				a.Shr(s, dst, n)
			default:
				a.Sar(s, dst, n)
			}
			return nil
		}
		c.shiftCL(aop, s, dst, src)
	case asm.Div, asm.Mod, asm.SDiv, asm.SMod:
		c.divide(aop, s, k, imm, dst, src)
	case asm.Swap:
		// BPF_END: to little endian (a truncation here), to big endian
		// or, in ALU64, an unconditional swap.
		swap := op.Endianness() == asm.BE || op.Class() == asm.ALU64Class
		switch imm {
		case 16:
			if swap {
				a.Rol16(dst, 8)
			}
			a.MovzxW(x86enc.S32, dst, dst)
		case 32:
			if swap {
				a.Bswap(x86enc.S32, dst)
			} else {
				a.Mov(x86enc.S32, dst, dst)
			}
		case 64:
			if swap {
				a.Bswap(x86enc.S64, dst)
			}
		default:
			return fmt.Errorf("byte swap of %d bits: %w", imm, ErrInvalid)
		}
	default:
		return unsupported(ins)
	}
	return nil
}

// shiftCL shifts dst by src, through %cl (BPF R4's rcx).
func (c *compiler) shiftCL(op asm.ALUOp, s x86enc.Size, dst, src x86enc.Reg) {
	a := c.a
	emit := func(r x86enc.Reg) {
		switch op {
		case asm.LSh:
			a.ShlCL(s, r)
		case asm.RSh:
			a.ShrCL(s, r)
		default:
			a.SarCL(s, r)
		}
	}
	rcx := x86enc.RCX
	switch {
	case src == rcx:
		emit(dst)
	case dst == rcx:
		a.Mov(x86enc.S64, tmp2, rcx)
		a.Mov(x86enc.S64, rcx, src)
		emit(tmp2)
		a.Mov(x86enc.S64, rcx, tmp2)
	default:
		a.Mov(x86enc.S64, tmp2, rcx)
		a.Mov(x86enc.S64, rcx, src)
		emit(dst)
		a.Mov(x86enc.S64, rcx, tmp2)
	}
}

// divide compiles div, mod and their signed forms with BPF's rules: a
// division by zero gives 0 and a modulo by zero leaves dst (zero-extended
// in 32 bits); the signed MIN/-1 gives MIN and MIN%-1 gives 0 where x86
// would fault.
func (c *compiler) divide(op asm.ALUOp, s x86enc.Size, k bool, imm int32, dst, src x86enc.Reg) {
	a := c.a
	rax, rdx := x86enc.RAX, x86enc.RDX
	if k {
		if s == x86enc.S64 {
			a.MovImm(tmp2, uint64(int64(imm)))
		} else {
			a.MovImm32(tmp2, uint32(imm))
		}
	} else {
		a.Mov(x86enc.S64, tmp2, src)
	}
	a.Mov(x86enc.S64, aux, rax)
	a.Mov(x86enc.S64, tmp, rdx)
	a.Mov(s, rax, dst)
	mod := op == asm.Mod || op == asm.SMod
	signed := op == asm.SDiv || op == asm.SMod
	done, nonzero := a.NewLabel(), a.NewLabel()
	a.Test(s, tmp2, tmp2)
	a.Jcc(x86enc.CondNE, nonzero)
	if !mod {
		a.ALU(x86enc.Xor, x86enc.S32, rax, rax)
	}
	a.Jmp(done)
	a.Bind(nonzero)
	if signed {
		divide := a.NewLabel()
		a.ALUImm8(x86enc.Cmp, s, tmp2, -1)
		a.Jcc(x86enc.CondNE, divide)
		if mod {
			a.ALU(x86enc.Xor, x86enc.S32, rax, rax)
		} else {
			a.Neg(s, rax)
		}
		a.Jmp(done)
		a.Bind(divide)
		a.SignExtendAX(s)
		a.Idiv(s, tmp2)
	} else {
		a.ALU(x86enc.Xor, x86enc.S32, rdx, rdx)
		a.Div(s, tmp2)
	}
	if mod {
		a.Mov(s, rax, rdx)
	}
	a.Bind(done)
	a.Mov(x86enc.S64, tmp2, rax)
	a.Mov(x86enc.S64, rax, aux)
	a.Mov(x86enc.S64, rdx, tmp)
	a.Mov(x86enc.S64, dst, tmp2)
}

var conds = map[asm.JumpOp]x86enc.Cond{
	asm.JEq: x86enc.CondE, asm.JNE: x86enc.CondNE, asm.JGT: x86enc.CondA,
	asm.JGE: x86enc.CondAE, asm.JLT: x86enc.CondB, asm.JLE: x86enc.CondBE,
	asm.JSGT: x86enc.CondG, asm.JSGE: x86enc.CondGE, asm.JSLT: x86enc.CondL,
	asm.JSLE: x86enc.CondLE, asm.JSet: x86enc.CondNE,
}

func (c *compiler) target(i int, rel int) (x86enc.Label, error) {
	t := c.raw[i] + 1 + rel
	if t < 0 || t >= c.raw[len(c.insns)] {
		return 0, fmt.Errorf("jump to %d, outside the program: %w", t, ErrInvalid)
	}
	return c.label(t), nil
}

func (c *compiler) jump(i int, ins *asm.Instruction, dst, src x86enc.Reg) error {
	a := c.a
	op := ins.OpCode
	s := x86enc.S64
	if op.Class() == asm.Jump32Class {
		s = x86enc.S32
	}
	switch jop := op.JumpOp(); jop {
	case asm.Exit:
		a.Jmp(c.exits[c.funcOf(c.raw[i])])
		return nil
	case asm.Call:
		return c.call(i, ins)
	case asm.Ja:
		rel := int(ins.Offset)
		if op.Class() == asm.Jump32Class {
			rel = int(ins.Constant) // gotol
		}
		l, err := c.target(i, rel)
		if err != nil {
			return err
		}
		a.Jmp(l)
		return nil
	default:
		cc, ok := conds[jop]
		if !ok {
			return unsupported(ins)
		}
		l, err := c.target(i, int(ins.Offset))
		if err != nil {
			return err
		}
		k := op.Source() == asm.ImmSource
		imm := int32(ins.Constant)
		switch {
		case jop == asm.JSet && k:
			if s == x86enc.S64 {
				a.MovImm(tmp2, uint64(int64(imm)))
			} else {
				a.MovImm32(tmp2, uint32(imm))
			}
			a.Test(s, dst, tmp2)
		case jop == asm.JSet:
			a.Test(s, dst, src)
		case k:
			a.ALUImm32(x86enc.Cmp, s, dst, imm)
		default:
			a.ALU(x86enc.Cmp, s, dst, src)
		}
		a.Jcc(cc, l)
		return nil
	}
}

func (c *compiler) call(i int, ins *asm.Instruction) error {
	a := c.a
	switch {
	case ins.IsFunctionCall():
		t, err := c.callTarget(i, c.syms)
		if err != nil {
			return err
		}
		a.CallLabel(c.entries[t])
		return nil
	case ins.IsBuiltinCall():
		fn := asm.BuiltinFunc(ins.Constant)
		if fn == asm.FnMapLookupElem && c.r1Map != nil && c.inlineLookup(c.r1Map) {
			return nil
		}
		l, err := c.helper(fn)
		if err != nil {
			return err
		}
		a.CallLabel(l)
		return nil
	}
	return fmt.Errorf("call of kind %v: %w", ins.Src, ErrUnsupported)
}

// ld compiles ld_imm64: a constant, a map's address or a map value's
// address. The legacy packet loads (ld_abs, ld_ind) are refused.
func (c *compiler) ld(ins *asm.Instruction, dst x86enc.Reg) error {
	if !ins.OpCode.IsDWordLoad() {
		return unsupported(ins)
	}
	a := c.a
	switch ins.Src {
	case asm.R0: // a constant
		a.MovImm(dst, uint64(ins.Constant))
		return nil
	case asm.PseudoMapFD, asm.PseudoMapValue:
		name := ins.Reference()
		m, ok := c.opts.Maps[name]
		if !ok {
			return fmt.Errorf("map %q: not given to the JIT: %w", name, ErrInvalid)
		}
		if ins.Src == asm.PseudoMapFD {
			a.MovAbs(dst, m.Desc())
			return nil
		}
		if m.Type() != ebpf.Array {
			return fmt.Errorf("direct value access to map %q of type %v: %w", name, m.Type(), ErrUnsupported)
		}
		off := uint64(ins.Constant) >> 32
		if off >= uint64(m.ValueSize()) {
			return fmt.Errorf("map %q: value offset %d: %w", name, off, ErrInvalid)
		}
		a.MovAbs(dst, m.Data()+off)
		return nil
	}
	return fmt.Errorf("ld_imm64 of kind %v: %w", ins.Src, ErrUnsupported)
}

func (c *compiler) ldx(ins *asm.Instruction, dst, src x86enc.Reg) error {
	a := c.a
	m := x86enc.At(src, int32(ins.Offset))
	sx := ins.OpCode.Mode() == asm.MemSXMode
	if ins.OpCode.Mode() != asm.MemMode && !sx {
		return unsupported(ins)
	}
	switch ins.OpCode.Size() {
	case asm.Byte:
		if sx {
			a.LoadSxB(x86enc.S64, dst, m)
		} else {
			a.LoadZxB(dst, m)
		}
	case asm.Half:
		if sx {
			a.LoadSxW(x86enc.S64, dst, m)
		} else {
			a.LoadZxW(dst, m)
		}
	case asm.Word:
		if sx {
			a.LoadSxd(dst, m)
		} else {
			a.Load(x86enc.S32, dst, m)
		}
	case asm.DWord:
		if sx {
			return unsupported(ins)
		}
		a.Load(x86enc.S64, dst, m)
	default:
		return unsupported(ins)
	}
	return nil
}

func (c *compiler) st(ins *asm.Instruction, dst x86enc.Reg) error {
	a := c.a
	if ins.OpCode.Mode() != asm.MemMode {
		return unsupported(ins)
	}
	m := x86enc.At(dst, int32(ins.Offset))
	v := int32(ins.Constant)
	switch ins.OpCode.Size() {
	case asm.Byte:
		a.StoreImmB(m, int8(v))
	case asm.Half:
		a.StoreImmW(m, int16(v))
	case asm.Word:
		a.StoreImm(x86enc.S32, m, v)
	case asm.DWord:
		a.StoreImm(x86enc.S64, m, v)
	default:
		return unsupported(ins)
	}
	return nil
}

func (c *compiler) stx(ins *asm.Instruction, dst, src x86enc.Reg) error {
	a := c.a
	m := x86enc.At(dst, int32(ins.Offset))
	switch ins.OpCode.Mode() {
	case asm.MemMode:
		switch ins.OpCode.Size() {
		case asm.Byte:
			a.StoreB(m, src)
		case asm.Half:
			a.StoreW(m, src)
		case asm.Word:
			a.Store(x86enc.S32, m, src)
		case asm.DWord:
			a.Store(x86enc.S64, m, src)
		default:
			return unsupported(ins)
		}
		return nil
	case asm.AtomicMode:
		return c.atomic(ins, dst, src)
	}
	return unsupported(ins)
}

func (c *compiler) atomic(ins *asm.Instruction, dst, src x86enc.Reg) error {
	a := c.a
	var s x86enc.Size
	switch ins.OpCode.Size() {
	case asm.Word:
		s = x86enc.S32
	case asm.DWord:
		s = x86enc.S64
	default:
		return unsupported(ins)
	}
	m := x86enc.At(dst, int32(ins.Offset))
	rax := x86enc.RAX
	switch aop := ins.OpCode.AtomicOp(); aop {
	case asm.AddAtomic:
		a.LockALUStore(x86enc.Add, s, m, src)
	case asm.AndAtomic:
		a.LockALUStore(x86enc.And, s, m, src)
	case asm.OrAtomic:
		a.LockALUStore(x86enc.Or, s, m, src)
	case asm.XorAtomic:
		a.LockALUStore(x86enc.Xor, s, m, src)
	case asm.FetchAdd:
		a.Xadd(s, m, src, true)
	case asm.Xchg:
		a.Xchg(s, m, src)
	case asm.CmpXchg:
		a.Cmpxchg(s, m, src, true)
		if s == x86enc.S32 {
			a.Mov(x86enc.S32, rax, rax) // r0 = the old value, zero-extended
		}
	case asm.FetchAnd, asm.FetchOr, asm.FetchXor:
		// A cmpxchg loop: rax holds the old value, r12 the new one.
		op := map[asm.AtomicOp]x86enc.ALU{asm.FetchAnd: x86enc.And, asm.FetchOr: x86enc.Or, asm.FetchXor: x86enc.Xor}[aop]
		a.Lea(tmp, m)
		a.Mov(x86enc.S64, tmp2, src)
		a.Mov(x86enc.S64, aux, rax)
		a.Push(stripe)
		a.Load(s, rax, x86enc.At(tmp, 0))
		loop := a.NewLabel()
		a.Bind(loop)
		a.Mov(x86enc.S64, stripe, rax)
		a.ALU(op, s, stripe, tmp2)
		a.Cmpxchg(s, x86enc.At(tmp, 0), stripe, true)
		a.Jcc(x86enc.CondNE, loop)
		a.Pop(stripe)
		a.Mov(x86enc.S64, tmp2, rax)
		a.Mov(x86enc.S64, rax, aux)
		a.Mov(s, src, tmp2)
	default:
		return unsupported(ins)
	}
	return nil
}

// inlineLookup compiles map_lookup_elem of an array or per-CPU array map
// known at compile time into its address computation, as the kernel's
// JIT does; false for the other map types. It changes only the registers
// a call may change.
func (c *compiler) inlineLookup(m *maps.Map) bool {
	a := c.a
	if m.Type() != ebpf.Array && m.Type() != ebpf.PerCPUArray {
		return false
	}
	null, done := a.NewLabel(), a.NewLabel()
	rax, rcx := x86enc.RAX, x86enc.RCX
	a.Load(x86enc.S32, rax, x86enc.At(x86enc.RSI, 0))
	a.ALUImm32(x86enc.Cmp, x86enc.S32, rax, int32(m.MaxEntries()))
	a.Jcc(x86enc.CondAE, null)
	a.MovImm32(rcx, uint32(m.Stride()))
	a.Imul(x86enc.S64, rax, rcx)
	if m.Type() == ebpf.PerCPUArray {
		a.ALUImm32(x86enc.Cmp, x86enc.S64, stripe, int32(m.Stripes()))
		a.Jcc(x86enc.CondAE, null)
		a.MovImm32(rcx, uint32(m.StripeSize()))
		a.Imul(x86enc.S64, rcx, stripe)
		a.ALU(x86enc.Add, x86enc.S64, rax, rcx)
	}
	a.MovAbs(rcx, m.Data())
	a.ALU(x86enc.Add, x86enc.S64, rax, rcx)
	a.Jmp(done)
	a.Bind(null)
	a.ALU(x86enc.Xor, x86enc.S32, rax, rax)
	a.Bind(done)
	return true
}
