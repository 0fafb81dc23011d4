package emulate_test

import (
	"errors"
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
)

// stackMemory is a Memory of one small area, little-endian; every access
// outside it faults.
type stackMemory struct {
	base uint64
	b    [64]byte
}

func (m *stackMemory) Read(addr uint64, size int) (uint64, error) {
	if addr < m.base || addr-m.base+uint64(size) > uint64(len(m.b)) {
		return 0, errors.New("unmapped")
	}
	var v uint64
	for i := 0; i < size; i++ {
		v |= uint64(m.b[addr-m.base+uint64(i)]) << (8 * i)
	}
	return v, nil
}

func (m *stackMemory) Write(addr uint64, size int, val uint64) error {
	if addr < m.base || addr-m.base+uint64(size) > uint64(len(m.b)) {
		return errors.New("unmapped")
	}
	for i := 0; i < size; i++ {
		m.b[addr-m.base+uint64(i)] = byte(val >> (8 * i))
	}
	return nil
}

// Emulate the push %rbp at a function's entry, as a probe does instead of
// single-stepping it.
func ExampleX86_Step() {
	inst, err := decode.DecodeX86([]byte{0x55}, 0x401000) // push %rbp
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := emulate.X86Supported(&inst); err != nil {
		fmt.Println(err)
		return
	}
	mem := &stackMemory{base: 0x7ffe0000}
	st := emulate.X86State{RIP: 0x401000, RFLAGS: 0x202}
	st.GPR[decode.RSP] = 0x7ffe0020
	st.GPR[decode.RBP] = 0x1122334455667788
	if err := (emulate.X86{}).Step(&inst, &st, mem); err != nil {
		fmt.Println(err)
		return
	}
	top, _ := mem.Read(st.GPR[decode.RSP], 8)
	fmt.Printf("rip %#x rsp %#x [rsp] %#x\n", st.RIP, st.GPR[decode.RSP], top)

	// A push below the mapped area faults and changes nothing.
	st.GPR[decode.RSP] = 0x7ffe0000
	before := st
	err = (emulate.X86{}).Step(&inst, &st, mem)
	var f *emulate.Fault
	fmt.Printf("fault %v, state unchanged %v\n", errors.As(err, &f), st == before)

	// What the emulator does not execute it refuses, never guesses.
	cpuid, _ := decode.DecodeX86([]byte{0x0f, 0xa2}, 0x401000)
	err = emulate.X86Supported(&cpuid)
	fmt.Println(errors.Is(err, emulate.ErrNotEmulated), err)
	// Output:
	// rip 0x401001 rsp 0x7ffe0018 [rsp] 0x1122334455667788
	// fault true, state unchanged true
	// true cpuid: instruction not in the emulated set: instruction not emulated
}

// Emulate an arm64 add that sets the flags.
func ExampleARM64_Step() {
	inst, err := decode.DecodeARM64([]byte{0x20, 0x00, 0x02, 0xab}, 0x400000) // adds x0, x1, x2
	if err != nil {
		fmt.Println(err)
		return
	}
	var st emulate.ARM64State
	st.PC = 0x400000
	st.X[1], st.X[2] = 0x7fffffffffffffff, 1
	if err := (emulate.ARM64{}).Step(&inst, &st, &stackMemory{}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: x0 %#x pc %#x n %v z %v c %v v %v\n", inst.Text(), st.X[0], st.PC,
		st.NZCV&emulate.NZCVN != 0, st.NZCV&emulate.NZCVZ != 0, st.NZCV&emulate.NZCVC != 0, st.NZCV&emulate.NZCVV != 0)
	// Output:
	// adds x0, x1, x2: x0 0x8000000000000000 pc 0x400004 n true z false c false v true
}
