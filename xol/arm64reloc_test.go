package xol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/internal/reason"
)

// a64Space is a flat test memory: code at two places, one data page.
type a64Space struct {
	b map[uint64]byte
}

func (m *a64Space) Read(a uint64, size int) (uint64, error) {
	var v uint64
	for i := 0; i < size; i++ {
		x, ok := m.b[a+uint64(i)]
		if !ok {
			return 0, &emulate.Fault{Addr: a + uint64(i), Err: errors.New("unmapped")}
		}
		v |= uint64(x) << (8 * i)
	}
	return v, nil
}

func (m *a64Space) Write(a uint64, size int, v uint64) error {
	for i := 0; i < size; i++ {
		if _, ok := m.b[a+uint64(i)]; !ok {
			return &emulate.Fault{Addr: a + uint64(i), Err: errors.New("unmapped")}
		}
	}
	for i := 0; i < size; i++ {
		m.b[a+uint64(i)] = byte(v >> (8 * i))
	}
	return nil
}

func (m *a64Space) put(a uint64, b []byte) {
	for i, x := range b {
		m.b[a+uint64(i)] = x
	}
}

// a64Run emulates from pc while pc stays in [lo, hi), at most 64 steps.
// It returns false when an instruction on the way is not emulated.
func a64Run(t testing.TB, m *a64Space, st *emulate.ARM64State, lo, hi uint64) (error, bool) {
	for k := 0; k < 64 && st.PC >= lo && st.PC < hi; k++ {
		w, err := m.Read(st.PC, 4)
		if err != nil {
			return err, true
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(w))
		inst, err := decode.DecodeARM64(b[:], st.PC)
		if err != nil {
			return nil, false
		}
		if err := (emulate.ARM64{NoPAuth: true}).Step(&inst, st, m); err != nil {
			if errors.Is(err, emulate.ErrNotEmulated) {
				return nil, false
			}
			return err, true
		}
	}
	return nil, true
}

// a64Memory returns the test memory of checkByEmulation: a data page at
// 0x7000_0000, a page of literals around the run, the run at from and the
// block at to.
func a64Memory(code []byte, from, to uint64, block []byte) *a64Space {
	m := &a64Space{b: map[uint64]byte{}}
	for a := uint64(0); a < 4096; a++ {
		m.b[0x7000_0000+a] = byte(a * 7)
		m.b[from-2048+a] = byte(a * 13) // literals around the run
	}
	m.put(from, code)
	m.put(to, block)
	return m
}

// a64Loops emulates the original run at from, from state st, in the
// memory of checkByEmulation, and reports whether it executes one of its
// instructions a second time: a taken branch (direct or through a
// register) back to the first instruction, to itself or to an instruction
// in between. If so, it returns the address of that instruction and the
// state and memory just before its second execution. A run that faults or
// meets an instruction the emulator lacks does not loop.
func a64Loops(code []byte, from uint64, st emulate.ARM64State) (uint64, emulate.ARM64State, *a64Space, bool) {
	m := a64Memory(code, from, from, nil)
	end := from + uint64(len(code))
	seen := map[uint64]bool{}
	st.PC = from
	for k := 0; k < 64 && st.PC >= from && st.PC < end; k++ {
		if seen[st.PC] {
			return st.PC, st, m, true
		}
		seen[st.PC] = true
		w, err := m.Read(st.PC, 4)
		if err != nil {
			break
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(w))
		inst, err := decode.DecodeARM64(b[:], st.PC)
		if err != nil {
			break
		}
		if err := (emulate.ARM64{NoPAuth: true}).Step(&inst, &st, m); err != nil {
			break
		}
	}
	return 0, st, nil, false
}

