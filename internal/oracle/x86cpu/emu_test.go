package x86cpu

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
)

// newTestEmuOracle starts an EmuOracle for a test (startTestOracle).
func newTestEmuOracle(t testing.TB) *EmuOracle {
	t.Helper()
	return startTestOracle(t, "emulator", NewEmuOracle)
}

// hostEmulator returns the emulator of the host CPU's vendor, or skips the
// test where the vendor cannot be told.
func hostEmulator(t testing.TB) emulate.X86 {
	t.Helper()
	return emulate.X86{Vendor: hostVendor(t)}
}

// runEmuOracle places the cases in img, decodes them with vendor's rules
// and runs them on the oracle; it returns the instructions and what the
// CPU did.
func runEmuOracle(t testing.TB, o EmuRunner, img *EmuImage, cases []EmuCase, vendor decode.Vendor) ([]decode.X86Inst, []EmuCPUResult) {
	t.Helper()
	insts := make([]decode.X86Inst, len(cases))
	for i := range cases {
		if err := img.Place(&cases[i]); err != nil {
			t.Fatal(err)
		}
		if err := (decode.X86Decoder{Vendor: vendor}).Decode(cases[i].Bytes, cases[i].Init.RIP, &insts[i]); err != nil {
			t.Fatalf("case %d % x: %v", i, cases[i].Bytes, err)
		}
	}
	out := make([]EmuCPUResult, len(cases))
	if err := o.Run(img, cases, out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return insts, out
}

// runEmuCases places the cases in img, runs them on the oracle and checks
// each with the emulator; it returns the verdicts and the mismatches.
func runEmuCases(t testing.TB, o EmuRunner, img *EmuImage, cases []EmuCase) ([]emuVerdict, []*EmuMismatch) {
	t.Helper()
	x := hostEmulator(t)
	insts, out := runEmuOracle(t, o, img, cases, x.Vendor)
	verdicts := make([]emuVerdict, len(cases))
	var mis []*EmuMismatch
	for i := range cases {
		v, m := checkEmu(&cases[i], &insts[i], img, &out[i], x)
		verdicts[i] = v
		if m != nil {
			mis = append(mis, m)
		}
	}
	return verdicts, mis
}

// TestEmuRegressions replays every regression vector on the CPU: the
// emulator must agree with it on each.
func TestEmuRegressions(t *testing.T) {
	vecs := readEmuVectorFile(t)
	o := newTestEmuOracle(t)
	for _, v := range vecs {
		c := v.Case
		verdicts, mis := runEmuCases(t, o, NewEmuImage(v.ImageSeed), []EmuCase{c})
		for _, m := range mis {
			t.Errorf("line %d:\n%s", v.Line, m)
		}
		if verdicts[0] == emuSkipped {
			t.Errorf("line %d: the case touches the oracle's own memory", v.Line)
		}
	}
}

// readEmuVectorFile reads testdata/emu/regressions.txt.
func readEmuVectorFile(t testing.TB) []EmuVector {
	t.Helper()
	return readTestVectors(t, "emu", ReadEmuVectors)
}

// TestEmuCampaign is the campaign continuous integration runs: 100,000
// generated cases (10,000,000 with PROBEOPT_LONG=1) and no mismatch.
func TestEmuCampaign(t *testing.T) {
	o := newTestEmuOracle(t)
	n := testCaseCount(t, "", 10_000, 100_000, 10_000_000)
	c := EmuCampaign{Cases: n, Seed: 0x70726f62, Vendor: hostVendor(t), OnMismatch: reportMismatches[*EmuMismatch](t)}
	rep, err := c.Run(o)
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	t.Logf("%d cases (%d completed, %d faulted, %d skipped) in %.1f s: %.0f cases/s, %d mismatches",
		rep.Cases, rep.Completed, rep.Faulted, rep.Skipped, rep.Seconds, rep.PerSecond, rep.Mismatches)
	if rep.Mismatches != 0 {
		t.Errorf("%d mismatches", rep.Mismatches)
	}
	if rep.Cases != n || rep.Skipped != 0 {
		t.Errorf("compared %d cases and skipped %d, want %d and 0", rep.Cases, rep.Skipped, n)
	}
	// Every class must both run and, where it touches memory, fault
	// sometimes: a class that never completes would test nothing.
	for _, name := range EmuClasses() {
		cl := rep.Classes[name]
		if cl == nil || cl.Completed == 0 {
			t.Errorf("class %s: no completed case (%+v)", name, cl)
		}
	}
}

// TestEmuOracleKnown checks the oracle itself on cases whose outcome on
// the CPU is known from the manuals, without the emulator.
func TestEmuOracleKnown(t *testing.T) {
	o := newTestEmuOracle(t)
	img := NewEmuImage(7)
	mk := func(addr uint64, code string, set func(*emulate.X86State)) EmuCase {
		return newEmuTestCase(t, "", addr, code, set)
	}
	cases := []EmuCase{
		// add eax, ebx: 0x7fffffff + 1 overflows into the sign bit and
		// clears the upper half of rax.
		mk(EmuCodeLow, "01d8", func(s *emulate.X86State) {
			s.GPR[decode.RAX] = 0xffffffff_7fffffff
			s.GPR[decode.RBX] = 1
		}),
		// push rax: 8 bytes below rsp.
		mk(EmuCodeLow+16, "50", func(s *emulate.X86State) { s.GPR[decode.RAX] = 0x1122334455667788 }),
		// mov rax, [rax] on an unmapped address: a page fault on a read.
		mk(EmuCodeLow+32, "488b00", func(s *emulate.X86State) { s.GPR[decode.RAX] = 0x1234 }),
		// mov [rax], al on the read-only page: a page fault on a write.
		mk(EmuCodeLow+48, "8800", func(s *emulate.X86State) { s.GPR[decode.RAX] = EmuROAddr + 8 }),
		// mov rax, [rax] at a non-canonical address: #GP.
		mk(EmuCodeLow+64, "488b00", func(s *emulate.X86State) { s.GPR[decode.RAX] = 0x8000_0000_0000 }),
		// push rax with a non-canonical rsp: #SS.
		mk(EmuCodeLow+80, "50", func(s *emulate.X86State) { s.GPR[decode.RSP] = 0x8000_0000_0008 }),
		// jmp rel32 from the high window past the canonical limit: #GP
		// at the jmp.
		mk(EmuCodeHigh, "e9ffffff7f", nil),
	}
	for i := range cases {
		if err := img.Place(&cases[i]); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]EmuCPUResult, len(cases))
	if err := o.Run(img, cases, out); err != nil {
		t.Fatal(err)
	}
	type want struct {
		sig, trap int
		addr      uint64
		write     bool
		rip       uint64
	}
	wants := []want{
		{emuSigTrap, emuTrapDB, 0, false, EmuCodeLow + 2},
		{emuSigTrap, emuTrapDB, 0, false, EmuCodeLow + 17},
		{emuSigSegv, emuTrapPF, 0x1234, false, EmuCodeLow + 32},
		{emuSigSegv, emuTrapPF, EmuROAddr + 8, true, EmuCodeLow + 48},
		{emuSigSegv, emuTrapGP, 0, false, EmuCodeLow + 64},
		{emuSigBus, emuTrapSS, 0, false, EmuCodeLow + 80},
		{emuSigSegv, emuTrapGP, 0, false, EmuCodeHigh},
	}
	for i, w := range wants {
		r := out[i]
		if noncanonical := cases[i].Init.GPR[decode.RSP] == 0x8000_0000_0008; noncanonical && !o.EntersNoncanonicalRSP() {
			// This host cannot start the case (HostEntersNoncanonicalRSP).
			if !r.NotRun {
				t.Errorf("case %d (% x): run with a non-canonical rsp on a host that cannot enter one", i, cases[i].Bytes)
			}
			t.Logf("case %d (% x): not run, this host cannot enter user mode with a non-canonical rsp", i, cases[i].Bytes)
			continue
		}
		if r.Signal != w.sig || r.Trap != w.trap || r.State.RIP != w.rip {
			t.Errorf("case %d (% x): signal %d trap %d rip %#x, want %d %d %#x", i, cases[i].Bytes, r.Signal, r.Trap, r.State.RIP, w.sig, w.trap, w.rip)
		}
		if w.trap == emuTrapPF && (r.Addr != w.addr || (r.ErrCode&2 != 0) != w.write) {
			t.Errorf("case %d: fault at %#x err %#x, want %#x write=%v", i, r.Addr, r.ErrCode, w.addr, w.write)
		}
	}
	if got := out[0].State.GPR[decode.RAX]; got != 0x80000000 {
		t.Errorf("add: rax %#x, want 0x80000000", got)
	}
	if f := out[0].State.RFLAGS & (emulate.FlagOF | emulate.FlagSF | emulate.FlagCF | emulate.FlagZF); f != emulate.FlagOF|emulate.FlagSF {
		t.Errorf("add: flags %#x, want OF|SF", f)
	}
	wantPush := []EmuMemWord{{Addr: EmuRWAddr + 0xff8, Val: 0x1122334455667788}}
	if !reflect.DeepEqual(out[1].Writes, wantPush) || out[1].State.GPR[decode.RSP] != EmuRWAddr+0xff8 {
		t.Errorf("push: writes %v rsp %#x, want %v and %#x", out[1].Writes, out[1].State.GPR[decode.RSP], wantPush, uint64(EmuRWAddr+0xff8))
	}
	// The window is restored between cases: the next batch sees the
	// template again.
	out2 := make([]EmuCPUResult, 1)
	if err := o.Run(img, cases[1:2], out2); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out2[0].Writes, wantPush) {
		t.Errorf("push again: writes %v, want %v", out2[0].Writes, wantPush)
	}
}

