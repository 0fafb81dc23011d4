package guest

import (
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
)

// Need skips t when the guest cannot be booted here (QEMU, the arm64
// kernel or busybox missing), and fails it instead under CI, where
// .ci/run installs them.
func Need(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
}
