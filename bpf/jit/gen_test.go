package jit

import (
	"math/rand/v2"

	"github.com/cilium/ebpf/asm"
)

// The generated programs of the kernel oracle. Every program:
//
//   - loads R9 with the address of the array map "m"'s value (ld_imm64 of a
//     map value) and R0-R8 with random 64-bit constants, and fills the
//     stack window fp-64..fp-8 with random words;
//   - runs a random body over R0-R8: every ALU64 and ALU32 operation with
//     a register or an immediate (div and mod signed and unsigned, shifts,
//     neg, movsx, byte swaps), conditional and unconditional forward jumps
//     of every condition in JMP and JMP32, loads (zero- and sign-extending)
//     and stores of every size and atomics (add, and, or, xor with and
//     without fetch, xchg, cmpxchg) on the stack window and on the map
//     value's first 64 bytes, ld_imm64 constants and bpf-to-bpf calls;
//   - stores R0-R8 at value+64 and the stack window at value+136, and
//     returns R0.
//
// The map's value before the run is random too. The programs keep to
// what the verifier accepts: R0-R8 hold scalars only, immediate shifts are
// in range, immediate divisors are not zero, stack accesses are aligned to
// their size (the verifier requires it) and atomics are aligned.
const (
	genValueSize = 200
	genMemSize   = 64  // the map bytes the body reads and writes
	genRegsAt    = 64  // R0-R8 after the body
	genStackAt   = 136 // the stack window after the body
)

type gen struct {
	r     *rand.Rand
	insns asm.Instructions
	sub   asm.Instructions // the subprogram, if any
	n     int              // raw instructions of the body so far
}

func (g *gen) reg() asm.Register { return asm.Register(g.r.IntN(9)) }

func (g *gen) imm() int32 {
	switch g.r.IntN(4) {
	case 0:
		return int32(g.r.IntN(64))
	case 1:
		return []int32{0, 1, -1, 0x7fffffff, -0x80000000, 0x80, 0xff, 0xffff, 32, 63}[g.r.IntN(10)]
	default:
		return int32(g.r.Uint32())
	}
}

func (g *gen) u64() uint64 {
	switch g.r.IntN(4) {
	case 0:
		return uint64(g.r.IntN(256))
	case 1:
		return []uint64{0, 1, 1<<64 - 1, 1 << 63, 1<<63 - 1, 0xffffffff, 0x80000000, 0x100000000}[g.r.IntN(8)]
	default:
		return g.r.Uint64()
	}
}

func (g *gen) emit(ins ...asm.Instruction) {
	for _, i := range ins {
		g.insns = append(g.insns, i)
		g.n += int(i.Size() / asm.InstructionSize)
	}
}

var genALU = []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.SDiv, asm.Or, asm.And,
	asm.LSh, asm.RSh, asm.Neg, asm.Mod, asm.SMod, asm.Xor, asm.Mov, asm.ArSh,
	asm.MovSX8, asm.MovSX16, asm.MovSX32}

var genJump = []asm.JumpOp{asm.JEq, asm.JGT, asm.JGE, asm.JSet, asm.JNE, asm.JSGT,
	asm.JSGE, asm.JLT, asm.JLE, asm.JSLT, asm.JSLE}

var genSizes = []asm.Size{asm.Byte, asm.Half, asm.Word, asm.DWord}

var genAtomics = []asm.AtomicOp{asm.AddAtomic, asm.FetchAdd, asm.AndAtomic, asm.FetchAnd,
	asm.OrAtomic, asm.FetchOr, asm.XorAtomic, asm.FetchXor, asm.Xchg, asm.CmpXchg}

