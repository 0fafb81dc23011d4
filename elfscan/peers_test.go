package elfscan_test

// Comparisons with independent tools: readelf -n and bpftrace -l for USDT
// notes, nm for function symbols and demangled names, go tool nm for Go
// binaries, objdump for PLT stub names and file offsets.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fixture.Cleanup()
	os.Exit(code)
}

// systemUSDT lists installed programs known to carry USDT notes; every one
// present is compared too (each file once, whatever links lead to it).
func systemUSDT() []string {
	var out []string
	seen := map[string]bool{}
	for _, pattern := range []string{
		"/usr/lib/postgresql/*/bin/postgres",
		"/usr/lib/jvm/*/lib/server/libjvm.so",
		"/usr/bin/python3.1[0-9]",
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
	} {
		m, _ := filepath.Glob(pattern)
		for _, p := range m {
			real, err := filepath.EvalSymlinks(p)
			if err != nil || seen[real] {
				continue
			}
			seen[real] = true
			out = append(out, p)
		}
	}
	return out
}

// usdtFixtures returns the paths of the USDT fixtures for the given
// architecture directories.
func usdtFixtures(t *testing.T, arches ...string) []string {
	var out []string
	for _, a := range arches {
		for _, n := range fixture.USDT[a] {
			out = append(out, fixture.Path(t, a, n))
		}
	}
	return out
}

func open(t *testing.T, path string) *elfscan.File {
	t.Helper()
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// openFuncs opens path for the test and returns it with its functions.
func openFuncs(t *testing.T, path string) (*elfscan.File, []elfscan.Func) {
	t.Helper()
	f := open(t, path)
	funcs, err := f.Funcs()
	if err != nil {
		t.Fatalf("%s: Funcs: %v", path, err)
	}
	return f, funcs
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, stderr.Bytes())
	}
	return string(out)
}

// readelfNote is one stapsdt note as readelf -n prints it.
type readelfNote struct {
	provider, name  string
	loc, base, sema uint64
	args            string
}

var readelfLoc = regexp.MustCompile(`Location: (0x[0-9a-f]+), Base: (0x[0-9a-f]+), Semaphore: (0x[0-9a-f]+)`)

func readelfNotes(t *testing.T, path string) []readelfNote {
	t.Helper()
	out := run(t, testenv.MustHaveTool(t, "readelf"), "-n", path)
	var notes []readelfNote
	var cur *readelfNote
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "Provider: "):
			notes = append(notes, readelfNote{provider: strings.TrimPrefix(line, "Provider: ")})
			cur = &notes[len(notes)-1]
		case cur == nil:
		case strings.HasPrefix(line, "Name: "):
			cur.name = strings.TrimPrefix(line, "Name: ")
		case strings.HasPrefix(line, "Location: "):
			m := readelfLoc.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("readelf line %q", line)
			}
			cur.loc, _ = strconv.ParseUint(m[1], 0, 64)
			cur.base, _ = strconv.ParseUint(m[2], 0, 64)
			cur.sema, _ = strconv.ParseUint(m[3], 0, 64)
		case strings.HasPrefix(line, "Arguments:"):
			cur.args = strings.TrimSpace(strings.TrimPrefix(line, "Arguments:"))
		}
	}
	return notes
}

// TestUSDTReadelf compares every USDT note with readelf -n: count, order,
// provider, name, the three addresses and the argument string. Every
// argument string must parse.
func TestUSDTReadelf(t *testing.T) {
	paths := append(usdtFixtures(t, "x86_64", "aarch64"), systemUSDT()...)
	for _, path := range paths {
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), func(t *testing.T) {
			want := readelfNotes(t, path)
			f := open(t, path)
			got, err := f.USDT()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d probes, readelf -n shows %d", len(got), len(want))
			}
			if len(want) == 0 {
				t.Fatalf("readelf -n shows no USDT notes")
			}
			sema := 0
			for i, w := range want {
				g := got[i]
				if g.Provider != w.provider || g.Name != w.name || g.Location != w.loc || g.Base != w.base || g.Semaphore != w.sema || g.Args != w.args {
					t.Errorf("probe %d: got %s:%s loc %#x base %#x sema %#x args %q; readelf: %s:%s loc %#x base %#x sema %#x args %q",
						i, g.Provider, g.Name, g.Location, g.Base, g.Semaphore, g.Args, w.provider, w.name, w.loc, w.base, w.sema, w.args)
				}
				if g.ArgsErr != nil {
					t.Errorf("probe %s:%s: %v", g.Provider, g.Name, g.ArgsErr)
				}
				if g.OffsetErr != nil || g.SemaphoreErr != nil {
					t.Errorf("probe %s:%s: offset %v, semaphore %v", g.Provider, g.Name, g.OffsetErr, g.SemaphoreErr)
				}
				if g.Semaphore != 0 {
					sema++
				}
			}
			t.Logf("%d probes (%d with a semaphore) equal readelf -n", len(got), sema)
		})
	}
}

