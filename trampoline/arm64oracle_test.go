package trampoline_test

// A differential test of arm64 slots against qemu-user: generated
// instructions of the relocation campaign's classes (branches, calls,
// PC-relative forms, indirect branches, data processing) run once at
// their address and once through the b at that address, the slot and
// the jump back, from the same state; registers, NZCV, FP/SIMD registers,
// the stopping signal and the memory written must agree, but for the
// slot's own frame below the stack pointer and the data area.

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/fuzz"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/trampoline"
)

// arm64OracleClasses are the classes drawn: those that touch no data
// memory through registers, so that the slot's own stores (its frame and
// the counters) cannot change what the instruction reads.
var arm64OracleClasses = []string{
	"b", "bl", "bcond", "cb", "tb", "adr", "adrp", "literal", "literal-fp", "prfm",
	"blr", "br", "addimm", "movwide", "logshift", "dp",
}

type a64Span struct{ lo, hi uint64 }

func (s a64Span) has(a uint64, n uint64) bool { return a < s.hi && a+n > s.lo }

func TestARM64QemuOracle(t *testing.T) {
	testenv.MustHaveTool(t, "qemu-aarch64")
	testenv.MustHaveTool(t, fuzz.QEMUHarnessCC)
	q, err := fuzz.StartQEMU(fuzz.NewARM64Image(7), nil)
	if err != nil {
		if errors.Is(err, fuzz.ErrNoToolchain) {
			testenv.Unavailable(t, "%v", err)
		}
		t.Fatal(err)
	}
	defer q.Close()
	n := 4000
	if testing.Short() {
		n = 500
	}
	if testenv.Long() {
		n = 100000
	}
	o := newA64Oracle(t)
	items, stats := o.items(t, n)
	faults, mismatches := o.run(t, q, items)
	t.Logf("%d cases run (%d faulting), %d mismatches; per class and skip reason: %v", len(items), faults, mismatches, stats)
	if len(items) < n/2 {
		t.Errorf("only %d of %d cases ran", len(items), n)
	}
}

// a64Oracle is the setup of TestARM64QemuOracle: the stack pointer of
// every case, the data area, and the memory the comparison leaves out
// (the slot's frame below the stack pointer, the data area).
type a64Oracle struct {
	sp      uint64
	data    *trampoline.Data
	cfg     *trampoline.Config
	protect []a64Span
}

