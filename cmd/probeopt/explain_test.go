package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/trampoline"
)

func TestExplain(t *testing.T) {
	nopsites := fixture.Path(t, "x86_64", "nopsites")
	stdout, stderr := runCLIExit(t, exitOK, "explain", nopsites, "usdt:nopsites:nop5")
	for _, want := range []string{
		"site", "usdt nopsites:nop5", "function", "sites +0x4", "usdt", "semaphore", "site nop5", "arguments",
		"signed 4-byte value in register edi", "bytes", "0f 1f 44 00 00", "instruction", "opcode", "boundary",
		"an instruction starts here",
		"linux-uprobes: trampoline-nop (nop5-optimized)", "red zone",
		"probeopt:", "trampoline-nop",
		"decode", "pass",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("explain lacks %q:\n%s", want, stdout)
		}
	}

	// A probe inside an instruction, and the bpftrace form without PATH.
	kinds := fixture.Path(t, "x86_64", "kinds")
	stdout, _, code := runCLI(t, "explain", "uprobe:"+kinds+":k_mid_movabs+2")
	if code != exitOK || !strings.Contains(stdout, "inside the instruction at") ||
		!strings.Contains(stdout, "probeopt: reject (mid-instruction)") || !strings.Contains(stdout, "Linux does not check boundaries") {
		t.Errorf("mid-instruction:\n%s", stdout)
	}

	// JSON: one object per site, with every policy's rules.
	stdout, _, code = runCLI(t, "explain", "--json", kinds, "k_syscall+5")
	var e struct {
		siteResult
		Boundary string                 `json:"boundary"`
		Rules    map[string][]plan.Rule `json:"rules"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
		Decoded map[string]string `json:"decoded"`
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &e) != nil {
		t.Fatalf("explain --json: exit %d %q", code, stdout)
	}
	if e.Function.Name != "k_syscall" || len(e.Rules["linux-uprobes"]) == 0 || len(e.Rules["probeopt"]) == 0 ||
		e.Verdicts["linux-uprobes"].Reason != plan.ReasonXOLSyscall || e.Verdicts["probeopt"].Reason != plan.ReasonSyscall || e.Decoded["opcode"] == "" {
		t.Errorf("explain --json: %+v", e)
	}

	// A glob explains the first --limit sites and says so.
	_, stderr, code = runCLI(t, "explain", "--limit", "2", kinds, "k_nop*")
	if code != exitOK || !strings.Contains(stderr, "showing the first 2") {
		t.Errorf("glob: exit %d, stderr %q", code, stderr)
	}

	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"explain", kinds}, exitUsage},               // no PATH in the spec
		{[]string{"explain", kinds, "usdt:a:b:c"}, exitUsage}, // bad spec
		{[]string{"explain", "--limit", "0", kinds, "main"}, exitUsage},
		{[]string{"explain", kinds, "no_such_function"}, exitFailed},
		{[]string{"explain", kinds, "main+0x100000"}, exitFailed},
		{[]string{"explain", "/nonexistent", "main"}, exitFailed},
	} {
		if _, stderr, code := runCLI(t, tc.args...); code != tc.code {
			t.Errorf("%q: exit %d, want %d: %s", tc.args, code, tc.code, stderr)
		}
	}
}

// TestExplainNotCode checks the error for an address at which the file
// holds no code: typed, wrapping elfscan.ErrNotMapped, naming where the
// address is and where the code is.
func TestExplainNotCode(t *testing.T) {
	path := fixture.Path(t, "x86_64", "funcs-pie")
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := checkCode(f, path, 0x1071); err != nil {
		t.Errorf("code at 0x1071: %v", err)
	}
	for _, c := range []struct {
		addr   uint64
		inSeg  bool
		phrase string
	}{
		{0xdeadbeef, false, "no PT_LOAD segment maps it"},
		{0x2010, true, "it is in a PT_LOAD segment that is not executable ([0x2000, 0x2188), R)"},
		{0x4020, true, "it is in a PT_LOAD segment that is not executable ([0x3dd0, 0x4028), RW)"}, // .bss
	} {
		err := checkCode(f, path, c.addr)
		var nc *notCodeError
		if !errors.As(err, &nc) || !errors.Is(err, elfscan.ErrNotMapped) {
			t.Fatalf("%#x: %v, want a *notCodeError wrapping ErrNotMapped", c.addr, err)
		}
		if nc.Addr != c.addr || (nc.In != nil) != c.inSeg || len(nc.Exec) != 1 {
			t.Errorf("%#x: %+v", c.addr, nc)
		}
		want := fmt.Sprintf("%#x is not in the executable code of %s: %s", c.addr, path, c.phrase)
		if msg := err.Error(); !strings.HasPrefix(msg, want) || !strings.HasSuffix(msg, "; the executable code is at [0x1000, 0x12b1)") {
			t.Errorf("%#x: %q, want it to start with %q and name the executable code", c.addr, msg, want)
		}
	}
	stdout, stderr, code := runCLI(t, "explain", path, "0x2010")
	if code != exitFailed || stdout != "" || !strings.Contains(stderr, "probeopt: explain 0x2010: 0x2010 is not in the executable code of") {
		t.Errorf("explain 0x2010: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// With --json the failure is also a JSON object with an error field.
	stdout, stderr, code = runCLI(t, "explain", "--json", path, "0x2010")
	if code != exitFailed || !strings.Contains(stdout, `"error":"0x2010 is not in the executable code`) || !strings.Contains(stderr, "not in the executable code") {
		t.Errorf("explain --json 0x2010: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestExplainARM64Trampoline explains an arm64 function entry and a USDT
// nop: probeopt takes the trampoline trampoline.AnalyzeARM64 accepts on
// the file's bytes, and the trampoline rule says what was checked.
func TestExplainARM64Trampoline(t *testing.T) {
	path := fixture.Path(t, "aarch64", "usdt-pie")
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		spec, want, rule string
		addr             uint64
	}{
		{"main", "probeopt: trampoline-detour (trampoline-detour)", "never inside the replaced bytes", 0x6c0},
		{"usdt:demo:loop", "probeopt: trampoline-nop (trampoline-nop)", "no branch can land inside it", 0x740},
	} {
		code, err := f.Code(tc.addr, 8)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := trampoline.AnalyzeARM64(tc.addr, code, nil); err != nil {
			t.Fatalf("%s: AnalyzeARM64 refuses it: %v", tc.spec, err)
		}
		stdout, stderr, code2 := runCLI(t, "explain", path, tc.spec)
		if code2 != exitOK {
			t.Fatalf("%s: exit %d: %s", tc.spec, code2, stderr)
		}
		for _, want := range []string{fmt.Sprintf("%#x", tc.addr), tc.want, "trampoline", "pass", tc.rule} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%s: explain lacks %q:\n%s", tc.spec, want, stdout)
			}
		}
	}
}
