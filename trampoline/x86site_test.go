package trampoline

import (
	"testing"
)

// TestKeepFirst checks where SiteOptions.KeepFirst puts the jump, with
// objdump as the oracle for the instruction boundaries: after the first
// instruction when it may run before the handler (it falls through; with
// Args it writes no argument register, with Returns neither the stack
// pointer nor memory, or it is a push of a register that the slot undoes
// and runs again: Site.Redo), else at the address.
func TestKeepFirst(t *testing.T) {
	const addr = 0x401000
	cases := []struct {
		name  string
		code  []byte
		keep  bool // kept without Args or Returns
		keepA bool // kept with Args
		keepR bool // kept with Returns
	}{
		// push %r13; push %rbx; mov %rdi,%rbx; sub $16,%rsp; ret (glibc's malloc starts so)
		{"push", []byte{0x41, 0x55, 0x53, 0x48, 0x89, 0xfb, 0x48, 0x83, 0xec, 0x10, 0xc3}, true, true, true},
		// test %rdi,%rdi; je rel32; lea 7(%rdi),%rax; ret (glibc's free)
		{"test", []byte{0x48, 0x85, 0xff, 0x0f, 0x84, 0x05, 0x00, 0x00, 0x00, 0x48, 0x8d, 0x47, 0x07, 0xc3, 0xb8, 0x07, 0, 0, 0, 0xc3}, true, true, true},
		// xor %edx,%edx (an argument register); lea 5(%rdi,%rdx),%rax; ret
		{"args", []byte{0x31, 0xd2, 0x48, 0x8d, 0x44, 0x17, 0x05, 0xc3}, true, false, true},
		// mov %rdi,8(%rsp) (memory); mov %rdi,%rax; add $1,%rax; ret
		{"store", []byte{0x48, 0x89, 0x7c, 0x24, 0x08, 0x48, 0x89, 0xf8, 0x48, 0x83, 0xc0, 0x01, 0xc3}, true, true, false},
		// jmp +0; then code: a branch never stays
		{"branch", []byte{0xeb, 0x00, 0x48, 0x89, 0xf8, 0x48, 0x83, 0xc0, 0x01, 0xc3}, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			insts := objdump(t, c.code, addr)
			first := insts[0].len
			for mode, want := range []bool{c.keep, c.keepA, c.keepR} {
				args, returns := mode == 1, mode == 2
				s, err := AnalyzeX86(addr, c.code, &SiteOptions{KeepFirst: true, Args: args, Returns: returns})
				if err != nil {
					t.Fatalf("args %v returns %v: %v", args, returns, err)
				}
				at := 0
				if want {
					at = first
				}
				redo := returns && want && c.name == "push"
				if s.Addr != addr || s.PatchAddr != addr+uint64(at) || s.Kept != at || (s.Redo != nil) != redo {
					t.Errorf("args %v returns %v: Addr %#x PatchAddr %#x Kept %d Redo %v, want %#x %#x %d %v", args, returns, s.Addr, s.PatchAddr, s.Kept, s.Redo != nil, addr, addr+uint64(at), at, redo)
				}
				// The jump ends on a boundary objdump sees, at least 5
				// bytes after it starts.
				end := s.PatchAddr + uint64(s.Len)
				onBoundary := false
				for _, in := range insts {
					onBoundary = onBoundary || in.addr == end
				}
				if s.Len < jmpLen || !onBoundary {
					t.Errorf("args %v returns %v: %d bytes replaced at %#x end off a boundary of %v", args, returns, s.Len, s.PatchAddr, insts)
				}
			}
			// Without the option the jump is at the address.
			s, err := AnalyzeX86(addr, c.code, nil)
			if err != nil || s.PatchAddr != addr || s.Kept != 0 {
				t.Errorf("without KeepFirst: %+v, %v", s, err)
			}
		})
	}
}

// TestKeepFirstNopOnly: with NopOnly, a kept first instruction followed
// by a NOP of 5 bytes gives the NOP site after it (what the plan decides
// as trampoline-nop with Decision.Kept), and anything else no site.
func TestKeepFirstNopOnly(t *testing.T) {
	const addr = 0x401000
	// push %rbx; nopl 0x0(%rax,%rax,1); ret
	code := []byte{0x53, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3}
	insts := objdump(t, code, addr)
	s, err := AnalyzeX86(addr, code, &SiteOptions{KeepFirst: true, NopOnly: true})
	if err != nil || s.Kind != SiteNop || s.Kept != insts[0].len || s.PatchAddr != insts[1].addr || s.Len != insts[1].len {
		t.Fatalf("push; nop5: %+v, %v; objdump: %v", s, err, insts)
	}
	// push %rbx; mov %rdi,%rax; ...: no NOP after the push.
	if s, err := AnalyzeX86(addr, []byte{0x53, 0x48, 0x89, 0xf8, 0x48, 0x83, 0xc0, 0x01, 0xc3}, &SiteOptions{KeepFirst: true, NopOnly: true}); err == nil {
		t.Fatalf("push; mov with NopOnly: %+v, want a refusal", s)
	}
}
