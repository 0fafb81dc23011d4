//go:build linux && amd64

package probe_test

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// fib is what the fixture's c_fib returns.
func fib(n uint64) uint64 {
	a, b := uint64(0), uint64(1)
	for ; n > 0; n-- {
		a, b = b, a+b
	}
	return a
}

// TestReturnProbes probes the entry and the return of a recursive C
// function: every call returns once, and each return event carries the
// value the function computes for the argument of an entry event.
func TestReturnProbes(t *testing.T) {
	argv, want := traceeRun(t, "work", "100")
	r := spawn(t, argv, &probe.Options{Events: true, EventBuffer: 1 << 16}, nil)
	probes, err := r.tr.Add("c_fib", "c_fib%return")
	if err != nil {
		t.Fatal(err)
	}
	r.finish(t, time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	st := r.tr.Stats()
	if len(st.Probes) != 2 || st.Probes[0].Hits == 0 || st.Probes[0].Hits != st.Probes[1].Hits {
		t.Fatalf("entry and return hits differ: %+v", st.Probes)
	}
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			if s.Strategy != plan.TrampolineDetour && s.Strategy != plan.TrampolineNop {
				t.Errorf("%s: %s", p.Spec, s.Strategy)
			}
		}
	}
	// The multiset of return values equals that of fib(argument).
	wantRets := map[uint64]int{}
	gotRets := map[uint64]int{}
	entries, returns := 0, 0
	for {
		select {
		case e, ok := <-r.tr.Events():
			if !ok {
				break // closed: the process is gone and every event read
			}
			switch {
			case e.Probe == probes[0].ID && !e.Return:
				entries++
				wantRets[fib(e.Args[0]&0xffffffff)]++
			case e.Probe == probes[1].ID && e.Return:
				returns++
				gotRets[e.Ret]++
			default:
				t.Errorf("event %+v", e)
			}
			if e.Tid != r.tr.Pid() {
				t.Errorf("event of thread %d", e.Tid)
			}
			continue
		default:
		}
		break
	}
	if uint64(entries) != st.Probes[0].Hits || uint64(returns) != st.Probes[1].Hits || st.DroppedEvents != 0 {
		t.Errorf("%d entry and %d return events, %d dropped, for %d hits", entries, returns, st.DroppedEvents, st.Probes[0].Hits)
	}
	for v, n := range wantRets {
		if gotRets[v] != n {
			t.Errorf("return value %d: %d times, want %d", v, gotRets[v], n)
		}
	}
	t.Logf("%d calls of c_fib, each returned once with fib of its argument", entries)
}

// TestReturnProbeNeedsTrampoline checks that a return probe is refused
// with its reason where traps serve the site.
func TestReturnProbeNeedsTrampoline(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	r := spawn(t, []string{exe, "work", "10"}, &probe.Options{NoTrampolines: true}, nil)
	_, err := r.tr.Add("c_fib%return")
	var re *probe.RejectedError
	if !errors.As(err, &re) || re.Reason != probe.ReasonReturnNeedsTrampoline {
		t.Errorf("return probe with traps: %v, want %s", err, probe.ReasonReturnNeedsTrampoline)
	}
	if _, err := r.tr.Add("c_fib+" + strconv.Itoa(1) + "%return"); err == nil {
		t.Errorf("a return probe at an offset was accepted")
	}
	r.finish(t, time.Minute)
}

// TestReturnAgainstKernel counts the returns of the fixture's C functions
// with return probes and, in a twin run, with the kernel's return probes
// (uretprobes, perf's uprobe PMU): the counts must be equal.
func TestReturnAgainstKernel(t *testing.T) {
	needKernelUprobes(t)
	argv, want := traceeRun(t, "work", "300")
	r := spawn(t, argv, nil, nil)
	if _, err := r.tr.Add("c_*%return", "mix%return", "work%return", "main%return"); err != nil {
		t.Fatal(err)
	}
	r.finish(t, time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	st := r.tr.Stats()
	sites, skipped := kernelSites(t, st)
	if len(skipped) > 0 || len(sites) < 3 {
		t.Fatalf("kernel sites %v, skipped %v", sites, skipped)
	}
	for i := range sites {
		sites[i].ret = true
	}
	kout, kcounts := kernelRun(t, argv, nil, nil, sites)
	if !bytes.Equal(kout, want) {
		t.Errorf("output under kernel return probes differs")
	}
	compared := 0
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			k, ok := kcounts[siteKey{s.Module, s.Addr}]
			if !ok {
				t.Errorf("%s: no kernel count", s.Symbol)
				continue
			}
			compared++
			if s.Hits != k {
				t.Errorf("%s: %d returns traced, kernel uretprobe %d", s.Symbol, s.Hits, k)
			} else {
				t.Logf("%s: %d returns, kernel %d", s.Symbol, s.Hits, k)
			}
		}
	}
	if compared != len(sites) {
		t.Errorf("%d sites compared of %d", compared, len(sites))
	}
}

