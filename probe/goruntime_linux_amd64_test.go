package probe_test

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// TestGoRuntimeEverySymbol probes every function of a Go program whose
// goroutines return to runtime.goexit+1, whose tight loops are preempted
// asynchronously and whose panics are recovered: the traced program must
// print what an untraced run prints, no detour may cover a place where the
// runtime resumes a goroutine, and the hits at the entry of each function
// of the main package must equal its calls, which the program makes a
// known number of times, plus its calls to morestack (counted at that
// call), in the traced run and under kernel uprobes alike.
func TestGoRuntimeEverySymbol(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	exe := fixture.GoCommandFor(t, "gort", runtime.GOARCH, false)
	const rounds = 12
	argv := []string{exe, strconv.Itoa(rounds)}
	env := os.Environ()
	plain := exec.Command(argv[0], argv[1:]...)
	plain.Env = env
	want, err := plain.Output()
	if err != nil {
		t.Fatalf("untraced: %v", err)
	}

	// A Go function's entry runs again each time its stack check sends
	// it to morestack (to grow the stack, or for a preemption request
	// that arrived in the stack guard): its hits are its calls plus the
	// hits of its call to morestack, which are probed too.
	reentries := morestackCalls(t, exe)
	specs := []string{"*"}
	for _, a := range reentries {
		specs = append(specs, fmt.Sprintf("%#x", a))
	}
	out, stats := spawnTraced(t, argv, env, specs, 3*time.Minute)
	if !bytes.Equal(out, want) {
		t.Errorf("traced output %q, untraced %q", out, want)
	}

	// Every trap at a probe ran its instruction one way; the engine's
	// own site (the dynamic linker's rendezvous) is apart.
	if n := stats.Emulated + stats.Boosted + stats.Stepped; n != stats.Traps {
		t.Errorf("%d traps, but %d emulated + %d boosted + %d stepped = %d", stats.Traps, stats.Emulated, stats.Boosted, stats.Stepped, n)
	}
	calls := map[string]uint64{"main.main": 1, "main.spin": rounds + 1, "main.churn": rounds, "main.safeDiv": rounds, "main.mayPanic": rounds, "main.grow": rounds * (gortGrowDepth + 1),
		"main.safeDiv.func1": rounds, "main.main.func1": rounds, "main.main.gowrap1": rounds, "main.main.func1.deferwrap1": rounds}
	var main []probe.SiteStats
	detours := 0
	hits := map[uint64]uint64{}
	for _, p := range stats.Probes {
		for _, s := range p.Sites {
			hits[s.Addr] += s.Hits
			if p.ID != stats.Probes[0].ID {
				main = append(main, s) // a call to morestack
				continue
			}
			if s.Strategy == plan.TrampolineDetour {
				detours++
			}
			switch {
			case s.Symbol == "runtime.goexit" && s.Strategy == plan.TrampolineDetour:
				t.Errorf("runtime.goexit took a detour over goexit+1")
			case calls[s.Symbol] > 0:
				main = append(main, s)
			}
		}
	}
	if detours == 0 {
		t.Errorf("no site took a detour: the test would not show a torn jump")
	}
	entries := map[string]uint64{}
	for _, s := range main {
		if calls[s.Symbol] > 0 && s.Addr != reentries[s.Symbol] {
			entries[s.Symbol] = s.Addr
		}
	}
	check := func(who string, counts map[uint64]uint64) {
		t.Helper()
		checkGoEntries(t, who, calls, entries, reentries, counts)
	}
	check("probeopt", hits)

	sub := stats
	sub.Probes = []probe.ProbeStats{{Sites: main}}
	sites, _ := kernelSites(t, sub)
	kout, kcounts := kernelRun(t, argv, env, nil, sites)
	if !bytes.Equal(kout, want) {
		t.Errorf("output under kernel uprobes %q, untraced %q", kout, want)
	}
	kernel := map[uint64]uint64{}
	for k, n := range kcounts {
		kernel[k.addr] = n
	}
	check("the kernel", kernel)
	t.Logf("%d sites, %d detours, %d traps; %d entries and calls to morestack, in each run the entries equal the calls plus the calls to morestack",
		len(stats.Probes[0].Sites), detours, stats.Traps, len(sites))
}

