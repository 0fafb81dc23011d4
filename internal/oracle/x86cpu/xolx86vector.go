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

// Vector renders the case as one line of the regression vectors
// (testdata/xolx86/regressions.txt):
//
//	CLASS HEX rip=ADDR slot=ADDR img=SEED flags=RFLAGS [force] rax=V ... r15=V
//
// Numbers are hexadecimal with 0x. ParseXOLX86Vector reads it back.
func (c *XOLX86Case) Vector() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %x rip=%#x slot=%#x img=%#x flags=%#x", c.Class, c.Bytes, c.Regs.RIP, c.Slot, c.Image, c.Regs.RFLAGS)
	if c.Opts.ForceScratch {
		b.WriteString(" force")
	}
	for i, v := range c.Regs.GPR {
		fmt.Fprintf(&b, " %s=%#x", decode.X86RegName(i), v)
	}
	return b.String()
}

// ParseXOLX86Vector parses a line made by Vector.
func ParseXOLX86Vector(line string) (XOLX86Case, error) {
	var c XOLX86Case
	f := strings.Fields(line)
	if len(f) < 2 {
		return c, fmt.Errorf("xol vector %q: want CLASS HEX key=value...", line)
	}
	c.Class = f[0]
	b, err := hex.DecodeString(f[1])
	if err != nil || len(b) == 0 || len(b) > MaxX86Len {
		return c, fmt.Errorf("xol vector %q: bad instruction bytes %q", line, f[1])
	}
	c.Bytes = b
	regs := map[string]int{}
	for i := 0; i < 16; i++ {
		regs[decode.X86RegName(i)] = i
	}
	seen := map[string]bool{}
	for _, kv := range f[2:] {
		if kv == "force" {
			c.Opts.ForceScratch = true
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return c, fmt.Errorf("xol vector %q: bad field %q", line, kv)
		}
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return c, fmt.Errorf("xol vector %q: field %s: %w", line, k, err)
		}
		seen[k] = true
		switch k {
		case "rip":
			c.Regs.RIP = n
		case "slot":
			c.Slot = n
		case "img":
			c.Image = n
		case "flags":
			c.Regs.RFLAGS = n
		default:
			r, ok := regs[k]
			if !ok {
				return c, fmt.Errorf("xol vector %q: unknown field %q", line, k)
			}
			c.Regs.GPR[r] = n
		}
	}
	for _, k := range []string{"rip", "slot", "img"} {
		if !seen[k] {
			return c, fmt.Errorf("xol vector %q: missing %s=", line, k)
		}
	}
	return c, nil
}

// ReadXOLX86Vectors reads vector lines, skipping blank lines and # comments.
func ReadXOLX86Vectors(r io.Reader) ([]XOLX86Case, error) {
	var out []XOLX86Case
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c, err := ParseXOLX86Vector(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}
