package trampoline

import (
	"errors"
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/x86enc"
)

// The slots' x86-64 code is written with package x86enc. x86Emitter is the
// generator's view of it: the names the generator (x86slot.go) calls, each
// one x86enc form, the code so far in b, the error sentinels of this
// package, and a check by package decode of every instruction written.

// x86Reg is a general-purpose register by encoding number (the numbering of
// package decode: rax rcx rdx rbx rsp rbp rsi rdi r8..r15).
type x86Reg = x86enc.Reg

const (
	rax = x86enc.RAX
	rcx = x86enc.RCX
	rdx = x86enc.RDX
	rbx = x86enc.RBX
	rsp = x86enc.RSP
	rbp = x86enc.RBP
	rsi = x86enc.RSI
	rdi = x86enc.RDI
	r8  = x86enc.R8
	r9  = x86enc.R9
	r10 = x86enc.R10
	r11 = x86enc.R11
)

// x86 condition codes (the low nibble of jcc).
const (
	ccB  = x86enc.CondB  // below (unsigned <)
	ccAE = x86enc.CondAE // above or equal
	ccE  = x86enc.CondE
	ccNE = x86enc.CondNE
	ccBE = x86enc.CondBE // below or equal (unsigned <=)
	ccA  = x86enc.CondA  // above (unsigned >)
)

// x86Mem is a memory operand: [base + index*scale + disp], [rip + target]
// or an absolute disp32 (no base, no index).
type x86Mem = x86enc.Mem

func memAt(base x86Reg, disp int32) x86Mem { return x86enc.At(base, disp) }

func memIdx(base, index x86Reg, disp int32) x86Mem { return x86enc.Indexed(base, index, 1, disp) }

func memRIP(target uint64) x86Mem { return x86enc.RIP(target) }

// x86Label is a position in the code, bound once.
type x86Label = x86enc.Label

// x86Emitter appends x86-64 instructions for a known address (base).
type x86Emitter struct {
	a      *x86enc.Asm
	base   uint64 // address of b[0]
	b      []byte // the code so far; labels are resolved by finish
	starts []int  // offsets where an instruction of the emitter starts, after finish
	err    error  // the emitter's own first error
}

func newX86Emitter(base uint64) *x86Emitter { return &x86Emitter{a: x86enc.New(base), base: base} }

func (e *x86Emitter) pc() uint64 { return e.a.PC() }

// sync makes b the code so far; every method ends with it.
func (e *x86Emitter) sync() { e.b = e.a.Bytes() }

// Instructions. The comments give the AT&T form.

// lea m, r
func (e *x86Emitter) lea(r x86Reg, m x86Mem) { e.a.Lea(r, m); e.sync() }

// mov r, m (64-bit store)
func (e *x86Emitter) store(m x86Mem, r x86Reg) { e.a.Store(x86enc.S64, m, r); e.sync() }

// mov m, r (64-bit load)
func (e *x86Emitter) load(r x86Reg, m x86Mem) { e.a.Load(x86enc.S64, r, m); e.sync() }

// movl r32, m
func (e *x86Emitter) store32(m x86Mem, r x86Reg) { e.a.Store(x86enc.S32, m, r); e.sync() }

// movl m, r32 (zero-extends)
func (e *x86Emitter) load32(r x86Reg, m x86Mem) { e.a.Load(x86enc.S32, r, m); e.sync() }

// movq $imm32 (sign-extended), m
func (e *x86Emitter) storeImm(m x86Mem, v int32) { e.a.StoreImm(x86enc.S64, m, v); e.sync() }

// movl $imm32, m
func (e *x86Emitter) storeImm32(m x86Mem, v int32) { e.a.StoreImm(x86enc.S32, m, v); e.sync() }

// mov src, dst (64-bit)
func (e *x86Emitter) movRR(dst, src x86Reg) { e.a.Mov(x86enc.S64, dst, src); e.sync() }

// mov src32, dst32 (zero-extends)
func (e *x86Emitter) movRR32(dst, src x86Reg) { e.a.Mov(x86enc.S32, dst, src); e.sync() }

// movImm loads a 64-bit constant: movl $imm32 (zero-extending) when it
// fits, else movabs.
func (e *x86Emitter) movImm(r x86Reg, v uint64) { e.a.MovImm(r, v); e.sync() }

