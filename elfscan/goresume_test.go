package elfscan_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// listedFunc is what the compiler's assembly listing (-gcflags=-S) says of
// one function: its size, the changes of its unsafe-point table
// (PCDATA $0) by offset, whether it has a locals pointer map (FUNCDATA
// $1), and where it calls runtime.deferreturn.
type listedFunc struct {
	size        uint64
	unsafe      [][2]int64 // offset, value
	locals      bool
	deferReturn int64 // -1 if none
}

var (
	listHeader = regexp.MustCompile(`^(\S+) STEXT .*size=(\d+) `)
	listInst   = regexp.MustCompile(`^\s+0x[0-9a-f]+ (\d+) \(.*\)\s+(\S+)\s*(.*)$`)
)

// parseListing reads the functions of a -S listing.
func parseListing(t *testing.T, listing []byte) map[string]*listedFunc {
	t.Helper()
	out := map[string]*listedFunc{}
	var cur *listedFunc
	sc := bufio.NewScanner(bytes.NewReader(listing))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := listHeader.FindStringSubmatch(line); m != nil {
			size, _ := strconv.ParseUint(m[2], 10, 64)
			cur = &listedFunc{size: size, deferReturn: -1}
			out[m[1]] = cur
			continue
		}
		m := listInst.FindStringSubmatch(line)
		if m == nil || cur == nil {
			continue
		}
		off, _ := strconv.ParseInt(m[1], 10, 64)
		switch op, args := m[2], m[3]; {
		case op == "PCDATA" && strings.HasPrefix(args, "$0, $"):
			v, err := strconv.ParseInt(strings.TrimPrefix(args, "$0, $"), 10, 32)
			if err != nil {
				t.Fatalf("listing: %q: %v", line, err)
			}
			cur.unsafe = append(cur.unsafe, [2]int64{off, v})
		case op == "FUNCDATA" && strings.HasPrefix(args, "$1,"):
			cur.locals = true
		case op == "CALL" && strings.HasPrefix(args, "runtime.deferreturn("):
			cur.deferReturn = off
		}
	}
	return out
}

// want gives the resume ranges the listing implies, as offsets from the
// function's entry, by the rules of the Go runtime: every instruction of a
// safe run is an asynchronous preemption point when the function has a
// locals pointer map, a restartable run resumes at its start, and a
// recovered panic resumes at the deferreturn call.
func (lf *listedFunc) want() []elfscan.GoResume {
	var out []elfscan.GoResume
	val, start := int64(-1), int64(0)
	flush := func(end int64) {
		switch {
		case end <= start:
		case val == -1 && lf.locals:
			if n := len(out); n > 0 && out[n-1].Kind == elfscan.GoAsyncPoint && out[n-1].Hi == uint64(start) {
				out[n-1].Hi = uint64(end)
				return
			}
			out = append(out, elfscan.GoResume{Lo: uint64(start), Hi: uint64(end), Kind: elfscan.GoAsyncPoint})
		case val == -3 || val == -4:
			out = append(out, elfscan.GoResume{Lo: uint64(start), Hi: uint64(start) + 1, Kind: elfscan.GoRestart})
		}
	}
	for _, c := range lf.unsafe {
		if c[1] == val {
			continue
		}
		flush(c[0])
		val, start = c[1], c[0]
	}
	flush(int64(lf.size))
	if d := lf.deferReturn; d >= 0 && !slices.ContainsFunc(out, func(r elfscan.GoResume) bool { return r.Lo <= uint64(d) && uint64(d) < r.Hi }) {
		out = append(out, elfscan.GoResume{Lo: uint64(d), Hi: uint64(d) + 1, Kind: elfscan.GoDeferReturn})
	}
	slices.SortFunc(out, func(a, b elfscan.GoResume) int { return int(a.Lo) - int(b.Lo) })
	return out
}

