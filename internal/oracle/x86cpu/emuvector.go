package x86cpu

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
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
	for r := 0; r < 16; r++ {
		fmt.Fprintf(&b, " %s=%#x", decode.X86RegName(r), c.Init.GPR[r])
	}
	fmt.Fprintf(&b, " rflags=%#x", c.Init.RFLAGS)
	if note != "" {
		fmt.Fprintf(&b, "  # %s", strings.ReplaceAll(note, "\n", " "))
	}
	return b.String()
}

// ReadEmuVectors parses regression vectors.
func ReadEmuVectors(r io.Reader) ([]EmuVector, error) {
	var out []EmuVector
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := parseEmuVector(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		v.Line = n
		out = append(out, v)
	}
	return out, sc.Err()
}

// parseEmuVector parses one vector line.
func parseEmuVector(line string) (EmuVector, error) {
	var v EmuVector
	if body, note, ok := strings.Cut(line, "#"); ok {
		line, v.Note = body, strings.TrimSpace(note)
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return v, fmt.Errorf("want CLASS HEX key=value...")
	}
	v.Case.Class = f[0]
	b, err := hex.DecodeString(f[1])
	if err != nil || len(b) == 0 || len(b) > MaxX86Len {
		return v, fmt.Errorf("bad instruction bytes %q", f[1])
	}
	v.Case.Bytes = b
	st := &v.Case.Init
	st.FSBase, st.GSBase = EmuFSBase, EmuGSBase
	seen := map[string]bool{}
	for _, kv := range f[2:] {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return v, fmt.Errorf("bad field %q", kv)
		}
		if k == "vendor" {
			switch val {
			case "amd":
				v.Vendor = decode.VendorAMD
			case "intel":
				v.Vendor = decode.VendorIntel
			default:
				return v, fmt.Errorf("vendor %q: want amd or intel", val)
			}
			seen[k] = true
			continue
		}
		x, err := strconv.ParseUint(val, 0, 64)
		if err != nil {
			return v, fmt.Errorf("field %s: %w", k, err)
		}
		seen[k] = true
		switch k {
		case "image":
			v.ImageSeed = x
		case "rip":
			st.RIP = x
		case "rflags":
			st.RFLAGS = x
		default:
			r := emuRegIndex(k)
			if r < 0 {
				return v, fmt.Errorf("unknown field %q", k)
			}
			st.GPR[r] = x
		}
	}
	for _, k := range []string{"vendor", "image", "rip", "rflags"} {
		if !seen[k] {
			return v, fmt.Errorf("missing %s=", k)
		}
	}
	return v, nil
}

// emuRegIndex returns the number of a 64-bit register name, or -1.
func emuRegIndex(name string) int {
	for r := 0; r < 16; r++ {
		if decode.X86RegName(r) == name {
			return r
		}
	}
	return -1
}
