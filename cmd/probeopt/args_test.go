package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/hostcpu"
)

func TestParseHexArg(t *testing.T) {
	tests := []struct {
		in   string
		want []byte
		err  error
	}{
		{"f30f1efa", []byte{0xf3, 0x0f, 0x1e, 0xfa}, nil},
		{"0xF30F1EFA", []byte{0xf3, 0x0f, 0x1e, 0xfa}, nil},
		{"0X90", []byte{0x90}, nil},
		{"c3", []byte{0xc3}, nil},
		{"", nil, errEmptyHex},
		{"0x", nil, errEmptyHex},
		{"f30", nil, errOddHex},
		{"0x9", nil, errOddHex},
		{"zz", nil, errBadHex},
		{"f3 0f", nil, errBadHex},
		{"0f1g", nil, errBadHex},
		{"-1", nil, errBadHex},
	}
	for _, tt := range tests {
		got, err := parseHexArg(tt.in)
		if !errors.Is(err, tt.err) {
			t.Errorf("parseHexArg(%q) error = %v, want %v", tt.in, err, tt.err)
			continue
		}
		if !bytes.Equal(got, tt.want) {
			t.Errorf("parseHexArg(%q) = %x, want %x", tt.in, got, tt.want)
		}
	}
	// The message points at the offending digit, counting from 1 in the
	// argument as written.
	if _, err := parseHexArg("0x0f1g"); err == nil || !strings.Contains(err.Error(), "'g' at position 6") {
		t.Errorf("parseHexArg(0x0f1g) error = %v, want it to name 'g' at position 6", err)
	}
}

func TestParseOptions(t *testing.T) {
	for in, want := range map[string]decode.Arch{"x86-64": decode.X86_64, "amd64": decode.X86_64, "x86_64": decode.X86_64, "arm64": decode.ARM64, "AArch64": decode.ARM64} {
		if got, err := parseArch(in); err != nil || got != want {
			t.Errorf("parseArch(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	var ue *usageError
	if _, err := parseArch("riscv64"); !errors.As(err, &ue) {
		t.Errorf("parseArch(riscv64) error = %v, want a usage error", err)
	}
	for in, want := range map[string]uint64{"0": 0, "0x401000": 0x401000, "4096": 4096, "0xffffffffffffffff": 1<<64 - 1} {
		if got, err := parseAddr(in); err != nil || got != want {
			t.Errorf("parseAddr(%q) = %#x, %v; want %#x", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0x", "-1", "0x1ffffffffffffffff", "addr"} {
		if _, err := parseAddr(in); !errors.As(err, &ue) {
			t.Errorf("parseAddr(%q) error = %v, want a usage error", in, err)
		}
	}
	for in, want := range map[string]string{"gnu": "gnu", "att": "gnu", "INTEL": "intel"} {
		if got, err := parseSyntax(in); err != nil || got != want {
			t.Errorf("parseSyntax(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := parseSyntax("plan9"); !errors.As(err, &ue) {
		t.Errorf("parseSyntax(plan9) error = %v, want a usage error", err)
	}
	for in, want := range map[string]decode.Vendor{"amd": decode.VendorAMD, "Intel": decode.VendorIntel} {
		if got, err := parseVendor(in); err != nil || got != want {
			t.Errorf("parseVendor(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseVendor("via"); !errors.As(err, &ue) {
		t.Errorf("parseVendor(via) error = %v, want a usage error", err)
	}
}

// TestDecodeVendorOf checks --vendor host for each kind of CPU: Intel and
// AMD rules without error for the vendors that have them, Intel rules for
// the uncharacterised Centaur and Zhaoxin, an error naming the cause for a
// vendor that cannot be told.
func TestDecodeVendorOf(t *testing.T) {
	const intel = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
	const amd = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
	const hygon = "vendor_id : HygonGenuine\n"
	const centaur = "processor\t: 0\nvendor_id\t: CentaurHauls\ncpu family\t: 6\n"
	const zhaoxin = "processor\t: 0\nvendor_id\t:   Shanghai  \ncpu family\t: 7\n"
	const arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n"
	const other = "vendor_id\t: SomeNewVendor\n"
	for text, want := range map[string]decode.Vendor{intel: decode.VendorIntel, amd: decode.VendorAMD, hygon: decode.VendorAMD, centaur: decode.VendorIntel, zhaoxin: decode.VendorIntel} {
		i := hostcpu.Parse("amd64", []byte(text), nil)
		if got, err := decodeVendorOf(&i); err != nil || got != want {
			t.Errorf("decodeVendorOf(%q) = %v, %v; want %v", text, got, err, want)
		}
	}
	for _, c := range []struct{ arch, text, msg string }{
		{"arm64", arm, "--vendor host: unknown cpu vendor: not an x86 cpu (arm64)"},
		{"amd64", other, `--vendor host: unknown cpu vendor: vendor_id "SomeNewVendor"`},
		{"amd64", "", "--vendor host: unknown cpu vendor: no vendor_id line in /proc/cpuinfo"},
	} {
		i := hostcpu.Parse(c.arch, []byte(c.text), nil)
		if _, err := decodeVendorOf(&i); !errors.Is(err, hostcpu.ErrUnknownVendor) || err.Error() != c.msg {
			t.Errorf("decodeVendorOf(%q) error = %v, want %q (hostcpu.ErrUnknownVendor)", c.text, err, c.msg)
		}
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"Len": "len", "RegsRead": "regs_read", "PCRelOff": "pc_rel_off", "Imm2Size": "imm2_size",
		"Rt": "rt", "ImmOff": "imm_off", "SF": "sf", "BranchKind": "branch_kind",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}
