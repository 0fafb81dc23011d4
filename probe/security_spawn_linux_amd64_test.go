//go:build linux && amd64

package probe_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
)

// copyExecutable copies the file src to dst (a new inode), mode 0755.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// processesRunning returns the pids of the processes whose executable is
// path (or path deleted).
func processesRunning(path string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err == nil && strings.TrimSuffix(exe, " (deleted)") == path {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestSpawnRefusesReplacedExecutable replaces the command's file between
// its lookup and its exec (by a copy with the same bytes: only the device
// and inode tell them apart) and checks that Spawn refuses to trace it and
// kills the process; unchanged, the same command is traced.
func TestSpawnRefusesReplacedExecutable(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	copyExecutable(t, exe, prog)
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))

	// Unchanged, by path and through PATH.
	for _, name := range []string{prog, "prog"} {
		r := spawn(t, []string{name, "work", "3"}, nil, nil)
		if _, err := r.tr.Add("c_sum"); err != nil {
			t.Fatalf("%s: add: %v", name, err)
		}
		r.finish(t, time.Minute)
		if h := hitsBySymbol(r.tr.Stats())["c_sum"]; h != 3 {
			t.Errorf("%s: c_sum hit %d times, want 3", name, h)
		}
	}

	// Replaced between the lookup and the exec.
	for i, name := range []string{prog, "prog"} {
		called := false
		restore := probe.SetSpawnLookedUp(func(path string) {
			called = true
			if path != prog {
				t.Errorf("looked up %q, want %q", path, prog)
			}
			tmp := filepath.Join(dir, "new")
			copyExecutable(t, exe, tmp)
			if err := os.Rename(tmp, prog); err != nil {
				t.Error(err)
			}
		})
		tr, err := probe.Spawn([]string{name, "work", "3"}, nil)
		restore()
		if !called {
			t.Fatalf("%s: the hook was not called", name)
		}
		if err == nil {
			tr.Kill()
			t.Fatalf("%s: the replaced executable was traced", name)
		}
		if !errors.Is(err, probe.ErrExecChanged) {
			t.Fatalf("%s: error %v, want one wrapping ErrExecChanged", name, err)
		}
		t.Logf("round %d: %v", i, err)
		if pids := processesRunning(prog); len(pids) > 0 {
			t.Errorf("%s: processes %v still run the replaced file", name, pids)
		}
	}

	// A script runs its interpreter: Spawn does not take that for a
	// replaced file.
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec "+prog+" work 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := spawn(t, []string{"script"}, nil, nil)
	r.finish(t, time.Minute)
	if !strings.HasPrefix(r.stdout.String(), "work 2 ") {
		t.Errorf("the script printed %q", r.stdout.String())
	}
}