// addr loads the address a into r: lea a(%rip) when it reaches, else a
// constant.
func (e *x86Emitter) addr(r x86Reg, a uint64) {
	if reachRIP(e.pc()+7, a) {
		e.lea(r, memRIP(a))
		return
	}
	e.movImm(r, a)
}

func (e *x86Emitter) push(r x86Reg) { e.a.Push(r); e.sync() }
func (e *x86Emitter) pop(r x86Reg)  { e.a.Pop(r); e.sync() }

func (e *x86Emitter) pushfq()      { e.a.Pushfq(); e.sync() }
func (e *x86Emitter) popfq()       { e.a.Popfq(); e.sync() }
func (e *x86Emitter) lahf()        { e.a.Lahf(); e.sync() }
func (e *x86Emitter) sahf()        { e.a.Sahf(); e.sync() }
func (e *x86Emitter) setoAL()      { e.a.Setcc(x86enc.CondO, rax); e.sync() }
func (e *x86Emitter) addAL(v int8) { e.a.ALUAL(x86enc.Add, v); e.sync() }
func (e *x86Emitter) ret()         { e.a.Ret(); e.sync() }
func (e *x86Emitter) ud2()         { e.a.Ud2(); e.sync() }
func (e *x86Emitter) rdtsc()       { e.a.Rdtsc(); e.sync() }

// one emits a one-byte instruction: int3 or nop (the fillers).
func (e *x86Emitter) one(b byte) {
	switch b {
	case 0xCC:
		e.a.Int3()
	case 0x90:
		e.a.Nop()
	default:
		if e.err == nil {
			e.err = fmt.Errorf("one-byte instruction %#x: %w", b, ErrEncode)
		}
	}
	e.sync()
}

// lock incq m
func (e *x86Emitter) lockInc(m x86Mem) { e.a.LockIncMem(x86enc.S64, m); e.sync() }

// incq m (not atomic)
func (e *x86Emitter) incMem(m x86Mem) { e.a.IncMem(x86enc.S64, m); e.sync() }

// [lock] cmpxchg r, m
func (e *x86Emitter) cmpxchg(m x86Mem, r x86Reg, lock bool) {
	e.a.Cmpxchg(x86enc.S64, m, r, lock)
	e.sync()
}

// cmp r, m: flags of m - r
func (e *x86Emitter) cmpMemReg(m x86Mem, r x86Reg) {
	e.a.ALUStore(x86enc.Cmp, x86enc.S64, m, r)
	e.sync()
}

// cmp src, dst: flags of dst - src
func (e *x86Emitter) cmpRR(dst, src x86Reg) { e.a.ALU(x86enc.Cmp, x86enc.S64, dst, src); e.sync() }

// cmpq $imm8, m
func (e *x86Emitter) cmpMemImm8(m x86Mem, v int8) {
	e.a.ALUMemImm8(x86enc.Cmp, x86enc.S64, m, v)
	e.sync()
}

// cmp $imm32, r (64-bit when w)
func (e *x86Emitter) cmpImm(r x86Reg, v int32, w bool) {
	e.a.ALUImm32(x86enc.Cmp, size(w), r, v)
	e.sync()
}

// sub m, r: r -= m
func (e *x86Emitter) subMem(r x86Reg, m x86Mem) {
	e.a.ALULoad(x86enc.Sub, x86enc.S64, r, m)
	e.sync()
}

// add $imm8, r32 / sub $imm8, r32
func (e *x86Emitter) add32(r x86Reg, v int8) { e.a.ALUImm8(x86enc.Add, x86enc.S32, r, v); e.sync() }
func (e *x86Emitter) sub32(r x86Reg, v int8) { e.a.ALUImm8(x86enc.Sub, x86enc.S32, r, v); e.sync() }

// add $imm32, r (64-bit, sign-extended)
func (e *x86Emitter) add(r x86Reg, v int32) { e.a.ALUImm32(x86enc.Add, x86enc.S64, r, v); e.sync() }

// and $imm32, r (64-bit, sign-extended)
func (e *x86Emitter) andImm(r x86Reg, v int32) {
	e.a.ALUImm32(x86enc.And, x86enc.S64, r, v)
	e.sync()
}

// shl $n, r / shr $n, r (64-bit)
func (e *x86Emitter) shl(r x86Reg, n uint8) { e.a.Shl(x86enc.S64, r, n); e.sync() }
func (e *x86Emitter) shr(r x86Reg, n uint8) { e.a.Shr(x86enc.S64, r, n); e.sync() }

