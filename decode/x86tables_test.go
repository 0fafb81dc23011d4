package decode

import (
	"bytes"
	"os"
	"testing"

	"github.com/probeopt/probeopt/decode/internal/x86map"
)

// TestX86TablesUpToDate fails when x86tables.go is not what `go generate`
// makes from x86map.txt.
func TestX86TablesUpToDate(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("x86map.txt")
	if err != nil {
		t.Fatal(err)
	}
	want, err := x86map.Generate(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("x86tables.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("x86tables.go is stale: run go generate ./decode")
	}
}
