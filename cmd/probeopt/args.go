package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/hostcpu"
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

// hostVendor is --vendor host: the decoding rules of the CPU this runs
// on (hostcpu.Info.X86Vendor). Centaur and Zhaoxin CPUs, whose differences
// from Intel and AMD are not characterised, decode with Intel's rules; a
// CPU whose vendor cannot be told (not x86, an unknown vendor_id) is an
// error.
func hostVendor() (decode.Vendor, error) { return decodeVendorOf(hostcpu.Host()) }

// decodeVendorOf is hostVendor for the CPU that i describes.
func decodeVendorOf(i *hostcpu.Info) (decode.Vendor, error) {
	v, err := i.X86Vendor()
	if err != nil && !errors.Is(err, hostcpu.ErrUncharacterised) {
		return 0, fmt.Errorf("--vendor host: %w", err)
	}
	return v, nil
}
