package jit

import (
	"errors"
	"fmt"
	"sort"

	"github.com/cilium/ebpf/asm"

	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/internal/x86enc"
)

// trackR1 follows which map R1 holds after ins.
func (c *compiler) trackR1(ins *asm.Instruction) {
	op := ins.OpCode
	switch {
	case op.IsDWordLoad() && ins.Dst == asm.R1 && ins.Src == asm.PseudoMapFD:
		c.r1Map = c.opts.Maps[ins.Reference()]
	case op.Class().IsJump() && op.JumpOp() == asm.Call:
		c.r1Map = nil
	case op.Class().IsJump():
	case op.Class() == asm.StXClass && op.Mode() == asm.AtomicMode && ins.Src == asm.R1 &&
		op.AtomicOp() != asm.AddAtomic && op.AtomicOp() != asm.AndAtomic &&
		op.AtomicOp() != asm.OrAtomic && op.AtomicOp() != asm.XorAtomic:
		c.r1Map = nil // a fetch into R1
	case op.Class() == asm.StXClass || op.Class() == asm.StClass:
	case ins.Dst == asm.R1:
		c.r1Map = nil
	}
}

// Errors of Compile.
var (
	// ErrUnsupported means an instruction, a helper or a map the JIT does
	// not compile; the error names it.
	ErrUnsupported = errors.New("not supported by the JIT")
	// ErrInvalid means a malformed program: a jump out of the program, a
	// reference to an unknown map or function.
	ErrInvalid = errors.New("invalid program")
	// ErrNotSupported means this system cannot run the code in-process.
	ErrNotSupported = errors.New("not supported on this system")
)

// StackSize is the BPF stack of one frame, in bytes.
const StackSize = 512

// Options are the choices of Compile; nil means defaults.
type Options struct {
	// Base is the address the code will run at (the code is position
	// independent apart from the map addresses it holds; Base only names
	// addresses in errors and in Verify).
	Base uint64
	// Maps resolves the program's map references by name: the maps the
	// code's ld_imm64 map loads and map helpers reach, by address.
	Maps map[string]*maps.Map
	// Runtime is the runtime area the helpers use (random state); nil
	// when the program calls no helper that needs it.
	Runtime *Runtime
}

// The BPF registers in x86-64 registers: R0-R5 where the System V ABI
// returns and passes arguments (so a helper is a plain function), R6-R9
// in callee-saved registers, R10 (the frame pointer) in rbp.
var regs = [11]x86enc.Reg{
	asm.R0:  x86enc.RAX,
	asm.R1:  x86enc.RDI,
	asm.R2:  x86enc.RSI,
	asm.R3:  x86enc.RDX,
	asm.R4:  x86enc.RCX,
	asm.R5:  x86enc.R8,
	asm.R6:  x86enc.RBX,
	asm.R7:  x86enc.R13,
	asm.R8:  x86enc.R14,
	asm.R9:  x86enc.R15,
	asm.R10: x86enc.RBP,
}

// Scratch registers, never a BPF register: r9, r10, r11; r12 holds the
// stripe number for the whole run.
const (
	aux    = x86enc.R9
	tmp    = x86enc.R10
	tmp2   = x86enc.R11
	stripe = x86enc.R12
)

// Code is a compiled program.
type Code struct {
	// Bytes is the machine code; the entry point is its first byte.
	Bytes []byte
	// Insns is the number of BPF instructions compiled.
	Insns int
	asm   *x86enc.Asm
}

// Verify decodes every instruction of the code with lenOf (package
// decode's length, in the tests) and checks the lengths emitted.
func (c *Code) Verify(lenOf func(code []byte, addr uint64) (int, error)) error {
	return c.asm.Verify(lenOf)
}

type compiler struct {
	a       *x86enc.Asm
	opts    *Options
	insns   asm.Instructions
	raw     []int // raw offset of each instruction
	labels  map[int]x86enc.Label
	funcs   []int                // raw offsets where a function starts, sorted
	exits   map[int]x86enc.Label // each function's epilogue
	entries map[int]x86enc.Label // each function's prologue, where calls land
	helpers map[asm.BuiltinFunc]x86enc.Label
	syms    map[string]int
	// targets are the raw offsets jumps land on.
	targets map[int]bool
	// perf is set when the program calls perf_event_output: the ring
	// reserve code takes perf event arrays too.
	perf bool
	// r1Map is the map whose address R1 holds from an ld_imm64 of this
	// straight-line code, or nil: a map_lookup_elem of it is inlined.
	r1Map *maps.Map
}

