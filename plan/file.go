package plan

import (
	"errors"
	"fmt"
	"sync"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
)

// File is the pipeline from an opened ELF file to a decision per site:
// the sweep of each function (cached), the file's branch index (made
// once, built by the first trampoline decision that needs it), and the
// Site of each elfscan.Site with all of them filled in. It is safe for
// concurrent use. A File reads its elfscan.File, whose Close ends it: the
// Sites and Functions it returns are views of the file's contents.
type File struct {
	f      *elfscan.File
	vendor decode.Vendor

	mu    sync.Mutex
	funcs map[uint64]*Function // by function address; nil values too

	branchesOnce sync.Once
	branches     *BranchIndex
}

// FileOptions tune a File; nil means the defaults.
type FileOptions struct {
	// Vendor selects Intel or AMD where x86-64 decoding differs: for the
	// sweeps of the functions, the branch index and the decisions of
	// File.Decide. A live engine sets the vendor of the CPU its process
	// runs on. The zero value is AMD (the decoder's default).
	Vendor decode.Vendor
}

// NewFile returns the planning pipeline of f. Nothing is read yet.
func NewFile(f *elfscan.File, opts *FileOptions) *File {
	pf := &File{f: f, funcs: map[uint64]*Function{}}
	if opts != nil {
		pf.vendor = opts.Vendor
	}
	return pf
}

// ELF returns the file the pipeline reads.
func (pf *File) ELF() *elfscan.File { return pf.f }

// Vendor returns the vendor the File decodes as (FileOptions.Vendor).
func (pf *File) Vendor() decode.Vendor { return pf.vendor }

// Analyze sweeps fn (AnalyzeX86 or AnalyzeARM64, by the file's
// instruction set) without keeping the result: for a caller that visits
// each function once, such as a scan of every function of a large
// library, and passes the sweep to SiteWith. It returns nil when fn's
// bytes lie in no executable segment. The Function's Code is a view of
// the file, not a copy; what the sweep adds is about 1/8 of the
// function's size (its instruction starts) and its branch targets. The
// jump tables of its indirect jumps are read from the file
// (Function.ResolveJumpTables).
func (pf *File) Analyze(fn *elfscan.Func) *Function {
	code, err := pf.f.Code(fn.Addr, fn.End-fn.Addr)
	if err != nil || len(code) == 0 {
		return nil
	}
	in := isaOf(pf.f.Arch)
	if in == nil {
		return nil
	}
	an := in.analyze(fn.Addr, code, pf.vendor)
	if an.IndirectJumps > 0 {
		an.ResolveJumpTables(decode.X86Decoder{Vendor: pf.vendor}, pf.f.Data)
	}
	return an
}

// Function returns the sweep of fn, made on the first call for it and
// kept for the File's life (see Analyze for a sweep that is not kept);
// nil when fn's bytes lie in no executable segment.
func (pf *File) Function(fn *elfscan.Func) *Function {
	pf.mu.Lock()
	an, ok := pf.funcs[fn.Addr]
	pf.mu.Unlock()
	if ok {
		return an
	}
	an = pf.Analyze(fn)
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if prev, ok := pf.funcs[fn.Addr]; ok {
		return prev // swept meanwhile by another goroutine: one Function per function
	}
	pf.funcs[fn.Addr] = an
	return an
}

// Branches returns the index of the direct branch targets and exception
// landing pads of the whole file, made on the first call; it decodes the
// file's executable sections on its first query. A file without section
// headers gets an index that fails to build (which bytes are code, and
// where its landing pads are, is not known), so its sites take no
// trampoline.
func (pf *File) Branches() *BranchIndex {
	pf.branchesOnce.Do(func() {
		load := func() (*BranchCode, error) { return ELFBranchCode(pf.f) }
		in := isaOf(pf.f.Arch)
		if in == nil {
			in = isaX86 // elfscan opens x86-64 and arm64 files only
		}
		pf.branches = in.index(load, pf.vendor)
	})
	return pf.branches
}

// ELFBranchCode returns what a branch index of f reads: its executable
// sections (elfscan.File.ExecSections), its functions, its exception
// tables, the code addresses its data holds (elfscan.File.DataPointers)
// and, for a Go binary, where the Go runtime resumes goroutines.
func ELFBranchCode(f *elfscan.File) (*BranchCode, error) {
	secs, err := f.ExecSections()
	if err != nil {
		return nil, err
	}
	c := &BranchCode{}
	for _, s := range secs {
		c.Regions = append(c.Regions, CodeRegion{Addr: s.Addr, Code: s.Data})
	}
	funcs, err := f.Funcs()
	if err != nil && !errors.Is(err, elfscan.ErrNoFunctions) {
		return nil, err
	}
	c.Funcs = make([]FuncRange, len(funcs))
	for i := range funcs {
		c.Funcs[i] = FuncRange{Name: funcs[i].Name, Addr: funcs[i].Addr, End: funcs[i].End}
	}
	eh, err := f.ExceptionTables()
	if err != nil {
		return nil, fmt.Errorf("exception tables: %w", err)
	}
	c.Exceptions = eh
	if c.GoResume, err = f.GoResumePoints(); err != nil {
		return nil, fmt.Errorf("Go resume points: %w", err)
	}
	if c.DataPointers, err = f.DataPointers(); err != nil {
		return nil, fmt.Errorf("code addresses in data: %w", err)
	}
	return c, nil
}

// Site returns the Site to decide for s: the bytes at its address, the
// sweep of its function (Function, cached), whether it is a USDT site or
// a PLT stub, and the file's branch index. When the bytes at s.Addr cannot
// be read (the address is in no executable segment), the error says why
// and the Site has no Code: a decision on it is a rejection (undecodable).
func (pf *File) Site(s *elfscan.Site) (*Site, error) {
	var fn *Function
	if s.Func != nil {
		fn = pf.Function(s.Func)
	}
	return pf.SiteWith(s, fn)
}

// SiteWith is Site with the sweep of s.Func already made (by Analyze or
// Function); fn is nil when no function holds s or its bytes could not be
// read.
func (pf *File) SiteWith(s *elfscan.Site, fn *Function) (*Site, error) {
	code, err := pf.f.Code(s.Addr, 16)
	return &Site{
		Arch:     pf.f.Arch,
		Addr:     s.Addr,
		Code:     code,
		Func:     fn,
		USDT:     s.Kind == elfscan.SiteUSDT,
		PLT:      s.Func != nil && s.Func.PLT,
		Branches: pf.Branches(),
	}, err
}

// Decide returns the decision of policy p for s (see Site, and the
// package function Decide), with the File's vendor in place of o.Vendor.
// The error is Site's: the decision is then a rejection.
func (pf *File) Decide(p Policy, s *elfscan.Site, o *Options) (Decision, error) {
	site, err := pf.Site(s)
	var opts Options
	if o != nil {
		opts = *o
	}
	opts.Vendor = pf.vendor
	return Decide(p, site, &opts), err
}
