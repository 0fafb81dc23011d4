package jit

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/probeopt/probeopt/bpf/maps"
)

// TestCompileRun runs a small program: arithmetic through the stack.
func TestCompileRun(t *testing.T) {
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R0, 40),
		asm.Add.Imm(asm.R0, 2),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.LoadMem(asm.R2, asm.RFP, -8, asm.DWord),
		asm.Mul.Reg(asm.R0, asm.R2),
		asm.Return(),
	}
	f := compileLoad(t, insns, nil)
	var ctx [168]byte
	if got := f.Run(unsafe.Pointer(&ctx[0]), 0); got != 42*42 {
		t.Fatalf("got %d, want %d", got, 42*42)
	}
}

// compileLoad compiles insns with opts and loads the code into this
// process until the test ends.
func compileLoad(t *testing.T, insns asm.Instructions, opts *Options) *Func {
	t.Helper()
	code, err := Compile(insns, opts)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Load(code.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestCalleeSaved runs programs that use every BPF register, the stack,
// a bpf-to-bpf call and helpers, with sentinels in rbx, rbp and r12-r15:
// the CPU must give each back.
func TestCalleeSaved(t *testing.T) {
	arena := testArena(t)
	h, err := maps.New(arena, &ebpf.MapSpec{Name: "h", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms := map[string]*maps.Map{"h": h}
	rt, err := NewRuntime(arena, 4)
	if err != nil {
		t.Fatal(err)
	}
	var regsUsed asm.Instructions
	for r := asm.R0; r <= asm.R9; r++ {
		regsUsed = append(regsUsed, asm.Mov.Imm(r, int32(r)*7), asm.StoreMem(asm.RFP, int16(-8-8*int(r)), r, asm.DWord))
	}
	sub := asm.Instructions{
		asm.Mov.Imm(asm.R6, -1).WithSymbol("sub"), asm.Mov.Imm(asm.R9, -2),
		asm.StoreMem(asm.RFP, -512, asm.R6, asm.DWord), asm.Mov.Reg(asm.R0, asm.R9), asm.Return(),
	}
	progs := map[string]asm.Instructions{
		"registers": append(regsUsed, asm.Return()),
		"call": append(append(regsUsed,
			asm.Instruction{OpCode: asm.Call.Op(asm.ImmSource), Src: asm.PseudoCall, Constant: -1}.WithReference("sub"),
			asm.Return()), sub...),
		"helpers": append(regsUsed,
			asm.FnGetPrandomU32.Call(), asm.FnKtimeGetNs.Call(), asm.FnGetCurrentPidTgid.Call(),
			asm.LoadMapPtr(asm.R1, 0).WithReference("h"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -8),
			asm.FnMapLookupElem.Call(), asm.Return()),
	}
	for name, insns := range progs {
		code, err := Compile(insns, &Options{Maps: ms, Runtime: rt})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f, err := Load(code.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		var ctx [168]byte
		top := uintptr(unsafe.Pointer(&f.stack[len(f.stack)-1])) + 1
		_, changed := callCodeSaved(uintptr(f.Addr()), uintptr(unsafe.Pointer(&ctx[0])), top)
		f.Close()
		if changed != 0 {
			t.Errorf("%s: callee-saved registers not given back: mask %#b (rbx, rbp, r12, r13, r14, r15 from bit 0)", name, changed)
		}
	}
}
