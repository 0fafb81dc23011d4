package emulate

import "github.com/probeopt/probeopt/decode"

// X86 executes decoded x86-64 instructions on an X86State and a Memory,
// exactly as a 64-bit-mode user process on the CPU would, or refuses them
// with ErrNotEmulated. The zero value is ready to use and assumes 48-bit
// virtual addresses (four-level paging).
//
// The emulated set is what X86Supported accepts: every NOP form, endbr64 and
// endbr32; push and pop of registers, immediates and memory; mov in every
// form and size; movzx, movsx, movsxd; lea; add, or, adc, sbb, and, sub,
// xor, cmp and test; inc, dec, neg, not; rol, ror, shl, shr and sar by 1,
// by an immediate and by cl; imul with two and three operands; xchg;
// cmovcc; setcc; cbw, cwde, cdqe, cwd, cdq, cqo; jmp, jcc and call with
// rel8/rel32; call and jmp through a register or memory; ret and ret
// imm16; leave; loop, loope, loopne and jrcxz.
//
// Flags the manuals leave undefined get a value (see X86UndefinedFlags);
// a program cannot rely on it, and neither can a comparison with a CPU.
//
// Where Intel and AMD CPUs execute the same instruction differently the
// emulator follows Vendor (the package documentation lists each
// difference and its evidence); where a difference is not characterised
// the instruction is refused (a 66 prefix on a near branch). The
// behaviour is checked against the CPU by package fuzz, on both vendors.
//
// xchg with a memory operand is atomic on the CPU; the emulator makes a
// Read and a Write, which is atomic only if nothing else writes the memory
// in between (for a traced process: while its other threads are stopped).
type X86 struct {
	// Vendor is the CPU whose behaviour is followed where Intel and AMD
	// differ. The zero value is decode.VendorAMD, as for the decoder; a
	// tracer sets the vendor of the CPU its process runs on.
	Vendor decode.Vendor
	// LA57 selects 57-bit virtual addresses (five-level paging) for the
	// canonical-address checks.
	LA57 bool
}

// EmulateX86 executes inst with the zero X86: AMD's behaviour and 48-bit
// virtual addresses.
func EmulateX86(inst *decode.X86Inst, st *X86State, mem Memory) error {
	return X86{}.Step(inst, st, mem)
}

// Step executes inst, located at st.RIP, on st and mem. inst.Addr is not
// used: relative branches and RIP-relative operands are taken from st.RIP,
// so an instruction decoded at one address can be executed as if it were
// at another.
//
// On success st holds the state after the instruction (RIP is the next
// instruction or the branch target). On failure st is unchanged: the error
// wraps ErrNotEmulated when inst is outside the emulated set, and is a
// *Fault when the instruction faults. A faulting instruction writes no
// memory, with one exception that follows Intel CPUs: a call to a
// non-canonical target stores its return address below rsp before it
// raises #GP (rsp itself is unchanged); an AMD CPU stores nothing.
func (x X86) Step(inst *decode.X86Inst, st *X86State, mem Memory) error {
	op, err := classifyX86(inst, x.Vendor)
	if err != nil {
		return err
	}
	e := x86Exec{in: inst, s: *st, mem: mem, la57: x.LA57, vendor: x.Vendor}
	e.fall = st.RIP + uint64(inst.Len)
	e.next = e.fall
	if err := e.run(op); err != nil {
		return err
	}
	e.s.RIP = e.next
	*st = e.s
	return nil
}

// x86Exec is one execution: the instruction, a scratch copy of the state
// that is committed only on success, and the memory.
type x86Exec struct {
	in   *decode.X86Inst
	s    X86State
	mem  Memory
	fall uint64 // address of the next instruction
	next uint64 // the new RIP: fall, or the branch target
	la57 bool
	// vendor is the CPU followed where Intel and AMD differ.
	vendor decode.Vendor
}

// x86Loc is an operand location: a register or a memory address.
type x86Loc struct {
	mem   bool
	high  bool   // register: bits 8-15 (ah, ch, dh, bh)
	stack bool   // memory: in the stack segment (#SS when non-canonical)
	seg   bool   // memory: an FS or GS base was added to off
	reg   uint8  // register number
	addr  uint64 // memory: linear address
	off   uint64 // memory: the offset (effective address) before the base
}

