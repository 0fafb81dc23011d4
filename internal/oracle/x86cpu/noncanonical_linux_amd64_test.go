//go:build linux && amd64

package x86cpu

import (
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
)

// TestHostEntersNoncanonicalRSP checks the probe of the host against
// itself at other stack pointers: a canonical one (in either half) is
// always entered, the nop runs; every non-canonical one gets the answer
// the host's probe gave.
func TestHostEntersNoncanonicalRSP(t *testing.T) {
	testenv.NeedPtrace(t)
	host, err := HostEntersNoncanonicalRSP()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("this host enters user mode with a non-canonical rsp: %v", host)
	for _, rsp := range []uint64{0xffff_8000_0000_0000, 0x0000_7fff_ffff_f000, 0x0000_8000_0000_0000, 0x8000_0000_0000_0000, 0x7fff_ffff_ffff_ffff} {
		want := host || hostCanonical(rsp)
		got, err := hostEntersRSP(rsp)
		if err != nil {
			t.Fatalf("rsp %#x: %v", rsp, err)
		}
		if got != want {
			t.Errorf("rsp %#x: the nop ran: %v, want %v", rsp, got, want)
		}
	}
}
