package bpf

import (
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
)

// bpfObject builds testdata/bpf/NAME.bpf.c with clang as its Makefile does
// and returns the object's path (cached per sources and flags).
func bpfObject(t testing.TB, name string) string {
	t.Helper()
	return fixture.Build(t, fixture.BPFObject("bpf", name))
}
