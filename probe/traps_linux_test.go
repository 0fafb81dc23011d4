//go:build linux && (amd64 || arm64)

package probe_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// loopsFuncs are the functions of loops whose every instruction the trap
// tests probe.
var loopsFuncs = []string{"leaf", "sum", "pick", "scale", "rec", "store", "divmod", "bump", "main"}

// instSpecs returns a spec ("func+0xOFF") for every instruction of the
// named functions of the executable at path, found by a sweep from each
// function's start.
func instSpecs(t *testing.T, path string, funcs []string) []string {
	t.Helper()
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, n := range funcs {
		want[n] = true
	}
	var specs []string
	for _, fn := range all {
		if !want[fn.Name] {
			continue
		}
		delete(want, fn.Name)
		code, err := f.Code(fn.Addr, fn.End-fn.Addr)
		if err != nil {
			t.Fatalf("%s: %v", fn.Name, err)
		}
		for off := 0; off < len(code); {
			n := 4
			if f.Arch == decode.X86_64 {
				var in decode.X86Inst
				if err := (decode.X86Decoder{}).Decode(code[off:], fn.Addr+uint64(off), &in); err != nil {
					break
				}
				n = in.Len
			}
			specs = append(specs, fmt.Sprintf("%s+%#x", fn.Name, off))
			off += n
		}
	}
	if len(want) > 0 {
		t.Fatalf("%s has no function %v", path, want)
	}
	return specs
}

// tracedRun spawns argv with opts, adds specs, runs it to its end and
// returns its output and the engine's statistics.
func tracedRun(t *testing.T, argv []string, opts *probe.Options, specs []string) ([]byte, probe.Stats) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, err := probe.Spawn(argv, &probe.SpawnOptions{Options: *opts, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Add(specs...); err != nil {
		// Refused sites of an accepted spec are listed in the stats; a
		// spec all of whose sites were refused is an error here, which
		// the caller looks at through the stats too.
		t.Logf("add: %v", firstLines(err.Error(), 5))
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Exited():
	case <-time.After(5 * time.Minute):
		_ = tr.Kill()
		t.Fatalf("%q did not end within 5 minutes under the tracer", argv)
	}
	st, err := tr.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("traced %q: status %+v, %v", argv, st, err)
	}
	stats := tr.Stats()
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b, stats
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines[n] = "..."
	}
	return strings.Join(lines, "\n")
}

// TestTrapsAgainstKernel probes every instruction of the loops fixture
// with traps only (each instruction emulated, or stepped where it stands),
// and checks that the program prints what it prints untraced, and that
// every site counts what a kernel uprobe at the same instruction counts in
// a run of its own (the sites the kernel accepts, as the linux-uprobes
// policy predicts). Both trap paths must have served hits.
func TestTrapsAgainstKernel(t *testing.T) {
	st := loopsAgainstKernel(t, &probe.Options{NoTrampolines: true})
	if st.Emulated == 0 || st.Stepped == 0 {
		t.Errorf("emulated %d, stepped %d: both trap paths should have run", st.Emulated, st.Stepped)
	}
}

// TestTrampolinesAgainstKernel is TestTrapsAgainstKernel with the plan's
// trampolines: on arm64 every instruction the plan lets take one is a
// word replaced by a b to its slot, on x86-64 a jump over the
// instructions it displaces (a site whose instruction another site's
// jump displaced takes traps). On arm64 most hit sites must have counted
// through their trampolines.
func TestTrampolinesAgainstKernel(t *testing.T) {
	st := loopsAgainstKernel(t, nil)
	tramp, hit := 0, 0
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			if s.Hits == 0 {
				continue
			}
			hit++
			if (s.Strategy == plan.TrampolineNop || s.Strategy == plan.TrampolineDetour) && s.Fallback == "" {
				tramp++
			}
		}
	}
	t.Logf("%d of %d hit sites counted by trampolines", tramp, hit)
	// On x86-64 a jump covers several of these sites, which then take
	// traps (17 of 139 hit sites had trampolines on the host).
	want := 1
	if runtime.GOARCH == "arm64" {
		want = hit / 2
	}
	if tramp < want {
		t.Errorf("%d of %d hit sites counted by trampolines", tramp, hit)
	}
}

// loopsAgainstKernel probes every instruction of loops with opts, checks
// the traced output and the counts against the kernel's uprobes, and
// returns the traced run's statistics.
func loopsAgainstKernel(t *testing.T, opts *probe.Options) probe.Stats {
	t.Helper()
	needKernelUprobes(t)
	exe := fixture.Build(t, fixture.Loops)
	argv := []string{exe, "40"} // 40 rounds: about 6,000 hits (each trap a few ms in the arm64 guest under TCG)
	plain, err := exec.Command(exe, argv[1:]...).Output()
	if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	if opts == nil {
		opts = &probe.Options{}
	}
	specs := instSpecs(t, exe, loopsFuncs)
	out, st := tracedRun(t, argv, opts, specs)
	if !bytes.Equal(out, plain) {
		t.Errorf("traced output %q, untraced %q", out, plain)
	}
	nsites, hit, refused := 0, 0, map[plan.Reason]int{}
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			nsites++
			if s.Hits > 0 {
				hit++
			}
		}
		for _, r := range p.Refused {
			refused[r.Reason]++
		}
	}
	t.Logf("%s (%s): %d specs, %d sites installed, %d hit, refused %v; traps %d, emulated %d, stepped %d", exe, runtime.GOARCH, len(specs), nsites, hit, refused, st.Traps, st.Emulated, st.Stepped)
	sites, skipped := kernelSites(t, st)
	if len(skipped) > 0 {
		sort.Strings(skipped)
		t.Logf("not compared (%d): %s", len(skipped), strings.Join(skipped, "; "))
	}
	kout, kernel := kernelRun(t, argv, nil, nil, sites)
	if !bytes.Equal(kout, plain) {
		t.Errorf("output under kernel uprobes %q, untraced %q", kout, plain)
	}
	t.Log(compareWithKernel(t, st, sites, kernel, 0))
	if len(sites) < nsites/2 {
		t.Errorf("%d of %d installed sites compared with the kernel", len(sites), nsites)
	}
	return st
}