// TestUSDTBpftrace compares the provider:name set with bpftrace -l.
func TestUSDTBpftrace(t *testing.T) {
	bpftrace := testenv.MustHaveTool(t, "bpftrace")
	// bpftrace parses the argument strings of the host architecture only,
	// so the arm64 fixtures are compared with readelf alone.
	paths := append(usdtFixtures(t, "x86_64"), systemUSDT()...)
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			// The quotes let bpftrace take paths such as libstdc++.so.6.
			out := run(t, bpftrace, "-l", "usdt:\""+path+"\":*")
			want := map[string]bool{}
			for _, l := range strings.Fields(out) {
				rest := strings.TrimPrefix(l, "usdt:"+path+":")
				if rest != l {
					want[rest] = true
				}
			}
			f := open(t, path)
			probes, err := f.USDT()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, p := range probes {
				got[p.Provider+":"+p.Name] = true
			}
			if diff := setDiff(got, want); diff != "" {
				t.Errorf("provider:name sets differ from bpftrace -l:\n%s", diff)
			}
			if len(want) == 0 {
				t.Errorf("bpftrace -l lists no probe")
			}
			t.Logf("%d provider:name pairs equal bpftrace -l", len(got))
		})
	}
}

// setDiff describes the differences between two sets, or returns "".
func setDiff(got, want map[string]bool) string {
	var only, missing []string
	for k := range got {
		if !want[k] {
			only = append(only, k)
		}
	}
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	if len(only)+len(missing) == 0 {
		return ""
	}
	sort.Strings(only)
	sort.Strings(missing)
	trim := func(s []string) []string {
		if len(s) > 20 {
			return append(s[:20:20], fmt.Sprintf("... %d more", len(s)-20))
		}
		return s
	}
	return fmt.Sprintf("only ours (%d): %v\nonly theirs (%d): %v", len(only), trim(only), len(missing), trim(missing))
}

// nmFuncs returns the defined FUNC and IFUNC symbols nm lists, as
// "name@addr"; dynamic selects .dynsym. Symbol versions are dropped.
func nmFuncs(t *testing.T, nm, path string, dynamic bool) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	for _, s := range nmSymbols(t, nm, path, dynamic, "FUNC", "<OS specific>: 10") {
		set[fmt.Sprintf("%s@%#x", s.name, s.addr)] = true
	}
	return set
}

// nmSymbol is a symbol nm lists.
type nmSymbol struct {
	name string
	addr uint64
}

// nmSymbols returns the defined symbols of the given types (nm's sysv
// column) nm lists; dynamic selects .dynsym. Symbol versions are dropped.
func nmSymbols(t *testing.T, nm, path string, dynamic bool, types ...string) []nmSymbol {
	t.Helper()
	args := []string{"--defined-only", "--format=sysv"}
	if dynamic {
		args = append(args, "-D")
	}
	out := run(t, nm, append(args, path)...)
	var syms []nmSymbol
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) < 7 || !slices.Contains(types, strings.TrimSpace(f[3])) {
			continue
		}
		name := strings.TrimSpace(f[0])
		if i := strings.IndexByte(name, '@'); i > 0 {
			name = name[:i]
		}
		addr, err := strconv.ParseUint(strings.TrimSpace(f[1]), 16, 64)
		if err != nil {
			t.Fatalf("nm line %q", line)
		}
		syms = append(syms, nmSymbol{name, addr})
	}
	return syms
}

