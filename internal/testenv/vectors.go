package testenv

import (
	"io"
	"os"
	"testing"
)

// ReadVectors reads the test-vector file path with read, or fails the
// test; a file without a vector fails it too.
func ReadVectors[T any](t testing.TB, path string, read func(io.Reader) ([]T, error)) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vs, err := read(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(vs) == 0 {
		t.Fatalf("%s: no vectors", path)
	}
	return vs
}
