package guest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
)

// TestCPIO writes an archive and lets GNU cpio, an independent reader of
// the newc format, list and extract it.
func TestCPIO(t *testing.T) {
	tool := testenv.MustHaveTool(t, "cpio")
	dir := t.TempDir()
	exe := filepath.Join(dir, "prog")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho hi\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c := newCPIO(&buf)
	c.charDev("/dev/console", 0o600, 5, 1)
	c.bytes("/a/b/c.txt", 0o644, []byte("abc")) // 3 bytes: the data needs padding
	c.file("/root/prog", exe)
	c.symlink("/lib", "usr/lib")
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive of %d bytes, not a multiple of 4", buf.Len())
	}
	list := exec.Command(tool, "-t", "-v", "--quiet")
	list.Stdin = bytes.NewReader(buf.Bytes())
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v\n%s", err, out)
	}
	for _, want := range []string{"crw-------", "dev/console", "drwxr-xr-x", "a/b/c.txt", "-rwxr-x---", "root/prog", "lib -> usr/lib"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("cpio -t lacks %q:\n%s", want, out)
		}
	}
	x := t.TempDir()
	ext := exec.Command(tool, "-i", "-d", "--quiet", "--no-absolute-filenames", "a/b/c.txt", "root/prog")
	ext.Dir = x
	ext.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := ext.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(x, "a/b/c.txt")); err != nil || string(b) != "abc" {
		t.Errorf("a/b/c.txt = %q, %v", b, err)
	}
	st, err := os.Stat(filepath.Join(x, "root/prog"))
	if err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("root/prog: %v, %v; want mode 0750", st, err)
	}
}
