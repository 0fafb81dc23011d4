package decode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
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

// TestX86VendorBranchTextObjdump checks the text of 66-prefixed near
// branches against GNU objdump, which decodes them as AMD CPUs do by
// default and as Intel CPUs do with -M intel64: the same length, the same
// target and the same register operand.
func TestX86VendorBranchTextObjdump(t *testing.T) {
	objdump := testenv.MustHaveTool(t, "objdump")
	cases := [][]byte{
		{0x66, 0xE8, 0x10, 0x00, 0x00, 0x00},             // call rel16 (AMD) / rel32 (Intel)
		{0x66, 0xE9, 0x10, 0x00, 0x00, 0x00},             // jmp
		{0x66, 0x0F, 0x84, 0x10, 0x00, 0x00, 0x00, 0x00}, // je rel16 (AMD) / rel32 (Intel)
		{0x66, 0xEB, 0x10},                               // jmp rel8
		{0x66, 0xFF, 0xD0},                               // call *%rax / *%ax
		{0x66, 0xFF, 0xE1},                               // jmp *%rcx / *%cx
		{0x66, 0xC3},                                     // ret
	}
	for _, tc := range []struct {
		vendor Vendor
		args   []string
	}{{VendorAMD, nil}, {VendorIntel, []string{"-M", "intel64"}}} {
		for _, b := range cases {
			f := filepath.Join(t.TempDir(), "code.bin")
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"-D", "-b", "binary", "-m", "i386:x86-64", "-w"}, tc.args...)
			out, err := exec.Command(objdump, append(args, f)...).Output()
			if err != nil {
				t.Fatalf("objdump: %v", err)
			}
			var want objdumpInsn
			for _, line := range strings.Split(string(out), "\n") {
				if m := objdumpInsnRE.FindStringSubmatch(line); m != nil && m[1] == "0" {
					want = objdumpInsn{len: len(strings.Fields(m[2])), text: strings.TrimSpace(m[3])}
					break
				}
			}
			inst, err := X86Decoder{Vendor: tc.vendor}.decodeAt(b, 0)
			if err != nil {
				t.Fatalf("% x (%s): %v", b, tc.vendor, err)
			}
			text := inst.Text("gnu")
			if inst.Len != want.len {
				t.Errorf("% x (%s): length %d, objdump %d (%q)", b, tc.vendor, inst.Len, want.len, want.text)
			}
			ops := strings.Fields(want.text)
			op := ops[len(ops)-1]
			if inst.Branch.Relative() {
				if !strings.Contains(text, op) {
					t.Errorf("% x (%s): text %q, objdump %q: another target", b, tc.vendor, text, want.text)
				}
			} else if strings.HasPrefix(op, "*%") && !strings.Contains(text, op) {
				t.Errorf("% x (%s): text %q, objdump %q: another operand", b, tc.vendor, text, want.text)
			}
		}
	}
}

// objdumpInsn is one instruction objdump printed: its length and text.
type objdumpInsn struct {
	len  int
	text string
}

// objdumpInsnRE matches "   0:\t66 e8 10 00 00 00    \tcall 0x16".
var objdumpInsnRE = regexp.MustCompile(`^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )*[0-9a-f]{2})\s*\t(.*)$`)
