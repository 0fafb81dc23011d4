package probe

import (
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/hostcpu"
)

// TestHostEmulator checks the tracer's emulator for each kind of CPU: the
// vendor's behaviour and address width on Intel, AMD and Hygon, and no
// emulation where the vendor's differences are not characterised.
func TestHostEmulator(t *testing.T) {
	for _, tt := range []struct {
		cpuinfo string
		vendor  decode.Vendor
		la57    bool
		ok      bool
	}{
		{"vendor_id\t: GenuineIntel\nflags\t\t: fpu la57\n", decode.VendorIntel, true, true},
		{"vendor_id\t: AuthenticAMD\nflags\t\t: fpu\n", decode.VendorAMD, false, true},
		{"vendor_id\t: HygonGenuine\n", decode.VendorAMD, false, true},
		{"vendor_id\t: CentaurHauls\n", decode.VendorIntel, false, false},
		{"vendor_id\t:   Shanghai  \n", decode.VendorIntel, false, false},
		{"vendor_id\t: SomeNewVendor\n", decode.VendorAMD, false, false},
	} {
		i := hostcpu.Parse("amd64", []byte(tt.cpuinfo), nil)
		x, ok := hostEmulator(&i)
		if x.Vendor != tt.vendor || x.LA57 != tt.la57 || ok != tt.ok {
			t.Errorf("%q: vendor %v la57 %v ok %v, want %v %v %v", tt.cpuinfo, x.Vendor, x.LA57, ok, tt.vendor, tt.la57, tt.ok)
		}
	}
}
