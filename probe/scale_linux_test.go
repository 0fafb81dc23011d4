//go:build linux && (amd64 || arm64)

package probe_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/probe/kuprobe"
)

// scaleCalls scales the calls of a scale workload test to the machine:
// the arm64 guest runs under TCG, tens of times slower than the host, so
// there it makes a twentieth of them.
func scaleCalls(n int) int {
	if runtime.GOARCH == "arm64" {
		return n / 20
	}
	return n
}

// scaleThread is one line of the scale workload's report: what one thread
// did, by its own count.
type scaleThread struct {
	tid, calls, sigCalls, sigOutside int
}

// parseScale reads the scale workload's report.
func parseScale(t *testing.T, out string) []scaleThread {
	t.Helper()
	var ths []scaleThread
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var th scaleThread
		if n, _ := fmt.Sscanf(sc.Text(), "thread %d calls %d signal_calls %d signal_outside %d", &th.tid, &th.calls, &th.sigCalls, &th.sigOutside); n == 4 {
			ths = append(ths, th)
		}
	}
	if len(ths) == 0 {
		t.Fatalf("no thread lines in the workload's output:\n%s", out)
	}
	return ths
}

// scaleEvents counts the events of a traced run per probe and thread,
// and keeps the first argument of each, in delivery order.
type scaleEvents struct {
	mu    sync.Mutex
	count map[[2]int]uint64 // probe, tid
	arg0  map[[2]int][]int64
	keep  bool
	// order is the first argument of every event, in delivery order
	// (when keep).
	order []int64
}

func (s *scaleEvents) add(evs []probe.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs {
		k := [2]int{e.Probe, e.Tid}
		s.count[k]++
		if s.keep {
			s.arg0[k] = append(s.arg0[k], int64(e.Args[0]))
			s.order = append(s.order, int64(e.Args[0]))
		}
	}
}

