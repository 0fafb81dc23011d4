package elfscan

import (
	"cmp"
	"debug/elf"
	"errors"
	"slices"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Source says where a function's names came from; a function found in
// several places has several bits set.
type Source uint8

const (
	FromSymtab  Source = 1 << iota // .symtab
	FromDynsym                     // .dynsym
	FromPclntab                    // the Go function table, .gopclntab
	FromPLT                        // a PLT stub, named after its relocation
)

// String lists the sources: ".symtab+.dynsym".
func (s Source) String() string {
	var parts []string
	for _, x := range []struct {
		bit  Source
		name string
	}{{FromSymtab, ".symtab"}, {FromDynsym, ".dynsym"}, {FromPclntab, ".gopclntab"}, {FromPLT, "plt"}} {
		if s&x.bit != 0 {
			parts = append(parts, x.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// Func is one function: every symbol that starts at one address.
type Func struct {
	// Name is the preferred raw (mangled) name: a global symbol before a
	// weak one before a local one, then the shortest, then the first in
	// byte order. Demangled returns its demangled form.
	Name string
	// Aliases are the other raw names at the same address, sorted.
	Aliases []string
	// Addr is the virtual address of the first byte.
	Addr uint64
	// Size is the largest st_size among the symbols (for the Go function
	// table, end minus entry); 0 when no symbol gives one.
	Size uint64
	// End is the address just past the function: Addr+Size, or for a
	// function without a size, the start of the next function or the end
	// of its section, whichever comes first.
	End uint64
	// Bind is the strongest binding among the symbols (global > weak >
	// local).
	Bind elf.SymBind
	// Type is STT_FUNC or STT_GNU_IFUNC (an ifunc resolver).
	Type elf.SymType
	// Sources says where the names came from.
	Sources Source
	// PLT is set for a procedure linkage table stub, named NAME@plt after
	// the function it jumps to (as objdump names them).
	PLT bool
	// Section is the name of the section holding Addr, "" if none.
	Section string
}

// Names returns Name followed by the aliases.
func (fn *Func) Names() []string {
	return append([]string{fn.Name}, fn.Aliases...)
}

// Demangled returns Name demangled (C++, Rust), or "" when Name is not a
// mangled name. It demangles on each call (a few microseconds): keep the
// result when it is needed more than once.
func (fn *Func) Demangled() string { return Demangle(fn.Name) }

// Funcs returns the functions of the file, sorted by address: the STT_FUNC
// and STT_GNU_IFUNC symbols of .symtab and .dynsym, the Go function table
// of a Go binary (stripped or not), and the PLT stubs. Symbols at one
// address are merged into one Func. The slice is shared: do not modify it.
//
// A file with none of these gives ErrNoFunctions; a damaged symbol table
// or Go function table gives a *FormatError.
func (f *File) Funcs() ([]Func, error) {
	f.funcsOnce.Do(func() {
		f.funcs, f.funcsErr = f.loadFuncs()
	})
	return f.funcs, f.funcsErr
}

// FuncSource says where the functions came from, for reports:
// ".symtab+.dynsym", ".dynsym", ".gopclntab"...
func (f *File) FuncSource() string {
	f.Funcs()
	return f.funcSource
}

// FuncAt returns the function whose range [Addr, End) holds vaddr; of
// nested ones, the innermost (the one that starts last). It returns nil when
// no function holds vaddr.
func (f *File) FuncAt(vaddr uint64) *Func {
	funcs, _ := f.Funcs()
	i := sort.Search(len(funcs), func(i int) bool { return funcs[i].Addr > vaddr })
	for j := i - 1; j >= 0 && j >= i-64; j-- {
		if vaddr < funcs[j].End {
			return &funcs[j]
		}
	}
	return nil
}

// rawSym is one function symbol before merging.
type rawSym struct {
	name    string
	addr    uint64
	size    uint64
	bind    elf.SymBind
	typ     elf.SymType
	src     Source
	section int // section index, or -1
	plt     bool
}

// ObjectAddr returns the address of the data object name, a symbol of
// type STT_OBJECT in .symtab or .dynsym, and whether the file has one.
func (f *File) ObjectAddr(name string) (uint64, bool) {
	for _, dynamic := range []bool{false, true} {
		syms, err := f.readSymbols(dynamic)
		if err != nil {
			continue
		}
		for _, s := range syms {
			if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_OBJECT && s.Section != elf.SHN_UNDEF {
				return s.Value, true
			}
		}
	}
	return 0, false
}

// readSymbols reads a symbol table, turning a parser panic into an error.
func (f *File) readSymbols(dynamic bool) (syms []elf.Symbol, err error) {
	defer func() {
		if p := recover(); p != nil {
			syms, err = nil, formatErr(".symtab", -1, "%v", p)
		}
	}()
	if dynamic {
		return f.ef.DynamicSymbols()
	}
	return f.ef.Symbols()
}

func (f *File) loadFuncs() ([]Func, error) {
	var raw []rawSym
	var sources Source
	for _, t := range []struct {
		dynamic bool
		src     Source
		name    string
	}{{false, FromSymtab, ".symtab"}, {true, FromDynsym, ".dynsym"}} {
		syms, err := f.readSymbols(t.dynamic)
		if errors.Is(err, elf.ErrNoSymbols) {
			continue
		}
		if err != nil {
			return nil, symtabError(t.name, err)
		}
		n := len(raw)
		for _, s := range syms {
			typ := elf.ST_TYPE(s.Info)
			if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC || s.Section == elf.SHN_UNDEF {
				continue
			}
			sec := -1
			if s.Section < elf.SHN_LORESERVE && int(s.Section) < len(f.ef.Sections) {
				sec = int(s.Section)
			}
			raw = append(raw, rawSym{name: s.Name, addr: s.Value, size: s.Size, bind: elf.ST_BIND(s.Info), typ: typ, src: t.src, section: sec})
		}
		if len(raw) > n {
			sources |= t.src
		}
	}
	if f.IsGo() {
		gofuncs, err := f.goFuncs()
		if err != nil {
			return nil, err
		}
		if len(gofuncs) > 0 {
			sources |= FromPclntab
		}
		raw = append(raw, gofuncs...)
	}
	raw = append(raw, f.pltStubs()...)
	if len(raw) == 0 {
		return nil, ErrNoFunctions
	}
	f.funcSource = (sources &^ FromPLT).String()
	return f.merge(raw), nil
}

// symtabError classifies a failure to read a symbol table.
func symtabError(name string, err error) error {
	var fe *FormatError
	if errors.As(err, &fe) {
		return err
	}
	return &FormatError{Where: name, Off: -1, Err: err}
}

// bindRank orders bindings by preference for the primary name.
func bindRank(b elf.SymBind) int {
	switch b {
	case elf.STB_GLOBAL:
		return 0
	case elf.STB_WEAK:
		return 1
	case elf.STB_LOCAL:
		return 3
	}
	return 2
}

// merge groups the symbols by address into functions.
func (f *File) merge(raw []rawSym) []Func {
	slices.SortStableFunc(raw, func(a, b rawSym) int { return cmp.Compare(a.addr, b.addr) })
	var funcs []Func
	for i := 0; i < len(raw); {
		j := i
		for j < len(raw) && raw[j].addr == raw[i].addr {
			j++
		}
		funcs = append(funcs, f.mergeOne(raw[i:j]))
		i = j
	}
	// Ends of functions without a size: the next function or the end of
	// the section.
	for i := range funcs {
		fn := &funcs[i]
		if fn.Size > 0 {
			fn.End = fn.Addr + fn.Size
			if fn.End < fn.Addr {
				fn.End = ^uint64(0)
			}
			continue
		}
		fn.End = fn.Addr
		if s := f.sectionAt(fn.Addr); s != nil {
			fn.End = s.Addr + s.Size
		}
		if i+1 < len(funcs) && funcs[i+1].Addr < fn.End {
			fn.End = funcs[i+1].Addr
		}
	}
	return funcs
}

// mergeOne merges the symbols of one address.
func (f *File) mergeOne(group []rawSym) Func {
	best := 0
	for k := 1; k < len(group); k++ {
		a, b := group[k], group[best]
		ra, rb := bindRank(a.bind), bindRank(b.bind)
		if ra < rb || ra == rb && (len(a.name) < len(b.name) || len(a.name) == len(b.name) && a.name < b.name) {
			best = k
		}
	}
	fn := Func{Name: group[best].name, Addr: group[best].addr, Bind: group[best].bind, Type: elf.STT_FUNC}
	for _, s := range group {
		fn.Sources |= s.src
		if s.size > fn.Size {
			fn.Size = s.size
		}
		if bindRank(s.bind) < bindRank(fn.Bind) {
			fn.Bind = s.bind
		}
		if s.typ == elf.STT_GNU_IFUNC {
			fn.Type = elf.STT_GNU_IFUNC
		}
		if s.plt {
			fn.PLT = true
		}
		if s.name != fn.Name && !slices.Contains(fn.Aliases, s.name) {
			fn.Aliases = append(fn.Aliases, s.name)
		}
		if fn.Section == "" && s.section >= 0 {
			fn.Section = f.ef.Sections[s.section].Name
		}
	}
	sort.Strings(fn.Aliases)
	if fn.Section == "" {
		if s := f.sectionAt(fn.Addr); s != nil {
			fn.Section = s.Name
		}
	}
	return fn
}

// sectionAt returns the allocated section holding vaddr, or nil.
func (f *File) sectionAt(vaddr uint64) *elf.Section {
	for _, s := range f.ef.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Size > 0 && vaddr >= s.Addr && vaddr-s.Addr < s.Size {
			return s
		}
	}
	return nil
}

// Demangle returns the demangled form of a C++ (Itanium) or Rust symbol
// name, keeping a "@plt" or "@VERSION" suffix, or "" when name is not a
// mangled name. The output is bounded in length, so a hostile name cannot
// make it grow without limit.
func Demangle(name string) string {
	base, suffix := name, ""
	if i := strings.IndexByte(name, '@'); i > 0 {
		base, suffix = name[:i], name[i:]
	}
	if !strings.HasPrefix(base, "_Z") && !strings.HasPrefix(base, "_R") {
		return ""
	}
	s, err := demangle.ToString(base, demangle.MaxLength(16))
	if err != nil || s == base {
		return ""
	}
	return s + suffix
}
