package elfscan

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// SpecKind says what a probe spec names.
type SpecKind uint8

const (
	SpecFunc SpecKind = iota + 1 // SYM or SYM+OFF (SYM may be a glob)
	SpecAddr                     // 0xADDR, a virtual address
	SpecUSDT                     // usdt:PROVIDER:NAME (globs allowed)
)

// Spec is a parsed probe spec.
//
// Forms: SYM, SYM+OFF, 0xADDR, usdt:PROVIDER:NAME, usdt:NAME (any
// provider), and the bpftrace forms uprobe:PATH:SYM[+OFF],
// uprobe:PATH:0xADDR, usdt:PATH:PROVIDER:NAME and usdt:PATH:NAME ("u:" and
// "U:" are accepted for "uprobe:" and "usdt:"). SYM, PROVIDER and NAME may
// be globs (*, ?, [...]). OFF is decimal or 0x-prefixed hexadecimal. A PATH
// starts with "/" or ".".
type Spec struct {
	// Text is the spec as written.
	Text string
	// Path is the file named by a bpftrace form, "" otherwise.
	Path string
	Kind SpecKind
	// Symbol is the function name or glob (SpecFunc).
	Symbol string
	// Offset is the byte offset from the function start (SpecFunc).
	Offset uint64
	// Addr is the virtual address (SpecAddr).
	Addr uint64
	// Provider and Name are the USDT provider and probe name or globs
	// (SpecUSDT); Provider is "*" when the spec omits it.
	Provider, Name string
}

// ParseSpec parses a probe spec. Errors wrap ErrBadSpec.
func ParseSpec(s string) (Spec, error) {
	sp := Spec{Text: s}
	bad := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("%w %q: %s", ErrBadSpec, s, fmt.Sprintf(format, args...))
	}
	rest := s
	usdt := false
	switch {
	case strings.HasPrefix(rest, "uprobe:"):
		rest = rest[len("uprobe:"):]
	case strings.HasPrefix(rest, "u:"):
		rest = rest[len("u:"):]
	case strings.HasPrefix(rest, "usdt:"):
		rest, usdt = rest[len("usdt:"):], true
	case strings.HasPrefix(rest, "U:"):
		rest, usdt = rest[len("U:"):], true
	default:
		return parseTarget(sp, rest, bad)
	}
	if strings.HasPrefix(rest, "/") || strings.HasPrefix(rest, ".") {
		p, r, ok := strings.Cut(rest, ":")
		if !ok || r == "" {
			return bad("want PATH:TARGET after the path")
		}
		sp.Path, rest = p, r
	} else if !usdt {
		return bad("uprobe: wants a path starting with / or .")
	}
	if !usdt {
		return parseTarget(sp, rest, bad)
	}
	sp.Kind = SpecUSDT
	parts := strings.Split(rest, ":")
	switch len(parts) {
	case 1:
		sp.Provider, sp.Name = "*", parts[0]
	case 2:
		sp.Provider, sp.Name = parts[0], parts[1]
	default:
		return bad("want usdt:PROVIDER:NAME")
	}
	if sp.Provider == "" || sp.Name == "" {
		return bad("empty provider or name")
	}
	for _, p := range []string{sp.Provider, sp.Name} {
		if _, err := path.Match(p, ""); err != nil {
			return bad("bad glob %q", p)
		}
	}
	return sp, nil
}

