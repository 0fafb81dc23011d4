package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// runCLI runs probeopt in-process with args and returns what it printed and
// its exit status.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// needX86Decoder skips the test (fails it under CI) while the x86-64
// decoder cannot decode a one-byte nop: the expectations below come from the
// manuals and objdump and are meaningless against a decoder that decodes
// nothing.
func needX86Decoder(t *testing.T) {
	t.Helper()
	if inst, err := decode.DecodeX86([]byte{0x90}, 0); err != nil || inst.Len != 1 {
		testenv.Unavailable(t, "the x86-64 decoder does not decode nop (90): len %d, error %v", inst.Len, err)
	}
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	fixture.Cleanup()
	os.Exit(code)
}

// probeoptBinary builds the command once per test run and returns its path.
func probeoptBinary(t *testing.T) string {
	t.Helper()
	goTool := testenv.MustHaveTool(t, "go")
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "probeopt-cli-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "probeopt")
		out, err := exec.Command(goTool, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// runCLIExit runs probeopt in-process like runCLI and fails the test
// unless its exit status is want.
func runCLIExit(t *testing.T, want int, args ...string) (stdout, stderr string) {
	t.Helper()
	stdout, stderr, code := runCLI(t, args...)
	if code != want {
		t.Fatalf("probeopt %q: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, want, stdout, stderr)
	}
	return stdout, stderr
}

// runBinary runs the built command and returns its output and exit status.
func runBinary(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runBinaryEnv(t, nil, args...)
}

// TestBinaryExitStatus checks the documented exit statuses of the built
// command: 0 ok, 1 some inputs failed, 2 usage error.
func TestBinaryExitStatus(t *testing.T) {
	notELF := filepath.Join(t.TempDir(), "notelf")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want int
		x86  bool // needs a working x86-64 decoder
	}{
		{[]string{"version"}, exitOK, false},
		{[]string{"--help"}, exitOK, false},
		{[]string{"decode", "f30f1efa"}, exitOK, true},
		{[]string{"decode", "f30f1efa", "0f1f440000"}, exitOK, true},
		{[]string{"decode", "--arch", "arm64", "1f2003d5"}, exitOK, false},
		{[]string{"decode", "zz"}, exitFailed, false},
		{[]string{"decode", "f30"}, exitFailed, false},
		{[]string{"decode", "--json", "f30"}, exitFailed, false},
		{[]string{"decode", "0f"}, exitFailed, false},
		{[]string{"decode", "f30f1efa", "zz"}, exitFailed, false},
		{[]string{"decode", "--arch", "arm64", "1f20"}, exitFailed, false},
		{[]string{"scan", notELF}, exitFailed, false},
		{[]string{"scan", filepath.Join(t.TempDir(), "missing")}, exitFailed, false},
		{[]string{"decode"}, exitUsage, false},
		{[]string{"decode", "--arch", "mips", "00"}, exitUsage, false},
		{[]string{"decode", "--vendor", "via", "00"}, exitUsage, false},
		{[]string{"decode", "--syntax", "plan9", "00"}, exitUsage, false},
		{[]string{"decode", "--addr", "0xzz", "00"}, exitUsage, false},
		{[]string{"decode", "--no-such-flag", "00"}, exitUsage, false},
		{[]string{"scan", "a", "b"}, exitFailed, false},
		{[]string{"scan", "--policy", "nope"}, exitUsage, false},
		{[]string{"scan", "--sites", "usdt:a:b:c"}, exitUsage, false},
		{[]string{"explain", notELF, "main"}, exitFailed, false},
		{[]string{"explain", "main"}, exitUsage, false},
		{[]string{"explain"}, exitUsage, false},
		{[]string{"version", "extra"}, exitUsage, false},
		{[]string{"no-such-command"}, exitUsage, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			if tt.x86 {
				needX86Decoder(t)
			}
			stdout, stderr, code := runBinary(t, tt.args...)
			if code != tt.want {
				t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.want, stdout, stderr)
			}
			if code != exitOK && stderr == "" && !bytes.Contains([]byte(stdout), []byte(`"error"`)) {
				t.Errorf("exit status %d but no message on stderr nor error in JSON", code)
			}
			if code == exitUsage && !bytes.Contains([]byte(stderr), []byte("--help")) {
				t.Errorf("usage error without a hint about --help:\n%s", stderr)
			}
		})
	}
}
