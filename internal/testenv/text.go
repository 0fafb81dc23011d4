package testenv

import (
	"fmt"
	"testing"

	"github.com/probeopt/probeopt/internal/textfile"
)

// TextEqualsFile checks that every executable mapping of the file path in
// process pid holds the file's bytes (no probe left behind), and that
// there is at least one (package textfile: proc's own tests can use it).
func TextEqualsFile(t testing.TB, pid int, path string) {
	t.Helper()
	diff, err := TextDiff(pid, path)
	if err != nil {
		t.Fatal(err)
	}
	if diff != "" {
		t.Error(diff)
	}
}

// TextDiff is TextEqualsFile's check without a test: it returns "" when
// every executable mapping of path in process pid holds the file's bytes,
// else the first difference; an error when the file, the process or a
// mapping of path cannot be read.
func TextDiff(pid int, path string) (string, error) {
	n, diffs, err := textfile.Compare(pid, path, 1)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", fmt.Errorf("process %d maps no text of %s", pid, path)
	}
	if len(diffs) > 0 {
		return fmt.Sprintf("process %d: %v", pid, diffs[0]), nil
	}
	return "", nil
}
