package decode

import (
	"encoding/hex"
	"strings"
	"testing"
)

// TestX86RegSets checks the register sets of instructions whose registers
// are implicit or easily missed. The sets were checked on an Intel CPU
// (the fuzz package's TestX86RegisterSetsCPU perturbs every register outside
// them and compares the outcomes).
func TestX86RegSets(t *testing.T) {
	tests := []struct {
		hex, read, written string
	}{
		// x87: the base and index of a memory operand are read; the
		// register forms use no general-purpose register.
		{"d903", "rbx", ""},                          // fld dword ptr [rbx]
		{"67dd0c98", "rax rbx", ""},                  // fisttp qword ptr [eax+4*ebx]
		{"dd30", "rax", ""},                          // fnsave [rax]
		{"41d97c2408", "r12", ""},                    // fnstcw [r12+8]
		{"dd0500000000", "", ""},                     // fld qword ptr [rip]
		{"d9c0", "", ""},                             // fld st0
		{"dec1", "", ""},                             // faddp st1, st0
		{"dfe0", "", "rax"},                          // fnstsw ax
		{"0f01c1", "rax", "rax"},                     // vmcall: the hypervisor answers in rax
		{"d7", "rax rbx", "rax"},                     // xlat
		{"99", "rax", "rdx"},                         // cdq
		{"0fa2", "rax rcx", "rax rcx rdx rbx"},       // cpuid
		{"f3a4", "rcx rsi rdi", "rcx rsi rdi"},       // rep movsb
		{"50", "rax rsp", "rsp"},                     // push rax
		{"0fc70e", "rax rcx rdx rbx rsi", "rax rdx"}, // cmpxchg8b [rsi]
	}
	for _, tt := range tests {
		b, err := hex.DecodeString(tt.hex)
		if err != nil {
			t.Fatal(err)
		}
		var inst X86Inst
		if err := (X86Decoder{Vendor: VendorIntel}).Decode(b, 0x1000, &inst); err != nil || inst.Len != len(b) {
			t.Errorf("%s: len %d, %v", tt.hex, inst.Len, err)
			continue
		}
		r := strings.Join(X86RegNames(inst.Read), " ")
		w := strings.Join(X86RegNames(inst.Written), " ")
		if r != tt.read || w != tt.written || inst.RegsApprox {
			t.Errorf("%s (%s): read %q written %q approx %v, want %q %q", tt.hex, inst.Text("intel"), r, w, inst.RegsApprox, tt.read, tt.written)
		}
	}
}
