package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/trampoline"
)

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// scanLines runs scan --json with args and returns the site objects and
// the summary object.
func scanLines(t *testing.T, args ...string) ([]siteResult, summary) {
	t.Helper()
	stdout, _ := runCLIExit(t, exitOK, append([]string{"scan", "--json"}, args...)...)
	var sites []siteResult
	var sum summary
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	for i, l := range lines {
		if i == len(lines)-1 {
			if err := json.Unmarshal([]byte(l), &sum); err != nil || !sum.Summary {
				t.Fatalf("last line is not the summary: %v\n%s", err, l)
			}
			break
		}
		var r siteResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d is not a site object: %v\n%s", i+1, err, l)
		}
		sites = append(sites, r)
	}
	return sites, sum
}

// TestScanBadFiles checks the exit status and message for each kind of
// unusable file named on the command line.
func TestScanBadFiles(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"script", []byte("#!/bin/sh\necho hello\n"), "not an ELF file"},
		{"empty", nil, "not an ELF file"},
		{"elf32", fixture.ELFHeader(elf.ELFCLASS32, elf.ELFDATA2LSB, elf.ET_EXEC, elf.EM_386), "32-bit"},
		{"big-endian", fixture.ELFHeader(elf.ELFCLASS64, elf.ELFDATA2MSB, elf.ET_EXEC, elf.EM_PPC64), "big-endian"},
		{"riscv", fixture.ELFHeader(elf.ELFCLASS64, elf.ELFDATA2LSB, elf.ET_EXEC, elf.EM_RISCV), "EM_RISCV"},
		{"cut", fixture.ELFHeader(elf.ELFCLASS64, elf.ELFDATA2LSB, elf.ET_EXEC, elf.EM_X86_64)[:40], "truncated"},
	} {
		p := writeFile(t, dir, tt.name, tt.data)
		_, stderr, code := runCLI(t, "scan", p)
		if code != exitFailed || !strings.Contains(stderr, tt.msg) || !strings.Contains(stderr, p) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tt.name, code, stderr, exitFailed, tt.msg)
		}
		stdout, _, code := runCLI(t, "scan", "--json", p)
		if code != exitFailed || !strings.Contains(stdout, `"error"`) || !strings.Contains(stdout, `"summary":true`) {
			t.Errorf("%s --json: exit %d, stdout %q", tt.name, code, stdout)
		}
	}
	// One bad file does not stop the others.
	good := fixture.Path(t, "x86_64", "funcs-pie")
	stdout, _, code := runCLI(t, "scan", "--summary", filepath.Join(dir, "script"), good)
	if code != exitFailed || !strings.Contains(stdout, "1 scanned") || !strings.Contains(stdout, "1 failed") {
		t.Errorf("bad + good: exit %d\n%s", code, stdout)
	}
}

// TestScanSelf scans the test binary itself, which is what scan does
// without a PATH.
func TestScanSelf(t *testing.T) {
	sites, sum := scanLines(t)
	exe, _ := os.Executable()
	if sum.Files != 1 || sum.Sites != len(sites) || sum.Functions < 1000 {
		t.Fatalf("summary %+v, %d sites", sum, len(sites))
	}
	for _, s := range sites {
		if s.File != exe {
			t.Fatalf("file %q, want %q", s.File, exe)
		}
	}
	if runtime.GOARCH == "amd64" && sum.Undecodable*100 > sum.Functions {
		t.Errorf("%d of %d functions do not decode", sum.Undecodable, sum.Functions)
	}
}

var readelfLocation = regexp.MustCompile(`Location: (0x[0-9a-f]+)`)

