//go:build linux && amd64

package probe_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// killedTracerEnv makes the test binary a tracer that attaches to the
// process it names, probes killedTracerSpecs with trampolines, says
// "ready" and waits to be killed.
const killedTracerEnv = "PROBEOPT_TEST_KILLED_TRACER"

// killedTracerSpecs are functions of the fixture that all take a
// trampoline: a detour (compiled C) and a nop5.
var killedTracerSpecs = []string{"c_sum", "k_nop"}

func killedTracer(pidText string) int {
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	tr, err := probe.Attach(pid, nil)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if _, err := tr.Add(killedTracerSpecs...); err != nil {
		fmt.Println(err)
		return 1
	}
	for _, p := range tr.Stats().Probes {
		for _, s := range p.Sites {
			if s.Strategy != plan.TrampolineNop && s.Strategy != plan.TrampolineDetour {
				fmt.Printf("%s: %s, not a trampoline\n", s.Symbol, s.Strategy)
				return 1
			}
		}
	}
	if err := tr.Resume(); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("ready")
	for {
		time.Sleep(time.Hour)
	}
}

// TestTracerKilled kills a tracer whose probes are all trampolines with
// SIGKILL while the traced program runs: the kernel detaches the tracee,
// which keeps running correctly on its jumps and slots (no int3 is left
// to kill it), and is no longer traced.
func TestTracerKilled(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	s := startServer(t, exe)
	s.work(t, 5)
	tracer := exec.Command(os.Args[0])
	tracer.Env = append(os.Environ(), killedTracerEnv+"="+strconv.Itoa(s.cmd.Process.Pid))
	out, err := tracer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	defer tracer.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("tracer said %q, %v", line, err)
	}
	if tracerPid(t, s.cmd.Process.Pid) != tracer.Process.Pid {
		t.Fatalf("the server is not traced by the tracer")
	}
	s.work(t, 50) // through the trampolines
	if err := tracer.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = tracer.Wait()
	for i := 0; i < 5; i++ {
		s.work(t, 100)
	}
	if p := tracerPid(t, s.cmd.Process.Pid); p != 0 {
		t.Errorf("the server is still traced by %d", p)
	}
}

// tracerPid returns the process (thread group) that traces process pid,
// or 0.
func tracerPid(t *testing.T, pid int) int {
	t.Helper()
	tid := statusField(t, pid, "TracerPid")
	if tid == 0 {
		return 0
	}
	// TracerPid names the tracing thread, which need not be the
	// tracer's main thread.
	return statusField(t, tid, "Tgid")
}

// statusField returns the numeric field key of /proc/PID/status.
func statusField(t *testing.T, pid int, key string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}
