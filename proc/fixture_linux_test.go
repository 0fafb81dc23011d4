//go:build linux && (amd64 || arm64)

package proc

import (
	"bufio"
	"os"
	"testing"
	"time"

	fixtures "github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// buildFixture compiles testdata/patchfixture with gcc (once per set of
// sources and flags, see fixtures.Build).
func buildFixture(t testing.TB) string {
	t.Helper()
	return fixtures.Build(t, fixtures.PatchFixture)
}

// fixture is a running patchfixture.
type fixture struct {
	fixtures.PatchLayout
	p   *Process
	out *bufio.Reader // its standard output after the address line
}

// startFixture spawns the fixture with the given arguments (see
// fixtures.StartPatch) and returns it running after its address line.
func startFixture(t *testing.T, opts *Options, args ...string) *fixture {
	t.Helper()
	testenv.NeedPtrace(t)
	p, run := fixtures.StartPatch(t, func(argv []string, stdout *os.File) (*Process, error) {
		so := &SpawnOptions{Stdout: stdout}
		if opts != nil {
			so.Options = *opts
		}
		return Spawn(argv, so)
	}, args...)
	return &fixture{PatchLayout: run.PatchLayout, p: p, out: run.Out}
}

// read64 reads the 64-bit field at offset off of struct shared.
func (f *fixture) read64(t testing.TB, off uint64) int64 {
	t.Helper()
	return fixtures.Shared{Addr: f.Shared, Read: f.p.ReadMemory}.Int64(t, off)
}

// read32 reads the 32-bit field at offset off of struct shared.
func (f *fixture) read32(t testing.TB, off uint64) int32 {
	t.Helper()
	return fixtures.Shared{Addr: f.Shared, Read: f.p.ReadMemory}.Int32(t, off)
}

// checkRuns checks that worker 0 makes progress after what the test did
// (the stops, the steps) and that no worker computed a wrong result.
func (f *fixture) checkRuns(t *testing.T, after string) {
	t.Helper()
	before := f.read64(t, fixtures.SharedCalls)
	if !fixtures.Eventually(60*time.Second, func() bool { return f.read64(t, fixtures.SharedCalls) > before }) {
		t.Errorf("worker 0 made no progress after the %s", after)
	}
	if bad := f.read64(t, fixtures.SharedBad); bad != 0 {
		t.Errorf("bad results: %d", bad)
	}
}
