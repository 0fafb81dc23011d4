package plan

import (
	"debug/elf"
	"errors"
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
)

// IndexELFBranches returns the branch index of an ELF file, not yet built:
// ELFBranchCode read from f when the first decision asks for it. A file
// without section headers gets an index that fails to build, so its sites
// take no trampoline (their landing pads cannot be known).
func IndexELFBranches(f *elfscan.File, vendor decode.Vendor) *BranchIndex {
	load := func() (*BranchCode, error) { return ELFBranchCode(f) }
	if f.Arch == decode.ARM64 {
		return IndexARM64Branches(load)
	}
	return IndexX86Branches(load, decode.X86Decoder{Vendor: vendor})
}

// ELFBranchCode returns what a branch index of f reads: its executable
// sections, .eh_frame and .gcc_except_table, and its functions.
func ELFBranchCode(f *elfscan.File) (*BranchCode, error) {
	secs, err := f.Sections()
	if err != nil {
		return nil, err
	}
	if len(secs) == 0 {
		return nil, fmt.Errorf("%s: no section headers", f.Path)
	}
	c := &BranchCode{}
	for _, s := range secs {
		switch {
		case s.Flags&elf.SHF_EXECINSTR != 0:
			c.Regions = append(c.Regions, CodeRegion{Addr: s.Addr, Code: s.Data})
		case s.Name == ".eh_frame":
			c.EHFrame = EHSection{Name: s.Name, Addr: s.Addr, Data: s.Data}
		case s.Name == ".gcc_except_table":
			c.EHData = append(c.EHData, EHSection{Name: s.Name, Addr: s.Addr, Data: s.Data})
		}
	}
	funcs, err := f.Funcs()
	if err != nil && !errors.Is(err, elfscan.ErrNoFunctions) {
		return nil, err
	}
	c.Funcs = make([]FuncRange, len(funcs))
	for i := range funcs {
		c.Funcs[i] = FuncRange{Name: funcs[i].Name, Addr: funcs[i].Addr, End: funcs[i].End}
	}
	return c, nil
}