// TestEmuVectorRoundTrip formats a case as a vector and parses it back.
func TestEmuVectorRoundTrip(t *testing.T) {
	g, err := newEmuGen(3, "", decode.VendorAMD)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		var c EmuCase
		if !g.gen(EmuCodeLow+16*uint64(i), &c) {
			t.Fatal("generator gave up")
		}
		vendor := []decode.Vendor{decode.VendorAMD, decode.VendorIntel}[i%2]
		line := formatEmuVector(&c, vendor, 0x1234, "a note")
		vecs, err := ReadEmuVectors(strings.NewReader("# comment\n\n" + line + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if len(vecs) != 1 || !reflect.DeepEqual(vecs[0].Case, c) || vecs[0].ImageSeed != 0x1234 || vecs[0].Vendor != vendor || vecs[0].Note != "a note" {
			t.Fatalf("round trip of %s gave %+v", line, vecs)
		}
	}
	for _, bad := range []string{"alu", "alu zz vendor=amd image=1 rip=1 rflags=2", "alu 90 vendor=amd rip=1 rflags=2", "alu 90 vendor=amd image=1 rip=1 rflags=2 xyz=3",
		"alu 90 image=1 rip=1 rflags=2", "alu 90 vendor=via image=1 rip=1 rflags=2"} {
		if _, err := ReadEmuVectors(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestEmuGenDeterministic checks that a seed gives the same cases.
func TestEmuGenDeterministic(t *testing.T) {
	a, _ := newEmuGen(9, "", decode.VendorAMD)
	b, _ := newEmuGen(9, "", decode.VendorAMD)
	ba, err := a.batch(5, 300)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := b.batch(5, 300)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ba.cases, bb.cases) || ba.img.RW != bb.img.RW {
		t.Error("same seed, different cases")
	}
	if _, err := newEmuGen(1, "nosuchclass", decode.VendorAMD); err == nil {
		t.Error("unknown class accepted")
	}
}

// emuFormKey names an instruction form for coverage: map, opcode, for
// forms with ModRM the reg field and whether the operand is a register,
// the operand size, and one legacy prefix byte (0 for none).
func emuFormKey(inst *decode.X86Inst, pfx byte) string {
	k := []byte{byte(inst.Map), inst.Opcode, 0xff, 0, byte(inst.OpSize), pfx}
	if inst.HasModRM {
		k[2] = inst.Reg
		if inst.Mod == 3 {
			k[3] = 1
		}
	}
	return string(k)
}

// emuLegacyPrefixes are the prefix bytes the coverage test tries.
var emuLegacyPrefixes = []byte{0x66, 0x67, 0x2e, 0x36, 0x3e, 0x26, 0x64, 0x65, 0xf2, 0xf3}

// emuPrefixKey maps a prefix byte to its coverage class, or 0 when it does
// not matter for the form: the segment prefixes count only on
// instructions with a memory operand, and ES, CS, SS and DS (all ignored)
// count as one.
func emuPrefixKey(inst *decode.X86Inst, p byte) byte {
	switch p {
	case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65:
		moffs := inst.Map == decode.Map1Byte && inst.Opcode >= 0xa0 && inst.Opcode <= 0xa3
		if !moffs && (!inst.HasModRM || inst.Mod == 3) {
			return 0
		}
		if p != 0x64 && p != 0x65 {
			return 0x2e
		}
	}
	return p
}

// TestEmuGenCoversClaims enumerates the one-byte and 0F opcodes with every
// ModRM reg field, register and memory operands, the three operand sizes
// and each legacy prefix, and checks that the structured generator
// produces every form the emulator claims to execute (X86Supported), so
// that the campaign tests everything the planner may rely on.
func TestEmuGenCoversClaims(t *testing.T) {
	claimed := map[string]string{}
	var dec decode.X86Decoder
	claim := func(b []byte, pfx byte) {
		var inst decode.X86Inst
		if dec.Decode(b, EmuCodeLow, &inst) == nil && emulate.X86Supported(&inst) == nil {
			claimed[emuFormKey(&inst, emuPrefixKey(&inst, pfx))] = inst.Text("intel")
		}
	}
	modrms := []byte{0x00, 0x08, 0x10, 0x18, 0x20, 0x28, 0x30, 0x38, 0xc0, 0xc8, 0xd0, 0xd8, 0xe0, 0xe8, 0xf0, 0xf8, 0xfa, 0xfb}
	for _, size := range [][]byte{nil, {0x66}, {0x48}} {
		for _, esc := range [][]byte{nil, {0x0f}} {
			for op := 0; op < 256; op++ {
				for _, modrm := range modrms {
					tail := append(append([]byte{}, esc...), byte(op), modrm, 0, 0, 0, 0, 0, 0, 0, 0, 0)
					claim(append(append([]byte{}, size...), tail...), 0)
					if size != nil {
						continue
					}
					for _, p := range emuLegacyPrefixes {
						claim(append([]byte{p}, tail...), p)
					}
				}
			}
		}
	}
	claim([]byte{0xf3, 0x0f, 0x1e, 0xfa}, 0) // endbr64, endbr32: F3 is part of them
	claim([]byte{0xf3, 0x0f, 0x1e, 0xfb}, 0)
	claim([]byte{0xf3, 0x90}, 0) // pause
	if len(claimed) < 5000 {
		t.Fatalf("only %d claimed forms: the enumeration is broken", len(claimed))
	}
	g, err := newEmuGen(11, "", decode.VendorAMD)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	n := 1_000_000
	if testing.Short() {
		n = 200_000
	}
	for i := 0; i < n; i++ {
		var c EmuCase
		if !g.gen(EmuCodeLow, &c) {
			t.Fatal("generator gave up")
		}
		var inst decode.X86Inst
		if err := dec.Decode(c.Bytes, EmuCodeLow, &inst); err != nil {
			t.Fatal(err)
		}
		seen[emuFormKey(&inst, 0)] = true
		for _, p := range c.Bytes[:inst.NumPrefixes] {
			seen[emuFormKey(&inst, emuPrefixKey(&inst, p))] = true
		}
	}
	missing := 0
	for k, text := range claimed {
		if !seen[k] && (k[5] == 0 || !testing.Short()) {
			missing++
			if missing <= 20 {
				t.Errorf("claimed form never generated: %s (map %d opcode %#x reg %d regform %d size %d prefix %#x)", text, k[0], k[1], k[2], k[3], k[4], k[5])
			}
		}
	}
	t.Logf("%d claimed forms, %d generated in %d cases", len(claimed), len(claimed)-missing, n)
}

// TestEmuModel checks the memory model the emulator runs on.
func TestEmuModel(t *testing.T) {
	img := NewEmuImage(1)
	m := &emuModel{img: img}
	if v, err := m.Read(EmuRWAddr, 8); err != nil || v != emuLE64(img.RW[:]) {
		t.Errorf("read rw: %#x %v", v, err)
	}
	var f *emulate.Fault
	if _, err := m.Read(EmuRWAddr+EmuRWSize-4, 8); !errors.As(err, &f) || f.Addr != EmuRWAddr+EmuRWSize {
		t.Errorf("read across the end of rw: %v, want a fault at the next page", err)
	}
	if err := m.Write(EmuROAddr+EmuROSize-2, 4, 0); !errors.As(err, &f) || f.Addr != EmuROAddr+EmuROSize-2 {
		t.Errorf("write from ro into rw: %v, want a fault at the first byte", err)
	}
	if m.wrote {
		t.Error("a refused write was recorded")
	}
	if _, err := m.Read(emuCtrlAddr+8, 1); !errors.Is(err, errEmuReserved) || !m.reserved {
		t.Errorf("read of the control area: %v", err)
	}
	m = &emuModel{img: img}
	if err := m.Write(EmuRWAddr+6, 4, 0xaabbccdd); err != nil {
		t.Fatal(err)
	}
	w := m.writes()
	q0, q1 := emuLE64(img.RW[0:]), emuLE64(img.RW[8:])
	want := []EmuMemWord{
		{EmuRWAddr, q0&0x0000ffff_ffffffff | 0xccdd<<48},
		{EmuRWAddr + 8, q1&^0xffff | 0xaabb},
	}
	var keep []EmuMemWord
	for i, x := range want {
		if x.Val != []uint64{q0, q1}[i] {
			keep = append(keep, x)
		}
	}
	if !reflect.DeepEqual(w, keep) {
		t.Errorf("writes %v, want %v", w, keep)
	}
}
