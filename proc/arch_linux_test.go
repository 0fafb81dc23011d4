//go:build linux && (amd64 || arm64)

package proc

import (
	"runtime"
	"testing"
	"unsafe"
)

// TestHostArch checks that the host's table is the one of runtime.GOARCH
// and describes the Regs layout ptrace fills.
func TestHostArch(t *testing.T) {
	want := map[string]*arch{"amd64": &archX86_64, "arm64": &archARM64}[runtime.GOARCH]
	if want == nil || hostArch.name != want.name {
		t.Fatalf("hostArch is %s on %s", hostArch.name, runtime.GOARCH)
	}
	if got := unsafe.Sizeof(Regs{}); got != hostArch.regsSize+regsExtra {
		t.Errorf("sizeof(Regs) = %d, the %s table says %d (and %d from other register sets)", got, hostArch.name, hostArch.regsSize, regsExtra)
	}
}
