package plan_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/plan"
)

// TestGoResumeBarsDetour: in a Go program, no detour covers a place where
// the runtime resumes a goroutine. runtime.goexit's entry is a one-byte
// nop that goroutines return past (to goexit+1); a function whose
// prologue is marked unsafe for preemption after its first instruction
// still takes one, and a function that may be preempted at its second
// instruction does not.
func TestGoResumeBarsDetour(t *testing.T) {
	exe := fixture.GoCommandFor(t, "gort", runtime.GOARCH, false)
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pf := plan.NewFile(f, nil)
	decide := func(name string) plan.Decision {
		t.Helper()
		sites, err := f.Resolve(elfscan.Spec{Kind: elfscan.SpecFunc, Symbol: name})
		if err != nil || len(sites) != 1 {
			t.Fatalf("%s: %d sites, %v", name, len(sites), err)
		}
		d, err := pf.Decide(plan.Probeopt, &sites[0], &plan.Options{Rules: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	failedRule := func(d plan.Decision) string {
		for _, r := range d.Rules {
			if r.Name == "trampoline" && r.Outcome == plan.Fail {
				return r.Detail
			}
		}
		return ""
	}
	d := decide("runtime.goexit")
	if d.Strategy == plan.TrampolineDetour || !strings.Contains(failedRule(d), "goexit+1") {
		t.Errorf("runtime.goexit: %s (%s), trampoline rule %q; want no detour, for goexit+1", d.Strategy, d.Reason, failedRule(d))
	}
	// mayPanic's first instruction compares the stack pointer with the
	// guard, and the compiler marks the rest of the check unsafe for
	// preemption: the detour displaces the compare and the branch.
	if d := decide("main.mayPanic"); d.Strategy != plan.TrampolineDetour {
		t.Errorf("main.mayPanic: %s, want trampoline-detour: %s", d.Strategy, failedRule(d))
	}
	// spin is a leaf loop without a stack check: the runtime may preempt
	// it at any instruction, the second one too.
	if d := decide("main.spin"); d.Strategy == plan.TrampolineDetour || !strings.Contains(failedRule(d), "asynchronous preemption point of main.spin") {
		t.Errorf("main.spin: %s, trampoline rule %q; want no detour, for an asynchronous preemption point", d.Strategy, failedRule(d))
	}
}
