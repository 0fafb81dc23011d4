package x86cpu

import (
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/probeopt/probeopt/decode"
)

// Regression vectors of the emulator oracle are text, one case per line:
//
//	CLASS HEX vendor=VENDOR image=SEED rip=ADDR rax=V rcx=V ... r15=V rflags=V  # note
//
// HEX is the instruction, VENDOR the vendor of the CPU on which the
// disagreement was found (amd or intel), SEED the seed of the memory image
// (NewEmuImage), and every register of the initial state is given in
// hexadecimal (0x prefix); fs_base and gs_base are EmuFSBase and
// EmuGSBase. Blank lines and lines starting with # are ignored. Every
// vector is replayed on whatever CPU runs the tests, with the emulator of
// that CPU's vendor: the vendor says where a case came from, not where it
// runs.

// EmuVector is one regression vector: a case and its memory image.
type EmuVector struct {
	Case      EmuCase
	ImageSeed uint64
	// Vendor is the vendor of the CPU the disagreement was found on.
	Vendor decode.Vendor
	Note   string // the comment after #, if any
	Line   int    // line number in the file
}

// Vector renders the mismatch's case as a regression vector line.
func (m *EmuMismatch) Vector() string {
	return formatEmuVector(&m.Case, m.Vendor, m.ImageSeed, m.Reason)
}

// formatEmuVector renders a case as a vector line.
func formatEmuVector(c *EmuCase, vendor decode.Vendor, seed uint64, note string) string {
	var b strings.Builder
	class := c.Class
	if class == "" {
		class = "-"
	}
	fmt.Fprintf(&b, "%s %s vendor=%v image=%#x rip=%#x", class, hex.EncodeToString(c.Bytes), vendor, seed, c.Init.RIP)
	writeVectorGPRs(&b, &c.Init.GPR)
	fmt.Fprintf(&b, " rflags=%#x", c.Init.RFLAGS)
	if note != "" {
		fmt.Fprintf(&b, "  # %s", strings.ReplaceAll(note, "\n", " "))
	}
	return b.String()
}

// ReadEmuVectors parses regression vectors.
func ReadEmuVectors(r io.Reader) ([]EmuVector, error) {
	return readVectorLines(r, func(line string, n int) (EmuVector, error) {
		v, err := parseEmuVector(line)
		v.Line = n
		return v, err
	})
}

// parseEmuVector parses one vector line.
func parseEmuVector(line string) (EmuVector, error) {
	var v EmuVector
	l, err := splitVectorLine(line, "vendor", "image", "rip", "rflags")
	if err != nil {
		return v, err
	}
	if len(l.words) > 0 {
		return v, fmt.Errorf("bad field %q", l.words[0])
	}
	v.Case.Class, v.Case.Bytes, v.Note = l.class, l.bytes, l.note
	st := &v.Case.Init
	st.FSBase, st.GSBase = EmuFSBase, EmuGSBase
	for _, kv := range l.fields {
		k, val := kv[0], kv[1]
		var dst *uint64
		switch k {
		case "vendor":
			switch val {
			case "amd":
				v.Vendor = decode.VendorAMD
			case "intel":
				v.Vendor = decode.VendorIntel
			default:
				return v, fmt.Errorf("vendor %q: want amd or intel", val)
			}
			continue
		case "image":
			dst = &v.ImageSeed
		case "rip":
			dst = &st.RIP
		case "rflags":
			dst = &st.RFLAGS
		default:
			if err := setVectorGPR(&st.GPR, k, val); err != nil {
				return v, err
			}
			continue
		}
		if *dst, err = vectorUint(k, val); err != nil {
			return v, err
		}
	}
	return v, nil
}
