package hostcpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/probeopt/probeopt/decode"
)

var (
	// ErrUnknownVendor is returned (wrapped) by Info.X86Vendor when the
	// vendor cannot be told: the vendor_id is one the project does not
	// know, there is none (the machine is not x86), or /proc/cpuinfo could
	// not be read.
	ErrUnknownVendor = errors.New("unknown cpu vendor")
	// ErrUncharacterised is returned (wrapped) by Info.X86Vendor for a
	// vendor whose differences from Intel and AMD are not characterised
	// (Centaur, Zhaoxin): the vendor returned with it is the best guess
	// for decoding, not a description to emulate or judge the CPU by.
	ErrUncharacterised = errors.New("cpu vendor not characterised")
	// ErrNotSupported is returned (wrapped) by Info.Err on a system whose
	// CPU description this package cannot read (not Linux).
	ErrNotSupported = errors.New("not supported")
)

// Vendor is the maker of an x86 CPU, from its cpuid vendor string (the
// vendor_id line of /proc/cpuinfo).
type Vendor uint8

const (
	// Unknown: not an x86 CPU, no vendor_id, or one not listed here.
	Unknown Vendor = iota
	// Intel: "GenuineIntel".
	Intel
	// AMD: "AuthenticAMD".
	AMD
	// Hygon: "HygonGenuine", the Dhyana parts licensed from AMD's Zen.
	Hygon
	// Centaur: "CentaurHauls", VIA's and early Zhaoxin parts.
	Centaur
	// Zhaoxin: "  Shanghai  " (cpuinfo prints it trimmed: "Shanghai").
	Zhaoxin
)

// vendorIDs maps a trimmed cpuid vendor string to its vendor.
var vendorIDs = map[string]Vendor{
	"GenuineIntel": Intel,
	"AuthenticAMD": AMD,
	"HygonGenuine": Hygon,
	"CentaurHauls": Centaur,
	"Shanghai":     Zhaoxin,
}

// String returns the vendor's name: "Intel", "AMD", "Hygon", "Centaur",
// "Zhaoxin" or "unknown".
func (v Vendor) String() string {
	switch v {
	case Intel:
		return "Intel"
	case AMD:
		return "AMD"
	case Hygon:
		return "Hygon"
	case Centaur:
		return "Centaur"
	case Zhaoxin:
		return "Zhaoxin"
	}
	return "unknown"
}

// Info describes a CPU as Linux reports it. The first processor of
// /proc/cpuinfo stands for all: Linux shows one vendor, family and model
// for every processor, and only the flags every processor has.
//
// The fields marked x86 are zero when Arch is neither amd64 nor 386. An
// Info is not modified after Host or Parse returns it; callers must not
// modify it either (Host's is shared).
type Info struct {
	// Arch is the GOARCH the description was read for (runtime.GOARCH for
	// Host).
	Arch string
	// VendorID is the cpuid vendor string as the vendor_id line gives it,
	// white space trimmed ("GenuineIntel", "Shanghai"); "" when there is
	// no such line. x86.
	VendorID string
	// Vendor is the maker that VendorID names. x86.
	Vendor Vendor
	// Family, Model and Stepping are the decimal "cpu family", "model"
	// and "stepping" lines (the kernel has already combined the base and
	// extended fields of cpuid); 0 when absent. x86.
	Family, Model, Stepping int
	// ModelName is the "model name" line: the brand string on x86; ""
	// where the kernel prints none (arm64).
	ModelName string
	// Flags are the words of the first processor's "flags" line (x86) or
	// "Features" line (arm64, arm): the features the CPU has and the
	// kernel lets programs use.
	Flags []string

	// LA57: 5-level paging is on, so user addresses have 57 bits (cpuinfo
	// flag la57, which the kernel clears when it runs with 4-level
	// paging). x86.
	LA57 bool
	// FSGSBase: rdfsbase and its kin work in user mode (HWCAP2_FSGSBASE,
	// bit 1 of AT_HWCAP2 in /proc/self/auxv, which Linux 5.9 and later set
	// when they enable it; the cpuinfo flag fsgsbase only says the CPU
	// has it). x86.
	FSGSBase bool
	// RDPID: the rdpid instruction is available (flag rdpid). x86.
	RDPID bool
	// LAHF: lahf and sahf work in 64-bit mode (flag lahf_lm). x86.
	LAHF bool

	// cpuinfoErr and auxvErr are why Host could not read the files.
	cpuinfoErr, auxvErr error
}

// Host returns the description of the CPU this program runs on, read on
// the first call; every call returns the same Info. A file that cannot be
// read leaves the fields it would have given zero, and Err says why.
func Host() *Info { return host() }

var host = sync.OnceValue(func() *Info {
	i := readHost()
	return &i
})

// Err returns why Host could not read part of the description (an error
// wrapping the read error, or ErrNotSupported off Linux), or nil. Parse
// never sets it.
func (i *Info) Err() error { return errors.Join(i.cpuinfoErr, i.auxvErr) }

