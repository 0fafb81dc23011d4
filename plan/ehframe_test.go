package plan_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/plan"
)

// TestLandingPadBarsDetour checks that a detour whose replaced bytes hold a
// landing pad of the fixture is refused, with the rule saying so: every
// instruction start just before a landing pad whose detour, judged without
// the exception tables, would cover it.
func TestLandingPadBarsDetour(t *testing.T) {
	_, exe := fixture.ThrowsCXX(t)
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code := branchCode(t, f)
	noEH := indexOf(code, decode.X86_64)
	withEH := *code
	eh, err := f.ExceptionTables()
	if err != nil {
		t.Fatal(err)
	}
	withEH.Exceptions = eh
	x := indexOf(&withEH, decode.X86_64)
	pads := x.LandingPads()
	if len(pads) == 0 {
		t.Fatal("no landing pad")
	}
	checked := 0
	for _, pad := range pads {
		fn := f.FuncAt(pad - 1)
		if fn == nil || fn.Addr == pad {
			continue
		}
		body, err := f.Code(fn.Addr, fn.End-fn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		an := plan.AnalyzeX86(fn.Addr, body, decodeAMD)
		for a := range an.Starts() {
			if a >= pad || pad-a > 15 {
				continue
			}
			site := &plan.Site{Arch: decode.X86_64, Addr: a, Code: body[a-fn.Addr:], Func: an, Branches: noEH}
			opts := &plan.Options{Rules: true, Live: true}
			before := plan.Decide(plan.Probeopt, site, opts)
			if before.Strategy != plan.TrampolineDetour || !strings.Contains(ruleOf(before, "trampoline").Detail, "replaced at") {
				continue
			}
			// Does the detour cover the pad? The rule names the
			// replaced bytes: "N bytes replaced at ADDR".
			var n int
			var at uint64
			fmt.Sscanf(ruleOf(before, "trampoline").Detail, "a detour: %d bytes replaced at %v", &n, &at)
			if pad >= at+uint64(n) || n == 0 {
				continue
			}
			site.Branches = x
			after := plan.Decide(plan.Probeopt, site, opts)
			r := ruleOf(after, "trampoline")
			if after.Strategy == plan.TrampolineDetour || !strings.Contains(r.Detail, fmt.Sprintf("an exception landing pad (the unwinder jumps there) lies at %#x", pad)) {
				t.Errorf("%s+%#x: %s, rule %+v; want no detour: the landing pad %#x is inside", fn.Name, a-fn.Addr, after.Strategy, r, pad)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no detour covers a landing pad: the fixture does not reach the case")
	}
	t.Logf("%d sites whose detour would cover one of %d landing pads", checked, len(pads))
}

// TestUnknownLandingPadsBarDetour checks code whose landing pads are not
// known (its FDE's LSDA could not be read): no detour over it, and the
// rule says why; with its landing pads known, the detour.
func TestUnknownLandingPadsBarDetour(t *testing.T) {
	// The code at 0x2008: push %rbp; mov %rsp,%rbp; sub $0x10,%rsp;
	// leave; ret.
	code := []byte{0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xc9, 0xc3}
	short := &elfscan.EHError{Section: ".gcc_except_table", Off: 9, Reason: "LSDA of the code at 0x2008: 1 bytes needed, 0 left"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{short, "the landing pads of the code at 0x2008-0x2048 are not known"},
		{nil, ""},
	} {
		eh := &elfscan.ExceptionTables{FDEs: []elfscan.FDE{{PCBegin: 0x2008, PCEnd: 0x2048, LSDA: 0x3000, Err: tc.err}}, LandingPads: []uint64{0x2018}}
		x := indexOf(&plan.BranchCode{Regions: []plan.CodeRegion{{Addr: 0x2008, Code: code}}, Exceptions: eh}, decode.X86_64)
		site := &plan.Site{Arch: decode.X86_64, Addr: 0x2008, Code: code, Func: plan.AnalyzeX86(0x2008, code, decodeAMD), Branches: x}
		d := plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true})
		if r := ruleOf(d, "trampoline"); (d.Strategy == plan.TrampolineDetour) != (tc.want == "") || !strings.Contains(r.Detail, tc.want) {
			t.Errorf("FDE error %v: %s, rule %+v; want %q", tc.err, d.Strategy, r, tc.want)
		}
		if tc.err != nil && !errors.Is(tc.err, elfscan.ErrEHFrame) {
			t.Errorf("%v is not ErrEHFrame", tc.err)
		}
	}
}