// checkGoEntries checks that the hits at the entry of each function of
// calls (entries) equal its calls plus the hits at its call to morestack
// (reentries), in the counts of a run by address.
func checkGoEntries(t *testing.T, who string, calls map[string]uint64, entries, reentries map[string]uint64, counts map[uint64]uint64) {
	t.Helper()
	for name, n := range calls {
		e, ok := entries[name]
		if !ok {
			t.Errorf("%s: no site at its entry", name)
			continue
		}
		if got, again := counts[e], counts[reentries[name]]; got != n+again {
			t.Errorf("%s: %s counts %d hits at %s, the program calls it %d times and it went to morestack %d times", who, name, got, name, n, again)
		}
	}
}

// spawnTraced runs argv traced with specs until it exits (within limit,
// successfully) and returns its standard output and the tracer's
// statistics.
func spawnTraced(t *testing.T, argv, env, specs []string, limit time.Duration) ([]byte, probe.Stats) {
	t.Helper()
	r, w := fixture.Pipe(t)
	tr, err := probe.Spawn(argv, &probe.SpawnOptions{Env: env, Stdout: w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Kill()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { out.ReadFrom(r); r.Close(); close(copied) }()
	if _, err := tr.Add(specs...); err != nil {
		t.Logf("add: %v", err)
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Exited():
	case <-time.After(limit):
		t.Fatalf("%q traced did not finish in %v", argv, limit)
	}
	st, werr := tr.Wait()
	<-copied
	if werr != nil || !st.Success() {
		t.Fatalf("traced %q: %+v %v", argv, st, werr)
	}
	return out.Bytes(), tr.Stats()
}

// morestackCalls returns, for each function of the main package of the Go
// program exe, the address of its call to runtime.morestack_noctxt or
// runtime.morestack (the end of its stack check), found by decoding the
// function.
func morestackCalls(t *testing.T, exe string) map[string]uint64 {
	t.Helper()
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	funcs, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	// Closures, which need their context register, call morestack itself.
	targets := map[uint64]bool{}
	for _, fn := range funcs {
		switch strings.TrimSuffix(fn.Name, ".abi0") {
		case "runtime.morestack_noctxt", "runtime.morestack":
			targets[fn.Addr] = true
		}
	}
	if len(targets) != 2 {
		t.Fatalf("%d of runtime.morestack and runtime.morestack_noctxt found", len(targets))
	}
	out := map[string]uint64{}
	for _, fn := range funcs {
		if !strings.HasPrefix(fn.Name, "main.") {
			continue
		}
		code, err := f.Code(fn.Addr, fn.End-fn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		var in decode.X86Inst
		for off := 0; off < len(code); off += in.Len {
			if err := (decode.X86Decoder{}).Decode(code[off:], fn.Addr+uint64(off), &in); err != nil {
				break
			}
			if in.Branch == decode.BranchCall && targets[in.Target] {
				out[fn.Name] = in.Addr
			}
		}
	}
	return out
}

// gortGrowDepth is the depth of gort's grow recursion (its growDepth).
const gortGrowDepth = 150

// TestGoReturnProbes puts return probes on functions of a Go program
// whose goroutines grow their stacks, collect garbage, panic and recover
// through deferred calls: the program must print what it prints
// untraced, each probe must fire once per return of its function (the
// program's known calls; a call that panics does not return), and each
// return event must carry the function's result, as the program computes
// it, with trampolines and with traps alike. An entry probe's events
// carry the arguments in Go's registers (mayPanic's in rax): each of its
// arguments at least once (a call whose stack check sends it to
// morestack enters it again, with the same argument), and no other.
func TestGoReturnProbes(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := fixture.GoCommandFor(t, "gort", runtime.GOARCH, false)
	const rounds = 12
	argv := []string{exe, strconv.Itoa(rounds)}
	want, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("untraced: %v", err)
	}
	exp := gortReturns(rounds)
	for _, traps := range []bool{false, true} {
		t.Run(map[bool]string{false: "trampolines", true: "traps"}[traps], func(t *testing.T) {
			run := traceGortReturns(t, argv, exp, traps)
			if !bytes.Equal(run.out, want) {
				t.Errorf("traced output %q, untraced %q", run.out, want)
			}
			for g := 0; g < rounds; g++ {
				if run.args[uint64(g)] == 0 || len(run.args) != rounds {
					t.Errorf("mayPanic's entry events have the arguments %v, want 0 to %d", run.args, rounds-1)
					break
				}
			}
			tramps := checkGortReturns(t, run, exp)
			// A return instruction takes a detour only when the bytes
			// after it may be displaced (spin's here).
			if traps != (tramps == 0) {
				t.Errorf("%d return sites with trampolines", tramps)
			}
		})
	}
}

// gortExpect is what gort's functions return, as the program computes it:
// how many times each returns, and, where known, how often each result
// comes back.
type gortExpect struct {
	returns map[string]uint64
	results map[string]map[uint64]uint64
}

// gortReturns computes gortExpect for a run of rounds rounds.
func gortReturns(rounds int) gortExpect {
	results := map[string]map[uint64]uint64{"main.mayPanic": {}, "main.safeDiv": {}, "main.grow": {}, "main.churn": nil, "main.spin": nil}
	returns := map[string]uint64{"main.spin": uint64(rounds + 1), "main.churn": uint64(rounds), "main.safeDiv": uint64(rounds), "main.grow": uint64(rounds * (gortGrowDepth + 1))}
	for g := 0; g < rounds; g++ {
		if g%3 == 0 {
			results["main.safeDiv"][uint64(-len(fmt.Sprintf("third %d", g)))]++
			continue
		}
		returns["main.mayPanic"]++
		results["main.mayPanic"][uint64(100/(g%3))]++
		results["main.safeDiv"][uint64(100/(g%3))]++
	}
	for v := 0; v <= gortGrowDepth; v++ {
		results["main.grow"][uint64(v)] = uint64(rounds)
	}
	// spin's loop, computed here.
	spin := func(n int) uint64 {
		x := 0
		for i := 0; i < n; i++ {
			x = x*31 + i ^ x>>7
		}
		return uint64(x)
	}
	results["main.spin"] = map[uint64]uint64{spin(5_000_000): 1}
	for g := 0; g < rounds; g++ {
		results["main.spin"][spin(20000+g)]++
	}
	return gortExpect{returns: returns, results: results}
}

// resumeToExit resumes tr and waits for its exit, for the output read
// from r and for the reader of its events (evDone closed), and returns
// the output; an exit other than 0 fails the test.
func resumeToExit(t *testing.T, tr *probe.Tracer, r io.Reader, evDone <-chan struct{}) []byte {
	t.Helper()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { out.ReadFrom(r); close(copied) }()
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	st, err := tr.Wait()
	<-copied
	<-evDone
	if err != nil || !st.Success() {
		t.Fatalf("traced: %+v %v\n%s", st, err, out.Bytes())
	}
	return out.Bytes()
}

// gortRun is a traced run of gort: its output, the results of each
// function's return events, mayPanic's entry arguments, and the stats.
type gortRun struct {
	out   []byte
	got   map[string]map[uint64]uint64
	args  map[uint64]uint64
	stats probe.Stats
}

// traceGortReturns runs gort with a return probe on each function of exp
// and an entry probe on main.mayPanic, events on, traps only with traps.
func traceGortReturns(t *testing.T, argv []string, exp gortExpect, traps bool) gortRun {
	t.Helper()
	var specs []string
	for name := range exp.returns {
		specs = append(specs, name+"%return")
	}
	specs = append(specs, "main.mayPanic")
	r, w := fixture.Pipe(t)
	tr, err := probe.Spawn(argv, &probe.SpawnOptions{Stdout: w, Options: probe.Options{Events: true, NoTrampolines: traps}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Kill()
	probes, err := tr.Add(specs...)
	if err != nil {
		t.Fatal(err)
	}
	name := map[int]string{}
	for _, p := range probes {
		name[p.ID] = strings.TrimSuffix(p.Spec, "%return")
	}
	run := gortRun{got: map[string]map[uint64]uint64{}, args: map[uint64]uint64{}}
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		for ev := range tr.Events() {
			n := name[ev.Probe]
			if ev.Probe == probes[len(probes)-1].ID {
				run.args[ev.Args[0]]++
				continue
			}
			if !ev.Return {
				t.Errorf("%s: an event that is not a return: %+v", n, ev)
			}
			if run.got[n] == nil {
				run.got[n] = map[uint64]uint64{}
			}
			run.got[n][ev.Ret]++
		}
	}()
	run.out = resumeToExit(t, tr, r, evDone)
	run.stats = tr.Stats()
	if run.stats.DroppedEvents != 0 {
		t.Fatalf("%d events dropped", run.stats.DroppedEvents)
	}
	return run
}

// checkGortReturns compares each return probe's hits, events and results
// with exp, and returns how many return sites had a trampoline.
func checkGortReturns(t *testing.T, run gortRun, exp gortExpect) (tramps int) {
	t.Helper()
	for _, p := range run.stats.Probes {
		if !strings.HasSuffix(p.Spec, "%return") {
			continue
		}
		n := strings.TrimSuffix(p.Spec, "%return")
		var hits, events uint64
		var where []string
		for _, s := range p.Sites {
			hits += s.Hits
			where = append(where, fmt.Sprintf("%s %s", s.Symbol, s.Strategy))
			if s.Strategy == plan.TrampolineDetour || s.Strategy == plan.TrampolineNop {
				tramps++
			}
		}
		for _, c := range run.got[n] {
			events += c
		}
		if hits != exp.returns[n] || events != exp.returns[n] {
			t.Errorf("%s: %d hits, %d return events at %v; it returns %d times", n, hits, events, where, exp.returns[n])
		}
		if w := exp.results[n]; w != nil && !maps.Equal(run.got[n], w) {
			t.Errorf("%s: results %v, the program's %v", n, run.got[n], w)
		}
		t.Logf("%s: %d returns at %v", n, hits, where)
	}
	return tramps
}

// TestGoStartEntries probes the first instructions a Go program runs,
// before its runtime gives the thread a %fs base: a trampoline there must
// not read the thread pointer through %fs (a fault at address 0), and
// each runs once.
func TestGoStartEntries(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := fixture.GoCommandFor(t, "gort", runtime.GOARCH, false)
	argv := []string{exe, "2"}
	want, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("untraced: %v", err)
	}
	specs := []string{"_rt0_amd64_linux", "_rt0_amd64", "runtime.rt0_go"}
	out, st := spawnTraced(t, argv, os.Environ(), specs, time.Minute)
	if !bytes.Equal(out, want) {
		t.Errorf("traced output %q, untraced %q", out, want)
	}
	tramps := 0
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			if s.Strategy == plan.TrampolineDetour || s.Strategy == plan.TrampolineNop {
				tramps++
			}
		}
		if p.Hits != 1 {
			t.Errorf("%s: %d hits, it runs once", p.Spec, p.Hits)
		}
	}
	if tramps == 0 {
		t.Errorf("no start entry took a trampoline: the test shows nothing")
	}
}
