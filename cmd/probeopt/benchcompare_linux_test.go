//go:build linux

package main

import (
	"encoding/json"
	"os"
	"runtime"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// needRoot skips (fails under CI) without root, which kernel uprobes need.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "kernel uprobes need root (euid %d)", os.Geteuid())
	}
}

// runReport runs the command of ARGS, which prints one JSON report,
// and decodes the report and returns it with the exit status.
func runReport[R any](t *testing.T, args ...string) (*R, int) {
	t.Helper()
	stdout, stderr, code := runBinary(t, args...)
	var rep R
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("exit %d: %v\n%s\n%s", code, err, stdout, stderr)
	}
	return &rep, code
}

// runCompare runs "bench compare --json --all ARGS..." and decodes the
// report.
func runCompare(t *testing.T, args ...string) (*compareReport, int) {
	t.Helper()
	return runReport[compareReport](t, append([]string{"bench", "compare", "--json", "--all"}, args...)...)
}

// TestBenchCompare compares the fixture's counts at every function with
// the kernel's: they are the same site by site, and the same output. The control is a Go program whose runtime
// calls its scheduler and allocator a different number of times in every
// run: there the harness must report differences and fail.
func TestBenchCompare(t *testing.T) {
	tracee := traceTracee(t)
	testenv.NeedPtrace(t)
	needRoot(t)
	// Only files of the test's own: a kernel uprobe on a shared file
	// (the C library) would be seen by every test that traces it at the
	// same time.
	rep, code := runCompare(t, "--runs", "2", "*", "--", tracee, "work", "50")
	if code != exitOK || rep.Differ != 0 || !rep.SameOutput || rep.Compared < 10 || rep.Hit < 5 || rep.Probeopt == 0 || rep.Runs != 2 {
		t.Errorf("exit %d: %d sites compared, %d hit, %d differ, same output %v, hits %d and %d, %d runs", code, rep.Compared, rep.Hit, rep.Differ, rep.SameOutput, rep.Probeopt, rep.Kernel, rep.Runs)
	}
	for _, s := range rep.Sites {
		same := s.ProbeoptMin == s.Probeopt && s.ProbeoptMax == s.Probeopt && s.KernelMin == s.Kernel && s.KernelMax == s.Kernel
		if s.Differs || s.Varies || !same || (!s.PerIteration && s.Probeopt != s.Kernel) {
			t.Errorf("%s (%#x): probeopt %d-%d, kernel %d-%d", s.Symbol, s.Addr, s.ProbeoptMin, s.ProbeoptMax, s.KernelMin, s.KernelMax)
		}
	}
	if _, stderr, code := runBinary(t, "bench", "compare", "--runs", "0", "*", "--", tracee); code != exitUsage {
		t.Errorf("--runs 0: exit %d, want %d (%s)", code, exitUsage, stderr)
	}

	// Code a library runs while the dynamic linker loads it, before
	// its initialisers: an IFUNC resolver (once) and the function it
	// calls (twice: the constructor calls it too), counted as the kernel
	// counts them, from the moment the library is mapped.
	lib := fixture.Build(t, fixture.Startup)
	rep, code = runCompare(t, "libstartup.so:choose", "libstartup.so:resolve_pick", "--", "env", "LD_PRELOAD="+lib, "true")
	if code != exitOK || rep.Differ != 0 || rep.Probeopt != 3 || rep.Kernel != 3 {
		t.Errorf("start-up: exit %d, %d of %d sites differ, hits %d and %d; want 2 of choose and 1 of resolve_pick", code, rep.Differ, rep.Compared, rep.Probeopt, rep.Kernel)
	}

	gort := fixture.GoCommandFor(t, "gort", runtime.GOARCH, false)
	rep, code = runCompare(t, "--runs", "3", "runtime.schedule", "runtime.findRunnable", "runtime.mallocgc", "runtime.lock2", "--", gort, "20")
	if !rep.SameOutput || rep.Runs != 3 {
		t.Errorf("the Go runtime's counts: same output %v, %d runs", rep.SameOutput, rep.Runs)
	}
	// Each side's own three runs disagree there, and the report says so
	// at each such site; a site differs only where the ranges part.
	varies, differ := 0, 0
	for _, s := range rep.Sites {
		lo, hi := s.ProbeoptMin, s.ProbeoptMax
		if s.Varies != (lo != hi || s.KernelMin != s.KernelMax) || s.Kernel < s.KernelMin || s.Kernel > s.KernelMax ||
			s.Probeopt < lo || s.Probeopt > hi || s.Differs != (hi < s.KernelMin || lo > s.KernelMax) {
			t.Errorf("%s: probeopt %d (%d-%d), kernel %d (%d-%d), differs %v, varies %v", s.Symbol, s.Probeopt, lo, hi, s.Kernel, s.KernelMin, s.KernelMax, s.Differs, s.Varies)
		}
		if s.Varies {
			varies++
		}
		if s.Differs {
			differ++
		}
	}
	if varies == 0 || differ != rep.Differ || rep.DifferVaries > rep.Differ || (code == exitFailed) != (rep.Differ > 0) {
		t.Errorf("the Go runtime's counts: exit %d, %d sites vary (want some), %d differ, report %d (%d varying)", code, varies, differ, rep.Differ, rep.DifferVaries)
	}
}