// parseTarget parses SYM, SYM+OFF or 0xADDR.
func parseTarget(sp Spec, t string, bad func(string, ...any) (Spec, error)) (Spec, error) {
	if t == "" {
		return bad("empty")
	}
	if strings.HasPrefix(t, "0x") || strings.HasPrefix(t, "0X") {
		a, err := strconv.ParseUint(t[2:], 16, 64)
		if err != nil {
			return bad("bad address %q", t)
		}
		sp.Kind, sp.Addr = SpecAddr, a
		return sp, nil
	}
	sp.Kind, sp.Symbol = SpecFunc, t
	if i := strings.LastIndexByte(t, '+'); i > 0 {
		off, err := strconv.ParseUint(t[i+1:], 0, 64)
		switch {
		case err == nil:
			sp.Symbol, sp.Offset = t[:i], off
		case strings.HasSuffix(t[:i], "operator") || t[i-1] == '+':
			// A C++ operator+ or operator++, not an offset.
		default:
			return bad("want SYM+OFF with OFF a decimal or 0x-prefixed number, not %q", t[i+1:])
		}
	}
	if c := sp.Symbol[0]; c >= '0' && c <= '9' {
		return bad("a symbol cannot start with a digit (write addresses as 0xADDR)")
	}
	if _, err := path.Match(sp.Symbol, ""); err != nil {
		return bad("bad glob %q", sp.Symbol)
	}
	return sp, nil
}

// isGlob reports whether a pattern has glob characters.
func isGlob(p string) bool { return strings.ContainsAny(p, "*?[") }

// match reports whether name matches the (already validated) pattern.
func match(pattern, name string) bool {
	if !isGlob(pattern) {
		return pattern == name
	}
	return globMatch(pattern, name)
}

// globMatch matches a symbol or probe name against a glob as path.Match
// does, except that "/" is an ordinary character: "*" matches Go's
// "crypto/sha256.block" and "internal/bytealg.Count" too. The slashes of
// both become NUL bytes, which no ELF name holds (a NUL ends it).
func globMatch(pattern, name string) bool {
	ok, _ := path.Match(strings.ReplaceAll(pattern, "/", "\x00"), strings.ReplaceAll(name, "/", "\x00"))
	return ok
}

// SiteKind says how a probe site was chosen.
type SiteKind string

const (
	SiteEntry SiteKind = "entry" // the first instruction of a function
	SiteUSDT  SiteKind = "usdt"  // a USDT probe
	SiteInst  SiteKind = "inst"  // another instruction (SYM+OFF, 0xADDR, every instruction)
)

// Site is a place to probe.
type Site struct {
	Kind SiteKind
	// Addr is the virtual address; Offset its file offset through the
	// executable segment, with OffsetErr set when there is none.
	Addr      uint64
	Offset    uint64
	OffsetErr error
	// Func is the function that holds Addr, nil if none does.
	Func *Func
	// USDT is the probe of a SiteUSDT site.
	USDT *USDTProbe
}

// newSite builds a site at vaddr.
func (f *File) newSite(kind SiteKind, vaddr uint64) Site {
	s := Site{Kind: kind, Addr: vaddr, Func: f.FuncAt(vaddr)}
	s.Offset, s.OffsetErr = f.TextOffset(vaddr)
	return s
}

// EntrySites returns a site at the start of every function that lies in an
// executable segment, PLT stubs excepted, in address order.
func (f *File) EntrySites() ([]Site, error) {
	funcs, err := f.Funcs()
	if err != nil {
		return nil, err
	}
	sites := make([]Site, 0, len(funcs))
	for i := range funcs {
		fn := &funcs[i]
		if fn.PLT {
			continue
		}
		off, err := f.TextOffset(fn.Addr)
		if err != nil {
			continue
		}
		sites = append(sites, Site{Kind: SiteEntry, Addr: fn.Addr, Offset: off, Func: fn})
	}
	return sites, nil
}

// USDTSites returns a site for every USDT probe, in note order.
func (f *File) USDTSites() ([]Site, error) {
	probes, err := f.USDT()
	if err != nil {
		return nil, err
	}
	sites := make([]Site, 0, len(probes))
	for i := range probes {
		p := &probes[i]
		sites = append(sites, Site{Kind: SiteUSDT, Addr: p.Addr, Offset: p.Offset, OffsetErr: p.OffsetErr, Func: f.FuncAt(p.Addr), USDT: p})
	}
	return sites, nil
}

