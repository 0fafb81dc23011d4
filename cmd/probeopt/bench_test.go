package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
)

// TestBenchPatch runs "probeopt bench patch" on small sizes and checks the
// report's shape and that the target saw no wrong result. Timings are not
// checked: they depend on the machine.
func TestBenchPatch(t *testing.T) {
	out := runBenchPatch(t, "--sizes", "1,16,256", "--repeat", "2", "--threads", "4", "--json")
	var rep benchPatchReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	if rep.Threads != 4 || len(rep.Rows) != 3 || rep.Bad != 0 {
		t.Fatalf("report %+v", rep)
	}
	for i, want := range []int{1, 16, 256} {
		r := rep.Rows[i]
		if r.Patches != want || r.Stops != want || r.BatchPause <= 0 || r.BatchTotal < r.BatchPause ||
			r.PerPatchTotal <= 0 || r.TotalRatio <= 0 {
			t.Errorf("row %d: %+v", i, r)
		}
	}
}

func TestBenchPatchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "patch", "--sizes", "3"},
		{"bench", "patch", "--threads", "0"},
		{"bench", "patch", "--repeat", "0"},
		{"bench", "patch", "extra"},
		{"bench", "patch", "--patches", "0"},
		{"bench", "patch", "--patches", "100", "--max-pause", "0"},
		{"bench", "patch", "--patches", "100", "--stop-nice", "-21"},
	} {
		if _, stderr, code := runCLI(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", args, code, exitUsage, stderr)
		}
	}
}

// runBenchPatch runs "probeopt bench patch ARGS..." and returns its
// standard output; it skips where the command cannot run.
func runBenchPatch(t *testing.T, args ...string) []byte {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("bench patch needs linux/amd64")
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(probeoptBinary(t), append([]string{"bench", "patch"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if strings.Contains(errb.String(), "operation not permitted") {
			testenv.Unavailable(t, "ptrace: %s", errb.String())
		}
		t.Fatalf("bench patch: %v\n%s", err, errb.String())
	}
	return out.Bytes()
}