func newA64Oracle(t *testing.T) *a64Oracle {
	const sp = fuzz.ARM64RWAddr + 0x1000
	data, err := trampoline.NewData(fuzz.ARM64RWAddr+0x1800, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	return &a64Oracle{sp: sp, data: data, cfg: &trampoline.Config{Data: data}, protect: []a64Span{{sp - 128, sp}, {data.Addr, data.Addr + 0x400}}}
}

// a64Item is a case of TestARM64QemuOracle: the instruction's case, its
// name in messages, the address of the counter the slot increments (or
// 0), the case run through the slot, and where the slot lies.
type a64Item struct {
	c        fuzz.ARM64SiteCase
	name     string
	counter  uint64
	tramp    fuzz.ARM64Case
	slotSpan a64Span
}

// items generates n site cases and the slot of each, with a handler and
// options that vary by case, and counts the cases by class and the others
// by why they are left out.
func (o *a64Oracle) items(t *testing.T, n int) (items []a64Item, stats map[string]int) {
	sp, data, cfg, protect := o.sp, o.data, o.cfg, o.protect
	handlers := []trampoline.Handler{
		{Count: true, Counter: 1},
		{ID: 3, Event: true, Count: true},
		{},
	}
	stats = map[string]int{}
	for i, c := range fuzz.GenARM64SiteCases(11, n, arm64OracleClasses) {
		st := c.State
		st.SP = sp
		pc := st.PC
		s, err := trampoline.AnalyzeARM64(pc, binary4(c.Word), nil)
		if err != nil {
			stats["refused"]++
			continue
		}
		// The slot: near the site (short forms) or 2 MiB away (long
		// forms of conditional branches and literal loads).
		slot := uint64(fuzz.ARM64CodeAddr + 0xC000)
		if i%2 == 1 {
			slot = fuzz.ARM64NearAddr + 0x1000
		}
		h := handlers[i%len(handlers)]
		opt := &trampoline.ARM64Options{LSE: i%4 == 0}
		code, err := trampoline.GenerateARM64(slot, s, &h, cfg, opt)
		if errors.Is(err, trampoline.ErrOutOfReach) {
			stats["out-of-reach"]++
			continue
		}
		if err != nil {
			t.Fatalf("%#08x (%s) at %#x: %v", c.Word, s.Inst.Text(), pc, err)
		}
		span := a64Span{slot, slot + uint64(len(code))}
		// Skip what would see the slot's memory: a branch or literal
		// into the slot, a literal in the frame or the data area.
		skip := false
		if s.Inst.PCRel && (span.has(s.Inst.Target, 16) || slices.ContainsFunc(protect, func(p a64Span) bool { return p.has(s.Inst.Target, 16) })) {
			skip = true
		}
		if s.Inst.Class == decode.ARM64ClassBranch && s.Inst.Rn >= 0 && s.Inst.Rn <= 30 && span.has(st.X[s.Inst.Rn], 4) {
			skip = true
		}
		if len(code)/4+1 > 64 {
			skip = true
		}
		if skip {
			stats["skipped"]++
			continue
		}
		it := a64Item{c: c, slotSpan: span, name: fmt.Sprintf("%s %#08x (%s) at %#x, slot %#x, handler %+v, %+v", c.Class, c.Word, s.Inst.Text(), pc, slot, h, *opt)}
		if h.Count {
			it.counter = data.CounterAddr(h.Counter)
		}
		b := code
		it.tramp = fuzz.ARM64Case{State: st, Vec: true, Code: []fuzz.ARM64Patch{{Addr: pc, Word: 0x14000000 | uint32((slot-pc)>>2)&0x3FFFFFF}}}
		for k := 0; k < len(b); k += 4 {
			it.tramp.Code = append(it.tramp.Code, fuzz.ARM64Patch{Addr: slot + uint64(k), Word: uint32(b[k]) | uint32(b[k+1])<<8 | uint32(b[k+2])<<16 | uint32(b[k+3])<<24})
		}
		c.State = st
		it.c = c
		items = append(items, it)
		stats[c.Class]++
	}
	return items, stats
}

// run runs every item twice under qemu, the original instruction and the
// slot, and compares the outcomes; it returns the faulting cases (whose
// PCs differ) and the mismatches.
func (o *a64Oracle) run(t *testing.T, q fuzz.ARM64Runner, items []a64Item) (faults, mismatches int) {
	protect := o.protect
	const batch = 512
	res := make([]fuzz.ARM64Result, 2*batch)
	for lo := 0; lo < len(items); lo += batch {
		part := items[lo:min(lo+batch, len(items))]
		var cases []fuzz.ARM64Case
		for _, it := range part {
			cases = append(cases, fuzz.ARM64Case{State: it.c.State, Vec: true, Code: []fuzz.ARM64Patch{{Addr: it.c.State.PC, Word: it.c.Word}}}, it.tramp)
		}
		if err := q.Run(cases, res); err != nil {
			t.Fatal(err)
		}
		for k, it := range part {
			want, got := &res[2*k], &res[2*k+1]
			if diff := a64Compare(want, got, it.counter, append(slices.Clone(protect), it.slotSpan)); diff != "" {
				if want.Signo != 5 && got.Signo == want.Signo {
					// A fault: the original's PC and the slot's differ,
					// and a materialized literal load leaves the address
					// in its register.
					faults++
					continue
				}
				mismatches++
				if mismatches <= 10 {
					t.Errorf("%s:\n%s", it.name, diff)
				}
			}
		}
	}
	return faults, mismatches
}

func binary4(w uint32) []byte { return []byte{byte(w), byte(w >> 8), byte(w >> 16), byte(w >> 24)} }

// a64Compare returns the differences between the original's result and
// the trampoline's, "" when they agree.
func a64Compare(want, got *fuzz.ARM64Result, counter uint64, allowed []a64Span) string {
	var d []string
	if want.Signo != got.Signo || want.Code != got.Code || want.Addr != got.Addr {
		d = append(d, fmt.Sprintf("signal %d/%d at %#x, want %d/%d at %#x", got.Signo, got.Code, got.Addr, want.Signo, want.Code, want.Addr))
	}
	if want.State.X != got.State.X {
		for i := range want.State.X {
			if want.State.X[i] != got.State.X[i] {
				d = append(d, fmt.Sprintf("x%d = %#x, want %#x", i, got.State.X[i], want.State.X[i]))
			}
		}
	}
	if want.State.SP != got.State.SP || want.State.PC != got.State.PC || want.State.NZCV != got.State.NZCV {
		d = append(d, fmt.Sprintf("sp %#x pc %#x nzcv %#x, want %#x %#x %#x", got.State.SP, got.State.PC, got.State.NZCV, want.State.SP, want.State.PC, want.State.NZCV))
	}
	if want.State.V != got.State.V {
		d = append(d, "FP/SIMD registers differ")
	}
	gotW := map[uint64]uint64{}
	for _, w := range got.Writes {
		gotW[w.Addr] = w.Val
	}
	for _, w := range want.Writes {
		if v, ok := gotW[w.Addr]; !ok || v != w.Val {
			d = append(d, fmt.Sprintf("write %#x = %#x missing", w.Addr, w.Val))
		}
		delete(gotW, w.Addr)
	}
	if counter != 0 && want.Signo == 5 {
		if _, ok := gotW[counter&^7]; !ok {
			d = append(d, "the counter did not change")
		}
	}
	for a, v := range gotW {
		if !slices.ContainsFunc(allowed, func(s a64Span) bool { return s.has(a, 8) }) {
			d = append(d, fmt.Sprintf("extra write %#x = %#x", a, v))
		}
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}