// canonical reports whether a is a canonical address.
func (e *x86Exec) canonical(a uint64) bool {
	if e.la57 {
		return uint64(int64(a<<7)>>7) == a
	}
	return uint64(int64(a<<16)>>16) == a
}

// checkAddr raises #GP or #SS when an access of size bytes at a is not
// canonical.
func (e *x86Exec) checkAddr(a uint64, size int, stack bool, acc Access) error {
	if e.canonical(a) && e.canonical(a+uint64(size)-1) {
		return nil
	}
	k := FaultGP
	if stack {
		k = FaultSS
	}
	return &Fault{Addr: a, Size: size, Access: acc, Kind: k, Err: ErrNonCanonical}
}

// checkMem raises the faults of a memory operand that come before any
// access: its linear address must be canonical, and on AMD CPUs so must
// its offset when an FS or GS base was added (Intel checks the linear
// address only).
func (e *x86Exec) checkMem(l x86Loc, size int, acc Access) error {
	if l.seg && e.vendor == decode.VendorAMD {
		if err := e.checkAddr(l.off, size, false, acc); err != nil {
			return err
		}
	}
	return e.checkAddr(l.addr, size, l.stack, acc)
}

// load reads size bytes of memory. acc is AccessRead, or AccessWrite for
// the read of a read-modify-write operand: the CPU reads it with the
// intent to write, and a fault on that read is reported as a write.
func (e *x86Exec) load(a uint64, size int, stack bool, acc Access) (uint64, error) {
	if err := e.checkAddr(a, size, stack, acc); err != nil {
		return 0, err
	}
	v, err := e.mem.Read(a, size)
	if err != nil {
		return 0, memFault(err, a, size, acc)
	}
	return v & sizeMask(size), nil
}

// store writes size bytes of memory. It is the last memory access of an
// instruction.
func (e *x86Exec) store(a uint64, size int, v uint64, stack bool) error {
	if err := e.checkAddr(a, size, stack, AccessWrite); err != nil {
		return err
	}
	if err := e.mem.Write(a, size, v&sizeMask(size)); err != nil {
		return memFault(err, a, size, AccessWrite)
	}
	return nil
}

// reg returns the location of general-purpose register r for an operand of
// size bytes: without a REX prefix, byte registers 4-7 are ah, ch, dh, bh.
func (e *x86Exec) reg(r uint8, size int) x86Loc {
	if size == 1 && r >= 4 && r < 8 && e.in.REX == 0 {
		return x86Loc{reg: r - 4, high: true}
	}
	return x86Loc{reg: r}
}

// regField is ModRM.reg with REX.R.
func (e *x86Exec) regField() uint8 {
	r := e.in.Reg
	if e.in.R {
		r |= 8
	}
	return r
}

// opcodeReg is the register in the low three bits of the opcode, with REX.B.
func (e *x86Exec) opcodeReg() uint8 {
	r := e.in.Opcode & 7
	if e.in.B {
		r |= 8
	}
	return r
}

// rm returns the location of the ModRM.rm operand.
func (e *x86Exec) rm(size int) x86Loc {
	if e.in.Mod == 3 {
		r := e.in.RM
		if e.in.B {
			r |= 8
		}
		return e.reg(r, size)
	}
	off, stack := e.ea()
	return e.segment(x86Loc{mem: true, addr: off, stack: stack})
}

// ea computes the offset of the memory operand of ModRM (and SIB), before
// any segment base is added, and whether its default segment is the stack
// segment (base register rsp or rbp).
func (e *x86Exec) ea() (off uint64, stack bool) {
	in := e.in
	var a uint64
	if in.RIPRel {
		a = e.fall + uint64(in.Disp)
	} else {
		a = uint64(in.Disp)
		base := -1
		if in.HasSIB {
			if b := in.SIB & 7; b != 5 || in.Mod != 0 {
				base = int(b)
			}
			idx := int(in.SIB>>3) & 7
			if in.X {
				idx |= 8
			}
			if idx != 4 {
				a += e.s.GPR[idx] << (in.SIB >> 6)
			}
		} else {
			base = int(in.RM)
		}
		if base >= 0 {
			if in.B {
				base |= 8
			}
			a += e.s.GPR[base]
			stack = base == decode.RSP || base == decode.RBP
		}
	}
	if in.AddrSize == 32 {
		a &= 0xffffffff
	}
	return a, stack
}

