package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/testenv"
)

// TestTracePauseUsage checks that a negative bound and a nice value out
// of range are usage errors.
func TestTracePauseUsage(t *testing.T) {
	if _, stderr, code := runCLI(t, "trace", "--max-pause", "-1ms", "main", "--", "true"); code != exitUsage || !strings.Contains(stderr, "--max-pause") {
		t.Errorf("exit %d, want %d (%s)", code, exitUsage, stderr)
	}
	if _, stderr, code := runCLI(t, "trace", "--stop-nice", "20", "main", "--", "true"); code != exitUsage || !strings.Contains(stderr, "--stop-nice") {
		t.Errorf("exit %d, want %d (%s)", code, exitUsage, stderr)
	}
}

// TestTraceMaxPause traces the fixture with a bound no pass can meet, so
// that every site is written in a stop of its own: the program's output
// and the hit counts must be those of one stop, and the report must give
// the passes and the bound. Then it attaches to a running server the same
// way, the stops at nice -20: the passes pause a running process (a
// longest pause above zero),
// and after the detach the server's text is the file's.
func TestTraceMaxPause(t *testing.T) {
	rep, _ := traceWork(t, "--max-pause", "1ns", "k_*", "c_sum")
	sites := 0
	for _, p := range rep.Probes {
		sites += len(p.Sites)
	}
	if rep.MaxPause != 1 || rep.Passes < sites {
		t.Errorf("report: max pause %d ns, %d passes for %d sites", rep.MaxPause, rep.Passes, sites)
	}

	tracee := traceTracee(t)
	bin := probeoptBinary(t)
	report := filepath.Join(t.TempDir(), "report.json")
	srv, in, sout := startTraceServer(t, tracee)
	pid := srv.Process.Pid
	cmd := exec.Command(bin, "trace", "--max-pause", "1ns", "--stop-nice", "-20", "--json", "-o", report, "k_*", "-p", fmt.Sprint(pid))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitTraced(t, pid, cmd.Process.Pid)
	// The server runs during the install: it answers meanwhile.
	fmt.Fprintln(in, 10)
	if l, err := sout.ReadString('\n'); err != nil || !strings.HasPrefix(l, "work 10 ") {
		t.Fatalf("server answered %q, %v", l, err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("trace: %v\n%s", err, errb.String())
	}
	rep = readTraceReport(t, report)
	sites = 0
	for _, p := range rep.Probes {
		sites += len(p.Sites)
	}
	if !rep.Detached || rep.Passes < sites || rep.LongestPause <= 0 {
		t.Errorf("attached: detached %v, %d passes for %d sites, longest pause %v", rep.Detached, rep.Passes, sites, rep.LongestPause)
	}
	testenv.TextEqualsFile(t, pid, tracee)
	in.Close()
}
