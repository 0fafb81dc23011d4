package bpf

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
)

// note parses a note's argument string as elfscan does.
func note(t *testing.T, args string) *elfscan.USDTProbe {
	t.Helper()
	p := &elfscan.USDTProbe{Provider: "p", Name: "n", Args: args}
	p.Arguments, p.ArgsErr = elfscan.ParseUSDTArgs(decode.X86_64, args)
	return p
}

// TestUSDTSpecRules: the operands libbpf's parse_usdt_arg (x86-64) reads,
// with the pt_regs offsets of its table, and those it refuses.
func TestUSDTSpecRules(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want USDTArgSpec
	}{
		{"-4@$5", USDTArgSpec{ValOff: 5, Type: USDTArgConst, Signed: true, Bitshift: 32}},
		{"8@$-1", USDTArgSpec{ValOff: 1<<64 - 1, Type: USDTArgConst, Bitshift: 0}},
		{"-1@%al", USDTArgSpec{Type: USDTArgReg, RegOff: 80, Signed: true, Bitshift: 56}},
		{"2@%r9w", USDTArgSpec{Type: USDTArgReg, RegOff: 64, Bitshift: 48}},
		{"8@%rip", USDTArgSpec{Type: USDTArgReg, RegOff: 128}},
		{"-4@-12(%rbp)", USDTArgSpec{ValOff: 1<<64 - 12, Type: USDTArgRegDeref, RegOff: 32, Signed: true, Bitshift: 32}},
		{"8@(%rsp)", USDTArgSpec{Type: USDTArgRegDeref, RegOff: 152}},
		{"-2@16(%r15)", USDTArgSpec{ValOff: 16, Type: USDTArgRegDeref, RegOff: 0, Signed: true, Bitshift: 48}},
	} {
		s, err := NewUSDTSpec(note(t, c.arg), 7)
		if err != nil || len(s.Args) != 1 || s.Args[0] != c.want || s.Cookie != 7 {
			t.Errorf("%s: %+v, %v; want %+v", c.arg, s, err, c.want)
		}
	}
	for _, arg := range []string{
		"-1@gsc(%rip)",       // a symbol
		"1@-96(%rbp,%rax,8)", // an index register
		"8@%fs:40",           // a segment
		"8@0x601040",         // an absolute address
		"1@%ah",              // a register libbpf does not name
		"%rdi",               // no size
		"4@0x10(%rbp)",       // a hexadecimal displacement
		"4@$0x10",            // a hexadecimal constant
		"3@%eax",             // a size elfscan refuses
		"8@%rax 8@%rbx 8@%rcx 8@%rdx 8@%rsi 8@%rdi 8@%r8 8@%r9 8@%r10 8@%r11 8@%r12 8@%r13 8@%r14", // 13
	} {
		if s, err := NewUSDTSpec(note(t, arg), 0); !errors.Is(err, ErrUSDTArg) {
			t.Errorf("%s: %+v, %v; want ErrUSDTArg", arg, s, err)
		}
	}
	// struct __bpf_usdt_spec's bytes.
	s, err := NewUSDTSpec(note(t, "-4@-12(%rbp) 8@$3"), 0x1122)
	if err != nil {
		t.Fatal(err)
	}
	b := s.Bytes()
	if len(b) != USDTSpecSize || binary.LittleEndian.Uint64(b) != 1<<64-12 || b[8] != 2 || binary.LittleEndian.Uint16(b[12:]) != 32 ||
		b[14] != 1 || b[15] != 32 || binary.LittleEndian.Uint64(b[16:]) != 3 || b[24] != 0 ||
		binary.LittleEndian.Uint64(b[192:]) != 0x1122 || binary.LittleEndian.Uint16(b[200:]) != 2 {
		t.Errorf("bytes %x", b)
	}
}

// TestUSDTSpecIDs: IDs as libbpf's loader gives them: one per distinct
// argument string of an attachment in note order; an attachment's IDs
// back on release, the last released taken first; none past the map's
// size, and none taken by a failed attachment.
func TestUSDTSpecIDs(t *testing.T) {
	m := &USDTSpecs{max: 4}
	ids := func(l *USDTLink, args ...string) []int {
		var notes []*elfscan.USDTProbe
		for _, a := range args {
			notes = append(notes, note(t, a))
		}
		out, err := l.Specs(notes)
		if err != nil {
			return nil
		}
		var r []int
		seen := map[string]bool{}
		for i, s := range out {
			r = append(r, s.ID)
			if (s.Spec != nil) == seen[args[i]] {
				t.Errorf("%v: spec bytes of note %d given: %v", args, i, s.Spec != nil)
			}
			seen[args[i]] = true
		}
		return r
	}
	a := m.NewLink(0)
	if got := ids(a, "8@%rdi", "8@%rsi", "8@%rdi"); len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != 0 {
		t.Errorf("first link: %v", got)
	}
	b := m.NewLink(0)
	if got := ids(b, "8@%rdx"); len(got) != 1 || got[0] != 2 {
		t.Errorf("second link: %v", got)
	}
	if got := ids(m.NewLink(0), "8@%rax", "8@%rbx"); got != nil {
		t.Errorf("past the map's 4 entries: %v", got)
	}
	if got := ids(m.NewLink(0), "8@%rax", "-1@x(%rip)"); got != nil {
		t.Errorf("a refused note: %v", got)
	}
	a.Release()
	if got := ids(m.NewLink(0), "8@%r8", "8@%r9", "8@%r10"); len(got) != 3 || got[0] != 1 || got[1] != 0 || got[2] != 3 {
		t.Errorf("after a release: %v, want [1 0 3]", got)
	}
}