// segment applies FS or GS to a memory location: it adds the base, and a
// non-canonical address then raises #GP whatever the base register. In
// 64-bit mode the ES, CS, SS and DS prefixes are ignored: they neither
// replace an FS or GS prefix nor change the default segment.
func (e *x86Exec) segment(l x86Loc) x86Loc {
	switch {
	case e.in.Prefixes&decode.PrefixFS != 0:
		l.off, l.seg = l.addr, true
		l.addr += e.s.FSBase
		l.stack = false
	case e.in.Prefixes&decode.PrefixGS != 0:
		l.off, l.seg = l.addr, true
		l.addr += e.s.GSBase
		l.stack = false
	}
	return l
}

// get reads an operand of size bytes.
func (e *x86Exec) get(l x86Loc, size int) (uint64, error) {
	return e.getAs(l, size, AccessRead)
}

// getRMW reads the destination of a read-modify-write instruction.
func (e *x86Exec) getRMW(l x86Loc, size int) (uint64, error) {
	return e.getAs(l, size, AccessWrite)
}

// getAs reads an operand; acc is the access kind a fault reports. For the
// destination of a read-modify-write instruction (acc == AccessWrite), a
// memory that is a WriteChecker is asked first whether the write would
// fault, as the CPU checks.
func (e *x86Exec) getAs(l x86Loc, size int, acc Access) (uint64, error) {
	if l.mem {
		if err := e.checkMem(l, size, acc); err != nil {
			return 0, err
		}
		if wc, ok := e.mem.(WriteChecker); ok && acc == AccessWrite {
			if err := wc.CheckWrite(l.addr, size); err != nil {
				return 0, memFault(err, l.addr, size, acc)
			}
		}
		return e.load(l.addr, size, l.stack, acc)
	}
	v := e.s.GPR[l.reg]
	if l.high {
		return (v >> 8) & 0xff, nil
	}
	return v & sizeMask(size), nil
}

// setReg writes a register operand of size bytes: 8- and 16-bit writes
// keep the other bits, 32-bit writes zero the upper half.
func (e *x86Exec) setReg(l x86Loc, size int, v uint64) {
	p := &e.s.GPR[l.reg]
	switch {
	case l.high:
		*p = *p&^0xff00 | (v&0xff)<<8
	case size == 1:
		*p = *p&^0xff | v&0xff
	case size == 2:
		*p = *p&^0xffff | v&0xffff
	case size == 4:
		*p = v & 0xffffffff
	default:
		*p = v
	}
}

// put writes an operand of size bytes.
func (e *x86Exec) put(l x86Loc, size int, v uint64) error {
	if l.mem {
		if err := e.checkMem(l, size, AccessWrite); err != nil {
			return err
		}
		return e.store(l.addr, size, v, l.stack)
	}
	e.setReg(l, size, v)
	return nil
}

// imm returns the first immediate sign-extended from its encoded size.
func (e *x86Exec) imm() uint64 {
	return signExtend(e.in.Imm, e.in.ImmSize)
}

// setStatus replaces the status flags with f.
func (e *x86Exec) setStatus(f uint64) {
	e.s.RFLAGS = e.s.RFLAGS&^FlagsStatus | f&FlagsStatus
}

// push stores v (size bytes) below rsp and moves rsp: the last memory
// access of the instruction.
func (e *x86Exec) push(v uint64, size int) error {
	sp := e.s.GPR[decode.RSP] - uint64(size)
	if err := e.store(sp, size, v, true); err != nil {
		return err
	}
	e.s.GPR[decode.RSP] = sp
	return nil
}

// branch moves to target, raising #GP when it is not canonical.
func (e *x86Exec) branch(target uint64) error {
	if !e.canonical(target) {
		return &Fault{Addr: target, Size: 1, Access: AccessFetch, Kind: FaultGP, Err: ErrNonCanonical}
	}
	e.next = target
	return nil
}