// checkLoopToStart checks a relocated run whose original, emulated from
// st, branches back to its first instruction: the block must leave for
// the original site (where the probe fires again) in the state the
// original has when it gets there, but for the scratch register. want and
// wantMem are that state and memory, from a64Loops.
func checkLoopToStart(t testing.TB, code []byte, from, to uint64, rel *ARM64Relocation, st, want emulate.ARM64State, wantMem *a64Space) {
	t.Helper()
	m := a64Memory(code, from, to, rel.Code)
	b := st
	b.PC = to
	err, ok := a64Run(t, m, &b, to, to+uint64(len(rel.Code)))
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("%s\nthe original loops back to its start; the block faults: %v", code2text(code, from), err)
	}
	checkSameEnd(t, code, from, to, rel, &want, &b, wantMem, m, "back at the start", "the block leaves with")
}

// checkSameEnd fails the test unless the block ends (b, mb) as the
// original does (a, ma), but for the block's scratch registers and its
// own bytes; wantName and gotName say which end each state is.
func checkSameEnd(t testing.TB, code []byte, from, to uint64, rel *ARM64Relocation, a, b *emulate.ARM64State, ma, mb *a64Space, wantName, gotName string) {
	t.Helper()
	for r := 0; r < 31; r++ {
		if rel.Scratch.Has(r) {
			b.X[r] = a.X[r]
		}
	}
	if *a != *b {
		t.Fatalf("%s\n%s:\n%s\n%s:\n%s\nblock % x", code2text(code, from), wantName, a.String(), gotName, b.String(), rel.Code)
	}
	for k, v := range ma.b {
		if mb.b[k] != v && (k < to || k >= to+uint64(len(rel.Code))) {
			t.Fatalf("memory at %#x: %#x, relocated %#x", k, v, mb.b[k])
		}
	}
}

// checkByEmulation relocates code from from to to and runs the original
// and the block in the emulator from state st; the results must agree but
// for the scratch register. It returns false when the emulator cannot run
// one of them.
func checkByEmulation(t testing.TB, code []byte, from, to uint64, opt *ARM64RelocOptions, st emulate.ARM64State) (*ARM64Relocation, bool) {
	t.Helper()
	rel, err := RelocateARM64(code, from, to, opt)
	if err != nil {
		t.Fatalf("relocate: %v", err)
	}
	ma, mb := a64Memory(code, from, to, rel.Code), a64Memory(code, from, to, rel.Code)
	a, b := st, st
	a.PC, b.PC = from, to
	errA, okA := a64Run(t, ma, &a, from, from+uint64(len(code)))
	end := to + uint64(rel.End)
	if opt != nil && opt.Return {
		end = to + uint64(len(rel.Code))
	}
	errB, okB := a64Run(t, mb, &b, to, end)
	if !okA || !okB {
		return rel, false
	}
	if opt == nil || !opt.Return {
		if b.PC == to+uint64(rel.End) {
			b.PC = from + uint64(len(code))
		}
	}
	if (errA == nil) != (errB == nil) {
		t.Fatalf("original: %v, relocated: %v", errA, errB)
	}
	if errA == nil {
		checkSameEnd(t, code, from, to, rel, &a, &b, ma, mb, "original", "relocated")
	}
	return rel, true
}

func code2text(code []byte, from uint64) string {
	s := ""
	for i := 0; i+4 <= len(code); i += 4 {
		inst, err := decode.DecodeARM64(code[i:], from+uint64(i))
		if err != nil {
			s += fmt.Sprintf("%#x: (bad)\n", from+uint64(i))
			continue
		}
		s += fmt.Sprintf("%#x: %s\n", from+uint64(i), inst.Text())
	}
	return s
}

const (
	relFrom = 0x40_0000_1000
	relNear = relFrom + 0x4000        // in reach of everything
	relMid  = relFrom + 0x20_0000     // beyond b.cond, within b
	relFar  = relFrom + 0x2_0000_0000 // beyond everything
)

