package plan_test

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
)

// buildCold builds testdata/src/cold_x86.S (foo, entered at foo+4 by its
// cold part, and bar) into a shared object, with gcc and the given flags.
func buildCold(t *testing.T, name string, flags ...string) string {
	t.Helper()
	gcc := testenv.MustHaveTool(t, "gcc")
	src := filepath.Join(fixture.Dir(t), "src", "cold_x86.S")
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-shared", "-fPIC", "-o", out, src}, flags...)
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %q: %v\n%s", args, err, b)
	}
	return out
}

// branchCode is what a branch index of f decodes, without the exception
// tables: its executable sections and its functions.
func branchCode(t testing.TB, f *elfscan.File) *plan.BranchCode {
	t.Helper()
	c, err := plan.ELFBranchCode(f)
	if err != nil {
		t.Fatal(err)
	}
	c.Exceptions = nil
	return c
}

func indexOf(c *plan.BranchCode, arch decode.Arch) *plan.BranchIndex {
	load := func() (*plan.BranchCode, error) { return c, nil }
	if arch == decode.ARM64 {
		return plan.IndexARM64Branches(load)
	}
	return plan.IndexX86Branches(load, decodeAMD)
}

// entrySite is the site at the entry of the function named name.
func entrySite(t *testing.T, f *elfscan.File, name string, x *plan.BranchIndex) *plan.Site {
	t.Helper()
	funcs, _ := f.Funcs()
	for i := range funcs {
		fn := &funcs[i]
		if fn.Name != name {
			continue
		}
		body, err := f.Code(fn.Addr, fn.End-fn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		return &plan.Site{Arch: decode.X86_64, Addr: fn.Addr, Code: body, Func: plan.AnalyzeX86(fn.Addr, body, decodeAMD), Branches: x}
	}
	t.Fatalf("%s: no function %s", f.Path, name)
	return nil
}

// TestForeignBranchBarsDetour checks that a jump from another function
// into the bytes a detour would replace bars the detour: foo's cold part
// jumps to foo+4, so foo's entry is not a detour, while bar's is. The
// shared object is built with its symbol table, and stripped (foo.cold is
// then code without a symbol). Without the index, the decision for foo is
// the detour that would run garbage: the fixture does reach the gap.
func TestForeignBranchBarsDetour(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		from  string // where the rule says the branch comes from
	}{
		{"symbols", nil, "(in foo.cold)"},
		{"stripped", []string{"-s"}, "(in no known function)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := buildCold(t, "libcold.so", tc.flags...)
			f, err := elfscan.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			x := indexOf(branchCode(t, f), decode.X86_64)
			foo := entrySite(t, f, "foo", x)
			if _, ok := foo.Func.BranchTargetIn(foo.Addr, foo.Addr+6); ok {
				t.Fatal("foo's own branches land in its first bytes: the fixture is wrong")
			}
			opts := &plan.Options{Rules: true, Live: true}
			d := plan.Decide(plan.Probeopt, foo, opts)
			r := ruleOf(d, "trampoline")
			want := fmt.Sprintf("a jmp at ... %s lands at %#x, inside the 6 bytes replaced at %#x", tc.from, foo.Addr+4, foo.Addr)
			if d.Strategy == plan.TrampolineDetour || r.Outcome != plan.Fail || !strings.Contains(r.Detail, tc.from+" lands at "+fmt.Sprintf("%#x", foo.Addr+4)) ||
				!strings.Contains(r.Detail, fmt.Sprintf("inside the 6 bytes replaced at %#x", foo.Addr)) {
				t.Errorf("foo: %s (%s), rule %+v; want no detour and a rule like %q", d.Strategy, d.Reason, r, want)
			}
			if d.Strategy != plan.Emulate {
				t.Errorf("foo: %s, want emulate (push %%rbp)", d.Strategy)
			}
			// The source is a jmp in foo.cold, which lies outside foo.
			brs, err := x.BranchesTo(foo.Addr + 4)
			if err != nil || len(brs) != 1 || brs[0].Kind != decode.BranchJmp || brs[0].From >= foo.Func.Addr && brs[0].From < foo.Func.Addr+uint64(len(foo.Func.Code)) {
				t.Errorf("branches to foo+4: %+v, %v; want one jmp from outside foo", brs, err)
			}

			bar := entrySite(t, f, "bar", x)
			d = plan.Decide(plan.Probeopt, bar, opts)
			if r := ruleOf(d, "trampoline"); d.Strategy != plan.TrampolineDetour || !strings.Contains(r.Detail, "no direct branch or landing pad in the file lands inside them") {
				t.Errorf("bar: %s (%s), rule %+v; want a detour", d.Strategy, d.Reason, r)
			}

			// With the empty index: the decision of the function's
			// own branches alone, the detour, and a rule that says what
			// it did not check.
			foo.Branches = plan.NoBranches
			d = plan.Decide(plan.Probeopt, foo, opts)
			if r := ruleOf(d, "trampoline"); d.Strategy != plan.TrampolineDetour || !strings.Contains(r.Detail, "were not checked") {
				t.Errorf("foo with plan.NoBranches: %s, rule %+v", d.Strategy, r)
			}
			// Without an index: no detour, and the rule says why.
			foo.Branches = nil
			d = plan.Decide(plan.Probeopt, foo, opts)
			if r := ruleOf(d, "trampoline"); d.Strategy != plan.Emulate || r.Outcome != plan.Fail || !strings.Contains(r.Detail, "no branch index was given") {
				t.Errorf("foo without an index: %s, rule %+v; want emulate and a rule that no index was given", d.Strategy, r)
			}
			bar.Branches = nil
			if d = plan.Decide(plan.Probeopt, bar, opts); d.Strategy != plan.Emulate {
				t.Errorf("bar without an index: %s, want emulate (no detour without the file's branches)", d.Strategy)
			}
		})
	}
}

