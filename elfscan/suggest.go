package elfscan

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// MaxSuggestions is the largest number of names a *NoSymbolError suggests.
const MaxSuggestions = 5

// NoSymbolError is the error of a probe spec that matches nothing in a file.
// It matches ErrNoSymbol under errors.Is. Its message names the closest
// names the file has, so that a misspelt symbol is easy to correct:
//
//	"mian": no such symbol; did you mean main?
type NoSymbolError struct {
	// Spec is the spec as written.
	Spec string
	// Suggestions are names from the file that come close to what the spec
	// asked for, best first, at most MaxSuggestions: function names (raw
	// names, NAME@plt for a PLT stub, or demangled names without their
	// parameters when the spec was written in C++ syntax) for a SYM or
	// SYM+OFF spec, usdt:PROVIDER:NAME for a USDT spec. Each is written so
	// that, as a spec, it names that function or probe (glob characters are
	// escaped: "llvm::Twine::str\[abi:cxx11]"). Nil when nothing comes
	// close.
	Suggestions []string
	// Note says why nothing could match, when the file lacks the kind of
	// thing asked for ("the file has no USDT probes"); "" otherwise.
	Note string
}

func (e *NoSymbolError) Error() string {
	s := strconv.Quote(e.Spec) + ": " + ErrNoSymbol.Error()
	if e.Note != "" {
		s += ": " + e.Note
	}
	if len(e.Suggestions) > 0 {
		s += "; did you mean " + orList(e.Suggestions) + "?"
	}
	return s
}

// Is reports whether target is ErrNoSymbol.
func (e *NoSymbolError) Is(target error) bool { return target == ErrNoSymbol }

