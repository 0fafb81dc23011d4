package jit

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf/asm"
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
	code, err := Compile(insns, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Load(code.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ctx [168]byte
	if got := f.Run(unsafe.Pointer(&ctx[0]), 0); got != 42*42 {
		t.Fatalf("got %d, want %d", got, 42*42)
	}
}