// TestScanJSON checks the JSON fields of a scan of the USDT fixture, and
// that its USDT sites are readelf's.
func TestScanJSON(t *testing.T) {
	path := fixture.Path(t, "x86_64", "usdt-pie")
	sites, sum := scanLines(t, path)
	var usdt, entries int
	for _, s := range sites {
		if s.File != path || s.Bytes == "" || s.Len == 0 || s.Text == "" || len(s.Verdicts) != 2 {
			t.Errorf("site %+v", s)
		}
		if s.Offset != s.Addr { // a PIE whose text sits at its file offset
			t.Errorf("%#x: offset %#x", s.Addr, s.Offset)
		}
		for _, p := range plan.Policies() {
			if v, ok := s.Verdicts[string(p)]; !ok || v.Strategy == "" || v.Reason == "" || v.Detail == "" {
				t.Errorf("%#x: verdict %s = %+v", s.Addr, p, v)
			}
		}
		switch s.Kind {
		case "usdt":
			usdt++
			if s.Provider != "demo" || s.Name == "" || s.Symbol == "" || s.SiteInsn != "nop" {
				t.Errorf("usdt site %+v", s)
			}
		case "entry":
			entries++
			if s.Symbol == "" || s.SymOffset != 0 {
				t.Errorf("entry site %+v", s)
			}
		}
	}
	if sum.Kinds["usdt"] != usdt || sum.Kinds["entry"] != entries {
		t.Errorf("summary kinds %v, counted %d usdt %d entries", sum.Kinds, usdt, entries)
	}
	// The same USDT addresses as readelf -n.
	readelf := testenv.MustHaveTool(t, "readelf")
	out, err := exec.Command(readelf, "-n", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]int{}
	for _, m := range readelfLocation.FindAllStringSubmatch(string(out), -1) {
		a, _ := strconv.ParseUint(m[1], 0, 64)
		want[a]++
	}
	got := map[uint64]int{}
	for _, s := range sites {
		if s.Kind == "usdt" {
			got[s.Addr]++
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("USDT addresses %v, readelf %v", got, want)
	}
}

// TestScanSummaryCounts checks that the summary counts the sites printed.
func TestScanSummaryCounts(t *testing.T) {
	path := fixture.Path(t, "x86_64", "kinds")
	sites, sum := scanLines(t, "--sites", "all", path)
	counts := map[string]map[string]int{}
	for _, s := range sites {
		for p, v := range s.Verdicts {
			if counts[p] == nil {
				counts[p] = map[string]int{}
			}
			counts[p][string(v.Strategy)]++
		}
	}
	for p, m := range sum.Strategies {
		total := 0
		for st, n := range m {
			total += n
			if counts[string(p)][string(st)] != n {
				t.Errorf("%s %s: summary %d, sites %d", p, st, n, counts[string(p)][string(st)])
			}
		}
		if total != len(sites) {
			t.Errorf("%s: %d sites in the summary, %d printed", p, total, len(sites))
		}
	}
	stdout, _, code := runCLI(t, "scan", "--summary", "--json", "--sites", "all", path)
	var only summary
	if code != exitOK || json.Unmarshal([]byte(stdout), &only) != nil || only.Sites != sum.Sites {
		t.Errorf("--summary --json: exit %d, %q", code, stdout)
	}
}

// TestScanTraps checks --traps: the probeopt policy then decides as a
// tracer that only traps, and nothing else changes.
func TestScanTraps(t *testing.T) {
	path := fixture.Path(t, "x86_64", "kinds")
	with, _ := scanLines(t, "--sites", "all", path)
	traps, sum := scanLines(t, "--sites", "all", "--traps", path)
	if !sum.Traps {
		t.Errorf("the summary does not say that trampolines were left out")
	}
	if len(with) != len(traps) {
		t.Fatalf("%d sites with trampolines, %d with --traps", len(with), len(traps))
	}
	trampolines, emulated := 0, 0
	for i, w := range with {
		tr := traps[i]
		if w.Addr != tr.Addr {
			t.Fatalf("site %d: %#x with trampolines, %#x with --traps", i, w.Addr, tr.Addr)
		}
		if w.Verdicts["linux-uprobes"] != tr.Verdicts["linux-uprobes"] {
			t.Errorf("%#x: --traps changed the linux-uprobes verdict: %+v, then %+v", w.Addr, w.Verdicts["linux-uprobes"], tr.Verdicts["linux-uprobes"])
		}
		before, after := w.Verdicts["probeopt"].Strategy, tr.Verdicts["probeopt"].Strategy
		switch {
		case after == plan.TrampolineNop || after == plan.TrampolineDetour:
			t.Errorf("%#x (%s): --traps chose %s", tr.Addr, tr.Text, after)
		case before == plan.TrampolineNop || before == plan.TrampolineDetour:
			trampolines++
		case before != after:
			t.Errorf("%#x (%s): a trap strategy changed with --traps: %s, then %s", tr.Addr, tr.Text, before, after)
		}
		if after == plan.Emulate {
			emulated++
		}
	}
	if trampolines == 0 || emulated == 0 {
		t.Errorf("%d trampoline sites without --traps, %d emulated with it: the fixture no longer tests --traps", trampolines, emulated)
	}
	if _, stderr, code := runCLI(t, "scan", "--traps", "--policy", "linux-uprobes", path); code != exitUsage || !strings.Contains(stderr, "--traps") {
		t.Errorf("--traps --policy linux-uprobes: exit %d, %q", code, stderr)
	}
}

// TestScanAllSites checks that --sites all gives one site per instruction
// objdump shows in the functions.
func TestScanAllSites(t *testing.T) {
	objdump := testenv.MustHaveTool(t, "objdump")
	path := fixture.Path(t, "x86_64", "funcs-nopie")
	sites, _ := scanLines(t, "--sites", "all", "--policy", "probeopt", path)
	out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", "-j", ".text", "-j", ".init", "-j", ".fini", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]bool{}
	insn := regexp.MustCompile(`^\s+([0-9a-f]+):\t`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := insn.FindStringSubmatch(sc.Text()); m != nil {
			a, _ := strconv.ParseUint(m[1], 16, 64)
			want[a] = true
		}
	}
	got := map[uint64]bool{}
	for _, s := range sites {
		if s.Kind == "entry" || s.Kind == "inst" {
			got[s.Addr] = true
		}
		if _, ok := s.Verdicts["linux-uprobes"]; ok {
			t.Fatalf("--policy probeopt printed a linux-uprobes verdict")
		}
	}
	// objdump also lists the padding between functions; every site must be
	// one of its instructions, and the count is that of the functions'.
	for a := range got {
		if !want[a] {
			t.Errorf("site %#x is not an instruction objdump shows", a)
		}
	}
	if len(got) < 100 {
		t.Errorf("only %d instruction sites", len(got))
	}
}

// TestScanSites checks the --sites forms.
func TestScanSites(t *testing.T) {
	mangled := fixture.Path(t, "x86_64", "mangled")
	usdt := fixture.Path(t, "x86_64", "usdt-pie")
	count := func(args ...string) (n int, kinds map[string]int) {
		sites, _ := scanLines(t, args...)
		kinds = map[string]int{}
		for _, s := range sites {
			kinds[string(s.Kind)]++
		}
		return len(sites), kinds
	}
	if n, k := count("--sites", "demo::Widget::*", mangled); n != 4 || k["entry"] != 4 {
		t.Errorf("demo::Widget::*: %d sites %v", n, k)
	}
	if n, k := count("--sites", "main+4,plain_c", mangled); n != 2 || k["inst"] != 1 || k["entry"] != 1 {
		t.Errorf("main+4,plain_c: %d sites %v", n, k)
	}
	if n, k := count("--sites", "demo::add<int>(int, int)", mangled); n != 1 || k["entry"] != 1 {
		t.Errorf("a C++ name with a comma: %d sites %v", n, k)
	}
	if n, k := count("--sites", "usdt:demo:sema_*", usdt); n != 2 || k["usdt"] != 2 {
		t.Errorf("usdt:demo:sema_*: %d sites %v", n, k)
	}
	if n, k := count("--sites", "usdt", "--sites", "main", usdt); n != 11 || k["usdt"] != 10 || k["entry"] != 1 {
		t.Errorf("usdt + main: %d sites %v", n, k)
	}
	// A bpftrace spec names the file when there is no PATH.
	if n, _ := count("--sites", "uprobe:"+mangled+":plain_c"); n != 1 {
		t.Errorf("uprobe:PATH:plain_c: %d sites", n)
	}
	// A spec that matches nothing is a warning, not a failure.
	_, stderr, code := runCLI(t, "scan", "--sites", "nothing_*", mangled)
	if code != exitOK || !strings.Contains(stderr, "no such symbol") {
		t.Errorf("nothing_*: exit %d, stderr %q", code, stderr)
	}
	for _, bad := range [][]string{
		{"--sites", "usdt:a:b:c"}, {"--sites", "1234"}, {"--sites", "entries,,usdt"}, {"--policy", "windows"}, {"--vendor", "via"},
	} {
		if _, stderr, code := runCLI(t, append(append([]string{"scan"}, bad...), mangled)...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d: %s", bad, code, exitUsage, stderr)
		}
	}
}

// TestScanDirectory scans a directory with ELF files, a script, a 32-bit
// ELF file and a symbolic link: the last three are skipped and counted.
func TestScanDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"funcs-pie", "usdt-nopie"} {
		b, err := os.ReadFile(fixture.Path(t, "x86_64", n))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, n, b)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(fixture.Path(t, "aarch64", "usdt-pie"))
	writeFile(t, sub, "arm64", b)
	writeFile(t, sub, "script.sh", []byte("#!/bin/sh\n"))
	writeFile(t, dir, "old32", fixture.ELFHeader(elf.ELFCLASS32, elf.ELFDATA2LSB, elf.ET_EXEC, elf.EM_386))
	if err := os.Symlink(filepath.Join(dir, "funcs-pie"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	_, sum := scanLines(t, "--summary", dir)
	want := map[string]int{"not ELF": 1, "unsupported ELF": 1, "symlink": 1}
	if sum.Files != 3 || sum.Skipped != 3 || fmt.Sprint(sum.SkippedWhy) != fmt.Sprint(want) || sum.Failed != 0 {
		t.Errorf("summary %+v", sum)
	}
	stdout, stderr, code := runCLI(t, "scan", "--summary", dir)
	if code != exitOK || !strings.Contains(stdout, "3 scanned, 3 skipped (not ELF: 1, symlink: 1, unsupported ELF: 1)") {
		t.Errorf("human summary: exit %d\n%s%s", code, stdout, stderr)
	}
	if stderr != "" {
		t.Errorf("stderr is not a terminal, yet progress was drawn: %q", stderr)
	}
}

// TestScanHuman checks the table and the summary.
func TestScanHuman(t *testing.T) {
	path := fixture.Path(t, "x86_64", "nopsites")
	stdout, stderr, code := runCLI(t, "scan", path)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		path + ": x86-64 pie, 10 functions (from .symtab), 6 USDT probes",
		"ADDRESS", "KIND", "SYMBOL", "INSTRUCTION", "LEN", "LINUX-UPROBES", "PROBEOPT", "REASON",
		"nopsites:nop5", "trampoline-nop", "nop5-optimized", "prefix-segment",
		"files", "functions", "sites", "strategy", "reasons (linux-uprobes):", "reasons (probeopt):",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, _ = runCLI(t, "scan", "--summary", "--policy", "linux-uprobes", path)
	if strings.Contains(stdout, "ADDRESS") || strings.Contains(stdout, "probeopt") {
		t.Errorf("--summary --policy linux-uprobes printed a table or the other policy:\n%s", stdout)
	}
}

// TestScanOtherBinaries scans the arm64 fixtures and a stripped Go binary
// for each architecture.
func TestScanOtherBinaries(t *testing.T) {
	sites, sum := scanLines(t, fixture.Path(t, "aarch64", "usdt-pie"))
	if sum.Kinds["usdt"] != 10 || sum.Kinds["entry"] == 0 {
		t.Errorf("arm64 usdt-pie: %+v", sum.Kinds)
	}
	for _, s := range sites {
		if s.Len != 4 {
			t.Errorf("arm64 site %#x: length %d", s.Addr, s.Len)
		}
		if s.Kind == "usdt" && s.Verdicts["linux-uprobes"].Reason != plan.ReasonEmulatedNop {
			t.Errorf("arm64 USDT nop: %+v", s.Verdicts["linux-uprobes"])
		}
	}
	for _, tc := range []struct{ goarch, arch string }{{"amd64", "x86-64"}, {"arm64", "arm64"}} {
		goprog := fixture.GoProgramFor(t, tc.goarch, true)
		stdout, stderr, code := runCLI(t, "scan", goprog)
		if code != exitOK || !strings.Contains(stdout, goprog+": "+tc.arch+" executable, ") ||
			!strings.Contains(stdout, "(from .gopclntab)") || !strings.Contains(stdout, "main.main") {
			t.Errorf("stripped Go binary for %s: exit %d %s\n%.2000s", tc.goarch, code, stderr, stdout)
		}
	}
}

// TestScanARM64Trampolines checks the probeopt verdict of every
// instruction of the arm64 fixtures against trampoline.AnalyzeARM64 on the
// file's bytes: a trampoline-nop for a nop (every USDT site is one), a
// trampoline-detour where it accepts another instruction, and a trap
// strategy where it refuses.
func TestScanARM64Trampolines(t *testing.T) {
	for _, name := range []string{"funcs-pie", "funcs-nopie", "tiny", "usdt-nopie", "usdt-pie", "usdt-stripped"} {
		path := fixture.Path(t, "aarch64", name)
		f, err := elfscan.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sites, _ := scanLines(t, "--sites", "all", path)
		if len(sites) == 0 {
			t.Errorf("%s: no sites", name)
		}
		for _, s := range sites {
			// 8 bytes: a bti at the site stays and the b replaces the word after it.
			code, err := f.Code(s.Addr, 8)
			if err != nil {
				t.Fatalf("%s %#x: %v", name, s.Addr, err)
			}
			var want plan.Strategy
			ts, err := trampoline.AnalyzeARM64(s.Addr, code, nil)
			switch {
			case err != nil:
			case ts.Kind == trampoline.SiteNop:
				want = plan.TrampolineNop
			default:
				want = plan.TrampolineDetour
			}
			v := s.Verdicts["probeopt"]
			if s.Kind == elfscan.SiteUSDT && (binary.LittleEndian.Uint32(code) != 0xD503201F || want != plan.TrampolineNop) {
				t.Errorf("%s %#x: a USDT site that is not a nop site: %s (%v)", name, s.Addr, s.Bytes, err)
			}
			switch {
			case want != "" && v.Strategy != want:
				t.Errorf("%s %#x (%s): probeopt %s (%s), AnalyzeARM64 says %s", name, s.Addr, s.Text, v.Strategy, v.Reason, want)
			case want == "" && (v.Strategy == plan.TrampolineNop || v.Strategy == plan.TrampolineDetour):
				t.Errorf("%s %#x (%s): probeopt %s, AnalyzeARM64 refuses: %v", name, s.Addr, s.Text, v.Strategy, err)
			}
		}
		f.Close()
	}
}

// TestProgress draws and erases the progress line.
func TestProgress(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, "scan", "files", 4)
	p.update(1)
	p.done()
	if got := b.String(); !strings.Contains(got, "\rscan: 1/4 files (25%)") || !strings.HasSuffix(got, "\r\033[K") {
		t.Errorf("progress output %q", got)
	}
	var nilp *progress
	nilp.update(1)
	nilp.done()
}
