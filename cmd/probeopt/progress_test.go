package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
)

// TestIsTerminalNot checks that a buffer, the null device, a pipe and a
// regular file are not terminals.
func TestIsTerminalNot(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w := fixture.Pipe(t)
	defer r.Close()
	defer w.Close()
	reg, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for name, w := range map[string]io.Writer{"buffer": &bytes.Buffer{}, os.DevNull: null, "pipe": w, "regular file": reg} {
		if isTerminal(w) {
			t.Errorf("%s: isTerminal reports a terminal", name)
		}
	}
}
