//go:build linux && amd64

package probe_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
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
	tracer := startReadyTracer(t, fmt.Sprintf("serve:%d:1", pid))
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

// TestAreasKeptForSignalFrame makes a thread take a signal inside a slot
// and wait in its handler: k_sigslot's load, displaced into the slot of
// its detour, faults on a page the program cannot read. Detached then,
// the tracer must keep its areas (the signal frame on the thread's stack
// holds an address in the slot); when the handler returns, the thread
// runs on in the slot, and the program prints its value and ends well.
// Unmapped, the return would fault in the hole and the program die.
func TestAreasKeptForSignalFrame(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	s := startModeServer(t, exe, "sigslot", 0)
	defer s.stop()
	pid := s.cmd.Process.Pid
	tr, err := probe.Attach(pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Add("k_sigslot"); err != nil {
		t.Fatal(err)
	}
	st := tr.Stats()
	if len(st.Probes) != 1 || len(st.Probes[0].Sites) != 1 || st.Probes[0].Sites[0].Strategy != "trampoline-detour" {
		t.Fatalf("k_sigslot is not a detour: %+v", st.Probes)
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(s.in, "go"); err != nil {
		t.Fatal(err)
	}
	if l, err := fixture.ReadLine(s.out, 10*time.Second); err != nil || strings.TrimSpace(l) != "in handler" {
		t.Fatalf("the program said %q (%v), want %q", l, err, "in handler")
	}
	if hits := tr.Stats().Probes[0].Sites[0].Hits; hits != 1 {
		t.Errorf("%d hits of k_sigslot, want 1", hits)
	}
	if err := tr.Detach(); err != nil {
		t.Fatal(err)
	}
	c := countAreas(t, pid)
	t.Logf("detached with a thread in a handler that interrupted a slot: %+v kept", c)
	if c.data != 1 || c.code == 0 {
		t.Errorf("after the detach the program maps %+v: its areas are gone while a thread will return into a slot", c)
	}
	if d := killCheck(pid, exe); d != "" {
		t.Fatalf("after the detach: %s", d)
	}
	if _, err := fmt.Fprintln(s.in, "release"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"value 0", "done"} {
		if l, err := fixture.ReadLine(s.out, 10*time.Second); err != nil || strings.TrimSpace(l) != want {
			t.Fatalf("the program said %q (%v), want %q", l, err, want)
		}
	}
	if err := s.finish(); err != nil {
		t.Errorf("the program ended with %v", err)
	}
}
