package testenv

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// cc1Dirs are where GCC installs cc1 for x86-64, by distribution.
var cc1Dirs = []string{"/usr/lib/gcc/x86_64-linux-gnu", "/usr/libexec/gcc/x86_64-linux-gnu", "/usr/lib/gcc/x86_64-pc-linux-gnu"}

// CC1Path returns GCC's cc1 for x86-64, the large real x86-64 text that
// tests and benchmarks sweep: version 12 (the one continuous integration
// installs) when it is there, else the highest version found; "" when
// there is none.
func CC1Path() string {
	for _, d := range cc1Dirs {
		p := filepath.Join(d, "12", "cc1")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
		ms, _ := filepath.Glob(filepath.Join(d, "*", "cc1"))
		if len(ms) > 0 {
			sort.Strings(ms)
			return ms[len(ms)-1]
		}
	}
	return ""
}

// MustHaveCC1 returns CC1Path, or skips (fails under CI) when there is no
// cc1.
func MustHaveCC1(t testing.TB) string {
	t.Helper()
	p := CC1Path()
	if p == "" {
		Unavailable(t, "GCC's cc1 for x86-64 not found in %v", cc1Dirs)
	}
	return p
}
