// Command x86gen generates decode/x86tables.go from decode/x86map.txt.
//
// Run it with `go generate ./decode` (see the go:generate line in
// decode/x86.go).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/probeopt/probeopt/decode/internal/x86map"
)

func main() {
	in := flag.String("in", "x86map.txt", "opcode description to read")
	out := flag.String("out", "x86tables.go", "Go file to write")
	flag.Parse()
	src, err := os.ReadFile(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "x86gen:", err)
		os.Exit(1)
	}
	code, err := x86map.Generate(src)
	if err != nil {
		fmt.Fprintf(os.Stderr, "x86gen: %s: %v\n", *in, err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, code, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "x86gen:", err)
		os.Exit(1)
	}
}
