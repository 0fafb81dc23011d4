package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

const docsPath = "../../docs/CLI.md"

// TestDocsUpToDate fails when docs/CLI.md differs from what the command
// definitions generate.
func TestDocsUpToDate(t *testing.T) {
	want, err := genDocs(newRootCmd())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatalf("read docs: %v (run: go generate ./cmd/probeopt)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/CLI.md is stale: run go generate ./cmd/probeopt")
	}
}

// TestGendocsCommand runs the hidden command and checks it writes the same
// text as the generator, and that hidden commands stay out of it.
func TestGendocsCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "CLI.md")
	if _, stderr, code := runCLI(t, "gendocs", out); code != exitOK {
		t.Fatalf("gendocs: exit status %d: %s", code, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := genDocs(newRootCmd())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("gendocs wrote different text than genDocs")
	}
	for _, s := range []string{"## probeopt decode", "## probeopt scan", "## probeopt version", "--json"} {
		if !bytes.Contains(got, []byte(s)) {
			t.Errorf("docs lack %q", s)
		}
	}
	if bytes.Contains(got, []byte("## probeopt gendocs")) {
		t.Errorf("docs describe the hidden gendocs command")
	}
}
