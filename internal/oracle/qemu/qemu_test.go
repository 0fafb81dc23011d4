package qemu

import (
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
)

// startTestQEMU starts the arm64 oracle, or skips (fails under CI) when
// qemu-aarch64 or the cross compiler is missing.
func startTestQEMU(t testing.TB, seed uint64) *QEMUOracle {
	t.Helper()
	testenv.MustHaveTool(t, "qemu-aarch64")
	testenv.MustHaveTool(t, QEMUHarnessCC)
	q, err := StartQEMU(NewARM64Image(seed), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}
