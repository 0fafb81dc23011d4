package probe_test

import (
	"bytes"
	"fmt"
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
	calls := map[string]uint64{"main.main": 1, "main.spin": rounds + 1, "main.churn": rounds, "main.safeDiv": rounds, "main.mayPanic": rounds,
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
