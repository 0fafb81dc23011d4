package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/probeopt/probeopt/decode"
)

// Errors about a byte-string argument.
var (
	errEmptyHex = errors.New("empty byte string")
	errOddHex   = errors.New("odd number of hex digits")
	errBadHex   = errors.New("invalid hex digit")
)

// parseHexArg parses one byte string written as hex digits without spaces,
// with an optional 0x prefix: "f30f1efa" or "0xF30F1EFA".
func parseHexArg(s string) ([]byte, error) {
	h := s
	if len(h) >= 2 && h[0] == '0' && (h[1] == 'x' || h[1] == 'X') {
		h = h[2:]
	}
	if h == "" {
		return nil, errEmptyHex
	}
	for i := 0; i < len(h); i++ {
		if hexVal(h[i]) < 0 {
			return nil, fmt.Errorf("%w %q at position %d", errBadHex, h[i], i+len(s)-len(h)+1)
		}
	}
	if len(h)%2 != 0 {
		return nil, fmt.Errorf("%w (%d); write each byte as two digits", errOddHex, len(h))
	}
	b := make([]byte, len(h)/2)
	for i := range b {
		b[i] = byte(hexVal(h[2*i])<<4 | hexVal(h[2*i+1]))
	}
	return b, nil
}

func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// parseArch turns an --arch value into an architecture.
func parseArch(s string) (decode.Arch, error) {
	switch strings.ToLower(s) {
	case "x86-64", "x86_64", "amd64", "x64":
		return decode.X86_64, nil
	case "arm64", "aarch64":
		return decode.ARM64, nil
	}
	return 0, usagef("invalid --arch %q: want x86-64 or arm64", s)
}

// parseAddr parses an --addr value: 0x-prefixed hex, or decimal.
func parseAddr(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, usagef("invalid --addr %q: want an address such as 0x401000", s)
	}
	return v, nil
}

// parseSyntax checks a --syntax value.
func parseSyntax(s string) (string, error) {
	switch strings.ToLower(s) {
	case "gnu", "att", "at&t":
		return "gnu", nil
	case "intel":
		return "intel", nil
	}
	return "", usagef("invalid --syntax %q: want gnu or intel", s)
}

// errUnknownVendor means the host CPU's vendor could not be told.
var errUnknownVendor = errors.New("cannot tell the host CPU vendor")

// cpuinfoPath is the file --vendor host reads.
const cpuinfoPath = "/proc/cpuinfo"

// parseVendor turns a --vendor value into a decoder vendor; "host" reads the
// vendor of the CPU this runs on.
func parseVendor(s string) (decode.Vendor, error) {
	switch strings.ToLower(s) {
	case "amd":
		return decode.VendorAMD, nil
	case "intel":
		return decode.VendorIntel, nil
	case "host":
		return hostVendor()
	}
	return 0, usagef("invalid --vendor %q: want amd, intel or host", s)
}

// checkVendorName checks a --vendor value without reading the host's CPU
// vendor, for commands that need the vendor only for x86-64 input.
func checkVendorName(s string) error {
	switch strings.ToLower(s) {
	case "amd", "intel", "host":
		return nil
	}
	return usagef("invalid --vendor %q: want amd, intel or host", s)
}

// hostVendor reads the vendor_id line of /proc/cpuinfo.
func hostVendor() (decode.Vendor, error) {
	f, err := os.Open(cpuinfoPath)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errUnknownVendor, err)
	}
	defer f.Close()
	return parseCPUInfoVendor(f)
}

// parseCPUInfoVendor finds the first vendor_id line in /proc/cpuinfo text.
// Intel and CPUs that follow Intel's decoding (Centaur, Zhaoxin) map to
// VendorIntel; AMD and Hygon map to VendorAMD.
func parseCPUInfoVendor(r io.Reader) (decode.Vendor, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(key) != "vendor_id" {
			continue
		}
		switch id := strings.TrimSpace(val); id {
		case "GenuineIntel", "CentaurHauls", "Shanghai":
			return decode.VendorIntel, nil
		case "AuthenticAMD", "HygonGenuine":
			return decode.VendorAMD, nil
		default:
			return 0, fmt.Errorf("%w: unknown vendor_id %q", errUnknownVendor, id)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%w: read %s: %w", errUnknownVendor, cpuinfoPath, err)
	}
	return 0, fmt.Errorf("%w: no vendor_id line in %s (not an x86 CPU?)", errUnknownVendor, cpuinfoPath)
}