// call pushes the return address and moves to target. A call to a
// non-canonical target raises #GP with the registers unchanged, after the
// faults of the push (a non-canonical or unwritable stack comes first).
// An Intel CPU has then stored the return address below rsp; an AMD CPU
// has stored nothing, and the emulator asks a WriteChecker memory whether
// the push would fault (without one it raises #GP).
func (e *x86Exec) call(target uint64) error {
	if e.vendor == decode.VendorAMD && !e.canonical(target) {
		sp := e.s.GPR[decode.RSP] - 8
		if err := e.checkAddr(sp, 8, true, AccessWrite); err != nil {
			return err
		}
		if wc, ok := e.mem.(WriteChecker); ok {
			if err := wc.CheckWrite(sp, 8); err != nil {
				return memFault(err, sp, 8, AccessWrite)
			}
		}
		return e.branch(target)
	}
	if err := e.push(e.fall, 8); err != nil {
		return err
	}
	if err := e.branch(target); err != nil {
		return err
	}
	return nil
}

// rel returns the target of a relative branch.
func (e *x86Exec) rel() uint64 {
	return e.fall + e.imm()
}

// run executes op on the scratch state: one method per instruction
// family.
func (e *x86Exec) run(op x86Op) error {
	switch op.kind {
	case kNop:
		return nil
	case kALU, kTest:
		return e.alu(op)
	case kIncDec, kNot, kNeg:
		return e.unary(op)
	case kShift:
		return e.shift(op)
	case kIMul:
		return e.imul(op)
	case kMov:
		return e.mov(op)
	case kMovZX, kMovSX, kCwd, kCdq:
		return e.extend(op)
	case kLea:
		a, _ := e.ea() // the offset: lea adds no segment base
		e.setReg(e.reg(e.regField(), int(op.size)), int(op.size), a)
		return nil
	case kXchg:
		return e.xchg(op)
	case kCmov, kSetcc:
		return e.conditional(op)
	case kPush:
		return e.pushOp(op)
	case kPop:
		return e.pop(op)
	case kLeave:
		return e.leave(op)
	case kJmp, kJcc, kCall, kCallInd, kJmpInd, kRet:
		return e.control(op)
	case kLoop:
		return e.loop(op)
	}
	return notEmulated(e.in, "instruction not in the emulated set")
}

// unary executes inc, dec (CF unchanged), not (flags unchanged) and neg.
func (e *x86Exec) unary(op x86Op) error {
	size := int(op.size)
	l := e.rm(size)
	a, err := e.getRMW(l, size)
	if err != nil {
		return err
	}
	switch op.kind {
	case kNot:
		return e.put(l, size, ^a)
	case kNeg:
		res, f := subFlags(0, a, 0, size)
		if err := e.put(l, size, res); err != nil {
			return err
		}
		e.setStatus(f)
		return nil
	}
	var res, f uint64
	if op.sub == 0 {
		res, f = addFlags(a, 1, 0, size)
	} else {
		res, f = subFlags(a, 1, 0, size)
	}
	if err := e.put(l, size, res); err != nil {
		return err
	}
	e.s.RFLAGS = e.s.RFLAGS&^(FlagsStatus&^FlagCF) | f&^FlagCF
	return nil
}

// shift executes rol, ror, shl, shr and sar by one, by cl or by an
// immediate.
func (e *x86Exec) shift(op x86Op) error {
	size := int(op.size)
	l := e.rm(size)
	a, err := e.getRMW(l, size)
	if err != nil {
		return err
	}
	cnt := shiftSource(op, e.in, &e.s)
	res, f := shiftOp(int(op.sub), a, shiftCount(cnt, size), size, e.s.RFLAGS)
	if err := e.put(l, size, res); err != nil {
		return err
	}
	e.s.RFLAGS = f
	return nil
}

// imul executes the two- and three-operand forms of imul.
func (e *x86Exec) imul(op x86Op) error {
	size := int(op.size)
	src, err := e.get(e.rm(size), size)
	if err != nil {
		return err
	}
	dst := e.reg(e.regField(), size)
	var b uint64
	if op.form == formGEI {
		b = e.imm()
	} else {
		b, _ = e.get(dst, size)
	}
	res, ovf := imulOp(src, b, size)
	e.setReg(dst, size, res)
	f := szpFlags(res, size)
	if ovf {
		f |= FlagCF | FlagOF
	}
	e.setStatus(f)
	return nil
}

