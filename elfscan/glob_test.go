package elfscan_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
)

// TestGlobSlash: in a symbol glob "/" is an ordinary character, so "*"
// names every function of a Go program, those of packages with a path
// ("internal/bytealg.Count", "unicode/utf8.DecodeRune") too.
func TestGlobSlash(t *testing.T) {
	f := open(t, fixture.GoCommandFor(t, "gort", runtime.GOARCH, false))
	entries, err := f.EntrySites()
	if err != nil {
		t.Fatal(err)
	}
	slashed := 0
	for _, s := range entries {
		if strings.Contains(s.Func.Name, "/") {
			slashed++
		}
	}
	if slashed == 0 {
		t.Fatal("the Go fixture has no function whose name holds a slash")
	}
	count := func(glob string) int {
		t.Helper()
		sp, err := elfscan.ParseSpec(glob)
		if err != nil {
			t.Fatal(err)
		}
		sites, err := f.Resolve(sp)
		if err != nil {
			t.Fatalf("%s: %v", glob, err)
		}
		return len(sites)
	}
	if n := count("*"); n != len(entries) {
		t.Errorf("* names %d sites, the file has %d function entries (%d with a slash)", n, len(entries), slashed)
	}
	internal := 0
	for _, s := range entries {
		if strings.HasPrefix(s.Func.Name, "internal/") {
			internal++
		}
	}
	if n := count("internal/*"); n != internal || n == 0 {
		t.Errorf("internal/* names %d sites, want %d", n, internal)
	}
	if n := count("*/utf8.*"); n == 0 {
		t.Errorf("*/utf8.* names no site")
	}
}
