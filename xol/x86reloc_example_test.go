package xol_test

import (
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/xol"
)

// The out-of-line step of `mov 0x10(%rip),%rax` at 0x401000 from a slot
// 48 TiB away: the operand is addressed through %rsi, which holds the
// original's next address during the step.
func ExampleRelocateX86() {
	inst, err := decode.DecodeX86([]byte{0x48, 0x8b, 0x05, 0x10, 0, 0, 0}, 0x401000)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := xol.RelocateX86(&inst, 0x7f00_0000_0000, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c)
	fmt.Printf("% x\n", c.Code)

	// A hit: the thread stopped on the original instruction.
	before := xol.X86Regs{RIP: 0x401000}
	before.GPR[decode.RSI] = 7
	regs := before
	if err := c.Enter(&regs); err != nil { // rip = slot, rsi = 0x401007
		fmt.Println(err)
		return
	}
	// ... the engine writes regs and single-steps the thread; the CPU
	// loads %rax and stops after the copy:
	regs.RIP = c.Slot + uint64(c.StepLen)
	regs.GPR[decode.RAX] = 42
	out, err := c.Fixup(&before, &regs, nil)
	fmt.Printf("%s %v: rip %#x rax %d rsi %d\n", out, err, regs.RIP, regs.GPR[decode.RAX], regs.GPR[decode.RSI])
	// Output:
	// copy of 0x401000 (7 bytes) at 0x7f0000000000 (scratch, 8 bytes, %rsi = 0x401007)
	// 48 8b 86 10 00 00 00 cc
	// done <nil>: rip 0x401007 rax 42 rsi 7
}