// Compile compiles a verified program (the instructions as the kernel
// accepted them, bpf-to-bpf calls flattened as cilium/ebpf links them)
// into x86-64 code with the calling convention of the package
// documentation. An instruction, helper or map type the JIT does not
// handle is refused with ErrUnsupported and its name.
func Compile(insns asm.Instructions, opts *Options) (*Code, error) {
	if opts == nil {
		opts = &Options{}
	}
	if len(insns) == 0 {
		return nil, fmt.Errorf("empty program: %w", ErrInvalid)
	}
	c := &compiler{a: x86enc.New(opts.Base), opts: opts, insns: insns,
		labels: map[int]x86enc.Label{}, exits: map[int]x86enc.Label{}, entries: map[int]x86enc.Label{},
		helpers: map[asm.BuiltinFunc]x86enc.Label{}}
	if err := c.layout(); err != nil {
		return nil, err
	}
	for i := range insns {
		ins := &insns[i]
		off := c.raw[i]
		if c.isFunc(off) {
			if off != 0 {
				c.endFunc(c.funcOf(off - 1))
			}
			c.a.Bind(c.entries[off])
			c.prologue(off)
		}
		c.a.Bind(c.label(off))
		if c.targets[off] {
			c.r1Map = nil // reached by a jump: R1 unknown here
		}
		if err := c.insn(i, ins); err != nil {
			return nil, fmt.Errorf("instruction %d (%v): %w", off, *ins, err)
		}
		c.trackR1(ins)
	}
	c.endFunc(c.funcOf(c.raw[len(insns)-1]))
	if err := c.emitHelpers(); err != nil {
		return nil, err
	}
	b, err := c.a.Finish()
	if err != nil {
		return nil, fmt.Errorf("assemble: %w", err)
	}
	return &Code{Bytes: b, Insns: len(insns), asm: c.a}, nil
}

// layout finds the raw offset of every instruction and where the
// functions start (the entry and every bpf-to-bpf call target).
func (c *compiler) layout() error {
	c.raw = make([]int, len(c.insns)+1)
	syms := map[string]int{}
	off := 0
	for i, ins := range c.insns {
		c.raw[i] = off
		if s := ins.Symbol(); s != "" {
			syms[s] = off
		}
		off += int(ins.Size() / asm.InstructionSize)
	}
	c.raw[len(c.insns)] = off
	end := off
	c.targets = map[int]bool{}
	for i, ins := range c.insns {
		op := ins.OpCode
		if !op.Class().IsJump() || op.JumpOp() == asm.Call || op.JumpOp() == asm.Exit {
			continue
		}
		rel := int(ins.Offset)
		if op.Class() == asm.Jump32Class && op.JumpOp() == asm.Ja {
			rel = int(ins.Constant)
		}
		c.targets[c.raw[i]+1+rel] = true
	}
	starts := map[int]bool{0: true}
	for i := range c.insns {
		ins := &c.insns[i]
		if !ins.IsFunctionCall() {
			continue
		}
		t, err := c.callTarget(i, syms)
		if err != nil {
			return err
		}
		if t < 0 || t >= end {
			return fmt.Errorf("call at %d to %d, outside the program: %w", c.raw[i], t, ErrInvalid)
		}
		starts[t] = true
	}
	for s := range starts {
		c.funcs = append(c.funcs, s)
		c.exits[s] = c.a.NewLabel()
		c.entries[s] = c.a.NewLabel()
	}
	sort.Ints(c.funcs)
	c.syms = syms
	return nil
}

// callTarget is the raw offset a bpf-to-bpf call at index i reaches: its
// reference's symbol, or its relative immediate.
func (c *compiler) callTarget(i int, syms map[string]int) (int, error) {
	ins := &c.insns[i]
	if ref := ins.Reference(); ref != "" {
		t, ok := syms[ref]
		if !ok {
			return 0, fmt.Errorf("call to unknown function %q: %w", ref, ErrInvalid)
		}
		return t, nil
	}
	return c.raw[i] + 1 + int(ins.Constant), nil
}

func (c *compiler) isFunc(off int) bool {
	i := sort.SearchInts(c.funcs, off)
	return i < len(c.funcs) && c.funcs[i] == off
}

// funcOf is the start of the function holding raw offset off.
func (c *compiler) funcOf(off int) int {
	i := sort.SearchInts(c.funcs, off+1)
	return c.funcs[i-1]
}