// Resolve returns the sites a spec names in this file (its Path is not
// checked). A spec that matches nothing gives a *NoSymbolError (it matches
// ErrNoSymbol and suggests close names); SYM+OFF past the end of the
// function, an error wrapping ErrBadSpec.
func (f *File) Resolve(sp Spec) ([]Site, error) {
	var sites []Site
	switch sp.Kind {
	case SpecAddr:
		return []Site{f.addrSite(sp.Addr)}, nil
	case SpecUSDT:
		probes, err := f.USDT()
		if err != nil {
			return nil, err
		}
		for i := range probes {
			p := &probes[i]
			if match(sp.Provider, p.Provider) && match(sp.Name, p.Name) {
				sites = append(sites, Site{Kind: SiteUSDT, Addr: p.Addr, Offset: p.Offset, OffsetErr: p.OffsetErr, Func: f.FuncAt(p.Addr), USDT: p})
			}
		}
	case SpecFunc:
		funcs, err := f.Funcs()
		if err != nil {
			return nil, err
		}
		for i := range funcs {
			fn := &funcs[i]
			if !funcMatches(fn, sp.Symbol) {
				continue
			}
			if sp.Offset > 0 && sp.Offset >= fn.End-fn.Addr {
				if !isGlob(sp.Symbol) {
					return nil, fmt.Errorf("%w %q: offset %#x is past the end of %s (%d bytes)", ErrBadSpec, sp.Text, sp.Offset, fn.Name, fn.End-fn.Addr)
				}
				continue
			}
			kind := SiteEntry
			if sp.Offset > 0 {
				kind = SiteInst
			}
			s := f.newSite(kind, fn.Addr+sp.Offset)
			s.Func = fn
			sites = append(sites, s)
		}
	default:
		return nil, fmt.Errorf("%w %q", ErrBadSpec, sp.Text)
	}
	if len(sites) == 0 {
		return nil, f.noSymbol(sp)
	}
	return sites, nil
}

// addrSite builds the site of a virtual address.
func (f *File) addrSite(vaddr uint64) Site {
	kind := SiteInst
	s := f.newSite(kind, vaddr)
	if s.Func != nil && s.Func.Addr == vaddr {
		s.Kind = SiteEntry
	}
	return s
}

// funcMatches reports whether a function's raw names or demangled name
// match the pattern. A demangled C++ name also matches without its
// parameter list and without a leading return type: "int demo::add<int>(int,
// int)" matches "demo::add<int>(int, int)", "demo::add<int>" and
// "int demo::add<int>". PLT stubs match only patterns that end in "@plt".
func funcMatches(fn *Func, pattern string) bool {
	if fn.PLT && !strings.HasSuffix(pattern, "@plt") {
		return false
	}
	for _, n := range fn.Names() {
		if match(pattern, n) {
			return true
		}
	}
	d := fn.Demangled()
	if d == "" {
		return false
	}
	for _, c := range demangledForms(d) {
		if match(pattern, c) {
			return true
		}
	}
	return false
}

// demangledForms returns a demangled name, without its parameters, and
// both again without a leading return type.
func demangledForms(d string) []string {
	forms := []string{d}
	depth, paren := 0, -1
	for i := 0; i < len(d) && paren < 0; i++ {
		switch d[i] {
		case '<':
			depth++
		case '>':
			depth--
		case '(':
			if depth == 0 && i > 0 {
				paren = i
			}
		}
	}
	if paren < 0 {
		return forms
	}
	head, tail := d[:paren], d[paren:]
	forms = append(forms, head)
	depth = 0
	for i := len(head) - 1; i >= 0; i-- {
		switch head[i] {
		case '>':
			depth++
		case '<':
			depth--
		case ' ':
			if depth == 0 {
				base := head[i+1:]
				return append(forms, base, base+tail)
			}
		}
	}
	return forms
}
