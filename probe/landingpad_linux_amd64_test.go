//go:build linux && amd64

package probe_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
)

// TestLandingPadNoDetour traces a C++ program at every instruction whose
// detour, judged on the function's own branches, would replace the first
// bytes of an exception landing pad: the unwinder jumps to the pad through
// a register when an exception passes, so the engine must not give those
// sites a detour. The program throws on every run: a wrong detour crashes
// it or changes its output.
func TestLandingPadNoDetour(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := fixture.Build(t, fixture.Program{Compiler: "g++", Flags: []string{"-O2"}, Dir: "src", Files: []string{"throws.cc"}, Name: "throws"})
	specs := padSites(t, exe)
	if len(specs) == 0 {
		t.Fatal("no detour covers a landing pad: the fixture does not reach the case")
	}
	want := untraced(t, []string{exe}, nil)
	r := spawn(t, []string{exe}, nil, nil)
	for _, spec := range specs {
		if _, err := r.tr.Add(spec); err != nil {
			t.Fatalf("add %s: %v", spec, err)
		}
	}
	r.finish(t, time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	for _, p := range r.tr.Stats().Probes {
		for _, s := range p.Sites {
			if s.Strategy == plan.TrampolineDetour {
				t.Errorf("%s: a detour (%s), over a landing pad", s.Symbol, s.Detail)
			}
		}
	}
	t.Logf("%d sites before a landing pad: %v", len(specs), specs)
}

// padSites returns SYM+OFF specs of instructions whose detour, judged
// without the file's landing pads, would replace the first bytes of one;
// at most one per 15 bytes, so that no site lies inside the bytes another
// one's trampoline would replace.
func padSites(t *testing.T, exe string) []string {
	t.Helper()
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	eh, err := f.ExceptionTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(eh.LandingPads) == 0 {
		t.Fatalf("%s: no landing pads in .eh_frame and .gcc_except_table", exe)
	}
	var specs []string
	last := uint64(0) // the last site taken: sites 15 bytes apart do not share a trampoline
	for _, pad := range eh.LandingPads {
		fn := f.FuncAt(pad - 1)
		if fn == nil || fn.Addr == pad {
			continue
		}
		body, err := f.Code(fn.Addr, fn.End-fn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		an := plan.AnalyzeX86(fn.Addr, body, decode.X86Decoder{})
		for a := range an.Starts() {
			if a >= pad || pad-a > 15 || a == fn.Addr {
				continue
			}
			// Without the file's landing pads: NoBranches.
			site := &plan.Site{Arch: decode.X86_64, Addr: a, Code: body[a-fn.Addr:], Func: an, Branches: plan.NoBranches}
			d := plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true, Live: true})
			var n int
			var at uint64
			for _, r := range d.Rules {
				if r.Name == "trampoline" {
					fmt.Sscanf(r.Detail, "a detour: %d bytes replaced at %v", &n, &at)
				}
			}
			if d.Strategy == plan.TrampolineDetour && pad < at+uint64(n) && (last == 0 || a-last >= 15) {
				specs = append(specs, fmt.Sprintf("%s+%#x", fn.Name, a-fn.Addr))
				last = a
			}
		}
	}
	return specs
}