// TestFuncsNm compares the function names and addresses with nm's FUNC and
// IFUNC symbols of .symtab and .dynsym. Documented aliases: our PLT stubs
// ("puts@plt") are named by objdump, not nm, and are left out here; every
// name of a merged function (aliases included) is compared.
func TestFuncsNm(t *testing.T) {
	t.Parallel()
	paths := []string{}
	for _, a := range []string{"x86_64", "aarch64"} {
		for _, n := range fixture.ELF[a] {
			paths = append(paths, fixture.Path(t, a, n))
		}
	}
	for _, p := range []string{
		testenv.CC1Path(),
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
		"/lib/x86_64-linux-gnu/libc.so.6",
	} {
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
		}
	}
	for _, path := range paths {
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), func(t *testing.T) {
			nm := testenv.MustHaveTool(t, "nm")
			if strings.Contains(path, "aarch64") {
				nm = testenv.MustHaveTool(t, "aarch64-linux-gnu-nm")
			}
			want := nmFuncs(t, nm, path, false)
			for k := range nmFuncs(t, nm, path, true) {
				want[k] = true
			}
			f, funcs := openFuncs(t, path)
			got := map[string]bool{}
			for _, fn := range funcs {
				if fn.PLT {
					continue
				}
				for _, n := range fn.Names() {
					got[fmt.Sprintf("%s@%#x", n, fn.Addr)] = true
				}
			}
			if diff := setDiff(got, want); diff != "" {
				t.Errorf("function symbols differ from nm:\n%s", diff)
			}
			t.Logf("%d names in %d functions equal nm's (%s)", len(got), len(funcs), f.FuncSource())
		})
	}
}

// TestDemangleNm compares the demangled names with nm -C (the binutils
// demangler). Documented differences, Rust only: nm keeps the v0 crate
// disambiguator ("mycrate[3c1c0]::foo"), and a leading underscore of a
// legacy path component ("std::io::stdio::_print"), which the Go demangler
// drops ("mycrate::foo", "std::io::stdio::print").
func TestDemangleNm(t *testing.T) {
	nm := testenv.MustHaveTool(t, "nm")
	type target struct {
		path    string
		dynamic bool
	}
	targets := []target{{fixture.Path(t, "x86_64", "mangled"), false}}
	if p := "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"; fileExists(p) {
		targets = append(targets, target{p, true})
	}
	for _, tg := range targets {
		t.Run(filepath.Base(tg.path), func(t *testing.T) {
			args := []string{"--defined-only", "--no-sort", "--format=sysv"}
			if tg.dynamic {
				args = append(args, "-D")
			}
			raw := strings.Split(run(t, nm, append(args, tg.path)...), "\n")
			dem := strings.Split(run(t, nm, append(append(args, "-C"), tg.path)...), "\n")
			if len(raw) != len(dem) {
				t.Fatalf("nm and nm -C list %d and %d lines", len(raw), len(dem))
			}
			want := map[string]string{}
			for i := range raw {
				r, d := strings.Split(raw[i], "|"), strings.Split(dem[i], "|")
				if len(r) < 7 || len(d) < 7 || strings.TrimSpace(r[3]) != "FUNC" {
					continue
				}
				rn, dn := strings.TrimSpace(r[0]), strings.TrimSpace(d[0])
				if j := strings.IndexByte(rn, '@'); j > 0 {
					dn = strings.TrimSuffix(dn, rn[j:])
					rn = rn[:j]
				}
				if rn != dn {
					want[rn] = dn
				}
			}
			_, funcs := openFuncs(t, tg.path)
			compared, rust, bad := 0, 0, 0
			for _, fn := range funcs {
				d, ok := want[fn.Name]
				if !ok || fn.PLT {
					continue
				}
				compared++
				if fn.Demangled() == d {
					continue
				}
				if isRustDifference(fn.Name, fn.Demangled(), d) {
					rust++
					continue
				}
				bad++
				if bad <= 10 {
					t.Errorf("%s: demangled %q, nm -C %q", fn.Name, fn.Demangled(), d)
				}
			}
			if compared == 0 {
				t.Fatalf("no mangled function compared")
			}
			if bad > 0 {
				t.Errorf("%d of %d demangled names differ from nm -C", bad, compared)
			}
			t.Logf("%d demangled names equal nm -C, %d differ only in the documented Rust details", compared-rust-bad, rust)
		})
	}
}

var rustHash = regexp.MustCompile(`::h[0-9a-f]{16}$`)
var rustDisambiguator = regexp.MustCompile(`\[[0-9a-f]+\]`)
var rustLegacy = regexp.MustCompile(`^_ZN.*17h[0-9a-f]{16}E$`)