func (c *compiler) label(off int) x86enc.Label {
	l, ok := c.labels[off]
	if !ok {
		l = c.a.NewLabel()
		c.labels[off] = l
	}
	return l
}

// savedRegs are the callee-saved registers every frame keeps: rbp (R10)
// and the registers of R6-R9.
var savedRegs = []x86enc.Reg{x86enc.RBP, x86enc.RBX, x86enc.R13, x86enc.R14, x86enc.R15}

// Below its BPF stack each frame keeps three words for probe_read_kernel,
// which reads them through rbp (R10) to tell the memory the program reads
// as the kernel's (helpers.go): at ctxSlot, the address of its run's
// context when the context lies on the same stack just above the code (a
// probe slot's struct pt_regs), else 0 (the fast path's copy); at
// rawCtxSlot, the context's address; at topSlot, the end of the stack the
// code uses (the entry's return address).
const (
	ctxSlot    = StackSize + 8
	rawCtxSlot = StackSize + 16
	topSlot    = StackSize + 24
)

// frameSize is what a frame reserves below its saved registers: the BPF
// stack and the three slots above, 32 bytes.
const frameSize = StackSize + 32

// callerFrame is how far above a called function's rbp its caller's
// frame starts: its five saved registers and the return address.
const callerFrame = 48

// ctxNear bounds how far above the entry's stack pointer (below its
// frame) the context may lie to count as on the same stack: a slot's is
// at most about 600 bytes above (the frame, the saved registers, the
// return address, 15 bytes of alignment). Within 1 KiB of a stack in use
// there is no unmapped page before the context's end: mappings are whole
// pages, so the context's page follows the stack's last one.
const ctxNear = 1024

// prologue starts a function: the entry also saves r12 and takes the
// stripe number from rsi; it fills its frame's slots (the context, on the
// same stack or not, and the end of its stack), and a called function
// copies its caller's (at rbp+callerFrame the caller's frame starts, its
// slots at the same distances from its bottom). Only rax and r11 are
// changed: rdi-r8 hold the arguments.
func (c *compiler) prologue(off int) {
	a := c.a
	for _, r := range savedRegs {
		a.Push(r)
	}
	if off == 0 {
		a.Push(stripe)
		a.Mov(x86enc.S64, stripe, x86enc.RSI)
	}
	a.Mov(x86enc.S64, x86enc.RBP, x86enc.RSP)
	a.ALUImm32(x86enc.Sub, x86enc.S64, x86enc.RSP, frameSize)
	if off != 0 {
		for _, slot := range []int32{ctxSlot, rawCtxSlot, topSlot} {
			a.Load(x86enc.S64, x86enc.RAX, x86enc.At(x86enc.RBP, callerFrame+frameSize-slot))
			a.Store(x86enc.S64, x86enc.At(x86enc.RBP, -slot), x86enc.RAX)
		}
		return
	}
	a.Store(x86enc.S64, x86enc.At(x86enc.RBP, -rawCtxSlot), x86enc.RDI)
	a.Lea(x86enc.RAX, x86enc.At(x86enc.RBP, callerFrame))
	a.Store(x86enc.S64, x86enc.At(x86enc.RBP, -topSlot), x86enc.RAX)
	near := a.NewLabel()
	a.Mov(x86enc.S64, x86enc.R11, x86enc.RDI)
	a.ALU(x86enc.Sub, x86enc.S64, x86enc.R11, x86enc.RSP)
	a.ALUImm32(x86enc.Cmp, x86enc.S64, x86enc.R11, ctxNear)
	a.Mov(x86enc.S64, x86enc.RAX, x86enc.RDI)
	a.Jcc(x86enc.CondB, near)
	a.ALU(x86enc.Xor, x86enc.S32, x86enc.RAX, x86enc.RAX)
	a.Bind(near)
	a.Store(x86enc.S64, x86enc.At(x86enc.RBP, -ctxSlot), x86enc.RAX)
}

// endFunc ends the function that starts at off with its epilogue, where
// its exits jump. A function whose last instruction falls through would
// run into the next: the verifier refuses such a program, and so does
// this epilogue by being where the fall-through lands.
func (c *compiler) endFunc(off int) {
	a := c.a
	a.Bind(c.exits[off])
	a.Mov(x86enc.S64, x86enc.RSP, x86enc.RBP)
	if off == 0 {
		a.Pop(stripe)
	}
	for i := len(savedRegs) - 1; i >= 0; i-- {
		a.Pop(savedRegs[i])
	}
	a.Ret()
}
