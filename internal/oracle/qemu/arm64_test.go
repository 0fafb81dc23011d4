package qemu

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/internal/testenv"
)

// Campaign sizes: a short run by default (also in CI), the long ones with
// PROBEOPT_LONG=1.
func arm64CampaignCases(short, long int) int {
	if testenv.Long() {
		return long
	}
	return short
}

// TestARM64Vectors runs the vector file on the emulator and the oracle.
func TestARM64Vectors(t *testing.T) {
	vs := testenv.ReadVectors(t, "testdata/arm64/emulate.txt", ReadARM64Vectors)
	q := startTestQEMU(t, 1)
	var items []a64EmuItem
	var cases []ARM64Case
	for _, v := range vs {
		it, skip := a64Emulate(v.Case, "vector", v.Line, q.Image())
		if skip != "" {
			t.Errorf("line %d (%s): %s", v.Line, v.Note, skip)
			continue
		}
		items = append(items, it)
		cases = append(cases, v.Case)
	}
	out := make([]ARM64Result, len(cases))
	if err := q.Run(cases, out); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if v, why := checkA64Emu(&items[i], &out[i]); v == a64Mismatch || v == a64Skip {
			t.Errorf("line %d (%s): %s\n  emulator: %s\n  oracle:   %s", items[i].index, items[i].inst.Text(), why, a64EmuWant(&items[i]), a64ResultText(&out[i]))
		}
	}
}

// TestARM64EmuCampaign is the emulator campaign against qemu: short by
// default (150,000 cases), with PROBEOPT_LONG=1 1,100,000 cases, of which
// over 1,000,000 are compared (the rest are refused).
func TestARM64EmuCampaign(t *testing.T) {
	q := startTestQEMU(t, 0x5eed)
	c := &ARM64EmuCampaign{Cases: arm64CampaignCases(150000, 1100000), Seed: 0x5eed}
	runARM64Campaign(t, "emulate", func(on func(*ARM64Mismatch) bool) (*ARM64Report, error) {
		c.OnMismatch = on
		return c.Run(q)
	})
}

// TestARM64XOLCampaign is the relocation campaign against qemu: short by
// default (50,000 runs), with PROBEOPT_LONG=1 1,400,000 runs, of which
// over 1,000,000 are compared (the rest are refused).
func TestARM64XOLCampaign(t *testing.T) {
	q := startTestQEMU(t, 0x5eed)
	c := &ARM64XOLCampaign{Cases: arm64CampaignCases(50000, 1400000), Seed: 0x5eed}
	runARM64Campaign(t, "xol", func(on func(*ARM64Mismatch) bool) (*ARM64Report, error) {
		c.OnMismatch = on
		return c.Run(q)
	})
}

