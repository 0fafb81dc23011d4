package fuzz

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/probeopt/probeopt/decode"
)

// HostVendor reports which vendor's decoding rules the host CPU follows,
// from the vendor_id line of /proc/cpuinfo: GenuineIntel selects
// decode.VendorIntel, AuthenticAMD (and HygonGenuine, an AMD design) selects
// decode.VendorAMD. Any other vendor, or a machine without /proc/cpuinfo or
// without a vendor_id line (arm64), gives an error wrapping ErrNotSupported
// or the read error.
func HostVendor() (decode.Vendor, error) {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return decode.VendorAMD, fmt.Errorf("read cpu vendor: %w", err)
	}
	return parseCPUInfoVendor(data)
}

// parseCPUInfoVendor finds the first vendor_id line of a /proc/cpuinfo text
// and maps it to a decode.Vendor.
func parseCPUInfoVendor(data []byte) (decode.Vendor, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(key) != "vendor_id" {
			continue
		}
		switch v := strings.TrimSpace(val); v {
		case "GenuineIntel":
			return decode.VendorIntel, nil
		case "AuthenticAMD", "HygonGenuine":
			return decode.VendorAMD, nil
		default:
			return decode.VendorAMD, fmt.Errorf("cpu vendor %q: %w", v, ErrNotSupported)
		}
	}
	if err := sc.Err(); err != nil {
		return decode.VendorAMD, fmt.Errorf("scan cpu info: %w", err)
	}
	return decode.VendorAMD, fmt.Errorf("no x86 vendor_id in cpu info: %w", ErrNotSupported)
}
