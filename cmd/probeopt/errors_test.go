package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
)

// badInputs holds the files the error-path tests give the command: each is
// something a new user may well pass by mistake.
type badInputs struct {
	dir      string
	missing  string // does not exist
	emptyDir string // a directory with nothing in it
	textDir  string // a directory with files, none of them ELF
	notELF   string // a shell script
	trunc    string // an ELF file cut inside its section headers
	short    string // an ELF file cut inside its ELF header
	riscv    string // ELF64 for EM_RISCV
	elf32    string // a 32-bit ELF file
	bigEnd   string // a big-endian ELF file
	rel      string // a relocatable object (ET_REL)
	noRead   string // a file without read permission
}

// makeBadInputs writes the bad inputs into a temporary directory. The ELF
// variants are the committed tiny fixture with one header field changed.
func makeBadInputs(t *testing.T) *badInputs {
	t.Helper()
	dir := t.TempDir()
	b := &badInputs{
		dir:      dir,
		missing:  filepath.Join(dir, "missing"),
		emptyDir: filepath.Join(dir, "empty"),
		textDir:  filepath.Join(dir, "text"),
		notELF:   filepath.Join(dir, "script.sh"),
		trunc:    filepath.Join(dir, "truncated"),
		short:    filepath.Join(dir, "short"),
		riscv:    filepath.Join(dir, "riscv"),
		elf32:    filepath.Join(dir, "elf32"),
		bigEnd:   filepath.Join(dir, "bigendian"),
		rel:      filepath.Join(dir, "object.o"),
		noRead:   filepath.Join(dir, "unreadable"),
	}
	tiny, err := os.ReadFile(fixture.Path(t, "x86_64", "tiny"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tiny) < 300 {
		t.Fatalf("the tiny fixture has %d bytes, want at least 300", len(tiny))
	}
	patched := func(off int, v ...byte) []byte {
		c := bytes.Clone(tiny)
		copy(c[off:], v)
		return c
	}
	var machine [2]byte
	binary.LittleEndian.PutUint16(machine[:], 243) // EM_RISCV
	files := map[string][]byte{
		b.notELF: []byte("#!/bin/sh\necho hello\n"),
		b.trunc:  tiny[:300],
		b.short:  tiny[:40],
		b.riscv:  patched(0x12, machine[:]...),
		b.elf32:  patched(4, 1),       // EI_CLASS = ELFCLASS32
		b.bigEnd: patched(5, 2),       // EI_DATA = ELFDATA2MSB
		b.rel:    patched(0x10, 1, 0), // e_type = ET_REL
		b.noRead: tiny,
	}
	files[filepath.Join(b.textDir, "README")] = []byte("not a binary\n")
	files[filepath.Join(b.textDir, "sub", "notes")] = []byte("nor this\n")
	for _, d := range []string{b.emptyDir, filepath.Join(b.textDir, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, data := range files {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(b.noRead, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// runBinaryEnv runs the built command with extra environment variables
// and returns its output and exit status.
func runBinaryEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(probeoptBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run probeopt %q: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// errorCase is one bad input and what the command must answer.
type errorCase struct {
	name string
	args []string
	env  []string // extra environment
	code int
	// stderr and stdout must contain every string listed.
	stderr, stdout []string
	// noStdout is set when nothing may be printed on stdout.
	noStdout bool
	// skip, when it returns a reason, skips the case.
	skip func() string
}

// TestErrorPaths drives the built command with every bad input a new user
// is likely to give and checks the exit status and that the message says
// what is wrong, on stderr, with no panic. The cases run in parallel: each
// is a process of its own that only reads its inputs.
func TestErrorPaths(t *testing.T) {
	in := newErrorInputs(t)
	var cases []errorCase
	for _, group := range []func(*errorInputs) []errorCase{
		decodeErrorCases, scanErrorCases, explainErrorCases, fuzzErrorCases, benchErrorCases, unknownCommandCases,
	} {
		cases = append(cases, group(in)...)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.check(t)
		})
	}
}

// errorInputs are the inputs of the error-path cases: the bad inputs and
// the committed fixtures they name.
type errorInputs struct {
	*badInputs
	funcsPIE, usdtPIE, tiny string   // x86-64 fixtures
	funcsPIEARM64           string   // the arm64 funcs-pie fixture
	noQEMU                  []string // an environment whose PATH finds no qemu-aarch64
}

// newErrorInputs writes the bad inputs and finds the fixtures.
func newErrorInputs(t *testing.T) *errorInputs {
	in := &errorInputs{
		badInputs:     makeBadInputs(t),
		funcsPIE:      fixture.Path(t, "x86_64", "funcs-pie"),
		usdtPIE:       fixture.Path(t, "x86_64", "usdt-pie"),
		tiny:          fixture.Path(t, "x86_64", "tiny"),
		funcsPIEARM64: fixture.Path(t, "aarch64", "funcs-pie"),
	}
	in.noQEMU = []string{"PATH=" + in.emptyDir}
	return in
}

// skipAsRoot skips a case that needs a file root could read anyway.
func skipAsRoot() string {
	if os.Geteuid() == 0 {
		return "running as root: every file is readable"
	}
	return ""
}

// decodeErrorCases returns the bad inputs of decode.
func decodeErrorCases(in *errorInputs) []errorCase {
	return []errorCase{
		{name: "decode/bad-hex", args: []string{"decode", "zz"}, code: exitFailed,
			stderr: []string{`decode "zz": invalid hex digit 'z' at position 1`}},
		{name: "decode/odd-digits", args: []string{"decode", "f30"}, code: exitFailed,
			stderr: []string{`decode "f30": odd number of hex digits (3); write each byte as two digits`}},
		{name: "decode/truncated-x86", args: []string{"decode", "0f"}, code: exitFailed,
			stderr: []string{`decode "0f": truncated instruction`}},
		{name: "decode/truncated-arm64", args: []string{"decode", "--arch", "arm64", "1f20"}, code: exitFailed,
			stderr: []string{`decode "1f20": truncated instruction`}},
		{name: "decode/missing-argument", args: []string{"decode"}, code: exitUsage,
			stderr: []string{"decode: missing HEX argument"}},
		{name: "decode/foreign-arch", args: []string{"decode", "--arch", "mips", "00"}, code: exitUsage,
			stderr: []string{`invalid --arch "mips": want x86-64 or arm64`}},
	}
}

// scanErrorCases returns the bad inputs of scan.
func scanErrorCases(in *errorInputs) []errorCase {
	return []errorCase{
		{name: "scan/missing-file", args: []string{"scan", in.missing}, code: exitFailed,
			stderr: []string{"scan " + in.missing + ": ", "no such file or directory"}},
		{name: "scan/missing-file-json", args: []string{"scan", "--json", in.missing}, code: exitFailed,
			stdout: []string{`"file":"` + in.missing + `"`, `"error":`, "no such file or directory", `"failed":1`}},
		{name: "scan/empty-directory", args: []string{"scan", in.emptyDir}, code: exitFailed,
			stderr: []string{"scan " + in.emptyDir + ": no file to scan: none is an x86-64 or arm64 ELF64 file (it holds no regular files)"}},
		{name: "scan/directory-without-elf", args: []string{"scan", in.textDir}, code: exitFailed,
			stderr: []string{"scan " + in.textDir + ": no file to scan: none is an x86-64 or arm64 ELF64 file (2 files skipped: not ELF: 2)"}},
		{name: "scan/not-elf", args: []string{"scan", in.notELF}, code: exitFailed,
			stderr: []string{"scan " + in.notELF + ": not an ELF file"}},
		{name: "scan/truncated", args: []string{"scan", in.trunc}, code: exitFailed,
			stderr: []string{"scan " + in.trunc + ": malformed ELF file: section headers", "truncated ELF file"}},
		{name: "scan/truncated-header", args: []string{"scan", in.short}, code: exitFailed,
			stderr: []string{"40 bytes, shorter than the 64-byte header: truncated ELF file"}},
		{name: "scan/foreign-machine", args: []string{"scan", in.riscv}, code: exitFailed,
			stderr: []string{"unsupported ELF file: machine EM_RISCV (want EM_X86_64 or EM_AARCH64)"}},
		{name: "scan/32-bit", args: []string{"scan", in.elf32}, code: exitFailed,
			stderr: []string{"unsupported ELF file: 32-bit ELF (want ELF64)"}},
		{name: "scan/big-endian", args: []string{"scan", in.bigEnd}, code: exitFailed,
			stderr: []string{"unsupported ELF file: big-endian ELF"}},
		{name: "scan/relocatable", args: []string{"scan", in.rel}, code: exitFailed,
			stderr: []string{"unsupported ELF file: relocatable object (ET_REL)"}},
		{name: "scan/unreadable", args: []string{"scan", in.noRead}, code: exitFailed,
			stderr: []string{"permission denied"}, skip: skipAsRoot},
		{name: "scan/unknown-symbol", args: []string{"scan", "--sites", "mian", in.funcsPIE}, code: exitOK,
			stderr: []string{"scan " + in.funcsPIE + `: "mian": no such symbol; did you mean main?`}},
		{name: "scan/unknown-plt-symbol", args: []string{"scan", "--sites", "printf", in.funcsPIE}, code: exitOK,
			stderr: []string{`"printf": no such symbol; did you mean printf@plt?`}},
		{name: "scan/unknown-usdt-probe", args: []string{"scan", "--sites", "usdt:dmeo:loop", in.usdtPIE}, code: exitOK,
			stderr: []string{`"usdt:dmeo:loop": no such symbol; did you mean usdt:demo:loop?`}},
		{name: "scan/usdt-semaphore", args: []string{"scan", "--sites", "usdt", in.usdtPIE}, code: exitOK,
			stdout: []string{"2 USDT probes have a semaphore (demo:sema_start, demo:sema_done)", "enabling them needs a pid"}},
		{name: "scan/bad-spec", args: []string{"scan", "--sites", "1234", in.tiny}, code: exitUsage,
			stderr: []string{`invalid --sites: invalid probe spec "1234": a symbol cannot start with a digit`}},
	}
}

// explainErrorCases returns the bad inputs of explain.
func explainErrorCases(in *errorInputs) []errorCase {
	return []errorCase{
		{name: "explain/missing-file", args: []string{"explain", in.missing, "main"}, code: exitFailed,
			stderr: []string{"explain " + in.missing + ": ", "no such file or directory"}},
		{name: "explain/directory", args: []string{"explain", in.textDir, "main"}, code: exitFailed,
			stderr: []string{"explain " + in.textDir + ": not an ELF file: not a regular file"}},
		{name: "explain/not-elf", args: []string{"explain", in.notELF, "main"}, code: exitFailed,
			stderr: []string{"explain " + in.notELF + ": not an ELF file"}},
		{name: "explain/truncated", args: []string{"explain", in.trunc, "main"}, code: exitFailed,
			stderr: []string{"truncated ELF file"}},
		{name: "explain/foreign-machine", args: []string{"explain", in.riscv, "main"}, code: exitFailed,
			stderr: []string{"unsupported ELF file: machine EM_RISCV"}},
		{name: "explain/unknown-symbol", args: []string{"explain", in.funcsPIE, "mian"}, code: exitFailed,
			stderr: []string{"explain " + in.funcsPIE + `: "mian": no such symbol; did you mean main?`}},
		{name: "explain/unknown-symbol-bpftrace-form", args: []string{"explain", "uprobe:" + in.funcsPIE + ":Main"}, code: exitFailed,
			stderr: []string{`no such symbol; did you mean main?`}},
		{name: "explain/unknown-usdt-probe", args: []string{"explain", in.usdtPIE, "usdt:demo:sema"}, code: exitFailed,
			stderr: []string{`"usdt:demo:sema": no such symbol; did you mean usdt:demo:sema_done or usdt:demo:sema_start?`}},
		{name: "explain/no-usdt-notes", args: []string{"explain", in.funcsPIE, "usdt:demo:loop"}, code: exitFailed,
			stderr: []string{`"usdt:demo:loop": no such symbol: the file has no USDT probes`}},
		{name: "explain/mid-instruction-x86", args: []string{"explain", in.funcsPIE, "main+2"}, code: exitOK,
			stderr: []string{"explain main+2: 0x1072 is inside the instruction at 0x1071, not at an instruction start"},
			stdout: []string{"boundary       inside the instruction at 0x1071", "probeopt: reject (mid-instruction)"}},
		{name: "explain/mid-instruction-arm64", args: []string{"explain", in.funcsPIEARM64, "main+2"}, code: exitOK,
			stderr: []string{"is inside the instruction at 0x6c0"},
			stdout: []string{"probeopt: reject (misaligned)"}},
		{name: "explain/unmapped-address", args: []string{"explain", in.funcsPIE, "0xdeadbeef"}, code: exitFailed,
			stderr:   []string{"explain 0xdeadbeef: 0xdeadbeef is not in the executable code of " + in.funcsPIE + ": no PT_LOAD segment maps it; the executable code is at [0x1000, 0x12b1)"},
			noStdout: true},
		{name: "explain/read-only-segment", args: []string{"explain", in.funcsPIE, "0x2010"}, code: exitFailed,
			stderr:   []string{"explain 0x2010: 0x2010 is not in the executable code of " + in.funcsPIE + ": it is in a PT_LOAD segment that is not executable ([0x2000, 0x2188), R); the executable code is at [0x1000, 0x12b1)"},
			noStdout: true},
		{name: "explain/bss", args: []string{"explain", in.funcsPIE, "0x4020"}, code: exitFailed,
			stderr:   []string{"0x4020 is not in the executable code of", "not executable ([0x3dd0, 0x4028), RW)"},
			noStdout: true},
		{name: "explain/elf-header", args: []string{"explain", in.funcsPIE, "0x0"}, code: exitFailed,
			stderr:   []string{"0x0 is not in the executable code of", "not executable ([0x0, 0x650), R)"},
			noStdout: true},
		{name: "explain/unmapped-address-json", args: []string{"explain", "--json", in.funcsPIE, "0xdeadbeef"}, code: exitFailed,
			stdout: []string{`"spec":"0xdeadbeef"`, `"addr":3735928559`, `"error":"0xdeadbeef is not in the executable code of`}},
		{name: "explain/unmapped-address-arm64", args: []string{"explain", in.funcsPIEARM64, "0x1fe00"}, code: exitFailed,
			stderr:   []string{"0x1fe00 is not in the executable code of", "not executable ([0x1fdc8, 0x20048), RW); the executable code is at [0x0, 0xaf8)"},
			noStdout: true},
		{name: "explain/offset-past-end", args: []string{"explain", in.funcsPIE, "main+0x1000"}, code: exitFailed,
			stderr: []string{`invalid probe spec "main+0x1000": offset 0x1000 is past the end of main`}},
		{name: "explain/usdt-semaphore", args: []string{"explain", in.usdtPIE, "usdt:demo:sema_start"}, code: exitOK,
			stdout: []string{"semaphore 0x408a", "the probe runs only once a tracer raises its semaphore in the running process; enabling it needs a pid"}},
		{name: "explain/usdt-semaphore-json", args: []string{"explain", "--json", in.usdtPIE, "usdt:demo:sema_start"}, code: exitOK,
			stdout: []string{`"needs_pid":true`}},
		{name: "explain/missing-path", args: []string{"explain", "main"}, code: exitUsage,
			stderr: []string{"explain: missing PATH"}},
		{name: "explain/bad-spec", args: []string{"explain", in.tiny, "usdt:a:b:c"}, code: exitUsage,
			stderr: []string{`invalid probe spec "usdt:a:b:c": want usdt:PROVIDER:NAME`}},
	}
}

// fuzzErrorCases returns the bad inputs of the fuzz campaigns.
func fuzzErrorCases(in *errorInputs) []errorCase {
	return []errorCase{
		{name: "fuzz/foreign-arch", args: []string{"fuzz", "emulate", "--arch", "mips"}, code: exitUsage,
			stderr: []string{`invalid --arch "mips": want`}},
		{name: "fuzz/no-cases", args: []string{"fuzz", "emulate", "-n", "0"}, code: exitUsage,
			stderr: []string{"invalid -n 0: want a positive number of cases"}},
		{name: "fuzz/unknown-class", args: []string{"fuzz", "emulate", "--class", "nope"}, code: exitUsage,
			stderr: []string{`invalid --class "nope": want one of`}},
		{name: "fuzz/xol-foreign-arch", args: []string{"fuzz", "xol", "--arch", "mips"}, code: exitUsage,
			stderr: []string{`invalid --arch "mips": want`}},
		{name: "fuzz/emulate-arm64-without-qemu", args: []string{"fuzz", "emulate", "--arch", "arm64", "-n", "10"}, env: in.noQEMU, code: exitFailed,
			stderr: []string{"qemu-aarch64", "not found"}},
		{name: "fuzz/xol-without-qemu", args: []string{"fuzz", "xol", "--arch", "arm64", "-n", "10"}, env: in.noQEMU, code: exitFailed,
			stderr: []string{"qemu-aarch64", "not found"}},
	}
}

// benchErrorCases returns the bad flags of bench patch.
func benchErrorCases(in *errorInputs) []errorCase {
	return []errorCase{
		{name: "bench-patch/threads", args: []string{"bench", "patch", "--threads", "0"}, code: exitUsage,
			stderr: []string{"--threads must be between 1 and 64, got 0"}},
		{name: "bench-patch/sizes", args: []string{"bench", "patch", "--sizes", "3"}, code: exitUsage,
			stderr: []string{"--sizes: 3 is not a divisor of 4096"}},
		{name: "bench-patch/repeat", args: []string{"bench", "patch", "--repeat", "0"}, code: exitUsage,
			stderr: []string{"--repeat must be at least 1, got 0"}},
		{name: "bench-patch/argument", args: []string{"bench", "patch", "x"}, code: exitUsage,
			stderr: []string{`patch takes no arguments, got ["x"]`}},
	}
}

// unknownCommandCases returns unknown commands and subcommands, with and without a suggestion.
func unknownCommandCases(in *errorInputs) []errorCase {
	return []errorCase{
		{name: "root/unknown-command", args: []string{"decod", "90"}, code: exitUsage,
			stderr: []string{`unknown command "decod" for "probeopt"; did you mean decode?`, "Run 'probeopt --help' for usage."}, noStdout: true},
		{name: "root/unknown-command-no-suggestion", args: []string{"frobnicate"}, code: exitUsage,
			stderr: []string{`unknown command "frobnicate" for "probeopt"`}, noStdout: true},
		{name: "fuzz/unknown-subcommand", args: []string{"fuzz", "emulat"}, code: exitUsage,
			stderr: []string{`unknown command "emulat" for "probeopt fuzz"; did you mean emulate?`, "Run 'probeopt fuzz --help' for usage."}, noStdout: true},
		{name: "fuzz/unknown-subcommand-typo", args: []string{"fuzz", "xlo"}, code: exitUsage,
			stderr: []string{`unknown command "xlo" for "probeopt fuzz"; did you mean xol?`}, noStdout: true},
		{name: "fuzz/unknown-subcommand-no-suggestion", args: []string{"fuzz", "everything"}, code: exitUsage,
			stderr: []string{`unknown command "everything" for "probeopt fuzz"`}, noStdout: true},
		{name: "bench/unknown-subcommand", args: []string{"bench", "foo"}, code: exitUsage,
			stderr: []string{`unknown command "foo" for "probeopt bench"`, "Run 'probeopt bench --help' for usage."}, noStdout: true},
		{name: "bench/unknown-subcommand-typo", args: []string{"bench", "pach"}, code: exitUsage,
			stderr: []string{`unknown command "pach" for "probeopt bench"; did you mean patch?`}, noStdout: true},
		{name: "bench/hidden-subcommand-not-suggested", args: []string{"bench", "patch-targe"}, code: exitUsage,
			stderr: []string{`unknown command "patch-targe" for "probeopt bench"`}, noStdout: true},
	}
}

// check runs the case and checks its exit status and output.
func (c *errorCase) check(t *testing.T) {
	if c.skip != nil {
		if why := c.skip(); why != "" {
			t.Skip(why)
		}
	}
	stdout, stderr, code := runBinaryEnv(t, c.env, c.args...)
	if code != c.code {
		t.Errorf("exit status %d, want %d", code, c.code)
	}
	for _, want := range c.stderr {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	for _, want := range c.stdout {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if c.noStdout && stdout != "" {
		t.Errorf("stdout is not empty")
	}
	checkMessages(t, stderr, code)
	if t.Failed() {
		t.Logf("probeopt %q\nstdout:\n%s\nstderr:\n%s", c.args, stdout, stderr)
	}
}

// checkMessages checks the form of what a run printed on stderr: every
// line starts with "probeopt: " (a usage error adds the line that points
// to --help), and nothing looks like a panic.
func checkMessages(t *testing.T, stderr string, code int) {
	t.Helper()
	if strings.Contains(stderr, "panic:") || strings.Contains(stderr, "goroutine ") {
		t.Errorf("stderr shows a panic")
	}
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if line == "" && stderr == "" {
			continue
		}
		if !strings.HasPrefix(line, "probeopt: ") && !(code == exitUsage && strings.HasPrefix(line, "Run 'probeopt ")) {
			t.Errorf("stderr line without the probeopt: prefix: %q", line)
		}
	}
	if code == exitUsage && !strings.Contains(stderr, "--help' for usage.") {
		t.Errorf("usage error without the hint about --help")
	}
}

// TestGroupCommandHelp checks that a command that only groups subcommands
// prints its help when run alone, with its subcommands and without a usage
// line of its own, and succeeds.
func TestGroupCommandHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		subs []string
	}{
		{[]string{"fuzz"}, []string{"emulate", "xol"}},
		{[]string{"bench"}, []string{"patch", "trace"}},
		{[]string{"fuzz", "--help"}, []string{"emulate", "xol"}},
		{nil, []string{"decode", "explain", "fuzz", "scan"}},
	} {
		stdout, stderr, code := runBinary(t, c.args...)
		path := strings.TrimSpace("probeopt " + strings.Join(c.args, " "))
		path = strings.TrimSuffix(path, " --help")
		if code != exitOK || stderr != "" {
			t.Errorf("probeopt %q: exit status %d, stderr %q; want 0 and nothing", c.args, code, stderr)
		}
		if !strings.Contains(stdout, "Usage:\n  "+path+" [command]\n") {
			t.Errorf("probeopt %q: the help lacks the usage line %q:\n%s", c.args, path+" [command]", stdout)
		}
		if strings.Contains(stdout, path+" [flags]") {
			t.Errorf("probeopt %q: the help shows %q, which runs nothing", c.args, path+" [flags]")
		}
		for _, sub := range c.subs {
			if !strings.Contains(stdout, "\n  "+sub+" ") {
				t.Errorf("probeopt %q: the help does not list %s", c.args, sub)
			}
		}
	}
}