// TestGoResumePointsListing compares the resume points read from the
// function table of the gort fixture with what the compiler's own assembly
// listing of its main package says, for amd64 and arm64.
func TestGoResumePointsListing(t *testing.T) {
	goTool := testenv.MustHaveTool(t, "go")
	for _, goarch := range fixture.GoArches {
		t.Run(goarch, func(t *testing.T) {
			exe := filepath.Join(t.TempDir(), "gort")
			cmd := exec.Command(goTool, "build", "-trimpath", "-gcflags=-S", "-o", exe, filepath.Join(fixture.Dir(t), "gort", "main.go"))
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
			var listing bytes.Buffer
			cmd.Stderr = &listing
			if err := cmd.Run(); err != nil {
				t.Fatalf("go build: %v\n%s", err, listing.Bytes())
			}
			listed := parseListing(t, listing.Bytes())
			f := open(t, exe)
			got, err := f.GoResumePoints()
			if err != nil {
				t.Fatal(err)
			}
			byFunc := map[string][]elfscan.GoResume{}
			for i, r := range got {
				if r.Hi <= r.Lo || i > 0 && r.Lo < got[i-1].Hi {
					t.Errorf("range %d %+v: empty, or not after %+v", i, r, got[max(i-1, 0)])
				}
				byFunc[r.Func] = append(byFunc[r.Func], r)
			}
			funcs, err := f.Funcs()
			if err != nil {
				t.Fatal(err)
			}
			compared, async := 0, 0
			for i := range funcs {
				fn := &funcs[i]
				lf := listed[fn.Name]
				if lf == nil || !strings.HasPrefix(fn.Name, "main.") {
					continue
				}
				var rel []elfscan.GoResume
				for _, r := range byFunc[fn.Name] {
					rel = append(rel, elfscan.GoResume{Lo: r.Lo - fn.Addr, Hi: r.Hi - fn.Addr, Kind: r.Kind})
				}
				if want := lf.want(); fmt.Sprint(rel) != fmt.Sprint(want) {
					t.Errorf("%s: read %v\nthe listing says %v", fn.Name, rel, want)
				}
				compared++
				async += len(rel)
			}
			// The fixture's main package has its own functions and
			// closures: spin, mayPanic, safeDiv and its deferred
			// closure, churn, main and its goroutine.
			if compared < 7 || async == 0 {
				t.Errorf("compared %d functions of the listing (%d ranges); want the fixture's 7 or more", compared, async)
			}
			for _, name := range []string{"runtime.goexit", "runtime.systemstack_switch", "runtime.morestack"} {
				if rs := byFunc[name]; len(rs) != 1 || rs[0].Kind != elfscan.GoRuntimeEntry {
					t.Errorf("%s: %v, want one runtime-entry range", name, rs)
				}
			}
			t.Logf("%s: %d ranges in the file; %d functions of the main package match the compiler's listing", goarch, len(got), compared)
		})
	}
}

// TestGoResumePointsNotGo: a C program has none.
func TestGoResumePointsNotGo(t *testing.T) {
	f := open(t, fixture.Path(t, "x86_64", "funcs-pie"))
	if rs, err := f.GoResumePoints(); err != nil || rs != nil {
		t.Errorf("GoResumePoints of a C program: %v, %v", rs, err)
	}
}

// TestGoTextStartCgo: a program linked by the external linker (cgo) has C
// code before the Go text, and its function table counts from
// runtime.text, not from .text. Stripped, the function list and the resume
// points still name runtime.goexit where the symbol table of the same
// program, unstripped, puts it.
func TestGoTextStartCgo(t *testing.T) {
	goTool := testenv.MustHaveTool(t, "go")
	testenv.MustHaveTool(t, "gcc")
	dir := t.TempDir()
	src := "package main\n\n// int add(int a, int b) { return a + b; }\nimport \"C\"\nimport \"fmt\"\n\nfunc main() { fmt.Println(C.add(1, 2)) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "cgo")
	for _, s := range []struct{ out, flags string }{{exe, ""}, {exe + "-stripped", "-s"}} {
		cmd := exec.Command(goTool, "build", "-trimpath", "-ldflags="+s.flags, "-o", s.out, "main.go")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=-buildvcs=false", "GO111MODULE=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
	}
	var want uint64
	for _, fn := range funcsOf(t, open(t, exe)) {
		if fn.Name == "runtime.goexit" {
			want = fn.Addr
		}
	}
	stripped := open(t, exe+"-stripped")
	var got uint64
	for _, fn := range funcsOf(t, stripped) {
		if fn.Name == "runtime.goexit" {
			got = fn.Addr
		}
	}
	rs, err := stripped.GoResumePoints()
	if err != nil {
		t.Fatal(err)
	}
	var resume uint64
	for _, r := range rs {
		if r.Func == "runtime.goexit" {
			resume = r.Lo
		}
	}
	if want == 0 || got != want || resume != want {
		t.Errorf("runtime.goexit: the symbol table says %#x; stripped, the function table %#x and the resume points %#x", want, got, resume)
	}
}

func funcsOf(t *testing.T, f *elfscan.File) []elfscan.Func {
	t.Helper()
	fs, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	return fs
}
