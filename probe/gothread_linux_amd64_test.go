package probe_test

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
)

// TestGoEventThreads traces main.work and its returns in a static Go
// program (no C library, no thread control block) whose goroutines say
// which kernel thread they are locked to (syscall.Gettid) and which
// goroutine they are (runtime.Stack): every event of a locked goroutine
// carries that thread id and goroutine id, every event of a roaming one
// its goroutine id and a thread of the process, with trampolines and with
// traps, from the binary's DWARF and (stripped) from the Go release's
// known layout. The assembly that work calls once per call (bytealg.Count,
// ABI0: r14 is not g there) is probed too: its events carry the thread
// (a locked goroutine's thread has exactly its calls) and no goroutine.
func TestGoEventThreads(t *testing.T) {
	testenv.NeedPtrace(t)
	const workers, calls = 3, 300
	for _, stripped := range []bool{false, true} {
		exe := fixture.GoCommandFor(t, "gothreads", runtime.GOARCH, stripped)
		for _, traps := range []bool{false, true} {
			name := fmt.Sprintf("%s/%s", map[bool]string{false: "dwarf", true: "stripped"}[stripped], map[bool]string{false: "trampolines", true: "traps"}[traps])
			t.Run(name, func(t *testing.T) { testGoEventThreads(t, exe, workers, calls, traps) })
		}
	}
}

type goWorker struct {
	locked    bool
	tid, goid int
	sum       int
}

func testGoEventThreads(t *testing.T, exe string, workers, calls int, traps bool) {
	argv := []string{exe, strconv.Itoa(workers), strconv.Itoa(calls)}
	r, w := fixture.Pipe(t)
	tr, err := probe.Spawn(argv, &probe.SpawnOptions{Stdout: w, Options: probe.Options{Events: true, NoTrampolines: traps, EventBuffer: 1 << 16}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Kill()
	// The entry runs again each time the stack check sends the function
	// to morestack: those entries are the hits of that call, probed too.
	again := morestackCalls(t, exe)["main.work"]
	if again == 0 {
		t.Fatal("main.work calls no morestack")
	}
	probes, err := tr.Add("main.work", "main.work%return", fmt.Sprintf("%#x", again), fmt.Sprintf("%#x", goAsmFunc(t, exe, "internal/bytealg.Count")))
	if err != nil {
		t.Fatal(err)
	}
	var evs []probe.Event
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		for ev := range tr.Events() {
			evs = append(evs, ev)
		}
	}()
	out := resumeToExit(t, tr, r, evDone)
	stats := tr.Stats()
	if stats.DroppedEvents != 0 {
		t.Fatalf("%d events dropped", stats.DroppedEvents)
	}
	// The program's own report.
	ws := map[int]goWorker{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var i int
		var g goWorker
		if _, err := fmt.Sscanf(l, "worker %d locked %t tid %d goid %d sum %d", &i, &g.locked, &g.tid, &g.goid, &g.sum); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		want := i*1_000_000*calls + calls*(calls-1)/2
		if g.sum != want || g.goid <= 0 || g.locked && g.tid <= 0 {
			t.Fatalf("output line %q: want sum %d, a goroutine id and a thread id", l, want)
		}
		ws[i] = g
	}
	if len(ws) != 2*workers {
		t.Fatalf("%d workers reported, want %d:\n%s", len(ws), 2*workers, out)
	}
	entries, returns, reentries, asmTids := map[int]int{}, map[int]int{}, map[int]int{}, map[int]int{}
	bad := 0
	for _, ev := range evs {
		var i int
		switch ev.Probe {
		case probes[0].ID:
			i = int(ev.Args[0])
			entries[i]++
		case probes[1].ID:
			i = int(ev.Ret / 1_000_000)
			returns[i]++
		case probes[2].ID:
			// At the call, rax still holds the first argument (its
			// spill to the stack leaves it).
			reentries[int(ev.Args[0])]++
			continue
		case probes[3].ID:
			asmTids[ev.Tid]++
			if ev.Tid <= 0 || ev.Goid != 0 {
				if bad++; bad <= 10 {
					t.Errorf("assembly: event %+v, want a thread and no goroutine", ev)
				}
			}
			continue
		default:
			t.Fatalf("event of probe %d: %+v", ev.Probe, ev)
		}
		g, ok := ws[i]
		switch {
		case !ok:
			t.Fatalf("event of no worker: %+v", ev)
		case g.locked && ev.Tid != g.tid, int(ev.Goid) != g.goid, ev.Tid <= 0:
			if bad++; bad <= 10 {
				t.Errorf("worker %d (thread %d, goroutine %d): event %+v", i, g.tid, g.goid, ev)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d events name the wrong thread or goroutine", bad, len(evs))
	}
	for i := range ws {
		if entries[i]-reentries[i] != calls || returns[i] != calls {
			t.Errorf("worker %d: %d entries (%d of them again after morestack) and %d returns, want %d calls", i, entries[i], reentries[i], returns[i], calls)
		}
		// The thread may have run bytes.Count for the runtime or another
		// goroutine before the worker locked it: a call or two more.
		if g := ws[i]; g.locked && (asmTids[g.tid] < calls || asmTids[g.tid] > calls+2) {
			t.Errorf("worker %d: %d hits of bytealg.Count on its thread %d, want %d (or one or two more)", i, asmTids[g.tid], g.tid, calls)
		}
	}
	total := 0
	for _, n := range asmTids {
		total += n
	}
	if total < 2*workers*calls {
		t.Errorf("%d hits of bytealg.Count, want at least %d", total, 2*workers*calls)
	}
	t.Logf("%d events, %d traps", len(evs), stats.Traps)
}

// goAsmFunc returns the address of the function called name (or
// name.abi0) that the Go function table of exe marks as assembly.
func goAsmFunc(t *testing.T, exe, name string) uint64 {
	t.Helper()
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	asm, err := f.GoAsmFuncs()
	if err != nil {
		t.Fatal(err)
	}
	funcs, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range funcs {
		for _, n := range fn.Names() {
			if (n == name || n == name+".abi0") && asm[fn.Addr] {
				return fn.Addr
			}
		}
	}
	t.Fatalf("%s: no assembly function %s", exe, name)
	return 0
}
