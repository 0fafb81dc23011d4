package x86cpu

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/internal/testenv"
)

// startTestOracle starts an oracle for a test and closes it at the end. It
// skips where the oracle does not exist (not Linux on amd64) and skips
// (fails under CI) when the machine does not allow ptrace.
func startTestOracle[O interface{ Close() error }](t testing.TB, what string, start func() (O, error)) O {
	t.Helper()
	o, err := start()
	switch {
	case errors.Is(err, ErrNotSupported):
		t.Skipf("no %s oracle here: %v", what, err)
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOSYS):
		testenv.Unavailable(t, "ptrace: %v", err)
	case err != nil:
		t.Fatalf("start the %s oracle: %v", what, err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return o
}

// testCaseCount is how many cases a campaign test runs: the value of the
// environment variable env when it is set (a positive integer; env "" for
// none), else long with PROBEOPT_LONG=1, short with -short, n otherwise.
func testCaseCount(t testing.TB, env string, short, n, long int) int {
	t.Helper()
	if v := os.Getenv(env); env != "" && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive integer", env, v)
		}
		return n
	}
	switch {
	case testenv.Long():
		return long
	case testing.Short():
		return short
	}
	return n
}

// reportMismatches returns a campaign's OnMismatch that fails the test
// with the first 20 mismatches and lets the campaign go on.
func reportMismatches[M fmt.Stringer](t testing.TB) func(M) bool {
	shown := 0
	return func(m M) bool {
		if shown < 20 {
			t.Errorf("%s", m)
		}
		shown++
		return true
	}
}

// readTestVectors reads testdata/DIR/regressions.txt with read and fails
// the test when the file holds no vector.
func readTestVectors[T any](t testing.TB, dir string, read func(io.Reader) ([]T, error)) []T {
	t.Helper()
	return testenv.ReadVectors(t, filepath.Join("testdata", dir, "regressions.txt"), read)
}

// newEmuTestCase returns a case of the emulator oracle: the instruction of
// hex code at addr, with IF set, the oracle's FS and GS bases and rsp in
// the read-write window, then changed by set (when not nil).
func newEmuTestCase(t testing.TB, class string, addr uint64, code string, set func(*emulate.X86State)) EmuCase {
	t.Helper()
	c := EmuCase{Class: class, Bytes: mustHex(t, code)}
	c.Init.RIP = addr
	c.Init.RFLAGS = 0x202
	c.Init.FSBase, c.Init.GSBase = EmuFSBase, EmuGSBase
	c.Init.GPR[decode.RSP] = EmuRWAddr + 0x1000
	if set != nil {
		set(&c.Init)
	}
	return c
}