// isRustDifference reports whether ours and nm's demangling of a Rust name
// differ only in the hash suffix, the crate disambiguator and a leading
// underscore of a path component (which the Go demangler drops from legacy
// names: "_print" becomes "print").
func isRustDifference(raw, ours, nm string) bool {
	if !strings.HasPrefix(raw, "_R") && !rustLegacy.MatchString(raw) {
		return false
	}
	nm = rustHash.ReplaceAllString(nm, "")
	nm = rustDisambiguator.ReplaceAllString(nm, "")
	return nm == ours || strings.ReplaceAll(nm, "::_", "::") == ours
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// goNmText returns the text symbols (T and t) go tool nm lists, as
// "name@addr".
func goNmText(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := run(t, testenv.MustHaveTool(t, "go"), "tool", "nm", path)
	set := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "T" && f[1] != "t" {
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			t.Fatalf("go tool nm line %q", line)
		}
		set[fmt.Sprintf("%s@%#x", goName(strings.Join(f[2:], " ")), addr)] = true
	}
	return set
}

// goMarkers are text symbols go tool nm lists that are not functions: the
// linker's markers of the text section bounds (size 0).
var goMarkers = map[string]bool{"runtime.text": true, "runtime.etext": true}

// goName normalizes a Go function name: the symbol table calls assembly
// (ABI0) functions NAME.abi0, the function table NAME; and the function
// table writes the middle dot of a few generated names ("·7") that the
// symbol table writes as a period.
func goName(n string) string {
	return strings.ReplaceAll(strings.TrimSuffix(n, ".abi0"), "·", ".")
}

// TestGoFuncs compares the functions of a Go binary, built for each of
// fixture.GoArches, with go tool nm's text symbols; for the stripped build
// (no symbol table, go tool nm refuses it) the functions come from
// .gopclntab alone and are compared with go tool nm of the unstripped build
// of the same source for the same architecture. Documented aliases: the
// text section markers runtime.text and runtime.etext, which are no
// functions, the ".abi0" suffix the symbol table gives assembly functions,
// which the function table does not, and the middle dot of a few generated
// names in the function table ("type:.eq.T·7", "type:.eq.T.7" in the
// symbol table): names are compared without both.
func TestGoFuncs(t *testing.T) {
	t.Parallel()
	arches := map[string]decode.Arch{"amd64": decode.X86_64, "arm64": decode.ARM64}
	for _, goarch := range fixture.GoArches {
		t.Run(goarch, func(t *testing.T) {
			testGoFuncs(t, goarch, arches[goarch])
		})
	}
}

func testGoFuncs(t *testing.T, goarch string, arch decode.Arch) {
	full := fixture.GoProgramFor(t, goarch, false)
	stripped := fixture.GoProgramFor(t, goarch, true)
	want := goNmText(t, full)
	for k := range want {
		if goMarkers[k[:strings.LastIndexByte(k, '@')]] {
			delete(want, k)
		}
	}
	for _, tc := range []struct {
		path   string
		source string
	}{{full, ".symtab+.gopclntab"}, {stripped, ".gopclntab"}} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			f := open(t, tc.path)
			if !f.IsGo() {
				t.Errorf("IsGo false")
			}
			if f.Arch != arch {
				t.Errorf("arch %v, want %v", f.Arch, arch)
			}
			funcs, err := f.Funcs()
			if err != nil {
				t.Fatal(err)
			}
			if f.FuncSource() != tc.source {
				t.Errorf("functions from %s, want %s", f.FuncSource(), tc.source)
			}
			got := map[string]bool{}
			for _, fn := range funcs {
				if fn.PLT {
					continue
				}
				for _, n := range fn.Names() {
					if !goMarkers[n] {
						got[fmt.Sprintf("%s@%#x", goName(n), fn.Addr)] = true
					}
				}
			}
			if diff := setDiff(got, want); diff != "" {
				t.Errorf("functions differ from go tool nm:\n%s", diff)
			}
			t.Logf("%d functions equal go tool nm's text symbols", len(got))
		})
	}
}

var objdumpLabel = regexp.MustCompile(`^([0-9a-f]+) <([^>]+)>:`)
var objdumpOffset = regexp.MustCompile(`^([0-9a-f]+) <([^>]+)> \(File Offset: (0x[0-9a-f]+)\):`)

// objdumpFor returns the objdump that disassembles path.
func objdumpFor(t *testing.T, path string) string {
	if strings.Contains(path, "aarch64") {
		return testenv.MustHaveTool(t, "aarch64-linux-gnu-objdump")
	}
	return testenv.MustHaveTool(t, "objdump")
}

