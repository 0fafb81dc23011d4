package xol_test

import (
	"encoding/hex"
	"errors"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/reason"
	"github.com/probeopt/probeopt/xol"
)

func decodeX86(t *testing.T, h string) *decode.X86Inst {
	t.Helper()
	b, err := hex.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := decode.DecodeX86(b, 0x401000)
	if err != nil {
		t.Fatalf("decode %s: %v", h, err)
	}
	if inst.Len != len(b) {
		t.Fatalf("decode %s: length %d, want %d", h, inst.Len, len(b))
	}
	return &inst
}

// TestCheckX86 checks the fixups and refusals of instruction forms whose
// out-of-line behaviour the manuals fix: what an instruction does to the
// instruction pointer, the stack and the trap flag.
func TestCheckX86(t *testing.T) {
	const none = "none"
	tests := []struct {
		hex    string
		what   string
		fixups string      // Fixup.String(), or "" when refused
		refuse reason.Code // refusal code
	}{
		{"4889f8", "mov %rdi,%rax", "ip", ""},
		{"55", "push %rbp", "ip", ""},
		{"90", "nop", "ip", ""},
		{"f30f1efa", "endbr64", "ip", ""},
		{"c3", "ret", none, ""},
		{"c20800", "ret $8", none, ""},
		{"ffe0", "jmp *%rax", none, ""},
		{"ff2425" + "00104000", "jmp *abs", none, ""},
		{"ffd0", "call *%rax", "call", ""},
		{"ff15" + "10000000", "call *x(%rip)", "call+riprel(rsi)", ""},
		{"e8" + "00000000", "call rel32", "ip+call+rel", ""},
		{"eb00", "jmp rel8", "ip+rel", ""},
		{"0f84" + "00000000", "je rel32", "ip+rel", ""},
		{"e200", "loop", "ip+rel", ""},
		{"e300", "jrcxz", "ip+rel", ""},
		{"488b05" + "10000000", "mov x(%rip),%rax", "ip+riprel(rsi)", ""},
		{"488b35" + "10000000", "mov x(%rip),%rsi", "ip+riprel(rdi)", ""},
		{"c705" + "10000000" + "01000000", "movl $1,x(%rip)", "ip+riprel(rsi)", ""},
		{"c5fe6f05" + "10000000", "vmovdqu x(%rip),%ymm0", "ip+riprel(rsi)", ""},
		{"9c", "pushf", "ip+pushf-tf", ""},
		{"9d", "popf", "ip+popf-tf", ""},
		{"f3a4", "rep movsb", "ip+rep", ""},
		{"f348ab", "rep stos %rax", "ip+rep", ""},
		{"a4", "movsb", "ip", ""},
		{"0fa2", "cpuid", "ip", ""},
		{"0f31", "rdtsc", "ip", ""},
		{"0f01d0", "xgetbv", "ip", ""},
		{"0f01f9", "rdtscp", "ip", ""},
		{"f0480107", "lock add", "ip", ""},
		{"8ed8", "mov %eax,%ds", "ip", ""},
		{"cb", "lret", none, ""},
		{"ff1f", "lcall *(%rdi)", "call", ""},
		{"0f05", "syscall", "", xol.RefuseSyscall},
		{"0f34", "sysenter", "", xol.RefuseSyscall},
		{"cc", "int3", "", xol.RefuseTrap},
		{"cd80", "int $0x80", "", xol.RefuseTrap},
		{"0f0b", "ud2", "", xol.RefuseTrap},
		{"f4", "hlt", "", xol.RefuseTrap},
		{"fa", "cli", "", xol.RefusePrivileged},
		{"ec", "in (%dx),%al", "", xol.RefusePrivileged},
		{"6c", "insb", "", xol.RefusePrivileged},
		{"0f30", "wrmsr", "", xol.RefusePrivileged},
		{"0f20c0", "mov %cr0,%rax", "", xol.RefusePrivileged},
		{"0f01ca", "clac", "", xol.RefusePrivileged},
		{"0f0118", "lidt (%rax)", "", xol.RefusePrivileged},
		{"48cf", "iretq", "", xol.RefusePrivileged},
		{"8ed0", "mov %eax,%ss", "", xol.RefuseTrapShadow},
		{"c7f8" + "00000000", "xbegin", "", xol.RefuseRTM},
		{"678b05" + "10000000", "mov x(%eip),%eax", "", xol.RefuseAddr32RIP},
	}
	for _, tt := range tests {
		inst := decodeX86(t, tt.hex)
		f, err := xol.CheckX86(inst)
		if tt.refuse != "" {
			var re *xol.RefusalError
			if !errors.As(err, &re) || re.Code != tt.refuse || !errors.Is(err, xol.ErrNotRelocatable) {
				t.Errorf("%s (%s): %v, %v; want refusal %s", tt.what, tt.hex, f, err, tt.refuse)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s (%s): %v", tt.what, tt.hex, err)
			continue
		}
		if got := f.String(); got != tt.fixups {
			t.Errorf("%s (%s): fixups %s, want %s", tt.what, tt.hex, got, tt.fixups)
		}
		if f.RIPRel && f.DispOff != inst.DispOff {
			t.Errorf("%s: DispOff %d, decoder %d", tt.what, f.DispOff, inst.DispOff)
		}
	}
}

// TestScratchFree checks, over every RIP-relative form of a sample, that the
// scratch register is one the instruction neither reads nor writes nor
// names.
func TestScratchFree(t *testing.T) {
	// mov, add, cmp, lea, movzx, call, push, vmovdqu, vpaddd with every
	// ModRM.reg value.
	prefixes := []string{"8b", "03", "3b", "8d", "0fb6", "c5fe6f", "c5fdfe", "48f7"}
	checked := 0
	defer func() {
		if checked < 40 {
			t.Errorf("only %d forms checked", checked)
		}
	}()
	for _, p := range prefixes {
		for reg := 0; reg < 8; reg++ {
			h := p + hex.EncodeToString([]byte{byte(reg<<3 | 5)}) + "10000000"
			b, _ := hex.DecodeString(h)
			inst, err := decode.DecodeX86(b, 0)
			if err != nil || !inst.RIPRel {
				continue
			}
			f, err := xol.CheckX86(&inst)
			if err != nil {
				t.Errorf("%s: %v", h, err)
				continue
			}
			if f.Scratch < 0 {
				if !inst.RegsApprox {
					t.Errorf("%s: no scratch register though the register sets are exact", h)
				}
				continue
			}
			named := int(inst.Reg) == f.Scratch || inst.Encoding != decode.EncLegacy && int(inst.VVVV) == f.Scratch
			if !inst.RegsApprox && (inst.Read|inst.Written).Has(f.Scratch) || named || f.Scratch == decode.RSP {
				t.Errorf("%s: scratch %s is used by the instruction", h, decode.X86RegName(f.Scratch))
			}
			checked++
		}
	}
}

// TestBoostableX86 checks which instructions may run boosted: those that
// raise no exception in user space whatever their operands.
func TestBoostableX86(t *testing.T) {
	tests := []struct {
		hex, what string
		want      bool
	}{
		{"90", "nop", true},
		{"4889c3", "mov %rax,%rbx", true},
		{"488b0510000000", "mov x(%rip),%rax", true},
		{"4883c001", "add $1,%rax", true},
		{"48f7d9", "neg %rcx", true},
		{"48f7e1", "mul %rcx", true},
		{"660fefc1", "pxor %xmm1,%xmm0", true},
		{"c5f9efc1", "vpxor %xmm1,%xmm0,%xmm0", true},
		{"488b18", "mov (%rax),%rbx", false},
		{"488d18", "lea (%rax),%rbx (a ModRM memory form)", false},
		{"c5f96f00", "vmovdqa (%rax),%xmm0", false},
		{"55", "push %rbp", false},
		{"5d", "pop %rbp", false},
		{"c9", "leave", false},
		{"c3", "ret", false},
		{"eb00", "jmp .+2", false},
		{"7400", "je .+2", false},
		{"e800000000", "call .+5", false},
		{"ffd0", "call *%rax", false},
		{"a4", "movsb", false},
		{"f348ab", "rep stos %rax,(%rdi)", false},
		{"d7", "xlat", false},
		{"6c", "insb", false},
		{"6f", "outsl", false},
		{"d9c9", "fxch %st(1)", false},
		{"dec1", "faddp", false},
		{"48f7f1", "div %rcx", false},
		{"48f7f9", "idiv %rcx", false},
		{"f6f1", "div %cl", false},
		{"660ff7c1", "maskmovdqu %xmm1,%xmm0", false},
		{"0ff7c1", "maskmovq %mm1,%mm0", false},
	}
	for _, tt := range tests {
		if got := xol.BoostableX86(decodeX86(t, tt.hex)); got != tt.want {
			t.Errorf("%s (%s): BoostableX86 = %v, want %v", tt.what, tt.hex, got, tt.want)
		}
	}
}