// extend executes the moves that zero- or sign-extend: movzx, movsx and
// movsxd into a register, cbw/cwde/cdqe within rAX, cwd/cdq/cqo into rDX.
func (e *x86Exec) extend(op x86Op) error {
	size := int(op.size)
	switch op.kind {
	case kCwd:
		half := size / 2
		e.setReg(x86Loc{reg: decode.RAX}, size, signExtend(e.s.GPR[decode.RAX], half))
		return nil
	case kCdq:
		var v uint64
		if e.s.GPR[decode.RAX]&signBit(size) != 0 {
			v = ^uint64(0)
		}
		e.setReg(x86Loc{reg: decode.RDX}, size, v)
		return nil
	}
	ssize := int(op.sub)
	v, err := e.get(e.rm(ssize), ssize)
	if err != nil {
		return err
	}
	if op.kind == kMovSX {
		v = signExtend(v, ssize)
	}
	e.setReg(e.reg(e.regField(), size), size, v)
	return nil
}

// xchg exchanges rAX with an opcode register, or ModRM.rm with ModRM.reg.
func (e *x86Exec) xchg(op x86Op) error {
	size := int(op.size)
	var a, b x86Loc
	if op.form == formZ {
		a, b = x86Loc{reg: decode.RAX}, x86Loc{reg: e.opcodeReg()}
	} else {
		a, b = e.rm(size), e.reg(e.regField(), size)
	}
	va, err := e.getRMW(a, size)
	if err != nil {
		return err
	}
	vb, _ := e.get(b, size)
	if err := e.put(a, size, vb); err != nil {
		return err
	}
	e.setReg(b, size, va)
	return nil
}

// conditional executes cmovcc and setcc.
func (e *x86Exec) conditional(op x86Op) error {
	if op.kind == kSetcc {
		var v uint64
		if condition(op.sub, e.s.RFLAGS) {
			v = 1
		}
		return e.put(e.rm(1), 1, v)
	}
	size := int(op.size)
	v, err := e.get(e.rm(size), size)
	if err != nil {
		return err
	}
	dst := e.reg(e.regField(), size)
	if !condition(op.sub, e.s.RFLAGS) {
		// A 32-bit cmov zeroes the upper half even when it does not move.
		v, _ = e.get(dst, size)
	}
	e.setReg(dst, size, v)
	return nil
}

// pushOp executes push of an opcode register, an immediate or ModRM.rm.
func (e *x86Exec) pushOp(op x86Op) error {
	size := int(op.size)
	var v uint64
	switch op.form {
	case formZ:
		v = e.s.GPR[e.opcodeReg()]
	case formI:
		v = e.imm()
	default:
		var err error
		if v, err = e.get(e.rm(size), size); err != nil {
			return err
		}
	}
	return e.push(v, size)
}

// leave executes leave: rsp = rbp, then pop rbp.
func (e *x86Exec) leave(op x86Op) error {
	size := int(op.size)
	sp := e.s.GPR[decode.RBP]
	v, err := e.load(sp, size, true, AccessRead)
	if err != nil {
		return err
	}
	e.s.GPR[decode.RSP] = sp + uint64(size)
	e.setReg(x86Loc{reg: decode.RBP}, size, v)
	return nil
}

// control executes the near branches: jmp, jcc, call (relative and
// indirect), indirect jmp and ret.
func (e *x86Exec) control(op x86Op) error {
	switch op.kind {
	case kJmp:
		return e.branch(e.rel())
	case kJcc:
		if condition(op.sub, e.s.RFLAGS) {
			return e.branch(e.rel())
		}
		return nil
	case kCall:
		return e.call(e.rel())
	case kCallInd, kJmpInd:
		t, err := e.get(e.rm(8), 8)
		if err != nil {
			return err
		}
		if op.kind == kCallInd {
			return e.call(t)
		}
		return e.branch(t)
	}
	// ret, ret imm16
	sp := e.s.GPR[decode.RSP]
	t, err := e.load(sp, 8, true, AccessRead)
	if err != nil {
		return err
	}
	if err := e.branch(t); err != nil {
		return err
	}
	sp += 8
	if e.in.Opcode == 0xc2 {
		sp += e.in.Imm
	}
	e.s.GPR[decode.RSP] = sp
	return nil
}

