package proc

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

// TestHoldGC allocates 256 MiB of garbage under two nested holds: no
// collection completes, and the last release puts the collector's
// settings back, after which allocation collects again.
func TestHoldGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(77))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	cycles := func() uint32 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.NumGC
	}
	var sink []byte
	churn := func() {
		for range 256 {
			sink = make([]byte, 1<<20)
		}
	}
	release1 := HoldGC()
	release2 := HoldGC()
	before := cycles()
	churn()
	release1()
	release1() // a second call does nothing
	churn()
	if n := cycles() - before; n != 0 {
		t.Errorf("%d collections during the hold", n)
	}
	if lim := debug.SetMemoryLimit(-1); lim == math.MaxInt64 {
		t.Errorf("no memory limit during the hold")
	}
	release2()
	if p := debug.SetGCPercent(-1); p != 77 {
		t.Errorf("GC percent %d after the hold, want 77", p)
	}
	debug.SetGCPercent(77)
	if lim := debug.SetMemoryLimit(-1); lim != math.MaxInt64 {
		t.Errorf("memory limit %d after the hold, want none", lim)
	}
	before = cycles()
	churn()
	if cycles() == before {
		t.Errorf("no collection after the hold")
	}
	_ = sink
}