// TestRelocateARM64Forms checks the form each instruction takes at three
// distances and that the block does what the original does.
func TestRelocateARM64Forms(t *testing.T) {
	type tc struct {
		name  string
		w     uint32
		to    uint64
		form  ARM64RelocForm
		setup func(s *emulate.ARM64State)
	}
	flagsZ := func(s *emulate.ARM64State) { s.NZCV = emulate.NZCVZ }
	for _, c := range []tc{
		{"b near", 0x14000010, relNear, ARM64FormRetarget, nil},
		{"b far", 0x14000010, relFar, ARM64FormFar, nil},
		{"bl near", 0x94000010, relNear, ARM64FormLink, nil},
		{"bl far", 0x94000010, relFar, ARM64FormLink, nil},
		{"b.eq near taken", 0x54000100, relNear, ARM64FormRetarget, flagsZ},
		{"b.eq mid taken", 0x54000100, relMid, ARM64FormNear, flagsZ},
		{"b.eq mid not taken", 0x54000100, relMid, ARM64FormNear, nil},
		{"b.eq far taken", 0x54000100, relFar, ARM64FormFar, flagsZ},
		{"b.eq far not taken", 0x54000100, relFar, ARM64FormFar, nil},
		{"bc.eq far taken", 0x54000110, relFar, ARM64FormFar, flagsZ},
		{"b.al far", 0x5400010e, relFar, ARM64FormFar, nil},
		{"cbnz x3 mid", 0xb5000103, relMid, ARM64FormNear, func(s *emulate.ARM64State) { s.X[3] = 1 }},
		{"tbz w4, #3 mid", 0x36180104, relMid, ARM64FormNear, nil},
		{"tbz w4, #3 near", 0x36180104, relNear, ARM64FormRetarget, nil},
		{"adr near", 0x10000105, relNear, ARM64FormRetarget, nil},
		{"adr mid", 0x10000105, relMid, ARM64FormMaterialize, nil},
		{"adrp far", 0xb0000105, relFar, ARM64FormMaterialize, nil},
		{"adrp mid", 0xb0000105, relMid, ARM64FormRetarget, nil},
		{"adr xzr", 0x1000011f, relFar, ARM64FormNop, nil},
		{"ldr x6 literal near", 0x58000106, relNear, ARM64FormRetarget, nil},
		{"ldr x6 literal far", 0x58000106, relFar, ARM64FormMaterialize, nil},
		{"ldrsw x6 literal far", 0x98000106, relFar, ARM64FormMaterialize, nil},
		{"ldr w6 literal far", 0x18000106, relFar, ARM64FormMaterialize, nil},
		{"ldr q6 literal far", 0x9c000106, relFar, ARM64FormMaterialize, nil},
		{"ldr xzr literal far", 0x5800011f, relFar, ARM64FormMaterialize, nil},
		{"prfm literal far", 0xd8000100, relFar, ARM64FormNop, nil},
		{"blr x7", 0xd63f00e0, relFar, ARM64FormLink, func(s *emulate.ARM64State) { s.X[7] = relFrom + 0x40 }},
		{"blr x30", 0xd63f03c0, relFar, ARM64FormLink, func(s *emulate.ARM64State) { s.X[30] = relFrom + 0x40 }},
		{"ret", 0xd65f03c0, relFar, ARM64FormCopy, func(s *emulate.ARM64State) { s.X[30] = relFrom + 0x40 }},
		{"add", 0x91000421, relFar, ARM64FormCopy, nil},
	} {
		for _, ret := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/return=%v", c.name, ret), func(t *testing.T) {
				var s emulate.ARM64State
				for i := range s.X {
					s.X[i] = uint64(i) * 0x1111
				}
				s.X[6] = 0x7000_0000
				if c.setup != nil {
					c.setup(&s)
				}
				opt := &ARM64RelocOptions{Return: ret}
				rel, ok := checkByEmulation(t, decode.ARM64Code(c.w), relFrom, c.to, opt, s)
				if !ok {
					t.Errorf("not emulated")
				}
				if got := rel.Insts[0].Form; got != c.form {
					t.Errorf("form %s, want %s", got, c.form)
				}
			})
		}
	}
}

