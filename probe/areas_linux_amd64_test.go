//go:build linux && amd64

package probe_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
)

// areaCount is what /proc/PID/maps shows of probeopt's areas: data areas
// (the memfd probeopt-data), anonymous r-x mappings (slot areas; the
// program has none of its own) and anonymous rw-p mappings whose first
// bytes are an area header (thread tables).
type areaCount struct{ data, code, tables int }

func countAreas(t *testing.T, pid int) areaCount {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var c areaCount
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		switch {
		case len(f) >= 6 && strings.HasPrefix(f[5], "/memfd:probeopt-data"):
			c.data++
		case len(f) == 5 && f[1] == "r-xp":
			c.code++
		case len(f) == 5 && f[1] == "rw-p":
			lo, _ := strconv.ParseUint(strings.Split(f[0], "-")[0], 16, 64)
			var h [8]byte
			if _, err := mem.ReadAt(h[:], int64(lo)); err == nil && string(h[:]) == "PRBOAREA" {
				c.tables++
			}
		}
	}
	return c
}

// TestAreasReclaimed attaches to a running multi-threaded program that
// takes a signal every 200 us (any thread, inside slots too) again and
// again with trampolines and return probes. A tracer killed with SIGKILL
// leaves its areas (its guardian restores the text only); the next attach
// unmaps them, and each clean Detach unmaps its own: after every detach
// the program maps at most one generation of areas (one kept while a
// thread may still be in it is unmapped at the next detach), answers as
// the untraced program and its text equals its files. PROBEOPT_LONG=1
// makes 200 cycles.
func TestAreasReclaimed(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	want := tserveAnswer(t, exe, 3, 2)
	s := startModeServer(t, exe, "sserve", 2)
	defer s.stop()
	pid := s.cmd.Process.Pid
	ask := func(when string) {
		t.Helper()
		if got, err := s.ask(3); err != nil || got != want {
			t.Fatalf("%s: answer %q (%v), want %q", when, got, err, want)
		}
	}

	// A tracer that dies.
	tracer := exec.Command(os.Args[0])
	tracer.Env = append(os.Environ(), fmt.Sprintf("%s=serve:%d:1", killCampaignEnv, pid))
	out, err := tracer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(l) != "ready" {
		_ = tracer.Process.Kill()
		_ = tracer.Wait()
		t.Fatalf("tracer said %q, %v", l, err)
	}
	ask("traced")
	_ = tracer.Process.Signal(syscall.SIGKILL)
	_ = tracer.Wait()
	for deadline := time.Now().Add(time.Second); killCheck(pid, exe) != ""; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a second after the tracer's death: %s", killCheck(pid, exe))
		}
	}
	left := countAreas(t, pid)
	if left.data != 1 || left.code == 0 || left.tables != 1 {
		t.Fatalf("the dead tracer left %+v, want its data area, slot areas and thread table", left)
	}
	ask("after the tracer's death")

	cycles := 6
	if os.Getenv("PROBEOPT_LONG") != "" {
		cycles = 200
	}
	kept := 0
	for i := 0; i < cycles; i++ {
		tr, err := probe.Attach(pid, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			c := countAreas(t, pid)
			t.Logf("attached: %+v of the dead tracer's areas left", c)
			if c.data+c.code+c.tables != 0 {
				kept++
			}
		}
		if _, err := tr.Add(killCampaignSpecs...); err != nil {
			t.Fatal(err)
		}
		if err := tr.Resume(); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 3; j++ {
			ask(fmt.Sprintf("attach %d", i))
		}
		if err := tr.Detach(); err != nil {
			t.Fatal(err)
		}
		c := countAreas(t, pid)
		if i < 6 || c != (areaCount{}) {
			t.Logf("detach %d: %+v", i, c)
		}
		if c.data > 1 || c.tables > 1 || c.code > 2 {
			t.Errorf("after detach %d the program maps %+v: more than one generation of areas", i, c)
		}
		if c.data+c.code+c.tables != 0 {
			kept++
		}
		if d := killCheck(pid, exe); d != "" {
			t.Fatalf("after detach %d: %s", i, d)
		}
		ask(fmt.Sprintf("detached %d", i))
	}
	if kept == cycles+1 {
		t.Errorf("no attach or detach unmapped the areas")
	}
	if err := s.finish(); err != nil {
		t.Errorf("the program ended with %v", err)
	}
}
