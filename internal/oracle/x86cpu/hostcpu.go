package x86cpu

import (
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/hostcpu"
)

// HostVendor reports which vendor's rules the host CPU follows, for the
// oracles that judge decode and emulate against it (hostcpu.Info.X86Vendor):
// GenuineIntel selects decode.VendorIntel, AuthenticAMD and HygonGenuine
// (an AMD design) select decode.VendorAMD. Any other CPU gives an error
// wrapping ErrNotSupported and hostcpu's error: hostcpu.ErrUncharacterised
// for Centaur and Zhaoxin, whose differences from Intel and AMD are not
// characterised and so cannot be judged by either's rules, and
// hostcpu.ErrUnknownVendor for an unknown vendor, a machine that is not
// x86 (arm64) or a /proc/cpuinfo that cannot be read. The vendor returned
// with an error must not be used.
func HostVendor() (decode.Vendor, error) {
	v, err := hostcpu.Host().X86Vendor()
	if err != nil {
		return v, fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return v, nil
}
