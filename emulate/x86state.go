package emulate

import (
	"fmt"
	"strings"

	"github.com/probeopt/probeopt/decode"
)

// X86State is the x86-64 user register file the emulator reads and
// writes. Vector and x87 registers are absent: no emulated instruction
// touches them.
type X86State struct {
	// GPR holds the 16 general-purpose registers in encoding order
	// (decode.RAX, decode.RCX, ... decode.R15).
	GPR [16]uint64
	// RIP is the address of the instruction to execute; after a step it is
	// the address of the next one.
	RIP uint64
	// RFLAGS is the flags register. Only the status flags (CF, PF, AF, ZF,
	// SF, OF) are ever changed; every other bit is carried through.
	RFLAGS uint64
	// FSBase and GSBase are the bases of the FS and GS segments, added to
	// the address of a memory operand with a 64 or 65 prefix.
	FSBase, GSBase uint64
}

// RFLAGS bits.
const (
	FlagCF uint64 = 1 << 0  // carry
	FlagPF uint64 = 1 << 2  // parity of the low byte
	FlagAF uint64 = 1 << 4  // auxiliary carry out of bit 3
	FlagZF uint64 = 1 << 6  // zero
	FlagSF uint64 = 1 << 7  // sign
	FlagTF uint64 = 1 << 8  // trap (single step)
	FlagIF uint64 = 1 << 9  // interrupts enabled
	FlagDF uint64 = 1 << 10 // direction
	FlagOF uint64 = 1 << 11 // overflow
	FlagRF uint64 = 1 << 16 // resume

	// FlagsStatus is the six status flags.
	FlagsStatus = FlagCF | FlagPF | FlagAF | FlagZF | FlagSF | FlagOF
)

// String renders the registers on two lines, in encoding order.
func (s *X86State) String() string {
	var b strings.Builder
	for r := 0; r < 16; r++ {
		sep := " "
		if r == 8 {
			sep = "\n"
		}
		if r == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s%s=%#x", sep, decode.X86RegName(r), s.GPR[r])
	}
	fmt.Fprintf(&b, "\nrip=%#x rflags=%#x fs_base=%#x gs_base=%#x", s.RIP, s.RFLAGS, s.FSBase, s.GSBase)
	return b.String()
}