var (
	objdumpLine   = regexp.MustCompile(`^\s*([0-9a-f]+):\t`)
	objdumpBranch = regexp.MustCompile(`^\s*([0-9a-f]+):\t(?:(?:bnd|notrack|data16|rex\.W|addr32|cs|ds)\s+)*(j[a-z]+|call|loop[a-z]*|jrcxz|xbegin)\s+([0-9a-f]+)(?:\s|$)`)
	objdumpA64    = regexp.MustCompile(`^\s*([0-9a-f]+):\t[0-9a-f]{8}\s+(b|bl|b\.[a-z]+|bc\.[a-z]+|cbn?z|tbn?z)\s+(?:[wx][0-9]+,\s*)?(?:#0x[0-9a-f]+,\s*)?([0-9a-f]+)(?:\s|$)`)
)

// objdumpTargets returns the targets of the direct branches objdump -d
// prints (with args), and how many instructions it printed.
func objdumpTargets(t *testing.T, objdump string, arm64 bool, args ...string) (map[uint64]bool, int) {
	t.Helper()
	cmd := exec.Command(objdump, append([]string{"-d", "-w", "--no-show-raw-insn"}, args...)...)
	re := objdumpBranch
	if arm64 {
		cmd = exec.Command(objdump, append([]string{"-d", "-w"}, args...)...)
		re = objdumpA64
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	targets := map[uint64]bool{}
	n := 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !objdumpLine.MatchString(line) || strings.Contains(line, "(bad)") {
			continue
		}
		n++
		if m := re.FindStringSubmatch(line); m != nil {
			tgt, _ := strconv.ParseUint(m[3], 16, 64)
			targets[tgt] = true
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return targets, n
}

// compareObjdump checks that every target objdump prints is in the index,
// and counts the index's targets in [lo, hi) that objdump has not.
func compareObjdump(t *testing.T, x *plan.BranchIndex, want map[uint64]bool, lo, hi uint64) (extra int) {
	t.Helper()
	missing := 0
	for tgt := range want {
		if _, ok, err := x.TargetIn(tgt, tgt+1); err != nil || !ok {
			if missing++; missing <= 10 {
				t.Errorf("objdump's target %#x is not in the index (%v)", tgt, err)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d objdump targets missing", missing, len(want))
	}
	for tgt := range x.Targets() {
		if tgt >= lo && tgt < hi && !want[tgt] {
			extra++
		}
	}
	return extra
}

// TestBranchIndexObjdump checks the index against objdump: every target of
// a direct branch objdump prints is in the index. The index may hold more
// (a sweep out of step, or data decoded as code); the test reports how
// many. Files: /usr/bin/ls whole, a 2 MB window of GCC's cc1 (the whole
// file's index, and an index of the window alone, whose extra targets are
// counted against objdump's for the same window), and the arm64 fixture.
func TestBranchIndexObjdump(t *testing.T) {
	t.Parallel()
	t.Run("ls", func(t *testing.T) {
		objdump := testenv.MustHaveTool(t, "objdump")
		const path = "/usr/bin/ls"
		testenv.MustHaveFile(t, path)
		f, err := elfscan.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		x := indexOf(branchCode(t, f), decode.X86_64)
		want, n := objdumpTargets(t, objdump, false, path)
		extra := compareObjdump(t, x, want, 0, 1<<64-1)
		t.Logf("%d instructions, %d objdump targets, index %d targets (%d extra) %+v", n, len(want), x.Len(), extra, x.Stats())
	})
	t.Run("cc1-window", func(t *testing.T) {
		objdump := testenv.MustHaveTool(t, "objdump")
		path, c := cc1Code(t)
		// A 2 MB window from the first function start past the middle
		// of .text (the largest region).
		text := largestRegion(c)
		mid := text.Addr + uint64(len(text.Code))/2
		var lo uint64
		var wfuncs []plan.FuncRange
		for _, fn := range c.Funcs {
			if lo == 0 && fn.Addr >= mid {
				lo = fn.Addr
			}
			if lo != 0 && fn.Addr < lo+2<<20 {
				wfuncs = append(wfuncs, fn)
			}
		}
		if lo == 0 {
			t.Fatal("no function past the middle of .text")
		}
		hi := min(lo+2<<20, text.Addr+uint64(len(text.Code)))
		want, n := objdumpTargets(t, objdump, false, fmt.Sprintf("--start-address=%#x", lo), fmt.Sprintf("--stop-address=%#x", hi), path)
		whole := indexOf(c, decode.X86_64)
		compareObjdump(t, whole, want, lo, hi)
		win := indexOf(&plan.BranchCode{Regions: []plan.CodeRegion{{Addr: lo, Code: text.Code[lo-text.Addr : hi-text.Addr]}}, Funcs: wfuncs}, decode.X86_64)
		// Against the window's own targets: those objdump's branches in
		// the window have, wherever they land.
		extra := 0
		for tgt := range win.Targets() {
			if !want[tgt] {
				extra++
			}
		}
		compareObjdump(t, win, want, 0, 0)
		t.Logf("window %#x-%#x: %d instructions, %d objdump targets, window index %d targets (%d extra) %+v; whole file %d targets %+v",
			lo, hi, n, len(want), win.Len(), extra, win.Stats(), whole.Len(), whole.Stats())
	})
	t.Run("arm64", func(t *testing.T) {
		objdump := testenv.MustHaveTool(t, "aarch64-linux-gnu-objdump")
		path := fixture.Path(t, "aarch64", "funcs-pie")
		f, err := elfscan.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		x := indexOf(branchCode(t, f), decode.ARM64)
		want, n := objdumpTargets(t, objdump, true, path)
		if len(want) == 0 {
			t.Fatal("no branch parsed from objdump")
		}
		extra := compareObjdump(t, x, want, 0, 1<<64-1)
		t.Logf("%d instructions, %d objdump targets, index %d targets (%d extra)", n, len(want), x.Len(), extra)
	})
}

// TestBranchIndexJoinsChunks checks the parallel sweep of code without
// function starts (each chunk after the first begins at an arbitrary
// offset and is joined to the sweep before it) against one plain sweep
// from the region's start: every target of the plain sweep is in the
// index.
func TestBranchIndexJoinsChunks(t *testing.T) {
	_, c := cc1Code(t)
	text := largestRegion(c)
	// 4 MB from an odd offset: the first chunk begins out of step too.
	const off, size = 1<<20 + 3, 4 << 20
	region := plan.CodeRegion{Addr: text.Addr + off, Code: text.Code[off : off+size]}
	x := indexOf(&plan.BranchCode{Regions: []plan.CodeRegion{region}}, decode.X86_64)
	st := x.Stats()
	if st.Joined == 0 {
		t.Fatalf("no chunk joined: %+v", st)
	}
	want := map[uint64]bool{}
	var l decode.X86Layout
	for pos := 0; pos < len(region.Code); {
		a := region.Addr + uint64(pos)
		if err := decodeAMD.Layout(region.Code[pos:], a, &l); err != nil {
			pos++
			continue
		}
		if l.Branch.Relative() || l.Branch == decode.BranchJmpAbs {
			want[l.Target] = true
		}
		pos += int(l.Len)
	}
	extra := compareObjdump(t, x, want, 0, 1<<64-1)
	t.Logf("%d targets of one sweep, index %d (%d extra) %+v", len(want), x.Len(), extra, st)
}

// TestBranchIndexQueries checks the queries on hand-made code: targets in
// and out of the regions, the half-open range, the sources and their
// functions, and a build that fails.
func TestBranchIndexQueries(t *testing.T) {
	// At 0x1000: jmp 0x2002; call 0x10 (below every region); jne
	// 0x1000; at 0x2000: nop; nop; jmp far above.
	r1 := []byte{0xe9, 0xfd, 0x0f, 0x00, 0x00, 0xe8, 0x06, 0xf0, 0xff, 0xff, 0x75, 0xf4}
	r2 := []byte{0x90, 0x90, 0xe9, 0xf9, 0xff, 0xff, 0x0f}
	c := &plan.BranchCode{
		Regions: []plan.CodeRegion{{Addr: 0x2000, Code: r2}, {Addr: 0x1000, Code: r1}},
		Funcs:   []plan.FuncRange{{Name: "two", Addr: 0x2000, End: 0x2007}, {Name: "one", Addr: 0x1000, End: 0x100c}},
	}
	x := indexOf(c, decode.X86_64)
	var got []uint64
	for tgt := range x.Targets() {
		got = append(got, tgt)
	}
	want := []uint64{0x10, 0x1000, 0x2002, 0x10002000}
	if fmt.Sprint(got) != fmt.Sprint(want) || x.Len() != len(want) {
		t.Errorf("targets %#x (len %d), want %#x", got, x.Len(), want)
	}
	for _, q := range []struct {
		lo, hi uint64
		want   uint64
		ok     bool
	}{
		{0x2001, 0x2006, 0x2002, true},
		{0x2002, 0x2003, 0x2002, true},
		{0x2003, 0x2010, 0, false},
		{0x1001, 0x2002, 0, false},
		{0, 0x11, 0x10, true},
		{0x11, 0x1000, 0, false},
		{0x3000, 1 << 40, 0x10002000, true},
		{0x2002, 0x2002, 0, false},
	} {
		tgt, ok, err := x.TargetIn(q.lo, q.hi)
		if err != nil || ok != q.ok || tgt.Addr != q.want || ok && tgt.Kind != plan.TargetBranch {
			t.Errorf("TargetIn(%#x, %#x) = %#x, %v, %v; want %#x, %v", q.lo, q.hi, tgt, ok, err, q.want, q.ok)
		}
	}
	brs, err := x.BranchesTo(0x2002)
	if err != nil || len(brs) != 1 || brs[0] != (plan.Branch{From: 0x1000, To: 0x2002, Kind: decode.BranchJmp, Func: "one"}) {
		t.Errorf("BranchesTo(0x2002) = %+v, %v", brs, err)
	}

	// A site whose index cannot be built takes no trampoline.
	// push %rbp; mov %rsp,%rbp; sub $0x10,%rsp; leave; ret
	code := []byte{0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xc9, 0xc3}
	boom := errors.New("boom")
	bad := plan.IndexX86Branches(func() (*plan.BranchCode, error) { return nil, boom }, decodeAMD)
	site := &plan.Site{Arch: decode.X86_64, Addr: 0x1000, Code: code, Func: plan.AnalyzeX86(0x1000, code, decodeAMD), Branches: bad}
	d := plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true})
	if r := ruleOf(d, "trampoline"); d.Strategy == plan.TrampolineDetour || !strings.Contains(r.Detail, "not known") || !strings.Contains(r.Detail, "boom") {
		t.Errorf("failed index: %s, rule %+v", d.Strategy, r)
	}
	if _, _, err := bad.TargetIn(0, 10); !errors.Is(err, boom) {
		t.Errorf("failed index: error %v", err)
	}
	far := indexOf(&plan.BranchCode{Regions: []plan.CodeRegion{{Addr: 0x1000, Code: code}, {Addr: 1 << 40, Code: code}}}, decode.X86_64)
	if err := far.Build(); !errors.Is(err, plan.ErrCodeSpan) {
		t.Errorf("regions 1 TiB apart: %v", err)
	}
	// The same code with a jump from elsewhere to 0x1004: no detour.
	site.Branches = indexOf(&plan.BranchCode{Regions: []plan.CodeRegion{{Addr: 0x1000, Code: code}, {Addr: 0x5000, Code: []byte{0xe9, 0xff, 0xbf, 0xff, 0xff}}}}, decode.X86_64)
	d = plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true})
	if r := ruleOf(d, "trampoline"); d.Strategy == plan.TrampolineDetour || !strings.Contains(r.Detail, "a jmp at 0x5000 (in no known function) lands at 0x1004, inside the 8 bytes replaced at 0x1000") {
		t.Errorf("foreign jump to 0x1004: %s, rule %+v", d.Strategy, r)
	}
}