// TestPLTObjdump compares the PLT stubs with the synthetic NAME@plt labels
// of objdump -d.
func TestPLTObjdump(t *testing.T) {
	paths := []string{
		fixture.Path(t, "x86_64", "funcs-pie"), fixture.Path(t, "x86_64", "funcs-nopie"),
		fixture.Path(t, "x86_64", "funcs-cet"), fixture.Path(t, "x86_64", "usdt-stripped"),
		fixture.Path(t, "aarch64", "funcs-pie"), fixture.Path(t, "aarch64", "funcs-nopie"),
		fixture.Path(t, "aarch64", "usdt-nopie"), fixture.Path(t, "aarch64", "usdt-stripped"),
	}
	if p := "/usr/bin/python3.11"; fileExists(p) {
		paths = append(paths, p)
	}
	for _, path := range paths {
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), func(t *testing.T) {
			out := run(t, objdumpFor(t, path), "-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got", path)
			want := map[string]bool{}
			for _, line := range strings.Split(out, "\n") {
				if m := objdumpLabel.FindStringSubmatch(line); m != nil && strings.HasSuffix(m[2], "@plt") {
					addr, _ := strconv.ParseUint(m[1], 16, 64)
					want[fmt.Sprintf("%s@%#x", m[2], addr)] = true
				}
			}
			_, funcs := openFuncs(t, path)
			got := map[string]bool{}
			for _, fn := range funcs {
				if fn.PLT {
					got[fmt.Sprintf("%s@%#x", fn.Name, fn.Addr)] = true
				}
			}
			if diff := setDiff(got, want); diff != "" {
				t.Errorf("PLT stubs differ from objdump:\n%s", diff)
			}
			if len(want) == 0 {
				t.Errorf("objdump shows no PLT stub")
			}
			t.Logf("%d PLT stubs equal objdump's", len(got))
		})
	}
}

// TestOffsetsObjdump compares the file offset of every function with
// objdump -d -F (PIE, non-PIE, stripped, arm64).
func TestOffsetsObjdump(t *testing.T) {
	for _, a := range []string{"x86_64", "aarch64"} {
		for _, n := range fixture.ELF[a] {
			path := fixture.Path(t, a, n)
			t.Run(a+"/"+n, func(t *testing.T) {
				out := run(t, objdumpFor(t, path), "-d", "-F", path)
				f := open(t, path)
				checked := 0
				for _, line := range strings.Split(out, "\n") {
					m := objdumpOffset.FindStringSubmatch(line)
					if m == nil {
						continue
					}
					addr, _ := strconv.ParseUint(m[1], 16, 64)
					want, _ := strconv.ParseUint(m[3], 0, 64)
					got, err := f.TextOffset(addr)
					if err != nil || got != want {
						t.Errorf("%s at %#x: offset %#x (%v), objdump %#x", m[2], addr, got, err, want)
					}
					back, err := f.Addr(want)
					if err != nil || back != addr {
						t.Errorf("Addr(%#x) = %#x (%v), want %#x", want, back, err, addr)
					}
					checked++
				}
				if checked == 0 {
					t.Fatalf("objdump -F printed no labelled offsets")
				}
			})
		}
	}
}

// TestObjectAddrNm compares ObjectAddr with the defined OBJECT symbols nm
// lists (names that name one address), in the dynamic linker and the C
// library, and asks for a function's name and a missing one.
func TestObjectAddrNm(t *testing.T) {
	nm := testenv.MustHaveTool(t, "nm")
	for _, path := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"} {
		if _, err := os.Stat(path); err != nil {
			t.Skipf("no %s", path)
		}
		addrs := map[string]map[uint64]bool{}
		for _, dyn := range []bool{false, true} {
			for _, s := range nmSymbols(t, nm, path, dyn, "OBJECT") {
				if addrs[s.name] == nil {
					addrs[s.name] = map[uint64]bool{}
				}
				addrs[s.name][s.addr] = true
			}
		}
		f, err := elfscan.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for name, as := range addrs {
			if len(as) != 1 {
				continue
			}
			got, ok := f.ObjectAddr(name)
			if !ok || !as[got] {
				t.Errorf("%s: %s at %#x, %v; nm %v", path, name, got, ok, as)
			}
			n++
		}
		for _, name := range []string{"malloc", "_dl_debug_state", "no_such_object"} {
			if a, ok := f.ObjectAddr(name); ok {
				t.Errorf("%s: %s is not a data object, got %#x", path, name, a)
			}
		}
		f.Close()
		if n == 0 {
			t.Errorf("%s: nm lists no data object", path)
		}
		t.Logf("%s: %d data objects at nm's addresses", path, n)
	}
}
