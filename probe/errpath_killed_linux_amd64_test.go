//go:build linux && amd64

package probe_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
)

// waitKilled waits (at most limit) until the traced process is gone and
// checks that Wait says SIGKILL, and that the tracer still answers.
func waitKilled(t *testing.T, tr *probe.Tracer, limit time.Duration) {
	t.Helper()
	select {
	case <-tr.Exited():
	case <-time.After(limit):
		t.Fatalf("the tracer did not see the process die within %v", limit)
	}
	st, err := tr.Wait()
	if err != nil || st.Signal != int(unix.SIGKILL) {
		t.Errorf("Wait: %+v, %v; want killed by SIGKILL", st, err)
	}
	_ = tr.Stats()
	if _, err := tr.Add("c_sum"); err == nil {
		t.Errorf("Add after the process died succeeded")
	}
	if err := tr.Detach(); err != nil && !errors.Is(err, probe.ErrClosed) {
		t.Errorf("Detach after the process died: %v", err)
	}
	tr.Kill() // does not hang
}

// serving spawns the fixture in serve mode (its input a pipe kept open)
// and runs it until its libraries are mapped.
func serving(t *testing.T, opts *probe.Options) *run {
	t.Helper()
	inR, inW := fixture.Pipe(t)
	t.Cleanup(func() { inW.Close() })
	r := spawn(t, []string{traceFixture(t, "tracee"), "serve"}, opts, inR)
	inR.Close()
	if err := r.tr.Resume(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", r.tr.Pid()))
		if strings.Contains(string(b), "/libc.so") {
			break
		}
		if i == 500 {
			t.Fatal("the server does not map libc")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// TestKilledBeforeAdd kills the process while it is stopped, before any
// probe is added: Add fails, nothing hangs.
func TestKilledBeforeAdd(t *testing.T) {
	testenv.NeedPtrace(t)
	if !killStopped(t) {
		return
	}
	r := spawn(t, []string{traceFixture(t, "tracee"), "work", "10"}, nil, nil)
	if err := unix.Kill(r.tr.Pid(), unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.tr.Add("k_*", "c_sum")
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("add: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Add hangs on a killed process")
	}
	_ = r.tr.Resume()
	waitKilled(t, r.tr, 30*time.Second)
}

// killStoppedEnv marks the child test process in which the tests that
// kill the process while the tracer holds it stopped run their scenario
// ("child"): the parent test bounds it in time, so that a tracer that hung
// on such a kill (a SIGKILL wakes the stopped thread, which runs to its
// PTRACE_EVENT_EXIT stop; that stop must still be continued) fails the test
// instead of hanging the suite.
const killStoppedEnv = "PROBEOPT_TEST_KILL_STOPPED"

// killStopped reports whether the calling test runs its scenario here;
// otherwise it skipped or ran it in a child process.
func killStopped(t *testing.T) bool {
	t.Helper()
	if os.Getenv(killStoppedEnv) == "child" {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=5", "-test.v")
	cmd.Env = append(os.Environ(), killStoppedEnv+"=child")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A tracer killed after a minute: the kernel then detaches and kills
	// its tracees.
	switch ended, err := fixture.WaitWithin(cmd, time.Minute); {
	case !ended:
		t.Fatalf("the tracer hangs on a process killed while stopped\n%s", out.String())
	case err != nil:
		t.Fatalf("%v\n%s", err, out.String())
	}
	return false
}

// TestKilledAfterAdd kills the process once its probes are installed,
// while the tracer holds it stopped, then resumes it, in every mode.
func TestKilledAfterAdd(t *testing.T) {
	testenv.NeedPtrace(t)
	if !killStopped(t) {
		return
	}
	for _, o := range []probe.Options{{}, {NoTrampolines: true}, {Events: true}} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			r := spawn(t, []string{traceFixture(t, "tracee"), "work", "10"}, &o, nil)
			if _, err := r.tr.Add("k_*", "c_sum", "work"); err != nil {
				t.Logf("add: %v", err) // k_syscall+... refusals are not expected, but any error is fine here
			}
			if err := unix.Kill(r.tr.Pid(), unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := r.tr.Resume(); err != nil {
				t.Logf("resume: %v", err)
			}
			waitKilled(t, r.tr, 30*time.Second)
		})
	}
}

// TestKilledDuringAdd kills the process at different moments of an Add
// that installs every function of every module it maps (thousands of
// sites, in one batch): whenever the kill lands, Add returns, and the
// tracer reports the death.
func TestKilledDuringAdd(t *testing.T) {
	testenv.NeedPtrace(t)
	if !killStopped(t) {
		return
	}
	for _, delay := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 80 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			r := serving(t, nil)
			pid := r.tr.Pid()
			go func() {
				time.Sleep(delay)
				unix.Kill(pid, unix.SIGKILL)
			}()
			done := make(chan error, 1)
			var n int
			go func() {
				ps, err := r.tr.Add("*:*")
				n = len(ps)
				done <- err
			}()
			select {
			case err := <-done:
				t.Logf("add: %d probes, error %v", n, firstLine(err))
			case <-time.After(time.Minute):
				t.Fatal("Add hangs on a process killed during it")
			}
			waitKilled(t, r.tr, 30*time.Second)
		})
	}
}

// TestKilledWhileTracing kills the process while its probes are hit, in
// every mode.
func TestKilledWhileTracing(t *testing.T) {
	testenv.NeedPtrace(t)
	for _, o := range []probe.Options{{}, {NoTrampolines: true}, {Events: true}, {StepOnly: true}} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			r := spawn(t, []string{traceFixture(t, "tracee"), "threads", "2", "1000000"}, &o, nil)
			if _, err := r.tr.Add("k_*", "c_sum", "work"); err != nil {
				t.Logf("add: %v", firstLine(err))
			}
			if err := r.tr.Resume(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for r.tr.Stats().Traps == 0 && hitsBySymbol(r.tr.Stats())["c_sum"] == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no hit")
				}
				time.Sleep(time.Millisecond)
			}
			if err := unix.Kill(r.tr.Pid(), unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitKilled(t, r.tr, 30*time.Second)
		})
	}
}

// firstLine returns the first line of err's text.
func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