func TestRelocateARM64Refusals(t *testing.T) {
	type tc struct {
		name string
		code []byte
		to   uint64
		opt  ARM64RelocOptions
		want reason.Code
	}
	for _, c := range []tc{
		{"far b without scratch", decode.ARM64Code(0x14000010), relFar, ARM64RelocOptions{NoScratch: true}, RefuseNoScratch},
		{"far b into a BTI page", decode.ARM64Code(0x14000010), relFar, ARM64RelocOptions{BTIGuarded: true}, RefuseBTI},
		{"far return without scratch", decode.ARM64Code(0x91000421), relFar, ARM64RelocOptions{Return: true, NoScratch: true}, RefuseNoScratch},
		{"both scratch registers used", decode.ARM64Code(0x91000610, 0x91000631, 0x14000010), relFar, ARM64RelocOptions{}, RefuseNoScratch},
		{"bl before the end", decode.ARM64Code(0x94000010, 0x91000421), relNear, ARM64RelocOptions{Return: true}, RefuseCallInRun},
		{"blr before the end", decode.ARM64Code(0xd63f00e0, 0x91000421), relNear, ARM64RelocOptions{Return: true}, RefuseCallInRun},
		{"svc before the end of a live detour", decode.ARM64Code(0xd4000001, 0x91000421), relNear, ARM64RelocOptions{Return: true, Live: true}, RefuseSyscallInRun},
		{"svc single-stepped", decode.ARM64Code(0xd4000001), relNear, ARM64RelocOptions{}, RefuseSyscall},
		{"brk", decode.ARM64Code(0xd4200000), relNear, ARM64RelocOptions{}, RefuseTrap},
		{"ldxr", decode.ARM64Code(0xc85f7c20), relNear, ARM64RelocOptions{}, RefuseExclusive},
		{"after an ldxr", decode.ARM64Code(0x91000421), relNear, ARM64RelocOptions{Before: decode.ARM64Code(0xc85f7c20, 0xd503201f)}, RefuseExclusiveWindow},
		{"udf", decode.ARM64Code(0x00000000), relNear, ARM64RelocOptions{}, RefuseUnknown},
		{"unknown branch-space word", decode.ARM64Code(0x74000000), relNear, ARM64RelocOptions{}, RefuseUnknown},
		{"blraa x30", decode.ARM64Code(0xd73f0bc1), relNear, ARM64RelocOptions{}, RefuseLinkRegister},
		{"blraa x7 into a BTI page", decode.ARM64Code(0xd73f08e1), relNear, ARM64RelocOptions{BTIGuarded: true}, RefuseBTI},
		{"far fp literal without scratch", decode.ARM64Code(0x9c000106), relFar, ARM64RelocOptions{NoScratch: true}, RefuseNoScratch},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := RelocateARM64(c.code, relFrom, c.to, &c.opt)
			var re *RefusalError
			if !errors.As(err, &re) || !errors.Is(err, ErrNotRelocatable) {
				t.Fatalf("err = %v, want a refusal %q", err, c.want)
			}
			if re.Code != c.want {
				t.Fatalf("code %q (%v), want %q", re.Code, err, c.want)
			}
		})
	}
	// Accepted: svc as the last instruction of a live detour; after a
	// completed exclusive sequence; blr with x16.
	for _, c := range []tc{
		{"svc last in a live detour", decode.ARM64Code(0x91000421, 0xd4000001), relNear, ARM64RelocOptions{Return: true, Live: true}, ""},
		{"after a store-exclusive", decode.ARM64Code(0x91000421), relNear, ARM64RelocOptions{Before: decode.ARM64Code(0xc85f7c20, 0xc8027c20)}, ""},
		{"blr x16 into a BTI page", decode.ARM64Code(0xd63f0200), relFar, ARM64RelocOptions{BTIGuarded: true}, ""},
		{"blraa x7", decode.ARM64Code(0xd73f08e1), relFar, ARM64RelocOptions{}, ""},
	} {
		if _, err := RelocateARM64(c.code, relFrom, c.to, &c.opt); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	for _, bad := range []struct {
		code     []byte
		from, to uint64
	}{{nil, relFrom, relNear}, {[]byte{1, 2, 3}, relFrom, relNear}, {decode.ARM64Code(0xd503201f), relFrom + 2, relNear}, {make([]byte, 4*65), relFrom, relNear}} {
		if _, err := RelocateARM64(bad.code, bad.from, bad.to, nil); !errors.Is(err, ErrBadRun) {
			t.Errorf("%d bytes from %#x: %v, want ErrBadRun", len(bad.code), bad.from, err)
		}
	}
}

