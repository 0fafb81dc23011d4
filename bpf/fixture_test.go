package bpf

import (
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
)

// bpfObject builds testdata/bpf/NAME.bpf.c with clang as its Makefile does
// and returns the object's path (cached per sources and flags).
func bpfObject(t testing.TB, name string) string {
	t.Helper()
	return fixture.Build(t, fixture.Program{
		Compiler: "clang",
		Flags:    []string{"-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86", "-I/usr/include/x86_64-linux-gnu", "-Wall", "-c"},
		Dir:      "bpf",
		Files:    []string{name + ".bpf.c"},
		Name:     name + ".bpf.o",
	})
}
