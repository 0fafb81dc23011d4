//go:build linux && amd64

package probe_test

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/proc"
)

// sigtrapSession runs "tracee sigtrap ARGS", attached to (every site a
// trap) after it said "ready" when trace is set, sends the lines one at a
// time ("DETACH" detaches the tracer instead) and returns what the program
// printed for each and how it ended.
func sigtrapSession(t *testing.T, exe string, args []string, trace bool, noTrapGuard bool, lines []string) ([]string, proc.ExitStatus) {
	t.Helper()
	cmd := exec.Command(exe, append([]string{"sigtrap"}, args...)...)
	inW, out := fixture.StartPiped(t, cmd)
	defer func() { inW.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }() // the tracer may have collected it
	if l, err := fixture.ReadLine(out, 10*time.Second); err != nil || strings.TrimSpace(l) != "ready" {
		t.Fatalf("tracee sigtrap said %q, %v", l, err)
	}
	var tr *probe.Tracer
	if trace {
		var err error
		tr, err = probe.Attach(cmd.Process.Pid, &probe.Options{NoTrampolines: true, NoTrapGuard: noTrapGuard})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if tr != nil {
				_ = tr.Detach()
			}
		}()
		if _, err := tr.Add("k_push", "k_mov", "mix"); err != nil {
			t.Fatal(err)
		}
		if err := tr.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, l := range lines {
		if l == "DETACH" {
			if err := tr.Detach(); err != nil {
				t.Fatal(err)
			}
			tr = nil
			got = append(got, l)
			continue
		}
		if _, err := inW.WriteString(l + "\n"); err != nil {
			got = append(got, "(write: "+err.Error()+")")
			break
		}
		r, err := fixture.ReadLine(out, 10*time.Second)
		if err != nil {
			got = append(got, "(end)")
			break
		}
		got = append(got, strings.TrimSpace(r))
	}
	inW.Close()
	if tr != nil {
		// Its tracer collects its end.
		st, err := tr.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return got, st
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return got, proc.ExitStatus{Signal: int(ws.Signal())}
		}
		return got, proc.ExitStatus{Code: ws.ExitStatus()}
	case err != nil:
		t.Fatal(err)
	}
	return got, proc.ExitStatus{}
}

// TestTrapGuardProgramSIGTRAP checks that a program's own SIGTRAP ends it
// as it would untraced while the trap guard is installed (a raise, an
// int3 of its own: killed by SIGTRAP, the same wait status), that its
// answers are the untraced ones, that a query of SIGTRAP's disposition
// shows the trap guard while the tracer is attached (the one difference
// package guardian documents) and SIG_DFL again after a clean detach, and
// that a program with its own SIGTRAP handler keeps it: its int3 reaches
// its handler, traced or not; with Options.NoTrapGuard a query shows
// SIG_DFL while attached.
func TestTrapGuardProgramSIGTRAP(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	for _, c := range []struct {
		name  string
		args  []string
		lines []string
		// attached is what "query" prints while the tracer is attached
		// ("" for the untraced answer).
		attached    string
		noTrapGuard bool
	}{
		{"raise", nil, []string{"query", "3", "raise", "3"}, "other", false},
		{"int3", nil, []string{"3", "query", "int3", "3"}, "other", false},
		{"detach", nil, []string{"query", "3", "DETACH", "query", "3", "raise"}, "other", false},
		{"own", []string{"own"}, []string{"query", "3", "int3", "raise", "3", "query"}, "", false},
		{"notrapguard", nil, []string{"query", "3", "raise"}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var plain []string
			for _, l := range c.lines {
				if l != "DETACH" {
					plain = append(plain, l)
				}
			}
			want, wantWS := sigtrapSession(t, exe, c.args, false, false, plain)
			got, gotWS := sigtrapSession(t, exe, c.args, true, c.noTrapGuard, c.lines)
			// What the traced run should print: the untraced lines, with
			// the trap guard shown by a query while attached.
			var exp []string
			attached, j := true, 0
			for _, l := range c.lines {
				if j >= len(want) {
					break
				}
				switch {
				case l == "DETACH":
					attached = false
					exp = append(exp, l)
					continue
				case l == "query" && attached && c.attached != "":
					exp = append(exp, c.attached)
				default:
					exp = append(exp, want[j])
				}
				j++
			}
			if strings.Join(got, "|") != strings.Join(exp, "|") {
				t.Errorf("traced %q, want %q (untraced %q)", got, exp, want)
			}
			if gotWS != wantWS {
				t.Errorf("traced: the program ended with %+v, untraced with %+v", gotWS, wantWS)
			}
			t.Logf("%q, ended with %+v", got, gotWS)
		})
	}
}