// TestRelocateARM64Run relocates a run with an internal branch, a literal
// load and a call at the end, and checks the map back to the original.
func TestRelocateARM64Run(t *testing.T) {
	code := decode.ARM64Code(
		0xb4000063, // cbz x3, +12 (to the bl, inside the run)
		0x58000106, // ldr x6, literal
		0x91000421, // add x1, x1, #1
		0x94000100, // bl +0x400
	)
	for _, to := range []uint64{relNear, relMid, relFar} {
		for _, x3 := range []uint64{0, 1} {
			var s emulate.ARM64State
			s.X[3] = x3
			rel, ok := checkByEmulation(t, code, relFrom, to, &ARM64RelocOptions{Return: true}, s)
			if !ok {
				t.Fatalf("to %#x: not emulated", to)
			}
			for i, in := range rel.Insts {
				if got, ok := rel.OrigPC(to + uint64(in.Off)); !ok || got != relFrom+4*uint64(i) {
					t.Errorf("OrigPC(%#x) = %#x, %v", to+uint64(in.Off), got, ok)
				}
			}
			if got, ok := rel.OrigPC(to + uint64(rel.End)); !ok || got != relFrom+16 {
				t.Errorf("OrigPC(end) = %#x, %v", got, ok)
			}
		}
	}
	// A branch back to the first instruction goes to the original site
	// (the probe fires again); one to a later instruction stays inside.
	rel, err := RelocateARM64(decode.ARM64Code(0x91000421, 0x17ffffff), relFrom, relNear, &ARM64RelocOptions{Return: true})
	if err != nil {
		t.Fatal(err)
	}
	w := binary.LittleEndian.Uint32(rel.Code[4:])
	if got := relNear + 4 + uint64(int64(int32(w<<6))>>4); got != relFrom {
		t.Errorf("branch to the run's start goes to %#x", got)
	}
}

// FuzzRelocateARM64 relocates random runs and compares the emulated
// original with the emulated block.
func FuzzRelocateARM64(f *testing.F) {
	f.Add(uint32(0x54000100), uint32(0x91000421), uint8(1), uint64(0x2_0000_0000), uint8(3), uint64(1))
	f.Add(uint32(0xb4000063), uint32(0x94000100), uint8(2), uint64(0x20_0000), uint8(1), uint64(0))
	f.Add(uint32(0x58000106), uint32(0x10000105), uint8(2), uint64(0x1000), uint8(0), uint64(7))
	f.Fuzz(fuzzRelocateARM64)
}

// fuzzRelocateARM64 is the body of FuzzRelocateARM64: a run of one or two
// words (n%2+1) relocated dist bytes ahead with the options in flags, from
// a state derived from x.
func fuzzRelocateARM64(t *testing.T, w0, w1 uint32, n uint8, dist uint64, flags uint8, x uint64) {
	words := []uint32{w0, w1}[:1+int(n%2)]
	dist = dist &^ 3 % (1 << 40)
	if dist < 0x100 {
		dist += 0x100
	}
	to := relFrom + dist
	opt := &ARM64RelocOptions{Return: flags&1 != 0, NoScratch: flags&2 != 0, BTIGuarded: flags&4 != 0, Live: flags&8 != 0}
	code := decode.ARM64Code(words...)
	rel, err := RelocateARM64(code, relFrom, to, opt)
	if err != nil {
		var re *RefusalError
		if !errors.As(err, &re) || !errors.Is(err, ErrNotRelocatable) {
			t.Fatalf("not a refusal: %v", err)
		}
		return
	}
	if len(rel.Code)%4 != 0 || rel.End > len(rel.Code) || len(rel.Insts) != len(words) {
		t.Fatalf("bad block: %+v", rel)
	}
	var s emulate.ARM64State
	for i := range s.X {
		s.X[i] = x + uint64(i)
	}
	s.X[6] = 0x7000_0000
	s.NZCV = uint64(flags) << 28
	// A run that branches back into itself (a loop) cannot be compared
	// after a fixed number of steps: the block sends a branch to the
	// first instruction to the original site. That one is checked up to
	// the branch; other loops are skipped. A literal outside the test
	// memory faults in both.
	if pc, want, wantMem, loops := a64Loops(code, relFrom, s); loops {
		if pc == relFrom {
			checkLoopToStart(t, code, relFrom, to, rel, s, want, wantMem)
		}
		return
	}
	checkByEmulation(t, code, relFrom, to, opt, s)
}