// or src, dst (64-bit)
func (e *x86Emitter) orRR(dst, src x86Reg) { e.a.ALU(x86enc.Or, x86enc.S64, dst, src); e.sync() }

// add src, dst (64-bit)
func (e *x86Emitter) addRR(dst, src x86Reg) { e.a.ALU(x86enc.Add, x86enc.S64, dst, src); e.sync() }

// xor r32, r32
func (e *x86Emitter) zero32(r x86Reg) { e.a.ALU(x86enc.Xor, x86enc.S32, r, r); e.sync() }

// test r, r (64-bit when w)
func (e *x86Emitter) test(r x86Reg, w bool) { e.a.Test(size(w), r, r); e.sync() }

// testl $imm32, m
func (e *x86Emitter) testMemImm32(m x86Mem, v int32) {
	e.a.TestMemImm32(x86enc.S32, m, v)
	e.sync()
}

// imul src, dst (64-bit)
func (e *x86Emitter) imulRR(dst, src x86Reg) { e.a.Imul(x86enc.S64, dst, src); e.sync() }

// inc r (64-bit)
func (e *x86Emitter) inc(r x86Reg) { e.a.Inc(x86enc.S64, r); e.sync() }

// dec r32
func (e *x86Emitter) dec32(r x86Reg) { e.a.Dec(x86enc.S32, r); e.sync() }

// rdfsbase r (64-bit)
func (e *x86Emitter) rdfsbase(r x86Reg) { e.a.Rdfsbase(r); e.sync() }

// jmp *m
func (e *x86Emitter) jmpMem(m x86Mem) { e.a.JmpMem(m); e.sync() }

// call *m
func (e *x86Emitter) callMem(m x86Mem) { e.a.CallMem(m); e.sync() }

// leaL: lea label(%rip), r (64-bit).
func (e *x86Emitter) leaL(r x86Reg, l x86Label) { e.a.LeaLabel(r, l); e.sync() }

// mov %fs:0, r
func (e *x86Emitter) loadFS0(r x86Reg) { e.a.Load(x86enc.S64, r, x86enc.Abs(0).FS()); e.sync() }

// newLabel returns an unbound label.
func (e *x86Emitter) newLabel() x86Label { return e.a.NewLabel() }

// bind binds l to the current position.
func (e *x86Emitter) bind(l x86Label) { e.a.Bind(l) }

// jmpL: jmp rel32 to a label.
func (e *x86Emitter) jmpL(l x86Label) { e.a.Jmp(l); e.sync() }

// jccL: jcc rel32 to a label.
func (e *x86Emitter) jccL(cc x86enc.Cond, l x86Label) { e.a.Jcc(cc, l); e.sync() }

// jmpTo: jmp rel32 to an absolute address; fails with ErrOutOfReach when
// it is beyond +-2 GiB.
func (e *x86Emitter) jmpTo(to uint64) { e.a.JmpTo(to); e.sync() }

// foreignCode appends bytes produced elsewhere (a relocated instruction).
func (e *x86Emitter) foreignCode(b []byte) { e.a.Raw(b); e.sync() }

func size(w bool) x86enc.Size {
	if w {
		return x86enc.S64
	}
	return x86enc.S32
}

// finish resolves the labels and checks every instruction the emitter
// wrote by decoding it again: same start, same length. It returns the code.
func (e *x86Emitter) finish() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	code, err := e.a.Finish()
	if err == nil {
		err = e.a.Verify(x86Len)
	}
	if err != nil {
		return nil, x86Err(err)
	}
	e.b, e.starts = code, e.a.Starts()
	return code, nil
}

// x86Len is the length of the instruction at the start of code.
func x86Len(code []byte, addr uint64) (int, error) {
	var inst decode.X86Inst
	if err := (decode.X86Decoder{}).Decode(code, addr, &inst); err != nil {
		return 0, err
	}
	return inst.Len, nil
}

// x86Err gives an error of the encoder this package's sentinel.
func x86Err(err error) error {
	var ee *x86enc.Error
	if !errors.As(err, &ee) {
		return err
	}
	if errors.Is(ee.Err, x86enc.ErrOutOfReach) {
		return fmt.Errorf("%s: %w", ee.Msg, ErrOutOfReach)
	}
	return fmt.Errorf("%s: %w", ee.Msg, ErrEncode)
}

// reachRIP reports whether an instruction ending at end reaches target
// with a rel32.
func reachRIP(end, target uint64) bool { return x86enc.Reaches(end, target) }
