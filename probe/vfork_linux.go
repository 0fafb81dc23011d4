//go:build linux && (amd64 || arm64)

package probe

import (
	"sync"
	"sync/atomic"

	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// Vfork children. A child made by vfork (or posix_spawn) runs in its
// parent's memory, with its parent thread's thread pointer, until it
// execs or exits, and that thread waits meanwhile. The child's hits at
// trap sites come to the parent's trap handler with the child's pid; its
// hits at trampolines land in the stripe of the thread that vforked,
// which nothing else writes until the child is done. So the counts of
// that stripe are noted when the vfork stops the thread, before the child
// runs (proc.Options.OnVfork), and again when the thread is released,
// before it runs: the difference is the child's, taken off the parent's
// counts (excluded). Hits that a thread without a stripe of its own made
// (the shared words) are not told apart: they stay the parent's.

// vforkWatch passes proc's vfork events to the tracer, which exists only
// once its first process is traced.
type vforkWatch struct{ t atomic.Pointer[Tracer] }

func (v *vforkWatch) on(ev proc.Event) {
	if t := v.t.Load(); t != nil {
		t.onVfork(ev)
	}
}

// vforkStart is what was noted when a thread vforked: its thread pointer,
// the data area, and the counts of its stripe then (nil without one).
type vforkStart struct {
	tp     uint64
	ts     *trampState
	counts []uint64
}

// excluded holds, per counter of a data area, the hits its threads
// counted that are a vfork child's.
type excluded struct {
	mu sync.Mutex
	n  map[int]uint64
}

func (e *excluded) add(i int, n uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[int]uint64{}
	}
	e.n[i] += n
}

func (e *excluded) get(i int) uint64 {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[i]
}

// onVfork runs on the tracer thread at a vfork and at its end, with the
// thread that vforked stopped (see vforkWatch); it takes no lock the
// tracer holds while it waits for that thread.
func (t *Tracer) onVfork(ev proc.Event) {
	v, ok := t.vforkTargets.Load(ev.Pid)
	if !ok {
		return
	}
	tg := v.(*target)
	ts := tg.live.Load()
	var counts []uint64
	if ts != nil && ev.ThreadPointer != 0 {
		counts = stripeCounts(ts.view, ev.ThreadPointer)
	}
	tg.vforkMu.Lock()
	defer tg.vforkMu.Unlock()
	switch ev.Kind {
	case proc.EventVfork:
		if tg.vforks == nil {
			tg.vforks = map[int]vforkStart{}
		}
		tg.vforks[ev.Tid] = vforkStart{tp: ev.ThreadPointer, ts: ts, counts: counts}
	case proc.EventVforkDone:
		start, ok := tg.vforks[ev.Tid]
		delete(tg.vforks, ev.Tid)
		if !ok || ts == nil || start.ts != ts || start.tp != ev.ThreadPointer {
			return
		}
		for i, n := range counts {
			var before uint64
			if i < len(start.counts) {
				before = start.counts[i]
			}
			if n > before {
				ts.excl.add(i, n-before)
				t.vforkHits.Add(n - before)
			}
		}
	}
}

// stripeCounts returns the counters of the stripe whose owner has thread
// pointer tp, nil if none has.
func stripeCounts(v *trampoline.View, tp uint64) []uint64 {
	for _, st := range v.Stripes() {
		if st.Key != tp {
			continue
		}
		out := make([]uint64, v.ThreadCounters())
		for i := range out {
			out[i] = v.ThreadCounter(st.Slot, i)
		}
		return out
	}
	return nil
}
