package probe_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
)

// TestGoCgoEvents traces a cgo program (testdata/gocgo): its goroutines,
// locked to their threads or roaming, call main.work, which calls the C
// function c_work through cgo, which calls back into Go
// (main.goCallback). With trampolines and with traps: the program's
// output is the untraced one's; the returns of main.work and the hits of
// c_work and main.goCallback number the calls exactly; every event of a Go
// function carries the goroutine id the goroutine printed (a callback from
// C runs on the goroutine that made the cgo call) and its arguments in Go's
// registers, every event of c_work its argument in rdi and no goroutine;
// a locked goroutine's events all carry its thread.
func TestGoCgoEvents(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := fixture.GoCgoCommand(t, "gocgo")
	const workers, calls = 2, 200
	want := string(untraced(t, []string{exe, strconv.Itoa(workers), strconv.Itoa(calls)}, nil))
	for _, traps := range []bool{false, true} {
		t.Run(map[bool]string{false: "trampolines", true: "traps"}[traps], func(t *testing.T) {
			argv := []string{exe, strconv.Itoa(workers), strconv.Itoa(calls)}
			r, w := fixture.Pipe(t)
			tr, err := probe.Spawn(argv, &probe.SpawnOptions{Stdout: w, Options: probe.Options{Events: true, NoTrampolines: traps, EventBuffer: 1 << 16}})
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Kill()
			probes, err := tr.Add("main.work%return", "c_work", "main.goCallback")
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
			out := string(resumeToExit(t, tr, r, evDone))
			// The goroutine and thread ids differ from run to run; the
			// sums do not.
			if gocgoSums(out) != gocgoSums(want) {
				t.Fatalf("output\n%s\nwant (ids aside)\n%s", out, want)
			}
			if n := tr.Stats().DroppedEvents; n != 0 {
				t.Fatalf("%d events dropped", n)
			}
			ws := map[int]goWorker{}
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				var i int
				var g goWorker
				if _, err := fmt.Sscanf(l, "worker %d locked %t tid %d goid %d sum %d", &i, &g.locked, &g.tid, &g.goid, &g.sum); err != nil {
					t.Fatalf("output line %q: %v", l, err)
				}
				ws[i] = g
			}
			hits := map[int][3]int{} // per worker: returns, c_work, goCallback
			bad := 0
			for _, ev := range evs {
				var i, k int
				goFunc := true
				switch ev.Probe {
				case probes[0].ID: // 2*(worker*1,000,000+call)+1
					i, k = int((ev.Ret-1)/2/1_000_000), 0
				case probes[1].ID:
					i, k, goFunc = int(ev.Args[0]/1_000_000), 1, false
				case probes[2].ID: // rax: the first argument
					i, k = int(ev.Args[0]/1_000_000), 2
				default:
					t.Fatalf("event of probe %d: %+v", ev.Probe, ev)
				}
				g, ok := ws[i]
				switch {
				case !ok:
					t.Fatalf("event of no worker: %+v", ev)
				case goFunc && int(ev.Goid) != g.goid, !goFunc && ev.Goid != 0, g.locked && ev.Tid != g.tid, ev.Tid <= 0:
					if bad++; bad <= 10 {
						t.Errorf("worker %d (thread %d, goroutine %d): event %+v", i, g.tid, g.goid, ev)
					}
				}
				h := hits[i]
				h[k]++
				hits[i] = h
			}
			for i := range ws {
				if h := hits[i]; h != [3]int{calls, calls, calls} {
					t.Errorf("worker %d: %d returns of main.work, %d hits of c_work, %d of main.goCallback; want %d each", i, h[0], h[1], h[2], calls)
				}
			}
			t.Logf("%d events, %d traps", len(evs), tr.Stats().Traps)
		})
	}
}

// gocgoSums returns gocgo's output without its thread and goroutine ids.
func gocgoSums(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 10 {
			f[5], f[7] = "-", "-"
		}
		b.WriteString(strings.Join(f, " ") + "\n")
	}
	return b.String()
}
