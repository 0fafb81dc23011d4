package proc

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestArchTables checks the architecture tables against the encodings
// they name, on every host: the arm64 table is checked on x86-64 too.
func TestArchTables(t *testing.T) {
	for _, a := range []*arch{&archX86_64, &archARM64} {
		if len(a.breakpoint) == 0 || uint64(len(a.breakpoint))%a.insnAlign != 0 {
			t.Errorf("%s: breakpoint % x is not a whole instruction", a.name, a.breakpoint)
		}
		if len(a.syscallInsn) == 0 || uint64(len(a.syscallInsn))%a.insnAlign != 0 {
			t.Errorf("%s: system-call instruction % x is not a whole instruction", a.name, a.syscallInsn)
		}
		if a.breakpointPCAdjust != 0 && a.breakpointPCAdjust != uint64(len(a.breakpoint)) {
			t.Errorf("%s: PC adjustment %d is neither 0 nor the breakpoint's length", a.name, a.breakpointPCAdjust)
		}
		if a.regsSize == 0 || a.regsSize%8 != 0 {
			t.Errorf("%s: register layout of %d bytes", a.name, a.regsSize)
		}
	}
	if !bytes.Equal(archX86_64.breakpoint, []byte{0xcc}) || !bytes.Equal(archX86_64.syscallInsn, []byte{0x0f, 0x05}) {
		t.Errorf("x86-64: int3 % x, syscall % x", archX86_64.breakpoint, archX86_64.syscallInsn)
	}
	// BRK #imm16 is 0xd4200000 | imm16<<5, SVC #imm16 is 0xd4000001 | imm16<<5.
	if w := binary.LittleEndian.Uint32(archARM64.breakpoint); w&^(0xffff<<5) != 0xd4200000 {
		t.Errorf("arm64: breakpoint %#08x is not brk", w)
	}
	if w := binary.LittleEndian.Uint32(archARM64.syscallInsn); w != 0xd4000001 {
		t.Errorf("arm64: system-call instruction %#08x is not svc #0", w)
	}
}
