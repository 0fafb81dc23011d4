package x86cpu

import (
	"reflect"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/xol"
)

// newTestXOLOracle starts an XOLX86Oracle for a test (startTestOracle).
func newTestXOLOracle(t testing.TB) *XOLX86Oracle {
	t.Helper()
	return startTestOracle(t, "relocation", NewXOLX86Oracle)
}

// TestXOLX86Campaign is the relocation campaign continuous integration
// runs: 100,000 generated cases (10,000 with -short, 1,000,000 with
// PROBEOPT_LONG=1), every class and every relocation form, no mismatch.
func TestXOLX86Campaign(t *testing.T) {
	o := newTestXOLOracle(t)
	n := testCaseCount(t, "", 10_000, 100_000, 1_000_000)
	c := XOLX86Campaign{Cases: n, Seed: 0x786f6c, Vendor: hostVendor(t), OnMismatch: reportMismatches[*XOLX86Mismatch](t)}
	rep, err := c.Run(o)
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	t.Logf("%d cases (%d compared: %d completed, %d faulted; %d boosted) in %.1f s: %.0f cases/s, %d mismatches; forms %v; refused %v",
		rep.Generated, rep.Compared, rep.Completed, rep.Faulted, rep.Boosted, rep.Seconds, rep.PerSecond, rep.Mismatches, rep.Forms, rep.Refused)
	if rep.Mismatches != 0 {
		t.Errorf("%d mismatches", rep.Mismatches)
	}
	if rep.Generated != n || rep.Compared < n*99/100 {
		t.Errorf("generated %d, compared %d, want %d", rep.Generated, rep.Compared, n)
	}
	for _, name := range XOLX86Classes {
		if cl := rep.Classes[name]; cl == nil || cl.Compared == 0 {
			t.Errorf("class %s: nothing compared (%+v)", name, cl)
		}
	}
	for _, f := range []xol.X86Form{xol.X86FormCopy, xol.X86FormDisp, xol.X86FormScratch, xol.X86FormRetarget, xol.X86FormStub, xol.X86FormAbs} {
		if rep.Forms[f.String()] == 0 {
			t.Errorf("no copy of form %s", f)
		}
	}
	if rep.Boosted == 0 || rep.Faulted == 0 {
		t.Errorf("%d boosted, %d faulted", rep.Boosted, rep.Faulted)
	}
}

// readXOLVectorFile reads testdata/xolx86/regressions.txt.
func readXOLVectorFile(t testing.TB) []XOLX86Case {
	t.Helper()
	return readTestVectors(t, "xolx86", ReadXOLX86Vectors)
}