// TestReturnProbeAddedLater adds a return probe to a function whose entry
// already has a trampoline, in a running process: the jump moves to a new
// slot that arms the return, the entry count goes on, and only the calls
// made after the addition count returns.
func TestReturnProbeAddedLater(t *testing.T) {
	s, tr := attachServer(t, nil)
	defer tr.Detach()
	addResume(t, tr, "c_sum")
	s.work(t, 5)
	if _, err := tr.Add("c_sum%return"); err != nil {
		t.Fatal(err)
	}
	s.work(t, 7)
	st := tr.Stats()
	if len(st.Probes) != 2 || st.Probes[0].Hits != 12 || st.Probes[1].Hits != 7 {
		t.Fatalf("entries and returns: %+v", st.Probes)
	}
	// And the other way round: a return probe alone (no entry counter in
	// its slot), then an entry probe.
	if _, err := tr.Add("c_fib%return"); err != nil {
		t.Fatal(err)
	}
	s.work(t, 10)
	if _, err := tr.Add("c_fib"); err != nil {
		t.Fatal(err)
	}
	s.work(t, 10)
	st = tr.Stats()
	// Every site counts its own returns: c_sum's 10 + 10 more, and c_fib
	// as many returns in each batch as it has entries in the second.
	if len(st.Probes) != 4 || st.Probes[1].Hits != 27 || st.Probes[3].Hits == 0 || st.Probes[2].Hits != 2*st.Probes[3].Hits {
		t.Fatalf("c_sum returns %d; c_fib returns and entries: %+v", st.Probes[1].Hits, st.Probes[2:])
	}
	for _, p := range st.Probes {
		if len(p.Sites) != 1 || p.Sites[0].Strategy != plan.TrampolineDetour {
			t.Errorf("%s: sites %+v", p.Spec, p.Sites)
		}
	}
	// Removing c_sum's return probe moves the jump to a slot that no
	// longer arms the return; removing c_fib's entry probe, to one without
	// the entry counter. The remaining probes count on.
	if entry, ret, ok := probe.SiteHandlers(tr, "c_sum"); !ok || !entry || !ret {
		t.Fatalf("c_sum's slot: entry %v, return %v (found %v)", entry, ret, ok)
	}
	if err := tr.Remove(&st.Probes[1].Probe, &st.Probes[3].Probe); err != nil {
		t.Fatal(err)
	}
	if entry, ret, ok := probe.SiteHandlers(tr, "c_sum"); !ok || !entry || ret {
		t.Errorf("c_sum's slot after its return probe went: entry %v, return %v (found %v)", entry, ret, ok)
	}
	if entry, ret, ok := probe.SiteHandlers(tr, "c_fib"); !ok || entry || !ret {
		t.Errorf("c_fib's slot after its entry probe went: entry %v, return %v (found %v)", entry, ret, ok)
	}
	// One more batch of 10: c_sum is entered 10 times, c_fib returns as
	// often as it was entered in the last batch of 10.
	sumEntries, fibReturns, fibPerBatch := st.Probes[0].Hits, st.Probes[2].Hits, st.Probes[3].Hits
	s.work(t, 10)
	st = tr.Stats()
	if st.Probes[0].Hits != sumEntries+10 || st.Probes[2].Hits != fibReturns+fibPerBatch {
		t.Errorf("after the removals: c_sum entries %d (want %d), c_fib returns %d (want %d)", st.Probes[0].Hits, sumEntries+10, st.Probes[2].Hits, fibReturns+fibPerBatch)
	}
	if err := tr.Detach(); err != nil {
		t.Fatal(err)
	}
	testenv.TextEqualsFile(t, s.cmd.Process.Pid, s.exe)
	s.work(t, 3)
}
