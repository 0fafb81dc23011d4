package qemu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/xol"
)

// a64CheckState is the state the checker tests start from: x<i> = 0x1000*i,
// the stack in the read-write window, the pc in the main code window.
func a64CheckState() emulate.ARM64State {
	st := arm64VectorBase().State
	st.PC = ARM64CodeAddr + 0x100
	return st
}

// TestARM64EmuCheckerCatches runs instructions under qemu, then checks them
// against emulator answers spoiled in one way at a time: each spoiled
// answer must be reported with the difference it names, a spoiled
// register that a faulting load leaves UNKNOWN must not be (arm64 has no
// undefined flags: NZCV is always compared), and the intact answers must
// agree.
func TestARM64EmuCheckerCatches(t *testing.T) {
	q := startTestQEMU(t, 3)
	mk := func(word uint32, vec bool, set func(*emulate.ARM64State)) ARM64Case {
		st := a64CheckState()
		if set != nil {
			set(&st)
		}
		return ARM64Case{State: st, Vec: vec, Code: []ARM64Patch{{st.PC, word}}}
	}
	const (
		adds = iota
		store
		load
	)
	cases := []ARM64Case{
		// adds x0, x1, x2: a signed overflow, N and V set.
		adds: mk(0xab020020, true, func(s *emulate.ARM64State) {
			s.X[1] = 0x7fffffffffffffff
			s.X[2] = 1
		}),
		// str x2, [x1] in the read-write window.
		store: mk(0xf9000022, false, func(s *emulate.ARM64State) {
			s.X[1] = ARM64RWAddr + 8
			s.X[2] = 0x1122334455667788
		}),
		// ldr x0, [x2] from an unmapped address.
		load: mk(0xf9400040, false, func(s *emulate.ARM64State) { s.X[2] = 0x1234 }),
	}
	items := make([]a64EmuItem, len(cases))
	for i, c := range cases {
		it, skip := a64Emulate(c, "checker", i, q.Image())
		if skip != "" {
			t.Fatalf("case %d: %s", i, skip)
		}
		items[i] = it
	}
	out := make([]ARM64Result, len(cases))
	if err := q.Run(cases, out); err != nil {
		t.Fatal(err)
	}
	want := []a64Verdict{adds: a64Completed, store: a64Completed, load: a64Faulted}
	for i := range items {
		if v, why := checkA64Emu(&items[i], &out[i]); v != want[i] || why != "" {
			t.Fatalf("case %d (%s): verdict %d, want %d; the intact emulator disagrees: %s\n  oracle: %s", i, items[i].inst.Text(), v, want[i], why, a64ResultText(&out[i]))
		}
	}
	spoilers := []struct {
		what   string
		c      int
		spoil  func(it *a64EmuItem)
		reason string // "" when the spoiled answer must still agree
	}{
		{"a register", adds, func(it *a64EmuItem) { it.st.X[0] ^= 1 },
			"x0 0x8000000000000000, expected 0x8000000000000001"},
		{"sp", adds, func(it *a64EmuItem) { it.st.SP += 16 },
			"sp 0x1000012000, expected 0x1000012010"},
		{"the pc", adds, func(it *a64EmuItem) { it.st.PC += 4 },
			"pc 0x1000000104, expected 0x1000000108"},
		{"a flag", adds, func(it *a64EmuItem) { it.st.NZCV ^= emulate.NZCVZ },
			"nzcv 0x9, expected 0xd"},
		{"a vector register", adds, func(it *a64EmuItem) { it.st.V[3][1] ^= 1 },
			"v3 0x0:0000000000000000, expected 0x1:0000000000000000"},
		{"a byte written", store, func(it *a64EmuItem) { it.mem[0].Val ^= 0x100 },
			"memory [0x1000011008]=0x1122334455667788, expected [0x1000011008]=0x1122334455667688"},
		{"no write", store, func(it *a64EmuItem) { it.mem = nil },
			"memory [0x1000011008]=0x1122334455667788, expected unchanged"},
		{"a vector register not compared", store, func(it *a64EmuItem) { it.st.V[3][1] ^= 1 }, ""},
		{"a fault where the oracle completed", adds, func(it *a64EmuItem) {
			it.fault, it.st, it.mem = &emulate.Fault{Addr: 0x1234, Size: 8, Access: emulate.AccessRead}, it.c.State, nil
		}, "signal 5, expected SIGSEGV"},
		{"completion where the oracle faulted", load, func(it *a64EmuItem) {
			it.fault = nil
			it.st.PC += 4
		}, "signal 11 at 0x1234, not at the pc"},
		{"the fault address", load, func(it *a64EmuItem) { it.fault.Addr += 8 },
			"fault address 0x1234, expected 0x123c"},
		{"the destination of a faulting load", load, func(it *a64EmuItem) { it.st.X[0] ^= 1 }, ""},
		{"another register of a faulting load", load, func(it *a64EmuItem) { it.st.X[3] ^= 1 },
			"x3 0x3000, expected 0x3001"},
	}
	for _, sp := range spoilers {
		t.Run(strings.ReplaceAll(sp.what, " ", "_"), func(t *testing.T) {
			it := items[sp.c]
			it.mem = append([]ARM64MemWord(nil), items[sp.c].mem...)
			if f := items[sp.c].fault; f != nil {
				fc := *f
				it.fault = &fc
			}
			sp.spoil(&it)
			v, why := checkA64Emu(&it, &out[sp.c])
			if sp.reason == "" {
				if v != want[sp.c] || why != "" {
					t.Fatalf("%s: reported (verdict %d): %s", it.inst.Text(), v, why)
				}
				return
			}
			if v != a64Mismatch {
				t.Fatalf("%s: not reported (verdict %d)", it.inst.Text(), v)
			}
			if !strings.Contains(why, sp.reason) {
				t.Errorf("%s: differences %q, want them to contain %q", it.inst.Text(), why, sp.reason)
			}
		})
	}
}

