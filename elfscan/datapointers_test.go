package elfscan_test

import (
	"cmp"
	"debug/elf"
	"runtime"
	"slices"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
)

// TestDataPointers reads the code addresses of the jump table fixture's
// data: hook holds h5 (its initializer) and computed's labels array its
// three labels, in the file's words (not PIE) or through RELATIVE
// relocations (PIE), as the C source says.
func TestDataPointers(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the fixture is built for the host, x86-64 here only; this is %s", runtime.GOARCH)
	}
	for _, pic := range [][]string{{"-fPIE", "-pie"}, {"-fno-pie", "-no-pie"}} {
		p := fixture.Program{Compiler: "gcc", Flags: append([]string{"-O2", "-Wall"}, pic...), Dir: "jumptab", Files: []string{"switches.c"}, Name: "switches-gcc-O2" + pic[0]}
		path := fixture.Build(t, p)
		_, syms := fixture.OpenELF(t, path)
		sym := map[string]elf.Symbol{}
		for _, s := range syms {
			sym[s.Name] = s
		}
		f := open(t, path)
		ptrs, err := f.DataPointers()
		if err != nil {
			t.Fatal(err)
		}
		has := func(at, to uint64) bool { return slices.Contains(ptrs, elfscan.DataPointer{At: at, To: to}) }
		if !has(sym["hook"].Value, sym["h5"].Value) {
			t.Errorf("%s: no pointer to h5 (%#x) at hook (%#x)", pic[0], sym["h5"].Value, sym["hook"].Value)
		}
		comp := sym["computed"]
		inside := 0
		for _, d := range ptrs {
			if d.To > comp.Value && d.To < comp.Value+comp.Size {
				inside++
			}
		}
		if inside != 3 {
			t.Errorf("%s: %d pointers inside computed, want its 3 labels", pic[0], inside)
		}
		if !slices.IsSortedFunc(ptrs, func(a, b elfscan.DataPointer) int { return cmp.Compare(a.To, b.To) }) {
			t.Errorf("%s: not sorted by To", pic[0])
		}
	}
}
