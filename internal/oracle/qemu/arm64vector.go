package qemu

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ARM64Vector is one line of an arm64 emulator vector file (see
// testdata/arm64/emulate.txt): an instruction and the state to run it
// from, in the oracle's address space.
type ARM64Vector struct {
	Line int
	Word uint32
	Case ARM64Case
	// Note is the comment after the settings.
	Note string
}

// arm64VectorBase returns the fixed state of a vector before its
// settings.
func arm64VectorBase() ARM64Case {
	var c ARM64Case
	for i := range c.State.X {
		c.State.X[i] = 0x1000 * uint64(i)
	}
	c.State.SP = ARM64RWAddr + 0x1000
	c.State.PC = ARM64CodeAddr + 0x1000
	c.Vec = true
	return c
}

// ReadARM64Vectors parses a vector file.
func ReadARM64Vectors(r io.Reader) ([]ARM64Vector, error) {
	var out []ARM64Vector
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, note, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		w, err := strconv.ParseUint(fields[0], 16, 32)
		if err != nil {
			return nil, fmt.Errorf("line %d: word %q: %v", n, fields[0], err)
		}
		v := ARM64Vector{Line: n, Word: uint32(w), Case: arm64VectorBase(), Note: strings.TrimSpace(note)}
		for _, f := range fields[1:] {
			if err := v.set(f); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
		}
		v.Case.Code = []ARM64Patch{{v.Case.State.PC, v.Word}}
		out = append(out, v)
	}
	return out, sc.Err()
}

// set applies one name=value setting.
func (v *ARM64Vector) set(f string) error {
	name, val, ok := strings.Cut(f, "=")
	if !ok {
		return fmt.Errorf("setting %q: want name=value", f)
	}
	var base uint64
	for prefix, b := range map[string]uint64{"rw+": ARM64RWAddr, "ro+": ARM64ROAddr, "code+": ARM64CodeAddr} {
		if strings.HasPrefix(val, prefix) {
			base, val = b, strings.TrimPrefix(val, prefix)
		}
	}
	x, err := strconv.ParseUint(strings.TrimPrefix(val, "0x"), 16, 64)
	if err != nil {
		return fmt.Errorf("setting %q: %v", f, err)
	}
	x += base
	s := &v.Case.State
	switch {
	case name == "sp":
		s.SP = x
	case name == "pc":
		s.PC = x
	case name == "nzcv":
		s.NZCV = x << 28
	case strings.HasPrefix(name, "x") || strings.HasPrefix(name, "v"):
		i, err := strconv.Atoi(name[1:])
		if err != nil || i < 0 || (name[0] == 'x' && i > 30) || i > 31 {
			return fmt.Errorf("setting %q: no such register", f)
		}
		if name[0] == 'x' {
			s.X[i] = x
		} else {
			s.V[i] = [2]uint64{x, 0}
		}
	default:
		return fmt.Errorf("setting %q: no such register", f)
	}
	return nil
}
