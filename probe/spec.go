package probe

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/probeopt/probeopt/elfscan"
)

// spec is a parsed probe spec bound to the modules it applies to.
type spec struct {
	text string
	// module is the module pattern: "" for the default (the main
	// executable for functions and addresses, every module for USDT).
	module string
	// exact is set when module is a path from a bpftrace form: it names one
	// file.
	exact bool
	es    elfscan.Spec
	// ret marks a return probe: it fires when the function returns.
	ret bool
}

// parseSpec parses [MODULE:]SPEC (see the package documentation).
func parseSpec(s string) (spec, error) {
	sp := spec{text: s}
	rest := s
	// The bpftrace return forms uretprobe:PATH:SYM and ur:PATH:SYM (a PATH
	// starts with "/" or "."), and perf's SYM%return.
	for _, p := range []string{"uretprobe:", "ur:"} {
		if r, ok := strings.CutPrefix(rest, p); ok && (strings.HasPrefix(r, "/") || strings.HasPrefix(r, ".")) {
			rest, sp.ret = "uprobe:"+r, true
		}
	}
	if r, ok := strings.CutSuffix(rest, "%return"); ok {
		rest, sp.ret = r, true
	}
	if !hasProbePrefix(rest) {
		if i := moduleColon(rest); i >= 0 {
			sp.module, rest = rest[:i], rest[i+1:]
			if sp.module == "" {
				return spec{}, fmt.Errorf("%w %q: empty module before ':'", elfscan.ErrBadSpec, s)
			}
			if _, err := path.Match(sp.module, ""); err != nil {
				return spec{}, fmt.Errorf("%w %q: bad module pattern %q", elfscan.ErrBadSpec, s, sp.module)
			}
		}
	}
	es, err := elfscan.ParseSpec(rest)
	if err != nil {
		return spec{}, err
	}
	es.Text = s
	if es.Path != "" {
		if sp.module != "" {
			return spec{}, fmt.Errorf("%w %q: a module and a path", elfscan.ErrBadSpec, s)
		}
		sp.module, sp.exact = es.Path, true
	}
	sp.es = es
	if sp.ret && (es.Kind != elfscan.SpecFunc || es.Offset != 0) {
		return spec{}, fmt.Errorf("%w %q: a return probe names functions (SYM or a glob), not an offset, an address or a USDT probe", elfscan.ErrBadSpec, s)
	}
	return sp, nil
}

// hasProbePrefix reports whether s starts with one of the probe-type
// prefixes elfscan.ParseSpec knows.
func hasProbePrefix(s string) bool {
	for _, p := range []string{"uprobe:", "u:", "usdt:", "U:"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// moduleColon returns the index of the colon that ends a MODULE prefix: the
// first ':' that is not part of a C++ "::", or -1.
func moduleColon(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		if i+1 < len(s) && s[i+1] == ':' {
			i++ // skip "::"
			continue
		}
		return i
	}
	return -1
}

// matchesModule reports whether the spec applies to a module mapped from
// path (main: the process's executable).
func (sp *spec) matchesModule(p string, main bool) bool {
	switch {
	case sp.exact:
		return elfscan.SamePath(sp.module, p)
	case sp.module == "":
		return main || sp.es.Kind == elfscan.SpecUSDT
	}
	return moduleMatch(sp.module, p)
}

// moduleMatch matches a module pattern against a file path: a pattern with
// a "/" against the path, any other against the base name, also without
// its suffixes ("libc.so" and "libc" match "libc.so.6").
func moduleMatch(pattern, p string) bool {
	if strings.Contains(pattern, "/") {
		ok, _ := path.Match(pattern, p)
		return ok
	}
	base := filepath.Base(p)
	if ok, _ := path.Match(pattern, base); ok {
		return true
	}
	for i := len(base) - 1; i > 0; i-- {
		if base[i] == '.' {
			if ok, _ := path.Match(pattern, base[:i]); ok {
				return true
			}
		}
	}
	return false
}