// alu emits one random ALU instruction.
func (g *gen) alu() {
	op := genALU[g.r.IntN(len(genALU))]
	wide := g.r.IntN(2) == 0
	dst, src := g.reg(), g.reg()
	switch op {
	case asm.Neg:
		if wide {
			g.emit(asm.Neg.Imm(dst, 0))
		} else {
			g.emit(asm.Neg.Imm32(dst, 0))
		}
		return
	case asm.MovSX8, asm.MovSX16, asm.MovSX32:
		if op == asm.MovSX32 || wide {
			g.emit(op.Reg(dst, src))
		} else {
			g.emit(op.Reg32(dst, src))
		}
		return
	}
	if g.r.IntN(2) == 0 {
		if wide {
			g.emit(op.Reg(dst, src))
		} else {
			g.emit(op.Reg32(dst, src))
		}
		return
	}
	v := g.imm()
	switch op {
	case asm.LSh, asm.RSh, asm.ArSh:
		if wide {
			v &= 63
		} else {
			v &= 31
		}
	case asm.Div, asm.SDiv, asm.Mod, asm.SMod:
		if v == 0 {
			v = 7
		}
	}
	if wide {
		g.emit(op.Imm(dst, v))
	} else {
		g.emit(op.Imm32(dst, v))
	}
}

func (g *gen) swap() {
	dst := g.reg()
	size := []asm.Size{asm.Half, asm.Word, asm.DWord}[g.r.IntN(3)]
	switch g.r.IntN(3) {
	case 0:
		g.emit(asm.HostTo(asm.LE, dst, size))
	case 1:
		g.emit(asm.HostTo(asm.BE, dst, size))
	default:
		g.emit(asm.BSwap(dst, size))
	}
}

// mem returns a base register and an offset for an access of size bytes:
// the stack window (aligned) or the map value's first bytes (aligned when
// atomic).
func (g *gen) mem(size int, aligned bool) (asm.Register, int16) {
	if g.r.IntN(2) == 0 {
		return asm.RFP, int16(-64 + size*g.r.IntN(64/size))
	}
	if aligned {
		return asm.R9, int16(size * g.r.IntN(genMemSize/size))
	}
	return asm.R9, int16(g.r.IntN(genMemSize - size + 1))
}

func (g *gen) load() {
	size := genSizes[g.r.IntN(4)]
	base, off := g.mem(size.Sizeof(), false)
	if size != asm.DWord && g.r.IntN(3) == 0 {
		g.emit(asm.LoadMemSX(g.reg(), base, off, size))
		return
	}
	g.emit(asm.LoadMem(g.reg(), base, off, size))
}

func (g *gen) store() {
	size := genSizes[g.r.IntN(4)]
	base, off := g.mem(size.Sizeof(), false)
	if g.r.IntN(3) == 0 {
		// asm.StoreImm refuses DWord, which BPF has (the immediate
		// sign-extended).
		g.emit(asm.Instruction{OpCode: asm.StoreImmOp(size), Dst: base, Offset: off, Constant: int64(g.imm())})
		return
	}
	g.emit(asm.StoreMem(base, off, g.reg(), size))
}

func (g *gen) atomic() {
	size := []asm.Size{asm.Word, asm.DWord}[g.r.IntN(2)]
	base, off := g.mem(size.Sizeof(), true)
	op := genAtomics[g.r.IntN(len(genAtomics))]
	ins := op.Mem(base, g.reg(), size, off)
	// cilium/ebpf v0.22.0 marshals the operation from Constant (as its
	// ELF reader fills it), not from the opcode Mem sets: without this
	// every atomic would be an add.
	ins.Constant = int64(op >> 8)
	g.emit(ins)
}

// branch emits a conditional forward jump over k1 instructions, and when
// k2 > 0 an if-else: the k1 instructions end with an unconditional jump
// (ja, or gotol with its 32-bit offset) over k2 more. (A plain ja over
// code would leave it unreachable, which the verifier refuses.)
func (g *gen) branch(k1, k2 int) {
	op := genJump[g.r.IntN(len(genJump))]
	dst := g.reg()
	wide := g.r.IntN(2) == 0
	var ins asm.Instruction
	switch {
	case g.r.IntN(2) == 0 && wide:
		ins = op.Reg(dst, g.reg(), "")
	case g.r.IntN(2) == 0:
		ins = op.Reg32(dst, g.reg(), "")
	case wide:
		ins = op.Imm(dst, g.imm(), "")
	default:
		ins = op.Imm32(dst, g.imm(), "")
	}
	ins.Offset = int16(k1)
	if k2 > 0 {
		ins.Offset++
	}
	g.emit(ins)
	for j := 0; j < k1; j++ {
		g.alu()
	}
	if k2 == 0 {
		return
	}
	if g.r.IntN(2) == 0 {
		g.emit(asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource), Offset: int16(k2)})
	} else {
		g.emit(asm.Instruction{OpCode: asm.OpCode(asm.Jump32Class).SetJumpOp(asm.Ja), Constant: int64(k2)})
	}
	for j := 0; j < k2; j++ {
		g.alu()
	}
}