// TestBranchIndexARM64BTI checks the arm64 case that needs the index: a bti
// at the probe address stays and the b replaces the word after it, which a
// branch from another function must not reach.
func TestBranchIndexARM64BTI(t *testing.T) {
	// bti c; stp x29, x30, [sp,#-16]!; ret
	code := decode.ARM64Code(0xD503245F, 0xA9BF7BFD, 0xD65F03C0)
	// At 0x2000: b 0x1004; at 0x3000: b 0x1000.
	into := decode.ARM64Code(0x17FFFC01)
	onto := decode.ARM64Code(0x17FFF800)
	for _, tc := range []struct {
		what   string
		region plan.CodeRegion
		detour bool
	}{
		{"branch to the word after the bti", plan.CodeRegion{Addr: 0x2000, Code: into}, false},
		{"branch to the bti", plan.CodeRegion{Addr: 0x3000, Code: onto}, true},
	} {
		x := indexOf(&plan.BranchCode{Regions: []plan.CodeRegion{{Addr: 0x1000, Code: code}, tc.region},
			Funcs: []plan.FuncRange{{Name: "f", Addr: 0x1000, End: 0x100c}, {Name: "g", Addr: tc.region.Addr, End: tc.region.Addr + 4}}}, decode.ARM64)
		site := &plan.Site{Arch: decode.ARM64, Addr: 0x1000, Code: code, Func: plan.AnalyzeARM64(0x1000, code), Branches: x}
		d := plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true})
		r := ruleOf(d, "trampoline")
		if (d.Strategy == plan.TrampolineDetour) != tc.detour {
			t.Errorf("%s: %s, rule %+v", tc.what, d.Strategy, r)
		}
		if !tc.detour && !strings.Contains(r.Detail, "a b at 0x2000 (in g) lands at 0x1004") {
			t.Errorf("%s: rule %+v", tc.what, r)
		}
	}
}