// orList joins names as "a", "a or b", "a, b or c".
func orList(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// noSymbol builds the error of a spec that resolved to no site.
func (f *File) noSymbol(sp Spec) *NoSymbolError {
	e := &NoSymbolError{Spec: sp.Text}
	switch sp.Kind {
	case SpecFunc:
		funcs, err := f.Funcs()
		if err != nil {
			return e
		}
		e.Suggestions = suggestFuncs(funcs, sp.Symbol)
		if f.section(".symtab") == nil && !f.IsGo() {
			e.Note = "the file is stripped (it has no .symtab): only its dynamic symbols are known; name a site by address (0xADDR) instead"
		}
		if sp.Offset > 0 {
			for i := range funcs {
				if funcMatches(&funcs[i], sp.Symbol) {
					e.Note = fmt.Sprintf("every function it names is %#x bytes long or shorter", sp.Offset)
					break
				}
			}
		}
	case SpecUSDT:
		probes, err := f.USDT()
		if err != nil {
			return e
		}
		if len(probes) == 0 {
			e.Note = "the file has no USDT probes"
			return e
		}
		e.Suggestions = suggestUSDT(probes, sp.Provider, sp.Name)
	}
	return e
}

// suggestion is a candidate name and how far it is from the query (lower
// is closer).
type suggestion struct {
	name  string
	score int
}

// suggester collects the best candidates, each name once with its best
// score.
type suggester struct {
	index map[string]int // name -> position in all
	all   []suggestion
}

func (s *suggester) add(name string, score int) {
	if s.index == nil {
		s.index = map[string]int{}
	}
	if i, ok := s.index[name]; ok {
		s.all[i].score = min(s.all[i].score, score)
		return
	}
	s.index[name] = len(s.all)
	s.all = append(s.all, suggestion{name, score})
}

// best returns up to MaxSuggestions names, closest first, then in byte
// order.
func (s *suggester) best() []string {
	if len(s.all) == 0 {
		return nil
	}
	sort.Slice(s.all, func(i, j int) bool {
		a, b := s.all[i], s.all[j]
		if a.score != b.score {
			return a.score < b.score
		}
		return a.name < b.name
	})
	n := min(len(s.all), MaxSuggestions)
	out := make([]string, n)
	for i := range out {
		out[i] = escapeGlob(s.all[i].name)
	}
	return out
}

// escapeGlob escapes the glob characters of a name ("str[abi:cxx11]"), so
// that the name, used as a spec, matches only itself.
func escapeGlob(name string) string {
	if !strings.ContainsAny(name, `*?[\`) {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Scores, in units of half an edit: an exact match but for letter case
// first, then NAME@plt for NAME, then edit distances, then names that
// contain the query (or are contained in it).
const (
	scoreFold  = 0
	scorePLT   = 1
	scoreEdit  = 2 // per edit
	scoreSub   = 100
	minSubstr  = 4 // shortest query that is looked for inside names
	maxEditLen = 128
)

// editLimit is the largest edit distance accepted for a query of n bytes:
// about one edit per three characters, at least one.
func editLimit(n int) int {
	return max(1, min(n/3, 5))
}

// nameScore scores a candidate name against a literal query, both in
// lower case. It returns false when the name is not close. (A name equal to
// the query would have matched it; here it differs in case or in what the
// caller stripped.)
func nameScore(lq, ln string) (int, bool) {
	switch {
	case lq == ln:
		return scoreFold, true
	case ln == lq+"@plt":
		return scorePLT, true
	}
	limit := editLimit(len(lq))
	if d := len(ln) - len(lq); d <= limit && -d <= limit && len(ln) <= maxEditLen {
		if e := editDistance(lq, ln, limit); e <= limit {
			return scorePLT + scoreEdit*e, true
		}
	}
	if len(lq) >= minSubstr && strings.Contains(ln, lq) || len(ln) >= minSubstr && strings.Contains(lq, ln) {
		d := len(ln) - len(lq)
		if d < 0 {
			d = -d
		}
		return scoreSub + d, true
	}
	return 0, false
}

// suggestFuncs returns the function names closest to a symbol or glob that
// matched none. A glob is matched again ignoring letter case, and against
// the names of PLT stubs without their "@plt"; a literal name is compared
// with every name by edit distance and by substring. Names written in C++
// syntax ("ns::f", "f<int>", "f(int)") are compared with the demangled
// names without their parameters.
func suggestFuncs(funcs []Func, symbol string) []string {
	var s suggester
	lq := strings.ToLower(symbol)
	glob := isGlob(symbol)
	cxx := strings.Contains(symbol, "::") || strings.ContainsAny(symbol, "<(")
	try := func(name string, plt bool) {
		ln := strings.ToLower(name)
		if cxx {
			ln = stripABITags(ln)
		}
		if glob {
			switch {
			case plt && !strings.HasSuffix(symbol, "@plt") && match(symbol, strings.TrimSuffix(name, "@plt")):
				s.add(name, scorePLT)
			case match(symbol, name):
				// A real match that failed for another reason (an
				// offset past its end).
			default:
				if globMatch(lq, ln) {
					s.add(name, scoreFold)
				}
			}
			return
		}
		if sc, ok := nameScore(lq, ln); ok {
			s.add(name, sc)
		}
	}
	for i := range funcs {
		fn := &funcs[i]
		for _, n := range fn.Names() {
			try(n, fn.PLT)
		}
		if !cxx {
			continue
		}
		if d := fn.Demangled(); d != "" {
			forms := demangledForms(d)
			// The name without its return type and parameters, when
			// there is one, reads best.
			try(forms[len(forms)/2], false)
		}
	}
	return s.best()
}

// stripABITags removes the ABI tags of a demangled name ("[abi:cxx11]" in
// "llvm::Twine::str[abi:cxx11]"), which a person seldom writes.
func stripABITags(s string) string {
	for {
		i := strings.Index(s, "[abi:")
		if i < 0 {
			return s
		}
		j := strings.IndexByte(s[i:], ']')
		if j < 0 {
			return s
		}
		s = s[:i] + s[i+j+1:]
	}
}

// suggestUSDT returns the probes (as usdt:PROVIDER:NAME) closest to a USDT
// spec that matched none. A glob part is matched again ignoring case; a
// literal part is compared by edit distance and substring, and a probe is
// suggested when each part either matches or comes close.
func suggestUSDT(probes []USDTProbe, provider, name string) []string {
	var s suggester
	part := func(pattern, v string) (int, bool) {
		if match(pattern, v) {
			return 0, true
		}
		lp, lv := strings.ToLower(pattern), strings.ToLower(v)
		if isGlob(pattern) {
			return scoreFold, globMatch(lp, lv)
		}
		return nameScore(lp, lv)
	}
	for i := range probes {
		p := &probes[i]
		sp, ok1 := part(provider, p.Provider)
		sn, ok2 := part(name, p.Name)
		if ok1 && ok2 {
			s.add("usdt:"+p.Provider+":"+p.Name, sp+sn)
		}
	}
	return s.best()
}

// editDistance returns the optimal-string-alignment distance between a and
// b (insertions, deletions, substitutions and transpositions of adjacent
// bytes each cost one), or limit+1 as soon as it must exceed limit.
func editDistance(a, b string, limit int) int {
	if len(a) > len(b) {
		a, b = b, a
	}
	// Three rows: two back (for transpositions), one back, current.
	prev2 := make([]int, len(a)+1)
	prev := make([]int, len(a)+1)
	cur := make([]int, len(a)+1)
	for i := range prev {
		prev[i] = i
	}
	prevMin := 0
	for j := 1; j <= len(b); j++ {
		cur[0] = j
		rowMin := cur[0]
		for i := 1; i <= len(a); i++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[i]+1, cur[i-1]+1, prev[i-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[i-2]+1)
			}
			cur[i] = v
			rowMin = min(rowMin, v)
		}
		// A later row is at least the smaller of this row's minimum and
		// one more than the previous row's (through a transposition).
		if rowMin > limit && prevMin >= limit {
			return limit + 1
		}
		prevMin = rowMin
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(a)], limit+1)
}
