package probe

import (
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/hostcpu"
)

// TestDecodeVendor checks the tracer's vendor for each kind of CPU: Intel
// rules for Intel, Centaur and Zhaoxin; AMD rules for AMD, Hygon and a
// CPU whose vendor cannot be told.
func TestDecodeVendor(t *testing.T) {
	for _, tt := range []struct {
		arch, cpuinfo string
		want          decode.Vendor
	}{
		{"amd64", "vendor_id\t: GenuineIntel\n", decode.VendorIntel},
		{"amd64", "vendor_id\t: CentaurHauls\n", decode.VendorIntel},
		{"amd64", "vendor_id\t:   Shanghai  \n", decode.VendorIntel},
		{"amd64", "vendor_id\t: AuthenticAMD\n", decode.VendorAMD},
		{"amd64", "vendor_id\t: HygonGenuine\n", decode.VendorAMD},
		{"amd64", "vendor_id\t: SomeNewVendor\n", decode.VendorAMD},
		{"amd64", "", decode.VendorAMD},
		{"arm64", "processor\t: 0\nFeatures\t: fp asimd\n", decode.VendorAMD},
	} {
		i := hostcpu.Parse(tt.arch, []byte(tt.cpuinfo), nil)
		if got := decodeVendor(&i); got != tt.want {
			t.Errorf("%s %q: %v, want %v", tt.arch, tt.cpuinfo, got, tt.want)
		}
	}
}
