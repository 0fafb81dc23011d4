package x86cpu

import (
	"fmt"
	"io"
	"strings"
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
	writeVectorGPRs(&b, &c.Regs.GPR)
	return b.String()
}

// ParseXOLX86Vector parses a line made by Vector.
func ParseXOLX86Vector(line string) (XOLX86Case, error) {
	c, err := parseXOLX86Vector(line)
	if err != nil {
		return c, fmt.Errorf("xol vector %q: %w", line, err)
	}
	return c, nil
}

// parseXOLX86Vector is ParseXOLX86Vector without the line in its errors.
func parseXOLX86Vector(line string) (XOLX86Case, error) {
	var c XOLX86Case
	l, err := splitVectorLine(line, "rip", "slot", "img")
	if err != nil {
		return c, err
	}
	c.Class, c.Bytes = l.class, l.bytes
	for _, w := range l.words {
		if w != "force" {
			return c, fmt.Errorf("bad field %q", w)
		}
		c.Opts.ForceScratch = true
	}
	for _, kv := range l.fields {
		k, val := kv[0], kv[1]
		var dst *uint64
		switch k {
		case "rip":
			dst = &c.Regs.RIP
		case "slot":
			dst = &c.Slot
		case "img":
			dst = &c.Image
		case "flags":
			dst = &c.Regs.RFLAGS
		default:
			if err := setVectorGPR(&c.Regs.GPR, k, val); err != nil {
				return c, err
			}
			continue
		}
		if *dst, err = vectorUint(k, val); err != nil {
			return c, err
		}
	}
	return c, nil
}

// ReadXOLX86Vectors reads vector lines, skipping blank lines and # comments.
func ReadXOLX86Vectors(r io.Reader) ([]XOLX86Case, error) {
	return readVectorLines(r, func(line string, _ int) (XOLX86Case, error) { return ParseXOLX86Vector(line) })
}
