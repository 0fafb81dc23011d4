package decode_test

import (
	"errors"
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// Decode one instruction and find where its RIP-relative displacement lies
// and what it refers to: what a relocator needs to move it.
func ExampleDecodeX86() {
	// lea 0x2f51(%rip),%rdi at 0x1130
	code := []byte{0x48, 0x8d, 0x3d, 0x51, 0x2f, 0x00, 0x00}
	inst, err := decode.DecodeX86(code, 0x1130)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(inst.Text("gnu"))
	fmt.Println("length:", inst.Len)
	fmt.Printf("rip-relative: %v, disp32 at offset %d, refers to %#x\n", inst.RIPRel, inst.DispOff, inst.Target)
	fmt.Println("reads:", decode.X86RegNames(inst.Read), "writes:", decode.X86RegNames(inst.Written))

	// Input that ends inside an instruction is an error, never a guess.
	_, err = decode.DecodeX86([]byte{0x48, 0x8b}, 0x1000)
	fmt.Println(errors.Is(err, decode.ErrTruncated), err)
	// Output:
	// lea 0x2f51(%rip),%rdi
	// length: 7
	// rip-relative: true, disp32 at offset 3, refers to 0x4088
	// reads: [] writes: [rdi]
	// true truncated instruction
}

// Some bytes decode differently on Intel and AMD CPUs; the decoder says so
// and follows the vendor it is given.
func ExampleX86Decoder_Decode() {
	code := []byte{0x66, 0xe8, 0x10, 0x00, 0x00, 0x00} // call with an operand-size prefix
	for _, v := range []decode.Vendor{decode.VendorAMD, decode.VendorIntel} {
		var inst decode.X86Inst
		if err := (decode.X86Decoder{Vendor: v}).Decode(code, 0x401000, &inst); err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%v: %d bytes, vendor-dependent %v\n", v, inst.Len, inst.VendorDependent)
	}
	// Output:
	// amd: 4 bytes, vendor-dependent true
	// intel: 6 bytes, vendor-dependent true
}

// Sweep a function linearly with Layout, the fast path that finds the
// instruction boundaries, branches and RIP-relative operands.
func ExampleX86Decoder_Layout() {
	fn := []byte{
		0xf3, 0x0f, 0x1e, 0xfa, // endbr64
		0x55,             // push %rbp
		0x48, 0x89, 0xe5, // mov %rsp,%rbp
		0xe8, 0x00, 0x01, 0x00, 0x00, // call +0x100
		0x48, 0x8d, 0x05, 0x10, 0x00, 0x00, 0x00, // lea 0x10(%rip),%rax
		0x5d, // pop %rbp
		0xc3, // ret
	}
	const addr = 0x401000
	d := decode.X86Decoder{}
	for off := 0; off < len(fn); {
		var l decode.X86Layout
		if err := d.Layout(fn[off:], addr+uint64(off), &l); err != nil {
			fmt.Printf("%#x: %v\n", addr+off, err)
			return
		}
		fmt.Printf("%#x: len %2d", addr+off, l.Len)
		if l.Branch != decode.BranchNone {
			fmt.Printf(", %v", l.Branch)
		}
		if l.RIPRel || l.Branch.Relative() {
			fmt.Printf(" -> %#x", l.Target)
		}
		fmt.Println()
		off += int(l.Len)
	}
	// Output:
	// 0x401000: len  4
	// 0x401004: len  1
	// 0x401005: len  3
	// 0x401008: len  5, call -> 0x40110d
	// 0x40100d: len  7 -> 0x401024
	// 0x401014: len  1
	// 0x401015: len  1, ret
}

// Decode arm64 words: a PC-relative branch and an adrp, whose targets move
// with the instruction.
func ExampleDecodeARM64() {
	for _, w := range [][]byte{
		{0x00, 0x04, 0x00, 0x94}, // bl +0x1000
		{0x00, 0x00, 0x00, 0x90}, // adrp x0, the page of the instruction
		{0xfd, 0x7b, 0xbe, 0xa9}, // stp x29, x30, [sp, #-32]!
	} {
		inst, err := decode.DecodeARM64(w, 0x400ffc)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-28s class %-8v pc-relative %v", inst.Text(), inst.Class, inst.PCRel)
		if inst.PCRel {
			fmt.Printf(" target %#x", inst.Target)
		}
		fmt.Println()
	}
	// Output:
	// bl 0x401ffc                  class branch   pc-relative true target 0x401ffc
	// adrp x0, 0x400000            class adr      pc-relative true target 0x400000
	// stp x29, x30, [sp,#-32]!     class ldst     pc-relative false
}