// TestBranchIndexGarbage builds indexes of random bytes at random and
// extreme addresses: no panic, and every target a plain sweep finds is in
// the index.
func TestBranchIndexGarbage(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	addrs := []uint64{0, 0x1000, 1<<64 - 1<<12 - 100, 1<<64 - 1, 1<<64 - 1<<12 + 5, 1 << 63}
	for i := 0; i < 300; i++ {
		var c plan.BranchCode
		for j := rng.Intn(4); j >= 0; j-- {
			b := make([]byte, rng.Intn(3000))
			rng.Read(b)
			// Many branch opcodes.
			for k := range b {
				if rng.Intn(8) == 0 {
					b[k] = []byte{0xe8, 0xe9, 0xeb, 0x74, 0xe3, 0x0f}[rng.Intn(6)]
				}
			}
			a := addrs[rng.Intn(len(addrs))] + uint64(rng.Intn(64))
			if rng.Intn(2) == 0 {
				a = uint64(rng.Int63n(1 << 20))
			}
			c.Regions = append(c.Regions, plan.CodeRegion{Addr: a, Code: b})
			for k := rng.Intn(5); k > 0; k-- {
				fa := a + uint64(rng.Intn(len(b)+1))
				c.Funcs = append(c.Funcs, plan.FuncRange{Name: "f", Addr: fa, End: fa + uint64(rng.Intn(100))})
			}
		}
		for _, arch := range []decode.Arch{decode.X86_64, decode.ARM64} {
			x := indexOf(&c, arch)
			if err := x.Build(); err != nil {
				if !errors.Is(err, plan.ErrCodeSpan) {
					t.Fatalf("build: %v", err)
				}
				continue
			}
			n := 0
			for range x.Targets() {
				n++
			}
			if n != x.Len() {
				t.Fatalf("Targets yields %d, Len %d", n, x.Len())
			}
			for tgt := range x.Targets() {
				if brs, err := x.BranchesTo(tgt); err != nil || len(brs) == 0 {
					t.Fatalf("target %#x: no branch to it (%v)", tgt, err)
				}
				break
			}
			x.TargetIn(0, 1<<64-1)
		}
	}
}

// largestRegion returns the largest code region of c (.text, in a
// compiler's output).
func largestRegion(c *plan.BranchCode) plan.CodeRegion {
	text := c.Regions[0]
	for _, r := range c.Regions {
		if len(r.Code) > len(text.Code) {
			text = r
		}
	}
	return text
}

// cc1Code returns the path of GCC's cc1 (MustHaveCC1) and its code for a
// branch index, open until the test ends.
func cc1Code(t *testing.T) (string, *plan.BranchCode) {
	t.Helper()
	path := testenv.MustHaveCC1(t)
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// The code is the file's mapping: it lives until the test ends.
	t.Cleanup(func() { f.Close() })
	return path, branchCode(t, f)
}
