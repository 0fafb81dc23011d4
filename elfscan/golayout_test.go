package elfscan_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
)

// TestGoLayout reads the offsets of runtime.g and runtime.m from the DWARF
// of a Go build by the go command in use, and from the same program
// stripped (-ldflags=-s: no DWARF), which takes the known layout of its
// release: the two must agree. (The offsets themselves are checked against
// the running program's own thread and goroutine ids by package probe's
// TestGoEventThreads.) A file that is not Go has none.
func TestGoLayout(t *testing.T) {
	full := openGo(t, fixture.GoCommandFor(t, "gothreads", runtime.GOARCH, false))
	l, err := full.GoLayout()
	if err != nil {
		t.Fatal(err)
	}
	if l.Source != "dwarf" || !strings.HasPrefix(l.Version, "go1.") || l.GM <= 0 || l.GGoid <= l.GM || l.MProcid <= 0 {
		t.Fatalf("layout from DWARF: %+v", l)
	}
	stripped := openGo(t, fixture.GoCommandFor(t, "gothreads", runtime.GOARCH, true))
	k, err := stripped.GoLayout()
	if err != nil {
		t.Fatalf("%s has no known layout (%v); DWARF gives %+v: add it to goKnownLayouts", l.Version, err, l)
	}
	if k.Source == "dwarf" || k.GM != l.GM || k.GGoid != l.GGoid || k.MProcid != l.MProcid || k.Version != l.Version {
		t.Errorf("known layout %+v, DWARF %+v", k, l)
	}
	asm, err := full.GoAsmFuncs()
	if err != nil || len(asm) == 0 {
		t.Fatalf("assembly functions: %d, %v", len(asm), err)
	}
	// Every function named NAME.abi0 whose body is assembly is marked,
	// and compiled Go (main.work) is not.
	funcs, err := full.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range funcs {
		switch {
		case fn.Name == "main.work" && asm[fn.Addr]:
			t.Errorf("main.work marked as assembly")
		case fn.Name == "runtime.gogo.abi0" && !asm[fn.Addr]:
			t.Errorf("runtime.gogo.abi0 not marked as assembly")
		}
	}
	c, err := elfscan.Open(fixture.Path(t, "x86_64", "funcs-nopie"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.GoLayout(); !errors.Is(err, elfscan.ErrNoGoLayout) {
		t.Errorf("a C program's layout: %v, want ErrNoGoLayout", err)
	}
}

func openGo(t *testing.T, path string) *elfscan.File {
	t.Helper()
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
