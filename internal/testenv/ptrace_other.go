//go:build !linux

package testenv

import "testing"

// NeedPtrace skips the test: tracing is tested on Linux only.
func NeedPtrace(t testing.TB) {
	t.Helper()
	t.Skip("ptrace is tested on Linux only")
}