// TestXOLX86Regressions replays every regression vector on the CPU: each
// is relocated and agrees with the original, or is refused with the code
// its comment names.
func TestXOLX86Regressions(t *testing.T) {
	cases := readXOLVectorFile(t)
	o := newTestXOLOracle(t)
	bad, err := CheckXOLX86Cases(o, cases, hostVendor(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range bad {
		t.Errorf("%s", m)
	}
}

// TestXOLX86VectorsRelocate checks, on any machine and with each vendor's
// decoding, that every regression vector decodes and is relocated or
// refused as CheckX86 says.
func TestXOLX86VectorsRelocate(t *testing.T) {
	for _, vendor := range []decode.Vendor{decode.VendorAMD, decode.VendorIntel} {
		refused := 0
		for _, c := range readXOLVectorFile(t) {
			img := NewXOLX86Image(c.Image)
			p, runs := prepareXOL(&c, decode.X86Decoder{Vendor: vendor}, img, nil)
			if p.bad != nil {
				t.Errorf("%v: %s", vendor, p.bad)
				continue
			}
			if p.refused != "" {
				refused++
				continue
			}
			if len(runs) < 2 {
				t.Errorf("%v: %s: %d runs", vendor, c.Vector(), len(runs))
			}
		}
		t.Logf("%v: %d refused", vendor, refused)
	}
}

// TestXOLX86VectorRoundTrip checks that Vector and ParseXOLX86Vector are
// inverses and that bad lines are rejected.
func TestXOLX86VectorRoundTrip(t *testing.T) {
	g := newXOLBatchGen(7, "", decode.VendorIntel)
	for k := 0; k < 200; k++ {
		c, ok := g.next()
		if !ok {
			break
		}
		back, err := ParseXOLX86Vector(c.Vector())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("%s\nparsed back as %+v", c.Vector(), back)
		}
	}
	for _, bad := range []string{"", "jmp", "jmp zz rip=0x1 slot=0x2 img=0x3", "jmp 90 slot=0x2 img=0x3", "jmp 90 rip=0x1 slot=0x2 img=0x3 xyz=1", "jmp 90 rip=q slot=0x2 img=0x3"} {
		if _, err := ParseXOLX86Vector(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestXOLX86GenDeterministic checks that a campaign's batches depend only
// on the seed, and that every class generates instructions that decode.
func TestXOLX86GenDeterministic(t *testing.T) {
	c := XOLX86Campaign{Cases: 1000, Seed: 42, Vendor: decode.VendorIntel}
	a, b := c.makeXOLBatch(3, 300), c.makeXOLBatch(3, 300)
	if !reflect.DeepEqual(a.runs, b.runs) || a.img.Code != b.img.Code || a.img.RW != b.img.RW {
		t.Fatal("the same batch differs between two generations")
	}
	for i, class := range XOLX86Classes {
		vendor := []decode.Vendor{decode.VendorAMD, decode.VendorIntel}[i%2]
		c := XOLX86Campaign{Cases: 300, Seed: 42, Vendor: vendor, Class: class}
		bt := c.makeXOLBatch(0, 300)
		undecodable, run := 0, 0
		for _, p := range bt.preps {
			if p.bad != nil {
				t.Errorf("%s", p.bad)
			}
			if p.refused == "undecodable" {
				undecodable++
			}
			if p.cp != nil {
				run++
			}
		}
		if undecodable > 0 || run < 250 {
			t.Errorf("class %s: %d undecodable, %d relocated of %d", class, undecodable, run, len(bt.preps))
		}
	}
	if _, err := (&XOLX86Campaign{Class: "nope"}).Run(nil); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown class: %v", err)
	}
}

// TestXOLX86Harness checks that the in-child harness assembles and that
// the decoder reads it as a sequence of whole instructions.
func TestXOLX86Harness(t *testing.T) {
	h, err := buildXOLHarness()
	if err != nil {
		t.Fatal(err)
	}
	if len(h.code) > 0x1000 {
		t.Fatalf("harness of %d bytes does not fit its page", len(h.code))
	}
	starts := map[int]bool{}
	for off := 0; off < len(h.code); {
		starts[off] = true
		inst, err := decode.DecodeX86(h.code[off:], uint64(xoCtrlAddr+xoOffHarness)+uint64(off))
		if err != nil {
			t.Fatalf("harness +%#x: % x: %v", off, h.code[off:min(off+15, len(h.code))], err)
		}
		off += inst.Len
	}
	for _, e := range []int{h.handler, h.restorer, h.idle, h.gadget, h.cpuid} {
		if !starts[e] {
			t.Errorf("entry +%#x is not an instruction boundary", e)
		}
	}
}

// TestXOLX86CheckerCatches breaks copies on purpose and checks that the
// comparison notices: a wrong displacement, a scratch register left
// changed, a wrong return address.
func TestXOLX86CheckerCatches(t *testing.T) {
	o := newTestXOLOracle(t)
	dec := decode.X86Decoder{Vendor: hostVendor(t)}
	regs := func(rip uint64) xol.X86Regs {
		var r xol.X86Regs
		for i := range r.GPR {
			r.GPR[i] = 0x100 * uint64(i+1)
		}
		r.GPR[decode.RSP] = xoStackMid
		r.RIP = rip
		return r
	}
	orig := uint64(XOLX86OrigAddr + 0x100)
	mk := func(b []byte, slot uint64) XOLX86Case {
		return XOLX86Case{Class: "riprel-load", Bytes: b, Slot: slot, Regs: regs(orig), Image: 1}
	}
	// mov x(%rip),%rax with x in the read-write window.
	disp := uint32(XOLX86RWAddr + 0x100 - (orig + 7))
	load := []byte{0x48, 0x8B, 0x05, byte(disp), byte(disp >> 8), byte(disp >> 16), byte(disp >> 24)}
	call := []byte{0xE8, 0x10, 0, 0, 0}
	breakers := []struct {
		what  string
		c     XOLX86Case
		spoil func(p *xoPrepared, img *XOLX86Image, runs []XOLX86Run)
	}{
		{"displacement off by 8", mk(load, XOLX86OrigAddr+0x8000), func(p *xoPrepared, img *XOLX86Image, runs []XOLX86Run) {
			code := img.Code[0][p.c.Slot-XOLX86OrigAddr:]
			code[3] += 8
		}},
		{"scratch value off by 8", mk(load, XOLX86FarAddr), func(p *xoPrepared, img *XOLX86Image, runs []XOLX86Run) {
			runs[p.run[1]].Regs.GPR[decode.RSI] += 8
		}},
		{"call pushes from elsewhere", mk(call, XOLX86FarAddr), func(p *xoPrepared, img *XOLX86Image, runs []XOLX86Run) {
			runs[p.run[1]].Regs.GPR[decode.RSP] -= 8
		}},
	}
	for _, bk := range breakers {
		img := NewXOLX86Image(bk.c.Image)
		p, runs := prepareXOL(&bk.c, dec, img, nil)
		if p.bad != nil || p.cp == nil {
			t.Fatalf("%s: %v %s", bk.what, p.bad, p.refused)
		}
		out := make([]XOLX86Result, len(runs))
		if err := o.Run(img, runs, out); err != nil {
			t.Fatal(err)
		}
		if m := p.compare(img, out); m != nil {
			t.Fatalf("%s: the intact copy disagrees: %s", bk.what, m)
		}
		bk.spoil(p, img, runs)
		if err := o.Run(img, runs, out); err != nil {
			t.Fatal(err)
		}
		if m := p.compare(img, out); m == nil {
			t.Errorf("%s: not noticed", bk.what)
		}
	}
}
