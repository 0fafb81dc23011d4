package x86cpu

import (
	"errors"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/hostcpu"
)

// TestHostVendor checks that HostVendor follows hostcpu and refuses every
// CPU but Intel, AMD and Hygon with ErrNotSupported.
func TestHostVendor(t *testing.T) {
	h := hostcpu.Host()
	v, err := HostVendor()
	switch h.Vendor {
	case hostcpu.Intel, hostcpu.AMD, hostcpu.Hygon:
		want := decode.VendorAMD
		if h.Vendor == hostcpu.Intel {
			want = decode.VendorIntel
		}
		if v != want || err != nil {
			t.Errorf("HostVendor on %s = %v, %v; want %v", h.Vendor, v, err, want)
		}
	case hostcpu.Centaur, hostcpu.Zhaoxin:
		if !errors.Is(err, ErrNotSupported) || !errors.Is(err, hostcpu.ErrUncharacterised) {
			t.Errorf("HostVendor on %s: error %v, want ErrNotSupported and hostcpu.ErrUncharacterised", h.Vendor, err)
		}
	default:
		if !errors.Is(err, ErrNotSupported) || !errors.Is(err, hostcpu.ErrUnknownVendor) {
			t.Errorf("HostVendor on %s (%q): error %v, want ErrNotSupported and hostcpu.ErrUnknownVendor", h.Vendor, h.VendorID, err)
		}
	}
}
