package main

import (
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/testenv"
)

// elfHeader returns a 64-byte ELF file header with no sections or segments.
func elfHeader(class elf.Class, data elf.Data, machine elf.Machine) []byte {
	h := make([]byte, elfHeaderSize)
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS] = byte(class)
	h[elf.EI_DATA] = byte(data)
	h[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var bo binary.ByteOrder = binary.LittleEndian
	if data == elf.ELFDATA2MSB {
		bo = binary.BigEndian
	}
	bo.PutUint16(h[0x10:], uint16(elf.ET_EXEC))
	bo.PutUint16(h[0x12:], uint16(machine))
	bo.PutUint32(h[0x14:], uint32(elf.EV_CURRENT))
	bo.PutUint16(h[0x34:], elfHeaderSize) // e_ehsize
	bo.PutUint16(h[0x3a:], 64)            // e_shentsize
	return h
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// selfPrefix returns the first n bytes of the test binary.
func selfPrefix(t *testing.T, n int64) []byte {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpenELFErrors checks that each kind of unusable file gets its own
// typed error, and that scan reports it with exit status 1.
func TestOpenELFErrors(t *testing.T) {
	tests := []struct {
		name    string
		content []byte
		want    error
		machine elf.Machine // for a machineError
		msg     string
	}{
		{"script", []byte("#!/bin/sh\necho hello\n"), errNotELF, 0, "not an ELF file"},
		{"empty", nil, errNotELF, 0, "not an ELF file"},
		{"magic-only", []byte("\x7fELF"), errTruncatedELF, 0, "truncated"},
		{"elf32", elfHeader(elf.ELFCLASS32, elf.ELFDATA2LSB, elf.EM_386), errELF32, 0, "32-bit"},
		{"big-endian", elfHeader(elf.ELFCLASS64, elf.ELFDATA2MSB, elf.EM_PPC64), errBigEndian, 0, "big-endian"},
		{"header-cut", elfHeader(elf.ELFCLASS64, elf.ELFDATA2LSB, elf.EM_X86_64)[:40], errTruncatedELF, 0, "truncated"},
		{"riscv", elfHeader(elf.ELFCLASS64, elf.ELFDATA2LSB, elf.EM_RISCV), nil, elf.EM_RISCV, "EM_RISCV"},
		{"no-symbols", elfHeader(elf.ELFCLASS64, elf.ELFDATA2LSB, elf.EM_X86_64), errNoSymbols, 0, "no function symbols"},
		// The start of a real executable: its section headers are at the end.
		{"truncated-self", selfPrefix(t, 4096), errTruncatedELF, 0, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.name, tt.content)
			img, err := openELF(path)
			if err == nil {
				img.Close()
				t.Fatalf("openELF succeeded, want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("openELF error = %v, want %v", err, tt.want)
			}
			if tt.machine != 0 {
				var me *machineError
				if !errors.As(err, &me) || me.Machine != tt.machine {
					t.Errorf("openELF error = %v, want a machineError for %v", err, tt.machine)
				}
			}
			_, stderr, code := runCLI(t, "scan", path)
			if code != exitFailed {
				t.Errorf("scan: exit status %d, want %d", code, exitFailed)
			}
			if !strings.Contains(stderr, tt.msg) || !strings.Contains(stderr, path) {
				t.Errorf("scan: stderr %q, want the path and %q", stderr, tt.msg)
			}
		})
	}
	// A directory is not an ELF file either.
	if _, err := openELF(t.TempDir()); !errors.Is(err, errNotELF) {
		t.Errorf("openELF(directory) error = %v, want errNotELF", err)
	}
}

// scanJSON runs scan --json and parses the report.
func scanJSON(t *testing.T, args ...string) scanReport {
	t.Helper()
	stdout, stderr, code := runCLI(t, append([]string{"scan", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("scan %q: exit status %d: %s", args, code, stderr)
	}
	var rep scanReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("scan --json output is not one JSON object: %v\n%s", err, stdout)
	}
	return rep
}

// TestScanSelf scans the test binary itself, which is what scan does
// without a PATH.
func TestScanSelf(t *testing.T) {
	rep := scanJSON(t, "--limit", "3")
	exe, _ := os.Executable()
	if rep.Path != exe {
		t.Errorf("path %q, want the test binary %q", rep.Path, exe)
	}
	wantArch := map[string]string{"amd64": decode.X86_64.String(), "arm64": decode.ARM64.String()}
	if a, ok := wantArch[runtime.GOARCH]; ok && rep.Arch != a {
		t.Errorf("arch %q, want %q", rep.Arch, a)
	}
	// go test strips the symbol table; the Go function table remains.
	if rep.Symbols != ".symtab" && rep.Symbols != ".gopclntab" {
		t.Errorf("symbols from %q, want .symtab or .gopclntab", rep.Symbols)
	}
	// A Go test binary has thousands of functions.
	if rep.Functions < 1000 || rep.Bytes < 100000 {
		t.Errorf("functions %d, bytes %d: want at least 1000 and 100000", rep.Functions, rep.Bytes)
	}
	if rep.UndecodableFuncs < len(rep.Undecodable) || len(rep.Undecodable) > 3 {
		t.Errorf("undecodable %d listed of %d, with --limit 3", len(rep.Undecodable), rep.UndecodableFuncs)
	}
	if rep.Seconds <= 0 {
		t.Errorf("seconds %v, want > 0", rep.Seconds)
	}
	if rep.Arch != decode.X86_64.String() {
		return
	}
	needX86Decoder(t)
	// The linear sweep of compiler output decodes; allow a few hand-written
	// assembly functions that embed data.
	if rep.UndecodableFuncs*100 > rep.Functions {
		t.Errorf("%d of %d functions do not decode; first: %+v", rep.UndecodableFuncs, rep.Functions, rep.Undecodable)
	}
	if rep.Instructions < rep.Functions || rep.BytesDecoded*100 < rep.Bytes*99 {
		t.Errorf("instructions %d, bytes decoded %d of %d", rep.Instructions, rep.BytesDecoded, rep.Bytes)
	}
	// Both histograms count the functions whose first instruction decoded.
	sumM, sumB := 0, 0
	for _, e := range rep.FirstMnemonics {
		sumM += e.Count
	}
	for _, e := range rep.FirstBranches {
		sumB += e.Count
	}
	if sumM != sumB || sumM < rep.Functions-rep.UndecodableFuncs || sumM > rep.Functions {
		t.Errorf("histograms count %d mnemonics and %d branch kinds of %d functions", sumM, sumB, rep.Functions)
	}
}

// TestScanHuman checks the human summary of the test binary.
func TestScanHuman(t *testing.T) {
	stdout, stderr, code := runCLI(t, "scan")
	if code != exitOK {
		t.Fatalf("exit status %d: %s", code, stderr)
	}
	for _, want := range []string{"file", "functions", "instructions", "bytes", "undecodable", "time"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	if stderr != "" {
		t.Errorf("stderr is not a terminal, yet something was written to it: %q", stderr)
	}
}

// TestScanCObject compiles a small C file with CET enabled and checks that
// every function's first instruction is endbr64.
func TestScanCObject(t *testing.T) {
	cc := testenv.MustHaveTool(t, "gcc")
	if runtime.GOARCH != "amd64" {
		t.Skip("the host compiler does not target x86-64")
	}
	needX86Decoder(t)
	obj := compileC(t, cc, "-O2", "-fcf-protection=full")
	rep := scanJSON(t, "--limit", "-1", obj)
	if rep.Arch != "x86-64" || rep.Functions != 3 {
		t.Fatalf("arch %s, %d functions; want x86-64 and 3", rep.Arch, rep.Functions)
	}
	if rep.UndecodableFuncs != 0 {
		t.Errorf("undecodable functions: %+v", rep.Undecodable)
	}
	if len(rep.FirstMnemonics) != 1 || rep.FirstMnemonics[0].Name != "endbr64" || rep.FirstMnemonics[0].Count != 3 {
		t.Errorf("first mnemonics %+v, want endbr64 x3", rep.FirstMnemonics)
	}
}

// TestScanARM64Object compiles a small C file for arm64 and scans it.
func TestScanARM64Object(t *testing.T) {
	cc := testenv.MustHaveTool(t, "aarch64-linux-gnu-gcc")
	obj := compileC(t, cc, "-O2")
	rep := scanJSON(t, "--limit", "-1", obj)
	if rep.Arch != "arm64" || rep.Functions != 3 {
		t.Fatalf("arch %s, %d functions; want arm64 and 3", rep.Arch, rep.Functions)
	}
	if rep.UndecodableFuncs != 0 {
		t.Errorf("undecodable functions: %+v", rep.Undecodable)
	}
	if rep.Instructions != int(rep.Bytes/4) {
		t.Errorf("%d instructions in %d bytes, want one per 4 bytes", rep.Instructions, rep.Bytes)
	}
}

// fixtureC is three small functions: a leaf, a loop and a call.
const fixtureC = `
int leaf(int a, int b) { return a * b + 7; }
long sum(const long *p, int n) { long s = 0; for (int i = 0; i < n; i++) s += p[i]; return s; }
extern int ext(int);
int caller(int x) { return ext(x) + ext(x + 1); }
`

// compileC compiles fixtureC to an object file with cc and flags.
func compileC(t *testing.T, cc string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "fixture.c")
	if err := os.WriteFile(src, []byte(fixtureC), 0o644); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(dir, "fixture.o")
	args := append(append([]string{}, flags...), "-c", "-o", obj, src)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v\n%s", cc, args, err, out)
	}
	return obj
}