// fatalRecorder is a testing.TB whose Fatalf records the failure and ends
// the goroutine, for tests of a checker.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(string, ...any) {
	r.failed = true
	runtime.Goexit()
}

// checkFails reports whether check fails through Fatalf.
func checkFails(t *testing.T, check func(testing.TB)) bool {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.failed
}

// TestRelocateARM64LoopCheck checks how FuzzRelocateARM64 treats a run that
// branches back into itself: a loop to the run's start is compared up to
// the branch (and a wrong block still fails), other loops are recognized
// and skipped, and a forward branch is no loop.
func TestRelocateARM64LoopCheck(t *testing.T) {
	loop := decode.ARM64Code(0x91000421, 0x17ffffff) // add x1, x1, #1; b .-4
	for _, flags := range []uint8{0, 1, 2, 3, 8, 9} {
		for _, dist := range []uint64{0x4000, 0x20_0000, 0x2_0000_0000} {
			fuzzRelocateARM64(t, 0x91000421, 0x17ffffff, 1, dist, flags, 0)
		}
	}
	var st emulate.ARM64State
	pc, want, _, loops := a64Loops(loop, relFrom, st)
	if !loops || pc != relFrom || want.X[1] != 1 || want.PC != relFrom {
		t.Errorf("add; b .-4: a64Loops = %#x, x1=%#x pc=%#x, %v; want a loop to %#x with x1=1", pc, want.X[1], want.PC, loops, uint64(relFrom))
	}
	if pc, _, _, loops := a64Loops(decode.ARM64Code(0x91000421, 0x14000000), relFrom, st); !loops || pc != relFrom+4 {
		t.Errorf("add; b .: a64Loops = %#x, %v; want a loop to %#x", pc, loops, uint64(relFrom+4))
	}
	for _, code := range [][]byte{
		decode.ARM64Code(0x91000421, 0x14000001), // add; b .+4
		decode.ARM64Code(0xb4000043, 0x91000421), // cbz x3, .+8; add
		decode.ARM64Code(0xb5ffffe3, 0x91000421), // cbnz x3, .-4 (not taken, x3 = 0)
	} {
		if _, _, _, loops := a64Loops(code, relFrom, st); loops {
			t.Errorf("%s: a loop", code2text(code, relFrom))
		}
	}

	// A block whose branch does not go back to the original site fails.
	rel, err := RelocateARM64(loop, relFrom, relNear, &ARM64RelocOptions{Return: true})
	if err != nil {
		t.Fatal(err)
	}
	bad := *rel
	bad.Code = append([]byte(nil), rel.Code...)
	binary.LittleEndian.PutUint32(bad.Code[4:], 0x17ffffff) // to the block's start
	_, want, wantMem, _ := a64Loops(loop, relFrom, st)
	if checkFails(t, func(tb testing.TB) { checkLoopToStart(tb, loop, relFrom, relNear, rel, st, want, wantMem) }) {
		t.Error("checkLoopToStart fails the relocated block")
	}
	if !checkFails(t, func(tb testing.TB) { checkLoopToStart(tb, loop, relFrom, relNear, &bad, st, want, wantMem) }) {
		t.Error("checkLoopToStart accepts a block that loops inside itself")
	}
}