// HasFlag reports whether name is one of Flags ("avx2", "la57").
func (i *Info) HasFlag(name string) bool { return slices.Contains(i.Flags, name) }

// X86Vendor returns the vendor whose decoding rules the CPU follows, for
// decode.X86Decoder and emulate:
//
//   - Intel: decode.VendorIntel, nil.
//   - AMD and Hygon: decode.VendorAMD, nil.
//   - Centaur and Zhaoxin: decode.VendorIntel and an error wrapping
//     ErrUncharacterised. As far as is known these decode like Intel, but
//     their differences from Intel and AMD are not characterised: a caller
//     that only decodes may use the vendor (and ignore the error); a caller
//     that emulates the CPU or judges it against the emulator must refuse.
//   - anything else (an unknown vendor_id, no vendor_id, a machine that is
//     not x86, /proc/cpuinfo unreadable): decode.VendorAMD, the decoder's
//     default, and an error wrapping ErrUnknownVendor (and the read error,
//     if any). A caller that needs a vendor anyway may use it, as objdump
//     does; one that claims to follow the host must refuse.
//
// The error is nil exactly for Intel, AMD and Hygon.
func (i *Info) X86Vendor() (decode.Vendor, error) {
	switch i.Vendor {
	case Intel:
		return decode.VendorIntel, nil
	case AMD, Hygon:
		return decode.VendorAMD, nil
	case Centaur, Zhaoxin:
		return decode.VendorIntel, fmt.Errorf("%w: %s (vendor_id %q): its differences from Intel and AMD are unknown; it is decoded with Intel's rules", ErrUncharacterised, i.Vendor, i.VendorID)
	}
	switch {
	case i.cpuinfoErr != nil:
		return decode.VendorAMD, fmt.Errorf("%w: %w", ErrUnknownVendor, i.cpuinfoErr)
	case !isX86(i.Arch):
		return decode.VendorAMD, fmt.Errorf("%w: not an x86 cpu (%s)", ErrUnknownVendor, i.Arch)
	case i.VendorID == "":
		return decode.VendorAMD, fmt.Errorf("%w: no vendor_id line in /proc/cpuinfo", ErrUnknownVendor)
	}
	return decode.VendorAMD, fmt.Errorf("%w: vendor_id %q", ErrUnknownVendor, i.VendorID)
}

// isX86 reports whether arch is an x86 GOARCH.
func isX86(arch string) bool { return arch == "amd64" || arch == "386" }

// Auxiliary vector entries and bits (linux/auxvec.h, asm/hwcap2.h).
const (
	atNull         = 0
	atHWCAP2       = 26
	hwcap2FSGSBase = 1 << 1
)

// Parse describes a CPU from the text of /proc/cpuinfo and the bytes of
// /proc/self/auxv, as a program built for arch (a GOARCH) sees them: auxv
// is a vector of (type, value) pairs of the native word (8 bytes on amd64,
// 4 on 386), little-endian. Either may be nil. Parse never fails: what it
// cannot find or parse stays zero.
func Parse(arch string, cpuinfo, auxv []byte) Info {
	i := Info{Arch: arch}
	x86 := isX86(arch)
	seen := false
	for line := range strings.Lines(string(cpuinfo)) {
		key, val, ok := strings.Cut(line, ":")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok {
			if seen && key == "" {
				break // the blank line after the first processor
			}
			continue
		}
		seen = true
		switch {
		case key == "model name":
			i.ModelName = val
		case key == "flags" && x86, key == "Features" && !x86:
			i.Flags = strings.Fields(val)
		case !x86:
		case key == "vendor_id":
			i.VendorID = val
			i.Vendor = vendorIDs[val]
		case key == "cpu family":
			i.Family = atoi(val)
		case key == "model":
			i.Model = atoi(val)
		case key == "stepping":
			i.Stepping = atoi(val)
		}
	}
	if !x86 {
		return i
	}
	i.LA57 = i.HasFlag("la57")
	i.RDPID = i.HasFlag("rdpid")
	i.LAHF = i.HasFlag("lahf_lm")
	if hwcap2, ok := auxvValue(arch, auxv, atHWCAP2); ok {
		i.FSGSBase = hwcap2&hwcap2FSGSBase != 0
	}
	return i
}

// atoi parses a decimal cpuinfo value, 0 when it is not one ("unknown").
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// auxvValue returns the value of the first entry of type typ in an
// auxiliary vector of arch's word size, up to the AT_NULL entry.
func auxvValue(arch string, auxv []byte, typ uint64) (uint64, bool) {
	word := 8
	if arch == "386" {
		word = 4
	}
	get := func(b []byte) uint64 {
		if word == 4 {
			return uint64(binary.LittleEndian.Uint32(b))
		}
		return binary.LittleEndian.Uint64(b)
	}
	for off := 0; off+2*word <= len(auxv); off += 2 * word {
		switch t := get(auxv[off:]); t {
		case atNull:
			return 0, false
		case typ:
			return get(auxv[off+word:]), true
		}
	}
	return 0, false
}
