//go:build linux

package main

import (
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
)

// runStress runs "bench stress --json ARGS..." and decodes the report.
func runStress(t *testing.T, args ...string) (*stressReport, int) {
	t.Helper()
	return runReport[stressReport](t, append([]string{"bench", "stress", "--json"}, args...)...)
}

// TestBenchStress traces the fixture's threads and signals every time the
// same way it runs untraced, through trampolines and through traps; the
// control is a command whose output changes from run to run (the clock's
// nanoseconds), where every run must be reported.
func TestBenchStress(t *testing.T) {
	tracee := traceTracee(t)
	testenv.NeedPtrace(t)
	rep, code := runStress(t, "--runs", "2", "*", "--", tracee, "threads", "2", "50")
	if code != exitOK || rep.Runs != 2 || rep.TrapRuns != 1 || len(rep.Failures) != 0 || rep.Trampolines == 0 || rep.Hits == 0 {
		t.Errorf("exit %d: %+v", code, rep)
	}
	rep, code = runStress(t, "--runs", "3", "--traps-every", "0", "*", "--", "/bin/sh", "-c", "date +%N")
	if code != exitFailed || len(rep.Failures) != 3 || rep.TrapRuns != 0 {
		t.Errorf("a command whose output changes: exit %d, %+v; want 3 failures and exit %d", code, rep, exitFailed)
	}
}
