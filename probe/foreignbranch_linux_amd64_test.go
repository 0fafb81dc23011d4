//go:build linux && amd64

package probe_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
)

// TestForeignBranchNoDetour traces a program whose foo is entered, besides
// its entry, by a jump from its cold part to foo+4: the engine must not
// give foo's entry a detour (the jump would land inside the jump to the
// slot), while bar, which nothing jumps into, takes one. Every call of foo
// with a negative argument takes the jump, so a wrong detour crashes the
// program or changes its output.
func TestForeignBranchNoDetour(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := fixture.Build(t, fixture.Program{Compiler: "gcc", Flags: []string{"-O2", "-fPIE", "-pie"}, Dir: "src", Files: []string{"cold_main.c", "cold_x86.S"}, Name: "cold"})
	argv := []string{exe}
	want := untraced(t, argv, nil)
	r := spawn(t, argv, nil, nil)
	for _, spec := range []string{"foo", "bar"} {
		if _, err := r.tr.Add(spec); err != nil {
			t.Fatalf("add %s: %v", spec, err)
		}
	}
	r.finish(t, time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	st := r.tr.Stats()
	seen := map[string]bool{}
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			seen[s.Symbol] = true
			switch s.Symbol {
			case "foo":
				if s.Strategy == plan.TrampolineDetour || s.Strategy == plan.TrampolineNop {
					t.Errorf("foo: %s (%s): a jump from foo.cold lands inside the replaced bytes", s.Strategy, s.Detail)
				}
			case "bar":
				if s.Strategy != plan.TrampolineDetour {
					t.Errorf("bar: %s (%s), want a detour", s.Strategy, s.Detail)
				}
			}
			if s.Hits != 6 {
				t.Errorf("%s: %d hits, want 6", s.Symbol, s.Hits)
			}
		}
	}
	if !seen["foo"] || !seen["bar"] {
		t.Errorf("sites %v, want foo and bar", seen)
	}
}
