package trampoline_test

import (
	"fmt"

	"github.com/probeopt/probeopt/trampoline"
)

// A function entry that starts with endbr64 and a frame setup takes a
// detour: the endbr64 stays, the jump replaces the next whole instructions,
// which run relocated in the slot.
func ExampleAnalyzeX86() {
	// endbr64; push %rbp; mov %rsp,%rbp; sub $0x10,%rsp; leave; ret
	code := []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xc9, 0xc3}
	s, err := trampoline.AnalyzeX86(0x401000, code, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: jump at %#x over %d bytes, %d instructions moved, back at %#x\n", s.Kind, s.PatchAddr, s.Len, s.Run, s.Resume())

	// A nop5 (gcc -mfentry -mnop-mcount, or a USDT site) is replaced
	// whole: nothing to relocate.
	s, err = trampoline.AnalyzeX86(0x402000, []byte{0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: jump at %#x over %d bytes\n", s.Kind, s.PatchAddr, s.Len)
	// Output:
	// detour: jump at 0x401004 over 8 bytes, 3 instructions moved, back at 0x40100c
	// nop: jump at 0x402000 over 5 bytes
}

// Area.BuildX86 makes the slot of a site in an area of executable memory
// and the patches that enter it and restore the site: the engine writes
// the code at the slot, then applies Install in one batch with the others.
func ExampleArea_BuildX86() {
	data, err := trampoline.NewData(0x7f0000000000, 16, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	area, err := trampoline.NewArea(0x500000, 1<<16)
	if err != nil {
		fmt.Println(err)
		return
	}
	site, err := trampoline.AnalyzeX86(0x401000, []byte{0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := &trampoline.Config{Data: data}
	tr, err := area.BuildX86(site, &trampoline.Handler{ID: 1, Count: true, Counter: 0}, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	rel := int32(uint32(tr.Install.New[1]) | uint32(tr.Install.New[2])<<8 | uint32(tr.Install.New[3])<<16 | uint32(tr.Install.New[4])<<24)
	fmt.Printf("slot at %#x; install %x at %#x (jmp to %#x); remove puts back %x\n",
		tr.Slot, tr.Install.New[:1], tr.Install.Addr, int64(tr.Install.Addr)+5+int64(rel), tr.Remove.New)
	// Output:
	// slot at 0x500000; install e9 at 0x401000 (jmp to 0x500000); remove puts back 0f1f440000
}
