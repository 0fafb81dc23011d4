package plan_test

import (
	"sync"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/plan"
)

// TestFile checks the pipeline on a fixture: one sweep per function shared
// by concurrent callers, the sites it builds (a PLT stub, a USDT site, the
// file's branch index), a decision with its fallback equal to the
// decision without trampolines, and Analyze plus SiteWith deciding as Site
// does.
func TestFile(t *testing.T) {
	f, err := elfscan.Open(fixture.Path(t, "x86_64", "usdt-nopie"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pf := plan.NewFile(f, nil)
	entries, err := f.EntrySites()
	if err != nil {
		t.Fatal(err)
	}
	usdt, err := f.USDTSites()
	if err != nil {
		t.Fatal(err)
	}

	// One Function per function, whoever asks first.
	fn := entries[0].Func
	got := make([]*plan.Function, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = pf.Function(fn) }()
	}
	wg.Wait()
	for _, an := range got {
		if an == nil || an != got[0] {
			t.Fatalf("Function(%s): %p, want one sweep shared by all: %p", fn.Name, an, got[0])
		}
	}
	if pf.Branches() == nil || pf.Branches() != pf.Branches() {
		t.Fatal("Branches: not one index")
	}

	for _, s := range append(entries, usdt...) {
		site, err := pf.Site(&s)
		if err != nil {
			t.Fatalf("%#x: %v", s.Addr, err)
		}
		if site.Branches != pf.Branches() || site.USDT != (s.Kind == elfscan.SiteUSDT) || s.Func != nil && (site.Func == nil || site.Func.Addr != s.Func.Addr || site.PLT != s.Func.PLT) {
			t.Errorf("%#x: site %+v", s.Addr, site)
		}
		o := &plan.Options{Live: true, Fallback: true}
		d, _ := pf.Decide(plan.Probeopt, &s, o)
		traps, _ := pf.Decide(plan.Probeopt, &s, &plan.Options{Live: true, NoTrampolines: true})
		switch {
		case d.Strategy == plan.TrampolineNop || d.Strategy == plan.TrampolineDetour:
			if d.Fallback == nil || d.Fallback.Strategy != traps.Strategy || d.Fallback.Reason != traps.Reason || d.Fallback.Detail != traps.Detail {
				t.Errorf("%#x: %s with fallback %+v, want %+v", s.Addr, d.Strategy, d.Fallback, traps)
			}
		case d.Fallback != nil || d.Strategy != traps.Strategy || d.Reason != traps.Reason:
			t.Errorf("%#x: %s (%s) with fallback %v, want the trap decision %s (%s) and none", s.Addr, d.Strategy, d.Reason, d.Fallback, traps.Strategy, traps.Reason)
		}
		var an *plan.Function
		if s.Func != nil {
			an = pf.Analyze(s.Func)
		}
		swept, err := pf.SiteWith(&s, an)
		if err != nil {
			t.Fatal(err)
		}
		if d2 := plan.Decide(plan.Probeopt, swept, o); d2.Strategy != d.Strategy || d2.Reason != d.Reason || d2.Detail != d.Detail {
			t.Errorf("%#x: SiteWith(Analyze) %s (%s), Site %s (%s)", s.Addr, d2.Strategy, d2.Reason, d.Strategy, d.Reason)
		}
	}

	// An address in no executable segment: an error, and a rejection.
	bad := elfscan.Site{Kind: elfscan.SiteInst, Addr: 0x10}
	if d, err := pf.Decide(plan.Probeopt, &bad, nil); err == nil || d.Strategy != plan.Reject {
		t.Errorf("unmapped address: %s, %v", d.Strategy, err)
	}
}
