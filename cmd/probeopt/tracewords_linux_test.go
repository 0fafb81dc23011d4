//go:build linux

package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// TestTraceWords runs trace on the mistakes a user makes and checks that
// each says what is wrong, in a line of its own, with the exit status the
// documentation gives: a function a loaded library does not have (with the
// closest names), a library that never loads, a USDT probe nobody has, an
// offset that is not a number, a stripped executable, probeopt itself and a
// kernel thread; and that probeopt exits with the status of the command it
// ran.
func TestTraceWords(t *testing.T) {
	needLiveTrace(t, "trace")
	trueCmd := testenv.MustHaveTool(t, "true")
	sh := testenv.MustHaveTool(t, "sh")
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stderr []string // each must appear
	}{
		{"misspelt in a library", []string{"libc.so.6:mallok", "libc.so.6:malloc", "--", trueCmd}, exitFailed,
			[]string{`probeopt: probe "libc.so.6:mallok": no such symbol in `, "did you mean malloc"}},
		{"library never loaded", []string{"libnothere.so:foo", "libc.so.6:malloc", "--", trueCmd}, exitOK,
			[]string{`probeopt: warning: probe "libnothere.so:foo": no module it names was loaded`}},
		{"USDT probe nobody has", []string{"usdt:nope:nope", "libc.so.6:malloc", "--", trueCmd}, exitOK,
			[]string{`probeopt: warning: probe "usdt:nope:nope": no loaded module has that USDT probe`}},
		{"offset not a number", []string{"malloc+", "--", trueCmd}, exitFailed,
			[]string{`invalid probe spec "malloc+": want SYM+OFF`}},
		{"stripped executable", []string{"main", "--", fixture.Path(t, "x86_64", "funcs-stripped")}, exitFailed,
			[]string{`probe "main": no probe site matches: the file is stripped (it has no .symtab)`}},
		{"through a wrapper", []string{"main", "--", testenv.MustHaveTool(t, "env"), trueCmd}, exitFailed,
			[]string{"the program CMD starts; to probe a program it runs in turn"}},
		{"kernel thread", []string{"main", "-p", "2"}, exitFailed,
			[]string{"probeopt: attach 2: process 2 is a kernel thread"}},
		{"command exits 57", []string{"libc.so.6:malloc", "--", sh, "-c", "exit 57"}, 57, nil},
		{"command killed", []string{"libc.so.6:malloc", "--", sh, "-c", "kill -9 $$"}, 128 + 9,
			[]string{"was killed by signal 9"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runBinary(t, append([]string{"trace"}, c.args...)...)
			if code != c.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			for _, w := range c.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
			checkMessages(t, stderr, code)
		})
	}

	// probeopt's own process: the command run in this one.
	t.Run("itself", func(t *testing.T) {
		_, stderr, code := runCLI(t, "trace", "-p", strconv.Itoa(os.Getpid()), "main")
		if code != exitFailed || !strings.Contains(stderr, "that is probeopt itself") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		checkMessages(t, stderr, code)
	})
}

// TestTraceNotFoundJSON: the JSON report lists a module that holds
// nothing a spec names, with the closest names.
func TestTraceNotFoundJSON(t *testing.T) {
	needLiveTrace(t, "trace")
	stdout, stderr, code := runBinary(t, "trace", "--json", "libc.so.6:mallok", "--", testenv.MustHaveTool(t, "true"))
	if code != exitFailed {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var rep traceReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if len(rep.Probes) != 1 || len(rep.Probes[0].NotFound) != 1 || !strings.Contains(rep.Probes[0].NotFound[0].Module, "libc.so.6") ||
		!strings.Contains(strings.Join(rep.Probes[0].NotFound[0].Suggestions, " "), "malloc") {
		t.Errorf("not_found: %+v", rep.Probes)
	}
}

// TestTraceWarningsToOutput: with --output the warnings go to the report
// file, not to the standard error the command shares.
func TestTraceWarningsToOutput(t *testing.T) {
	needLiveTrace(t, "trace")
	report := t.TempDir() + "/report.txt"
	_, stderr, code := runBinary(t, "trace", "-o", report, "libnothere.so:foo", "libc.so.6:malloc", "--", testenv.MustHaveTool(t, "true"))
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	const w = `probeopt: warning: probe "libnothere.so:foo": no module it names was loaded`
	if code != exitOK || strings.Contains(stderr, "warning") || !strings.Contains(string(b), w) {
		t.Errorf("exit %d, stderr %q, report:\n%s", code, stderr, b)
	}
}