// traceScale runs the scale workload with args under probeopt, probing
// hot and hot2 with events delivered in batches, and returns its report,
// the tracer's statistics, the probes and the events.
func traceScale(t *testing.T, exe string, ringSize int, keep bool, args ...string) ([]scaleThread, probe.Stats, []*probe.Probe, *scaleEvents) {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	evs := &scaleEvents{count: map[[2]int]uint64{}, arg0: map[[2]int][]int64{}, keep: keep}
	tr, err := probe.Spawn(append([]string{exe}, args...), &probe.SpawnOptions{
		Options: probe.Options{Events: true, RingSize: ringSize, OnEvents: evs.add}, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	probes, err := tr.Add("hot", "hot2")
	if err != nil {
		tr.Kill()
		t.Fatal(err)
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	es, err := tr.Wait()
	if err != nil || es.Code != 0 || es.Signal != 0 {
		t.Fatalf("workload: %+v %v", es, err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	st := tr.Stats()
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			if !strings.HasPrefix(string(s.Strategy), "trampoline") {
				t.Fatalf("%s at %s:%#x: %s, want a trampoline", p.Spec, s.Module, s.Addr, s.Strategy)
			}
		}
	}
	return parseScale(t, string(b)), st, probes, evs
}

// checkEventAccounting requires every hit of every probe, per thread, to
// be delivered as an event or counted dropped; want gives each probe's
// hits per thread by the program's own count.
func checkEventAccounting(t *testing.T, st probe.Stats, probes []*probe.Probe, evs *scaleEvents, want map[[2]int]uint64) {
	t.Helper()
	threadDrops := map[int]uint64{}
	for _, d := range st.ThreadDrops {
		threadDrops[d.Tid] += d.Dropped
	}
	var delivered, dropped uint64
	for _, p := range st.Probes {
		var got uint64
		for k, n := range evs.count {
			if k[0] == p.ID {
				got += n
			}
		}
		if got+p.Dropped != p.Hits {
			t.Errorf("%s: %d events delivered + %d dropped, %d hits", p.Spec, got, p.Dropped, p.Hits)
		}
		delivered += got
		dropped += p.Dropped
	}
	if dropped != st.DroppedEvents {
		t.Errorf("dropped %d per probe, %d in all", dropped, st.DroppedEvents)
	}
	// Per thread: the events delivered and the thread's drops make its
	// hits of every probe.
	perTid := map[int]uint64{}
	for k, n := range want {
		perTid[k[1]] += n
		if got := evs.count[k]; got > n {
			t.Errorf("probe %d, thread %d: %d events for %d calls", k[0], k[1], got, n)
		}
	}
	for tid, n := range perTid {
		var got uint64
		for k, c := range evs.count {
			if k[1] == tid {
				got += c
			}
		}
		if got+threadDrops[tid] != n {
			t.Errorf("thread %d: %d events + %d dropped, %d calls by its own count", tid, got, threadDrops[tid], n)
		}
	}
	for k, n := range evs.count {
		if _, ok := want[k]; !ok {
			t.Errorf("%d events of probe %d from thread %d, which made no call", n, k[0], k[1])
		}
	}
}

// kernelScaleCounts runs the scale workload with args untraced, its
// functions counted by kernel uprobes (the uprobe PMU, the entry
// instruction emulated or stepped by the kernel) in each of its threads
// from their first call, and returns the kernel's count of each function.
func kernelScaleCounts(t *testing.T, exe string, funcs []string, args ...string) map[string]uint64 {
	t.Helper()
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	addrOf := map[string]uint64{}
	for i := range all {
		addrOf[all[i].Name] = all[i].Addr
	}
	// The workload stops itself once its threads exist, before they
	// call anything (SCALE_STOP).
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "SCALE_STOP=1")
	var outb strings.Builder
	cmd.Stdout, cmd.Stderr = &outb, &outb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	if !fixture.Eventually(10*time.Second, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err == nil && strings.Contains(string(b), ") T ")
	}) {
		t.Fatal("the workload did not stop")
	}
	counters := map[string]*kuprobe.Tasks{}
	for _, name := range funcs {
		addr, ok := addrOf[name]
		if !ok {
			t.Fatalf("no function %s in %s", name, exe)
		}
		off, err := f.TextOffset(addr)
		if err != nil {
			t.Fatal(err)
		}
		c, err := kuprobe.OpenTasks(exe, off, pid, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		counters[name] = c
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, outb.String())
	}
	out := map[string]uint64{}
	for name, c := range counters {
		n, err := c.Count()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = n
	}
	return out
}

// TestScaleCountsMatchKernel: two threads hit two trampolines, each
// thread in its own stripe; probeopt's counts equal the kernel's uprobe
// counts of the same workload, and every hit is an event delivered or
// dropped, per probe and per thread (the rings are small: both threads
// drop, which only per-thread rings can tell apart).
func TestScaleCountsMatchKernel(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	exe := fixture.Build(t, fixture.Scale)
	calls := scaleCalls(30_000)
	kern := kernelScaleCounts(t, exe, []string{"hot", "hot2"}, "2", fmt.Sprint(calls))
	ths, st, probes, evs := traceScale(t, exe, 1024, false, "2", fmt.Sprint(calls))
	for _, p := range st.Probes {
		if k := kern[p.Spec]; p.Hits != k || k != uint64(2*calls) {
			t.Errorf("%s: probeopt %d hits, kernel uprobe %d, program %d", p.Spec, p.Hits, k, 2*calls)
		}
	}
	want := map[[2]int]uint64{}
	for _, th := range ths {
		for _, p := range probes {
			want[[2]int{p.ID, th.tid}] = uint64(th.calls)
		}
	}
	checkEventAccounting(t, st, probes, evs, want)
	t.Logf("kernel %v; events %d, dropped %d, per thread %+v", kern, len(evs.count), st.DroppedEvents, st.ThreadDrops)
}

// TestScaleSignalInSlot: a timer signal interrupts each of two threads
// every 100 us, often inside a slot (the handler sees the interrupted
// instruction outside the program's text), and the handler calls the
// probed hot itself, entering the slot again and recording into the ring
// its thread was writing. Every call is counted, every event delivered
// (the rings are large enough for all), and no event is corrupted: each
// thread's events of its loop carry the arguments 0, 1, 2... in order,
// and those of its handler -1, as many as the handler says it ran. A
// ring of 2^20 holds a thread's whole run (2*calls events and the
// handler's), so no event is dropped however late the drain runs.
func TestScaleSignalInSlot(t *testing.T) {
	testenv.NeedPtrace(t)
	if runtime.GOARCH == "arm64" {
		// Seen in the guest: both threads in ptrace stops with SIGPROF
		// pending, almost all their time in the kernel, no progress in
		// 35 s (untraced the run takes 0.1 s).
		t.Skip("in the arm64 guest under TCG a ptrace round trip for each signal outlasts the 100 us timer period: the threads starve")
	}
	exe := fixture.Build(t, fixture.Scale)
	calls := scaleCalls(300_000)
	ths, st, probes, evs := traceScale(t, exe, 1<<20, true, "2", fmt.Sprint(calls), "signal")
	var hot, hot2 *probe.Probe
	for _, p := range probes {
		if p.Spec == "hot" {
			hot = p
		} else {
			hot2 = p
		}
	}
	want := map[[2]int]uint64{}
	var hotCalls, sig, outside uint64
	for _, th := range ths {
		want[[2]int{hot.ID, th.tid}] = uint64(th.calls + th.sigCalls)
		want[[2]int{hot2.ID, th.tid}] = uint64(th.calls)
		hotCalls += uint64(th.calls + th.sigCalls)
		sig += uint64(th.sigCalls)
		outside += uint64(th.sigOutside)
	}
	for _, p := range st.Probes {
		w := uint64(2 * calls)
		if p.Spec == "hot" {
			w = hotCalls
		}
		if p.Hits != w {
			t.Errorf("%s: %d hits, %d calls by the program's count", p.Spec, p.Hits, w)
		}
	}
	checkEventAccounting(t, st, probes, evs, want)
	if st.DroppedEvents != 0 {
		t.Fatalf("%d events dropped with rings of 2^20", st.DroppedEvents)
	}
	for _, th := range ths {
		var loop, handler int64
		for _, a := range evs.arg0[[2]int{hot.ID, th.tid}] {
			switch {
			case a == -1:
				handler++
			case a == loop:
				loop++
			default:
				t.Fatalf("thread %d: event with argument %d after %d loop events in order", th.tid, a, loop)
			}
		}
		if loop != int64(th.calls) || handler != int64(th.sigCalls) {
			t.Errorf("thread %d: %d loop events, %d handler events; it made %d and %d calls", th.tid, loop, handler, th.calls, th.sigCalls)
		}
	}
	if sig == 0 || outside == 0 {
		t.Fatalf("%d signals, %d of them outside the program's text: the handler never interrupted a slot", sig, outside)
	}
	t.Logf("%d signal handler calls, %d interrupted the thread outside the program's text", sig, outside)
}

// TestEventsInCallOrder: two threads take turns calling hot (the k-th
// call in the process is hot(k), made by thread k%2 once the other made
// hot(k-1)), so the order of the calls across threads is the program's
// own. Every event is delivered (rings of 2^20), and the events of both
// threads' rings, read in many drains, arrive in that order.
func TestEventsInCallOrder(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := fixture.Build(t, fixture.Scale)
	calls := scaleCalls(200_000)
	// Rings of 2^20 (a GiB of data area for its 16 stripes) on x86-64;
	// 2^15 hold the arm64 run's 10,000 calls a thread (with rings of
	// 2^20 the arm64 guest's run did not end: open).
	ring := 1 << 20
	if runtime.GOARCH == "arm64" {
		ring = 1 << 15
	}
	_, st, _, evs := traceScale(t, exe, ring, true, "2", fmt.Sprint(calls), "turns")
	if st.DroppedEvents != 0 {
		t.Fatalf("%d events dropped with rings of %d", st.DroppedEvents, ring)
	}
	if len(evs.order) != 2*calls {
		t.Fatalf("%d events, %d calls", len(evs.order), 2*calls)
	}
	late := 0
	for k, a := range evs.order {
		if a != int64(k) {
			if late < 5 {
				t.Errorf("event %d: hot(%d) (the neighbours: %v)", k, a, evs.order[max(0, k-3):min(len(evs.order), k+4)])
			}
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d of %d events out of the calls' order", late, len(evs.order))
	}
}
