package main

import (
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/fuzz"
	"github.com/probeopt/probeopt/internal/oracle/x86cpu"
	"github.com/probeopt/probeopt/internal/testenv"
)

// spoiledCase is the index, counted over every case the command sends to
// its oracle, of the one case whose result the spoiled oracles change.
const spoiledCase = 5

// spoiledEmuOracle is the x86-64 oracle with the rax of one result
// changed, as if the CPU disagreed with the emulator on that case.
type spoiledEmuOracle struct {
	emuOracle
	seen int
}

func (o *spoiledEmuOracle) Run(img *x86cpu.EmuImage, cases []x86cpu.EmuCase, out []x86cpu.EmuCPUResult) error {
	if err := o.emuOracle.Run(img, cases, out); err != nil {
		return err
	}
	if k := spoiledCase - o.seen; k >= 0 && k < len(cases) {
		out[k].State.GPR[decode.RAX] ^= 0x1000
	}
	o.seen += len(cases)
	return nil
}

// spoiledARM64Oracle is the arm64 oracle with the sp of one result
// changed.
type spoiledARM64Oracle struct {
	arm64Oracle
	seen int
}

func (o *spoiledARM64Oracle) Run(cases []fuzz.ARM64Case, out []fuzz.ARM64Result) error {
	if err := o.arm64Oracle.Run(cases, out); err != nil {
		return err
	}
	if k := spoiledCase - o.seen; k >= 0 && k < len(cases) {
		out[k].State.SP ^= 0x1000
	}
	o.seen += len(cases)
	return nil
}

// needEmuOracle skips the test where the x86-64 oracle cannot run: not on
// Linux x86-64, or (failing under CI) without ptrace.
func needEmuOracle(t *testing.T) {
	t.Helper()
	o, err := fuzz.NewEmuOracle()
	switch {
	case errors.Is(err, fuzz.ErrNotSupported):
		t.Skipf("no emulator oracle here: %v", err)
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOSYS):
		testenv.Unavailable(t, "ptrace: %v", err)
	case err != nil:
		t.Fatalf("NewEmuOracle: %v", err)
	}
	o.Close()
}

// spoilOracles makes the fuzz commands run on spoiled oracles until the
// test ends.
func spoilOracles(t *testing.T) {
	t.Helper()
	emu, arm64 := startEmuOracle, startARM64Oracle
	t.Cleanup(func() { startEmuOracle, startARM64Oracle = emu, arm64 })
	startEmuOracle = func() (emuOracle, error) {
		o, err := emu()
		if err != nil {
			return nil, err
		}
		return &spoiledEmuOracle{emuOracle: o}, nil
	}
	startARM64Oracle = func(seed uint64) (arm64Oracle, error) {
		q, err := arm64(seed)
		if err != nil {
			return nil, err
		}
		return &spoiledARM64Oracle{arm64Oracle: q}, nil
	}
}

// TestFuzzMismatchExitStatus runs the fuzz campaigns in-process on their
// real oracles, first as they are, then with one oracle result spoiled: a
// clean campaign exits with 0; a mismatch makes the exit status 1 and is
// printed with its reason, as text (with the count on stderr) and in the
// JSON report.
func TestFuzzMismatchExitStatus(t *testing.T) {
	tests := []struct {
		name string
		args []string
		need func(t *testing.T)
		// text is in the printed mismatch and its reason, reason in the
		// JSON reason; stderr is the count line.
		text, reason, stderr string
	}{
		{"emulate x86-64", []string{"fuzz", "emulate", "-n", "300", "--seed", "7"}, needEmuOracle,
			"mismatch: ", "rax 0x", "probeopt: 1 mismatches between the emulator and the cpu\n"},
		{"emulate arm64", []string{"fuzz", "emulate", "--arch", "arm64", "-n", "300", "--seed", "7"}, needQEMU,
			"emulate mismatch (class ", "sp 0x", "probeopt: 1 mismatches against qemu-aarch64\n"},
		{"xol arm64", []string{"fuzz", "xol", "--arch", "arm64", "-n", "100", "--seed", "7"}, needQEMU,
			"xol mismatch (class ", "sp 0x", "probeopt: 1 mismatches against qemu-aarch64\n"},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			tt.need(t)
			stdout, stderr, code := runCLI(t, tt.args...)
			if code != exitOK || !strings.Contains(stdout, "mismatches") {
				t.Fatalf("clean campaign: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitOK, stdout, stderr)
			}
			spoilOracles(t)
			stdout, stderr = runCLIExit(t, exitFailed, tt.args...)
			if !strings.Contains(stdout, tt.text) || !strings.Contains(stdout, tt.reason) || strings.Count(stdout, tt.text) != 1 {
				t.Errorf("stdout does not show one mismatch (%q, %q):\n%s", tt.text, tt.reason, stdout)
			}
			if stderr != tt.stderr {
				t.Errorf("stderr %q, want %q", stderr, tt.stderr)
			}
			stdout, stderr = runCLIExit(t, exitFailed, append(tt.args, "--json")...)
			if stderr != "" {
				t.Errorf("--json: stderr %q, want nothing", stderr)
			}
			var rep struct {
				Mismatches int `json:"mismatches"`
				List       []struct {
					Reason string `json:"reason"`
				} `json:"mismatch_list"`
			}
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("--json: %v\n%s", err, stdout)
			}
			if rep.Mismatches != 1 || len(rep.List) != 1 || !strings.Contains(rep.List[0].Reason, tt.reason) {
				t.Errorf("--json: %d mismatches %+v, want one whose reason contains %q", rep.Mismatches, rep.List, tt.reason)
			}
		})
	}
}

// needQEMU skips the test (fails it under CI) without qemu-aarch64 and the
// cross compiler of its harness.
func needQEMU(t *testing.T) {
	t.Helper()
	testenv.MustHaveTool(t, "qemu-aarch64")
	testenv.MustHaveTool(t, fuzz.QEMUHarnessCC)
}
