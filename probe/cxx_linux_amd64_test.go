//go:build linux && amd64

package probe_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
)

// cxxFixture builds the C++ program of testdata/trampoline: eight threads,
// recursion, setjmp/longjmp out of recursion, exceptions through recursion
// with destructors, signal handlers that call the probed functions.
func cxxFixture(t *testing.T) string {
	return fixture.Build(t, fixture.Program{
		Compiler: "g++",
		Flags:    []string{"-O2", "-g", "-pthread", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls"},
		Dir:      "trampoline",
		Files:    []string{"fixture.cc", "leaf_x86.S"},
		Name:     "trampfixture",
	})
}

// varying matches the parts of the program's output that differ from run
// to run: its pid and thread pointers, and the signal counts.
var varying = regexp.MustCompile(`pid=\d+| tps=\S+| sig_count=\d+| (fib|lj_deep)_calls=\d+`)

// TestReturnProbesCXX puts entry and return probes on the C++ program's
// functions while it runs its workload: the program computes what it
// computes untraced; every function that returns normally counts as many
// returns as entries; frames left by longjmp or by an exception never count
// a return (as with Linux's return probes). The exceptions cross frames
// whose return addresses point to the return trampoline: the engine's
// trampolines at the unwinder's entries put the original addresses back,
// or the program would abort. A nop5 in the middle of a leaf function that
// keeps live data in its red zone is probed too: the jump to the slot
// leaves the red zone alone (a call there, as Linux's nop5 optimization
// makes, would overwrite it), and the program's own check (rzbad=0) holds. (The program's signal workload, a 20 µs
// timer per thread, is left to the trampoline package's tests, which run
// without a tracer: here every signal would stop its thread for the
// tracer, and the workers would hardly progress.)
func TestReturnProbesCXX(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := cxxFixture(t)
	input := []byte("run 2000\nquit\n")
	want := untraced(t, []string{exe}, input)
	in := filepath.Join(t.TempDir(), "input")
	if err := os.WriteFile(in, input, 0o644); err != nil {
		t.Fatal(err)
	}
	stdin, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	r := spawn(t, []string{exe}, nil, stdin)
	// The nop5 in the middle of a leaf that keeps sixteen live words in
	// its red zone, and a USDT-shaped nop; nop5 (both reached as
	// FUNCTION+OFFSET from the symbol table).
	rz, usdt := symbolOffset(t, exe, "rz_leaf", "rz_leaf_site"), symbolOffset(t, exe, "usdt_like", "usdt_like_site")
	specs := []string{"work", "work%return", "fibr", "fibr%return", "lj_top", "lj_top%return", "lj_deep%return",
		"thrower", "thrower%return", "catcher", "catcher%return", rz, usdt}
	if _, err := r.tr.Add(specs...); err != nil {
		t.Fatal(err)
	}
	r.finish(t, 2*time.Minute)
	got := r.stdout.String()
	if norm := func(s string) string { return varying.ReplaceAllString(s, "") }; norm(got) != norm(string(want)) {
		t.Errorf("output differs:\ntraced   %s\nuntraced %s", got, want)
	}
	if !strings.Contains(got, "rzbad=0") || !strings.Contains(got, "sig_bad=0") {
		t.Errorf("the program saw wrong results:\n%s", got)
	}
	hits := map[string]uint64{}
	for _, p := range r.tr.Stats().Probes {
		hits[p.Spec] = p.Hits
		for _, s := range p.Sites {
			nop := p.Spec == rz || p.Spec == usdt
			if s.Strategy != plan.TrampolineDetour && !nop || s.Strategy != plan.TrampolineNop && nop {
				t.Errorf("%s: %s (%s)", p.Spec, s.Strategy, s.Detail)
			}
		}
		if len(p.Refused) > 0 {
			t.Errorf("%s refused: %v", p.Spec, p.Refused[0])
		}
	}
	for _, f := range []string{"work", "fibr", "lj_top", "catcher"} {
		if hits[f] == 0 || hits[f+"%return"] != hits[f] {
			t.Errorf("%s: %d entries, %d returns", f, hits[f], hits[f+"%return"])
		}
	}
	for _, f := range []string{"lj_deep", "thrower"} {
		if hits[f+"%return"] != 0 {
			t.Errorf("%s: %d returns, want none (its frames are left by longjmp or an exception)", f, hits[f+"%return"])
		}
	}
	// 2,000 iterations of 8 threads; catcher every 100th.
	if hits["work"] != 8*2000 || hits["catcher"] != 8*20 || hits["thrower"] == 0 || hits[rz] != 8*2000 || hits[usdt] != 8*2000 {
		t.Errorf("hits %v", hits)
	}
	t.Logf("hits %v", hits)
}

// symbolOffset returns the spec FUNC+OFF of symbol label inside function
// fn of the ELF file exe.
func symbolOffset(t *testing.T, exe, fn, label string) string {
	t.Helper()
	_, syms := fixture.OpenELF(t, exe)
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	if addr[fn] == 0 || addr[label] <= addr[fn] {
		t.Fatalf("%s: symbols %s %#x, %s %#x", exe, fn, addr[fn], label, addr[label])
	}
	return fmt.Sprintf("%s+%#x", fn, addr[label]-addr[fn])
}
