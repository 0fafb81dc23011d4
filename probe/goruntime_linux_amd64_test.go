package probe_test

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// TestGoRuntimeEverySymbol probes every function of a Go program whose
// goroutines return to runtime.goexit+1, whose tight loops are preempted
// asynchronously and whose panics are recovered: the traced program must
// print what an untraced run prints, no detour may cover a place where the
// runtime resumes a goroutine, and the hits of the main package's
// functions must equal their calls, which the program makes a known number
// of times, and the counts of kernel uprobes at the same sites.
func TestGoRuntimeEverySymbol(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	exe := fixture.GoCommandFor(t, "gort", runtime.GOARCH, false)
	const rounds = 12
	argv := []string{exe, strconv.Itoa(rounds)}
	want, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("untraced: %v", err)
	}

	var out bytes.Buffer
	o := probe.SpawnOptions{}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	o.Stdout = w
	tr, err := probe.Spawn(argv, &o)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Kill()
	copied := make(chan struct{})
	go func() { out.ReadFrom(r); r.Close(); close(copied) }()
	if _, err := tr.Add("*"); err != nil {
		t.Logf("add: %v", err)
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Exited():
	case <-time.After(3 * time.Minute):
		t.Fatal("the traced Go program did not finish in 3 minutes")
	}
	st, werr := tr.Wait()
	<-copied
	if werr != nil || !st.Success() {
		t.Fatalf("traced: %+v %v", st, werr)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("traced output %q, untraced %q", out.Bytes(), want)
	}

	stats := tr.Stats()
	calls := map[string]uint64{"main.spin": rounds + 1, "main.churn": rounds, "main.safeDiv": rounds, "main.mayPanic": rounds}
	var main []probe.SiteStats
	detours := 0
	for _, p := range stats.Probes {
		for _, s := range p.Sites {
			if s.Strategy == plan.TrampolineDetour {
				detours++
			}
			switch {
			case s.Symbol == "runtime.goexit" && s.Strategy == plan.TrampolineDetour:
				t.Errorf("runtime.goexit took a detour over goexit+1")
			case strings.HasPrefix(s.Symbol, "main."):
				main = append(main, s)
				if n, ok := calls[s.Symbol]; ok && s.Hits != n {
					t.Errorf("%s: %d hits, the program calls it %d times", s.Symbol, s.Hits, n)
				}
			}
		}
	}
	if detours == 0 {
		t.Errorf("no site took a detour: the test would not show a torn jump")
	}
	sub := stats
	sub.Probes = []probe.ProbeStats{{Sites: main}}
	sites, _ := kernelSites(t, sub)
	kout, kcounts := kernelRun(t, argv, os.Environ(), nil, sites)
	if !bytes.Equal(kout, want) {
		t.Errorf("output under kernel uprobes %q, untraced %q", kout, want)
	}
	t.Logf("%d sites, %d detours, %d traps\n%s", len(stats.Probes[0].Sites), detours, stats.Traps, compareWithKernel(t, sub, sites, kcounts, 0))
}
