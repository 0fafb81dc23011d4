// Package textfile compares the text a process maps from its files with
// the files: what is left of a tracer's probes once it has gone. It reads
// /proc/PID/maps and /proc/PID/mem itself (no ptrace stop, no dependency
// on package proc), so that proc's own tests can use it too.
package textfile

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Diff is a run of a process's text that differs from the file it is
// mapped from: the bytes from Addr (file offset Off) to Addr+Len, of
// which the first differs and so does the last. Differing bytes fewer
// than mergeGap apart are one run (a jump whose displacement shares a
// byte with the instruction it replaced is one Diff).
type Diff struct {
	Path string
	Addr uint64
	Off  uint64
	Len  int
	// Got and Want are the process's bytes and the file's, the first
	// maxShown of the run.
	Got, Want []byte
}

func (d Diff) String() string {
	return fmt.Sprintf("%s: %d bytes at %#x (file offset %#x) are % x, the file has % x", d.Path, d.Len, d.Addr, d.Off, d.Got, d.Want)
}

// mergeGap is how many equal bytes at most two differing ones of one run
// may have between them.
const mergeGap = 8

// maxShown is how many bytes of a run a Diff holds.
const maxShown = 16

// Mapping is an executable mapping of a file.
type Mapping struct {
	Start, End, Off uint64
	Path            string
}

// Executable returns the executable mappings of files (their paths
// absolute, the file not deleted) of process pid, in address order.
func Executable(pid int) ([]Mapping, error) {
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return nil, err
	}
	var out []Mapping
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) != 6 || !strings.HasPrefix(f[5], "/") || !strings.Contains(f[1], "x") {
			continue
		}
		start, end, ok := strings.Cut(f[0], "-")
		m := Mapping{Path: f[5]}
		var e1, e2, e3 error
		m.Start, e1 = strconv.ParseUint(start, 16, 64)
		m.End, e2 = strconv.ParseUint(end, 16, 64)
		m.Off, e3 = strconv.ParseUint(f[2], 16, 64)
		if !ok || e1 != nil || e2 != nil || e3 != nil || m.End <= m.Start {
			return nil, fmt.Errorf("process %d: maps line %q", pid, l)
		}
		out = append(out, m)
	}
	return out, nil
}

// Compare compares every executable mapping of the file path in process
// pid with the file and returns how many it compared and the runs that
// differ, at most limit of them (0: all), in address order. The process
// runs on meanwhile: a run it rewrites as it is read may be seen either
// way.
func Compare(pid int, path string, limit int) (mappings int, diffs []Diff, err error) {
	all, err := Executable(pid)
	if err != nil {
		return 0, nil, err
	}
	var ms []Mapping
	for _, m := range all {
		if m.Path == path {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return 0, nil, nil
	}
	file, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, err
	}
	mem, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		return 0, nil, err
	}
	defer mem.Close()
	for _, m := range ms {
		if m.Off > uint64(len(file)) {
			return mappings, diffs, fmt.Errorf("%s mapped at file offset %#x, past its end", path, m.Off)
		}
		n := min(m.End-m.Start, uint64(len(file))-m.Off)
		got := make([]byte, n)
		if _, err := mem.ReadAt(got, int64(m.Start)); err != nil {
			return mappings, diffs, fmt.Errorf("read the text of %d at %#x: %w", pid, m.Start, err)
		}
		mappings++
		want := file[m.Off : m.Off+n]
		for _, r := range runs(got, want) {
			if limit > 0 && len(diffs) == limit {
				return mappings, diffs, nil
			}
			shown := min(r[1]-r[0], maxShown)
			diffs = append(diffs, Diff{Path: path, Addr: m.Start + uint64(r[0]), Off: m.Off + uint64(r[0]), Len: r[1] - r[0],
				Got: bytes.Clone(got[r[0] : r[0]+shown]), Want: bytes.Clone(want[r[0] : r[0]+shown])})
		}
	}
	return mappings, diffs, nil
}

// runs returns the [start, end) runs in which a and b (of one length)
// differ, bytes fewer than mergeGap apart in one run.
func runs(a, b []byte) [][2]int {
	var out [][2]int
	for i := 0; i < len(a); {
		// Skip the equal part fast.
		j := i + commonPrefix(a[i:], b[i:])
		if j == len(a) {
			break
		}
		end := j + 1
		for k := end; k < len(a) && k < end+mergeGap; k++ {
			if a[k] != b[k] {
				end = k + 1
			}
		}
		out = append(out, [2]int{j, end})
		i = end
	}
	return out
}

// commonPrefix returns the length of the longest common prefix of a and b,
// comparing a page at a time.
func commonPrefix(a, b []byte) int {
	n := 0
	for len(a) >= 4096 && bytes.Equal(a[:4096], b[:4096]) {
		a, b, n = a[4096:], b[4096:], n+4096
	}
	for i := range a {
		if a[i] != b[i] {
			return n + i
		}
	}
	return n + len(a)
}
