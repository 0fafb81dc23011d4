//go:build linux && (amd64 || arm64)

package batchpatch

import (
	"bufio"
	"os"
	"testing"

	fixtures "github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/proc"
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
	p   *proc.Process
	out *bufio.Reader // its standard output after the address line
}

// startFixture spawns the fixture with the given arguments (see
// fixtures.StartPatch) and returns it running after its address line.
func startFixture(t testing.TB, opts *proc.Options, args ...string) *fixture {
	t.Helper()
	testenv.NeedPtrace(t)
	p, run := fixtures.StartPatch(t, func(argv []string, stdout *os.File) (*proc.Process, error) {
		so := &proc.SpawnOptions{Stdout: stdout}
		if opts != nil {
			so.Options = *opts
		}
		return proc.Spawn(argv, so)
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

// threadInfo returns what a stop of the world says of thread tid.
func (f *fixture) threadInfo(t testing.TB, tid int) proc.ThreadInfo {
	t.Helper()
	var info proc.ThreadInfo
	if _, err := f.p.Stopped(func(w *proc.World) error {
		ths, err := w.Threads()
		for _, th := range ths {
			if th.Tid == tid {
				info = th
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return info
}
