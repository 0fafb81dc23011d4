package testenv

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TextEqualsFile checks that every executable mapping of the file path in
// process pid holds the file's bytes (no probe left behind), and that
// there is at least one. It reads /proc/PID/maps itself, so that package
// proc's own tests can use it.
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
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return "", err
	}
	file, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return "", err
	}
	defer mem.Close()
	checked := 0
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || f[5] != path || !strings.Contains(f[1], "x") {
			continue
		}
		var start, end, off uint64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &start, &end); err != nil {
			return "", fmt.Errorf("maps line %q: %w", l, err)
		}
		if _, err := fmt.Sscanf(f[2], "%x", &off); err != nil {
			return "", fmt.Errorf("maps line %q: %w", l, err)
		}
		if off > uint64(len(file)) {
			return "", fmt.Errorf("%s mapped at file offset %#x, past its end", path, off)
		}
		n := min(end-start, uint64(len(file))-off)
		got := make([]byte, n)
		if _, err := mem.ReadAt(got, int64(start)); err != nil {
			return "", fmt.Errorf("read the text of %d at %#x: %w", pid, start, err)
		}
		checked++
		if want := file[off : off+n]; !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					return fmt.Sprintf("%s in process %d: text at %#x (file offset %#x) is %#x, the file has %#x", path, pid, start+uint64(i), off+uint64(i), got[i], want[i]), nil
				}
			}
		}
	}
	if checked == 0 {
		return "", fmt.Errorf("process %d maps no text of %s", pid, path)
	}
	return "", nil
}
