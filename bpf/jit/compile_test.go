package jit

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/decode"
)

// testMaps returns maps for programs that reference "m" (an array of
// the oracle's value size) and "h" (a hash), in a Go-allocated arena (the
// code is only compiled).
func testMaps(t *testing.T) map[string]*maps.Map {
	arena := maps.NewArenaMem(make([]byte, 1<<16), 0x7f00_0000_0000)
	out := map[string]*maps.Map{}
	for _, s := range []*ebpf.MapSpec{
		{Name: "m", Type: ebpf.Array, KeySize: 4, ValueSize: 10 * genValueSize, MaxEntries: 1},
		{Name: "h", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 4},
		{Name: "r", Type: ebpf.RingBuf, MaxEntries: 4096},
	} {
		m, err := maps.New(arena, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[s.Name] = m
	}
	return out
}

// TestCodeDecodes compiles generated programs (every instruction form the
// JIT emits for them) and programs calling every helper, and decodes all
// of the code with package decode: each instruction has the length the
// encoder emitted.
func TestCodeDecodes(t *testing.T) {
	ms := testMaps(t)
	arena := maps.NewArenaMem(make([]byte, 1<<17), 0x7f00_1000_0000) // the runtime and trace_printk's ring
	rt, err := NewRuntime(arena, 4)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	var progs []asm.Instructions
	for i := 0; i < 100; i++ {
		insns, _ := genProgram(r, 3, 60)
		progs = append(progs, insns)
	}
	var calls asm.Instructions
	for _, fn := range Helpers {
		calls = append(calls, asm.LoadMapPtr(asm.R1, 0).WithReference("h"), fn.Call())
	}
	progs = append(progs, append(calls, asm.Return()))
	for i, insns := range progs {
		code, err := Compile(insns, &Options{Base: 0x7f00_2000_0000, Maps: ms, Runtime: rt})
		if err != nil {
			t.Fatalf("program %d: %v", i, err)
		}
		if err := code.Verify(decode.X86Len); err != nil {
			t.Fatalf("program %d: %v", i, err)
		}
	}
}

// TestRefused checks that what the JIT does not compile is refused at
// compile time with its name.
func TestRefused(t *testing.T) {
	ms := testMaps(t)
	for _, c := range []struct {
		ins  asm.Instruction
		name string
	}{
		{asm.FnGetCurrentTask.Call(), "FnGetCurrentTask"},
		{asm.FnTailCall.Call(), "FnTailCall"},
		{asm.FnSendSignal.Call(), "FnSendSignal"},
		{asm.LoadAbs(0, asm.Word), "LdAbsW"},
		{asm.LoadInd(asm.R0, asm.R1, 0, asm.Word), "LdIndW"},
		{asm.Instruction{OpCode: asm.Call.Op(asm.ImmSource), Src: asm.PseudoKfuncCall, Constant: 5}, "call of kind"},
		{asm.LoadAcquire(asm.R0, asm.R1, asm.DWord, 0), "LdAcq"},
		{asm.Instruction{OpCode: asm.LoadImmOp(asm.DWord), Src: asm.PseudoFunc, Constant: 0}, "ld_imm64 of kind"},
	} {
		insns := asm.Instructions{asm.Mov.Imm(asm.R1, 0), c.ins, asm.Mov.Imm(asm.R0, 0), asm.Return()}
		_, err := Compile(insns, &Options{Maps: ms})
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%v: %v, want ErrUnsupported naming %s", c.ins, err, c.name)
		}
	}
	for _, insns := range []asm.Instructions{
		{asm.LoadMapPtr(asm.R1, 0).WithReference("nosuch"), asm.Return()},
		{asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource), Offset: 5}, asm.Return()},
		{asm.Instruction{OpCode: asm.Call.Op(asm.ImmSource), Src: asm.PseudoCall, Constant: 7}, asm.Return()},
		{},
	} {
		if _, err := Compile(insns, &Options{Maps: ms}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: %v, want ErrInvalid", insns, err)
		}
	}
}