// call emits a bpf-to-bpf call of the subprogram, which mixes R1-R5
// into R0 and uses a stack of its own; R1-R5 are then set again (a call
// leaves them unreadable to the verifier).
func (g *gen) call() {
	if g.sub == nil {
		g.sub = asm.Instructions{
			asm.Mov.Reg(asm.R0, asm.R1).WithSymbol("sub"),
			asm.StoreMem(asm.RFP, -8, asm.R2, asm.DWord),
			asm.Mul.Reg(asm.R0, asm.R3),
			asm.LoadMem(asm.R4, asm.RFP, -8, asm.Word),
			asm.Xor.Reg(asm.R0, asm.R4),
			asm.Add.Reg32(asm.R0, asm.R5),
			asm.Return(),
		}
	}
	g.emit(asm.Instruction{OpCode: asm.Call.Op(asm.ImmSource), Src: asm.PseudoCall, Constant: -1}.WithReference("sub"))
	for r := asm.R1; r <= asm.R5; r++ {
		g.emit(asm.LoadImm(r, int64(g.u64()), asm.DWord))
	}
}

// body emits n random instructions (roughly).
func (g *gen) body(n int) {
	for i := 0; i < n; i++ {
		switch k := g.r.IntN(100); {
		case k < 45:
			g.alu()
		case k < 50:
			g.swap()
		case k < 58:
			g.load()
		case k < 66:
			g.store()
		case k < 74:
			g.atomic()
		case k < 78:
			g.emit(asm.LoadImm(g.reg(), int64(g.u64()), asm.DWord))
		case k < 80:
			g.call()
		default:
			g.branch(1+g.r.IntN(3), g.r.IntN(3))
		}
	}
}

// genProgram returns a random program of the oracle made of cases
// independent tests, each with its own genValueSize bytes of the map
// value (a batch: one program for the kernel to verify and the JIT to
// compile), and the map value it starts from.
func genProgram(r *rand.Rand, cases, n int) (asm.Instructions, []byte) {
	g := &gen{r: r}
	for c := 0; c < cases; c++ {
		g.genCase(uint32(c*genValueSize), n)
	}
	g.emit(asm.Return())
	insns := append(g.insns, g.sub...)
	value := make([]byte, cases*genValueSize)
	for i := range value {
		value[i] = byte(r.Uint32())
	}
	return insns, value
}

// genCase emits one test whose part of the map value starts at base.
func (g *gen) genCase(base uint32, n int) {
	g.emit(asm.LoadMapValue(asm.R9, 0, base).WithReference("m"))
	for reg := asm.R0; reg <= asm.R8; reg++ {
		g.emit(asm.LoadImm(reg, int64(g.u64()), asm.DWord))
	}
	for off := int16(-64); off < 0; off += 8 {
		g.emit(asm.LoadImm(asm.R1, int64(g.u64()), asm.DWord),
			asm.StoreMem(asm.RFP, off, asm.R1, asm.DWord))
	}
	g.emit(asm.LoadImm(asm.R1, int64(g.u64()), asm.DWord))
	g.body(n)
	for reg := asm.R0; reg <= asm.R8; reg++ {
		g.emit(asm.StoreMem(asm.R9, int16(genRegsAt+8*int(reg)), reg, asm.DWord))
	}
	for i := int16(0); i < 8; i++ {
		g.emit(asm.LoadMem(asm.R1, asm.RFP, -64+8*i, asm.DWord),
			asm.StoreMem(asm.R9, genStackAt+8*i, asm.R1, asm.DWord))
	}
}
