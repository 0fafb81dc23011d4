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
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
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
			t.Fatalf("maps line %q: %v", l, err)
		}
		if _, err := fmt.Sscanf(f[2], "%x", &off); err != nil {
			t.Fatalf("maps line %q: %v", l, err)
		}
		if off > uint64(len(file)) {
			t.Fatalf("%s mapped at file offset %#x, past its end", path, off)
		}
		n := min(end-start, uint64(len(file))-off)
		got := make([]byte, n)
		if _, err := mem.ReadAt(got, int64(start)); err != nil {
			t.Fatalf("read the text of %d at %#x: %v", pid, start, err)
		}
		if want := file[off : off+n]; !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("%s in process %d: text at %#x (file offset %#x) is %#x, the file has %#x", path, pid, start+uint64(i), off+uint64(i), got[i], want[i])
					break
				}
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("process %d maps no text of %s", pid, path)
	}
}
