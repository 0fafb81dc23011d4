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

// The regression vectors of the x86-64 oracles share one line syntax:
//
//	CLASS HEX word key=value ...  # note
//
// CLASS names the generator class, HEX is the instruction, a bare word is
// a flag and every other field a key with its value. The emulator and
// relocation vectors differ only in their keys (emuvector.go,
// xolx86vector.go).

// readVectorLines calls parse for every line of r that is neither blank
// nor a # comment, with the line trimmed and its number (from 1), and
// returns what parse made of them. An error names the line.
func readVectorLines[T any](r io.Reader, parse func(line string, n int) (T, error)) ([]T, error) {
	var out []T
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := parse(line, n)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// vectorLine is one vector line split into its parts.
type vectorLine struct {
	class string
	bytes []byte // the instruction: 1 to MaxX86Len bytes
	note  string // after #, trimmed
	// fields are the key=value fields in their order; words the bare ones.
	fields [][2]string
	words  []string
}

// splitVectorLine splits line and checks that every key of required is
// among its fields.
func splitVectorLine(line string, required ...string) (vectorLine, error) {
	var v vectorLine
	if body, note, ok := strings.Cut(line, "#"); ok {
		line, v.note = body, strings.TrimSpace(note)
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return v, fmt.Errorf("want CLASS HEX key=value...")
	}
	v.class = f[0]
	b, err := hex.DecodeString(f[1])
	if err != nil || len(b) == 0 || len(b) > MaxX86Len {
		return v, fmt.Errorf("bad instruction bytes %q", f[1])
	}
	v.bytes = b
	seen := map[string]bool{}
	for _, kv := range f[2:] {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			v.words = append(v.words, kv)
			continue
		}
		seen[k] = true
		v.fields = append(v.fields, [2]string{k, val})
	}
	for _, k := range required {
		if !seen[k] {
			return v, fmt.Errorf("missing %s=", k)
		}
	}
	return v, nil
}

// vectorUint parses the number of field k (decimal, or hexadecimal with 0x).
func vectorUint(k, val string) (uint64, error) {
	x, err := strconv.ParseUint(val, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("field %s: %w", k, err)
	}
	return x, nil
}

// setVectorGPR stores the value of a field named after a 64-bit register
// (rax ... r15) in gpr; it fails for any other name.
func setVectorGPR(gpr *[16]uint64, k, val string) error {
	r := x86RegIndex(k)
	if r < 0 {
		return fmt.Errorf("unknown field %q", k)
	}
	x, err := vectorUint(k, val)
	if err != nil {
		return err
	}
	gpr[r] = x
	return nil
}

// writeVectorGPRs appends the fields " rax=V ... r15=V" of gpr to b.
func writeVectorGPRs(b *strings.Builder, gpr *[16]uint64) {
	for r, v := range gpr {
		fmt.Fprintf(b, " %s=%#x", decode.X86RegName(r), v)
	}
}

// x86RegIndex returns the number of a 64-bit register name, or -1.
func x86RegIndex(name string) int {
	for r := 0; r < 16; r++ {
		if decode.X86RegName(r) == name {
			return r
		}
	}
	return -1
}
