package decode

import (
	"fmt"
	"strings"
	"testing"
)

// TestX86Branch16Target checks that a 16-bit operand size truncates a
// relative branch's target to 16 bits whatever the displacement's size
// (AMD64 APM vol. 3, near branches: "the instruction pointer is truncated
// to the operand size"), and that Intel rules keep the 64-bit target.
func TestX86Branch16Target(t *testing.T) {
	for _, tc := range []struct {
		hex        []byte
		amd, intel uint64
	}{
		{[]byte{0x66, 0xEB, 0x00}, 0x1003, 0x401003},            // jmp rel8
		{[]byte{0x66, 0x74, 0xFF}, 0x1002, 0x401002},            // je rel8
		{[]byte{0x66, 0xE2, 0x00}, 0x1003, 0x401003},            // loop rel8
		{[]byte{0xEB, 0x00, 0x90}, 0x401002, 0x401002},          // no prefix
		{[]byte{0x66, 0xE9, 0x01, 0x00, 0, 0, 0, 0}, 0x1005, 0}, // jmp rel16 (AMD) / rel32 (Intel)
	} {
		for _, v := range []Vendor{VendorAMD, VendorIntel} {
			want := tc.amd
			if v == VendorIntel {
				want = tc.intel
				if want == 0 {
					// rel32 from the same bytes: 0x401000 + 7 + 0x00000001... the
					// displacement is 00000001 (bytes 2-5) -> 0x401007.
					want = 0x401007
				}
			}
			inst, err := X86Decoder{Vendor: v}.decodeAt(tc.hex, 0x401000)
			if err != nil {
				t.Fatalf("% x (%s): %v", tc.hex, v, err)
			}
			if inst.Target != want {
				t.Errorf("% x (%s): target %#x, want %#x", tc.hex, v, inst.Target, want)
			}
			for _, syntax := range []string{"gnu", "intel"} {
				if text := inst.Text(syntax); !strings.Contains(text, fmt.Sprintf("%#x", want)) {
					t.Errorf("% x (%s): %s text %q does not show the target %#x", tc.hex, v, syntax, text, want)
				}
			}
		}
	}
}

func (d X86Decoder) decodeAt(b []byte, addr uint64) (X86Inst, error) {
	var inst X86Inst
	err := d.Decode(b, addr, &inst)
	return inst, err
}
