// Package testenv holds helpers that let tests say what they need from the
// machine: a tool on PATH, root, ptrace, a long run. A missing need skips the
// test with the reason, except under CI (CI=true), where the continuous
// integration script is supposed to have installed it and the test fails.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run under continuous integration.
func InCI() bool { return os.Getenv("CI") == "true" }

// Long reports whether long runs are asked for (PROBEOPT_LONG=1).
func Long() bool { return os.Getenv("PROBEOPT_LONG") == "1" }

// Unavailable skips the test with the reason, or fails it under CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("required under CI but unavailable: "+format, args...)
	}
	t.Skipf("unavailable: "+format, args...)
}

// MustHaveTool returns the path of the named program, or skips (fails under
// CI) when it is not on PATH.
func MustHaveTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, "tool %q not found on PATH", name)
	}
	return p
}

// MustHaveFile skips (fails under CI) when path does not exist.
func MustHaveFile(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Unavailable(t, "file %s: %v", path, err)
	}
}