// TestARM64XOLCheckerCatches relocates runs, spoils the relocated block
// (one word of it) in one way at a time and runs the original, the intact
// block and the spoiled one under qemu: each spoiled block must be
// reported with the difference it names, and the intact blocks must agree
// with their originals, also where the block leaves a scratch register
// changed (which the checker ignores).
func TestARM64XOLCheckerCatches(t *testing.T) {
	q := startTestQEMU(t, 4)
	from := uint64(ARM64CodeAddr + 0x100)
	near := uint64(ARM64CodeAddr + 0x800)
	type run struct {
		words []uint32
		to    uint64
		set   func(*emulate.ARM64State)
	}
	// add x0, x0, #1
	addX0 := run{[]uint32{0x91000400}, near, nil}
	// cmp x1, x2
	cmp := run{[]uint32{0xeb02003f}, near, func(s *emulate.ARM64State) { s.X[1], s.X[2] = 1, 2 }}
	// str x2, [x1]
	store := run{[]uint32{0xf9000022}, near, func(s *emulate.ARM64State) {
		s.X[1] = ARM64RWAddr + 8
		s.X[2] = 0x1122334455667788
		s.X[3] = s.X[2] ^ 0x100
	}}
	// ldr x0, [x2] from an unmapped address
	load := run{[]uint32{0xf9400040}, near, func(s *emulate.ARM64State) {
		s.X[2] = 0x1234
		s.X[1] = ARM64RWAddr + 8
		s.X[3] = ARM64CodeAddr - 0x1000 // mapped without access
	}}
	// b to the window 2 MiB away, relocated 6 GiB away: through x16 or x17.
	far := run{[]uint32{0x14000000 | uint32((ARM64NearAddr+0x40-from)/4)&0x3ffffff}, ARM64FarAddr + 0x100, nil}
	// A spoiler replaces word k of the block (k < 0: the word at End, the
	// jump back) with what word returns for the intact one.
	type spoiler struct {
		what   string
		r      run
		k      int
		word   func(old uint32) uint32
		reason string // "" when the spoiled block must still agree
	}
	set := func(w uint32) func(uint32) uint32 { return func(uint32) uint32 { return w } }
	spoilers := []spoiler{
		{"intact with a scratch register", far, 0, nil, ""},
		// add x0, x0, #2
		{"a register", addX0, 0, set(0x91000800), "x0 0x2, expected 0x1"},
		{"the pc", addX0, -1, func(w uint32) uint32 { return w + 1 }, "pc 0x1000000108, expected 0x1000000104"},
		// cmn x1, x2
		{"a flag", cmp, 0, set(0xab02003f), "nzcv 0x0, expected 0x8"},
		// str x3, [x1]
		{"a byte written", store, 0, set(0xf9000023),
			"memory [0x1000011008]=0x1122334455667688, expected [0x1000011008]=0x1122334455667788"},
		// ldr x0, [x2, #8]
		{"the fault address", load, 0, set(0xf9400440), "signal address 0x123c, original's 0x1234"},
		// ldr x0, [x3]: an access error instead of an unmapped address
		{"the fault kind", load, 0, set(0xf9400060), "signal 11 code 2, original 11 code 1"},
		// ldr x0, [x1]
		{"completion where the original faulted", load, 0, set(0xf9400020), "original 11 code 1"},
		// ldr x0, [x2] with x2 = 0x2000
		{"a fault where the original completed", addX0, 0, set(0xf9400040), "signal 11 code 1, original 5"},
	}
	for _, sp := range spoilers {
		t.Run(strings.ReplaceAll(sp.what, " ", "_"), func(t *testing.T) {
			st := a64CheckState()
			if sp.r.set != nil {
				sp.r.set(&st)
			}
			opt := xol.ARM64RelocOptions{Return: true}
			it, refused := a64Relocate(sp.r.words, from, sp.r.to, opt, st, "checker", 0)
			if refused != "" {
				t.Fatalf("refused: %s", refused)
			}
			// The intact pair, then the original with the spoiled block.
			bad := it
			bad.orig.Code = append([]ARM64Patch(nil), it.orig.Code...)
			desc := a64RunText(&it)
			if sp.word != nil {
				k := sp.k
				if k < 0 {
					k = it.rel.End / 4
				}
				p := &bad.orig.Code[len(sp.r.words)+k]
				p.Word = sp.word(p.Word)
				desc += fmt.Sprintf(", block word %d spoiled to %08x", k, p.Word)
			}
			cases := []ARM64Case{it.orig, it.orig, bad.orig, bad.orig}
			cases[1].State.PC = sp.r.to
			cases[3].State.PC = sp.r.to
			out := make([]ARM64Result, len(cases))
			if err := q.Run(cases, out); err != nil {
				t.Fatal(err)
			}
			if v, why := checkA64XOL(&it, &out[0], &out[1]); (v != a64Completed && v != a64Faulted) || why != "" {
				t.Fatalf("%s: the intact block disagrees (verdict %d): %s\n  original:  %s\n  relocated: %s", a64RunText(&it), v, why, a64ResultText(&out[0]), a64ResultText(&out[1]))
			}
			if sp.word == nil {
				// The block leaves its scratch register changed: the
				// checker must ignore it.
				changed := false
				for r := 16; r <= 17; r++ {
					changed = changed || it.rel.Scratch.Has(r) && out[0].State.X[r] != out[1].State.X[r]
				}
				if !changed {
					t.Fatalf("%s: no scratch register changed (scratch %#x), which tests nothing", a64RunText(&it), uint64(it.rel.Scratch))
				}
			}
			v, why := checkA64XOL(&bad, &out[2], &out[3])
			if sp.reason == "" {
				if (v != a64Completed && v != a64Faulted) || why != "" {
					t.Fatalf("%s: reported (verdict %d): %s", desc, v, why)
				}
				return
			}
			if v != a64Mismatch {
				t.Fatalf("%s: not reported (verdict %d)\n  original:  %s\n  relocated: %s", desc, v, a64ResultText(&out[2]), a64ResultText(&out[3]))
			}
			if !strings.Contains(why, sp.reason) {
				t.Errorf("%s: differences %q, want them to contain %q", desc, why, sp.reason)
			}
		})
	}
}