func runARM64Campaign(t *testing.T, kind string, run func(func(*ARM64Mismatch) bool) (*ARM64Report, error)) {
	t.Helper()
	shown := 0
	rep, err := run(func(m *ARM64Mismatch) bool {
		if shown < 10 {
			t.Error(m)
		}
		shown++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d generated, %d compared (%d completed, %d faulted), %d mismatches, %.0f cases/s; refused %v; skipped %v; forms %v",
		kind, rep.Generated, rep.Cases, rep.Completed, rep.Faulted, rep.Mismatches, rep.PerSecond, rep.Refused, rep.Skipped, rep.Forms)
	if rep.Mismatches > 0 {
		t.Errorf("%d mismatches", rep.Mismatches)
	}
	if rep.Cases < rep.Generated/2 {
		t.Errorf("only %d of %d cases compared", rep.Cases, rep.Generated)
	}
	for class, cl := range rep.Classes {
		if cl.Cases == 0 {
			t.Errorf("class %s: no case compared", class)
		}
	}
}

// TestQEMUOracleBasics checks the harness's answers on known cases.
func TestQEMUOracleBasics(t *testing.T) {
	q := startTestQEMU(t, 2)
	pc := uint64(ARM64CodeAddr + 0x100)
	st := emulate.ARM64State{PC: pc, SP: ARM64RWAddr + 0x1000, NZCV: emulate.NZCVZ}
	st.X[1] = ARM64RWAddr + 8
	st.X[2] = 0x1234
	mk := func(w uint32) ARM64Case { return ARM64Case{State: st, Code: []ARM64Patch{{pc, w}}} }
	cases := []ARM64Case{
		mk(0xd503201f), // nop: trap at pc+4
		mk(0x14000000), // b .: a loop, stopped by the timer
		mk(0xf9000022), // str x2, [x1]
		mk(0xf9400040), // ldr x0, [x2]: low memory, unmapped
		mk(0xd503201f), // the patch of the previous cases is gone
	}
	out := make([]ARM64Result, len(cases))
	if err := q.Run(cases, out); err != nil {
		t.Fatal(err)
	}
	if r := out[0]; r.Signo != sigTRAP || r.State.PC != pc+4 || r.State.NZCV != emulate.NZCVZ || r.State.X[2] != 0x1234 {
		t.Errorf("nop: %s", a64ResultText(&r))
	}
	if r := out[1]; r.Signo != sigVTALRM {
		t.Errorf("loop: %s", a64ResultText(&r))
	}
	if r := out[2]; r.Signo != sigTRAP || len(r.Writes) != 1 || r.Writes[0] != (ARM64MemWord{ARM64RWAddr + 8, 0x1234}) {
		t.Errorf("store: %s", a64ResultText(&r))
	}
	if r := out[3]; r.Signo != sigSEGV || r.Addr != 0x1234 || r.State.PC != pc {
		t.Errorf("load: %s", a64ResultText(&r))
	}
	if r := out[4]; r.Signo != sigTRAP || len(r.Writes) != 0 {
		t.Errorf("restored: %s", a64ResultText(&r))
	}
	q.Close()
	if err := q.Run(cases, out); err == nil {
		t.Errorf("Run after Close succeeded")
	}
}

func TestQEMUMissingTool(t *testing.T) {
	_, err := StartQEMU(NewARM64Image(1), &QEMUOptions{QEMU: "no-such-qemu-aarch64"})
	if !errors.Is(err, ErrNoToolchain) {
		t.Errorf("err = %v, want ErrNoToolchain", err)
	}
	if _, err := BuildQEMUHarness("no-such-cross-gcc", t.TempDir()); !errors.Is(err, ErrNoToolchain) {
		t.Errorf("err = %v, want ErrNoToolchain", err)
	}
}

func TestBuildQEMUHarnessCached(t *testing.T) {
	testenv.MustHaveTool(t, QEMUHarnessCC)
	dir := t.TempDir()
	a, err := BuildQEMUHarness("", dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	b, err := BuildQEMUHarness("", dir)
	if err != nil || a != b {
		t.Fatalf("second build: %v, %s vs %s", err, a, b)
	}
	if st2, _ := os.Stat(b); !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("the cached harness was rebuilt")
	}
}

// TestARM64GenDeterministic: a seed gives the same cases.
func TestARM64GenDeterministic(t *testing.T) {
	a, b := newA64Gen(7, ""), newA64Gen(7, "")
	for i := 0; i < 1000; i++ {
		ca, cla := a.emuCase("")
		cb, clb := b.emuCase("")
		if cla != clb || ca.State != cb.State || ca.Code[0] != cb.Code[0] {
			t.Fatalf("case %d differs", i)
		}
	}
}

// fuzzOracle is one oracle per fuzzing process.
var fuzzOracle struct {
	once sync.Once
	q    *QEMUOracle
	err  error
}

// FuzzARM64EmulateQEMU compares the emulator with qemu on a fuzzed word
// and a state generated from a fuzzed seed.
func FuzzARM64EmulateQEMU(f *testing.F) {
	for _, w := range []uint32{0xa9be7bfd, 0xab020020, 0x54000081, 0xd63f03c0, 0x9c080006, 0x38dffca4, 0xa9000c22} {
		f.Add(w, uint64(w))
	}
	f.Fuzz(func(t *testing.T, w uint32, seed uint64) {
		fuzzOracle.once.Do(func() {
			testenv.MustHaveTool(t, "qemu-aarch64")
			testenv.MustHaveTool(t, QEMUHarnessCC)
			fuzzOracle.q, fuzzOracle.err = StartQEMU(NewARM64Image(1), nil)
		})
		if fuzzOracle.err != nil {
			t.Fatal(fuzzOracle.err)
		}
		if fuzzOracle.q == nil {
			t.Skip("no oracle")
		}
		g := newA64Gen(seed, "")
		c, _ := g.emuCase("random")
		c.Code[0].Word = w
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], w)
		if inst, err := decode.DecodeARM64(b[:], 0); err == nil && inst.HasCond && w&0x10 != 0 {
			return // bc.cond: qemu 7.2 lacks FEAT_HBC
		}
		it, skip := a64Emulate(c, "fuzz", 0, fuzzOracle.q.Image())
		if skip != "" {
			return
		}
		out := make([]ARM64Result, 1)
		if err := fuzzOracle.q.Run([]ARM64Case{c}, out); err != nil {
			t.Fatal(err)
		}
		if v, why := checkA64Emu(&it, &out[0]); v == a64Mismatch {
			t.Fatalf("%s: %s\n  emulator: %s\n  oracle:   %s", it.inst.Text(), why, a64EmuWant(&it), a64ResultText(&out[0]))
		}
	})
}