// alu executes add, or, adc, sbb, and, sub, xor, cmp and test.
func (e *x86Exec) alu(op x86Op) error {
	size := int(op.size)
	var dst x86Loc
	var b uint64
	switch op.form {
	case formEG:
		dst = e.rm(size)
		b, _ = e.get(e.reg(e.regField(), size), size)
	case formGE:
		dst = e.reg(e.regField(), size)
		v, err := e.get(e.rm(size), size)
		if err != nil {
			return err
		}
		b = v
	case formEI:
		dst = e.rm(size)
		b = e.imm()
	case formAI:
		dst = x86Loc{reg: decode.RAX}
		b = e.imm()
	}
	acc := AccessRead
	if op.kind == kALU && op.sub != aluCmp {
		acc = AccessWrite
	}
	a, err := e.getAs(dst, size, acc)
	if err != nil {
		return err
	}
	var res, f uint64
	write := false
	if op.kind == kTest {
		res = a & b & sizeMask(size)
		f = logicFlags(res, size)
	} else {
		res, f, write = aluOp(int(op.sub), a, b, e.s.RFLAGS&FlagCF, size)
	}
	if write {
		if err := e.put(dst, size, res); err != nil {
			return err
		}
	}
	e.setStatus(f)
	return nil
}

// mov executes every form of mov.
func (e *x86Exec) mov(op x86Op) error {
	size := int(op.size)
	switch op.form {
	case formEG:
		v, _ := e.get(e.reg(e.regField(), size), size)
		return e.put(e.rm(size), size, v)
	case formGE:
		v, err := e.get(e.rm(size), size)
		if err != nil {
			return err
		}
		e.setReg(e.reg(e.regField(), size), size, v)
		return nil
	case formEI:
		return e.put(e.rm(size), size, e.imm())
	case formZI:
		e.setReg(e.reg(e.opcodeReg(), size), size, e.in.Imm)
		return nil
	case formAO:
		a := uint64(e.in.Disp)
		if e.in.AddrSize == 32 {
			a &= 0xffffffff
		}
		l := e.segment(x86Loc{mem: true, addr: a})
		rax := x86Loc{reg: decode.RAX}
		if op.sub == 0 {
			v, err := e.get(l, size)
			if err != nil {
				return err
			}
			e.setReg(rax, size, v)
			return nil
		}
		v, _ := e.get(rax, size)
		return e.put(l, size, v)
	}
	return notEmulated(e.in, "mov form")
}

// pop executes pop to a register or to memory.
func (e *x86Exec) pop(op x86Op) error {
	size := int(op.size)
	sp := e.s.GPR[decode.RSP]
	v, err := e.load(sp, size, true, AccessRead)
	if err != nil {
		return err
	}
	// rsp moves before the destination is written (and before a memory
	// destination based on rsp is computed); pop rsp then overwrites it.
	e.s.GPR[decode.RSP] = sp + uint64(size)
	if op.form == formZ {
		e.setReg(x86Loc{reg: e.opcodeReg()}, size, v)
		return nil
	}
	return e.put(e.rm(size), size, v)
}

// loop executes loopne, loope, loop and jrcxz; with a 67 prefix they count
// in ecx.
func (e *x86Exec) loop(op x86Op) error {
	cx := e.s.GPR[decode.RCX]
	csize := 8
	if e.in.AddrSize == 32 {
		csize = 4
	}
	if op.sub == 3 { // jrcxz, jecxz
		if cx&sizeMask(csize) == 0 {
			return e.branch(e.rel())
		}
		return nil
	}
	cx = (cx - 1) & sizeMask(csize)
	take := cx != 0
	switch op.sub {
	case 0: // loopne
		take = take && e.s.RFLAGS&FlagZF == 0
	case 1: // loope
		take = take && e.s.RFLAGS&FlagZF != 0
	}
	if take {
		if err := e.branch(e.rel()); err != nil {
			return err
		}
	}
	e.setReg(x86Loc{reg: decode.RCX}, csize, cx)
	return nil
}
