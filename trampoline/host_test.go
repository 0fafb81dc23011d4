package trampoline

import (
	"runtime"
	"testing"

	"github.com/probeopt/probeopt/internal/hostcpu"
)

// TestHostFeatures checks that HostFeatures is hostcpu's view of the
// machine: its fsgsbase and lahf on x86-64, nothing elsewhere.
func TestHostFeatures(t *testing.T) {
	got := HostFeatures()
	h := hostcpu.Host()
	want := Features{}
	if runtime.GOARCH == "amd64" {
		want = Features{FSGSBase: h.FSGSBase, LAHF: h.LAHF}
	}
	if got != want {
		t.Errorf("HostFeatures = %+v, want %+v", got, want)
	}
	if got.FSGSBase && !h.HasFlag("fsgsbase") {
		t.Errorf("FSGSBase without the cpu's fsgsbase flag")
	}
	if (got.ThreadPointer() == ThreadFSBase) != got.FSGSBase || (got.Flags() == FlagsLAHF) != got.LAHF {
		t.Errorf("features %+v: thread pointer %v, flags %v", got, got.ThreadPointer(), got.Flags())
	}
}
