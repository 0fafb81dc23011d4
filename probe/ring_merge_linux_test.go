//go:build linux && (amd64 || arm64)

package probe

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/probeopt/probeopt/trampoline"
)

// mergeFeed drives a ringReader's merge as drainBatch does: each batch
// reads one run of records from each of rings rings (counters rising
// within a ring, the rings interleaved in time), merges and releases the
// events whose counter is at most the batch's limit, the smallest last
// counter of the rings. It returns the events in delivery order.
// With full, the runs are perRing records each (a drain that finds
// every ring full), else 1 to perRing. With lagging, the reader is
// further behind the rings than a record being written is waited for:
// the batch's counter exceeds every record's by more than the hold (only
// with full: a ring read to its end holds no record older than the hold,
// but one a thread was stopped in the middle of writing).
func mergeFeed(rings, batches, perRing int, full, lagging bool, seed uint64, deliver func([]Event)) {
	rnd := rand.New(rand.NewPCG(seed, 1))
	rr := &ringReader{tg: &target{t: &Tracer{}}}
	rr.tg.t.opts.OnEvents = deliver
	sites := make([]*ringSite, rings) // ring r's records are probe r's
	for r := range sites {
		sites[r] = &ringSite{probes: []int{r}}
	}
	next := make([]uint64, rings) // each ring's last counter: r modulo rings, no two equal
	for r := range next {
		next[r] = uint64(r)
	}
	for b := range batches {
		rr.runs = append(rr.runs[:0], 0)
		now := ^uint64(0) - 1
		bound := deliveryBound{writing: now, unread: now}
		for r := range rings {
			rr.runs = append(rr.runs, len(rr.recs))
			n := perRing
			if !full {
				n = 1 + rnd.IntN(perRing)
			}
			for range n {
				next[r] += uint64(rings) * (1 + rnd.Uint64N(8))
				rr.recs = append(rr.recs, trampoline.Event{Probe: uint32(r), TSC: next[r], Args: [6]uint64{next[r]}})
				rr.recTids = append(rr.recTids, r)
				rr.recTSC = append(rr.recTSC, next[r])
				rr.sites = append(rr.sites, sites[r])
			}
			bound.ring(next[r], n == perRing, true)
		}
		rr.mergeHeld()
		var hold uint64
		if lagging {
			hold = 1 << 40
		}
		limit := bound.limit(now, hold)
		if b == batches-1 {
			limit = now
		}
		n, _ := slices.BinarySearchFunc(rr.order, limit+1, func(k heldKey, t uint64) int { return cmp.Compare(k.tsc, t) })
		rr.release(n, tscClock{})
	}
}

// TestMergeHeldOrder checks the reader's merge against a sort of all the
// records by counter: every record delivered once, in counter order.
func TestMergeHeldOrder(t *testing.T) {
	for seed := range uint64(50) {
		var got []Event
		mergeFeed(1+int(seed%4), 40, 300, seed%2 == 0, seed%4 == 2, seed, func(evs []Event) { got = append(got, evs...) })
		want := slices.Clone(got)
		slices.SortFunc(want, func(a, b Event) int { return cmp.Compare(a.Args[0], b.Args[0]) })
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: %d events not in counter order", seed, len(got))
		}
		seen := map[[2]uint64]bool{}
		for _, ev := range got {
			k := [2]uint64{uint64(ev.Probe), ev.Args[0]}
			if seen[k] {
				t.Fatalf("seed %d: ring %d's record %d delivered twice", seed, ev.Probe, ev.Args[0])
			}
			seen[k] = true
		}
	}
}

// BenchmarkMergeHeld times the merge of two rings' batches of 4,096
// records and the making and delivery of their events (ns per event; the
// records' making by the feed included).
func BenchmarkMergeHeld(b *testing.B) {
	events := 0
	for b.Loop() {
		mergeFeed(2, 64, 4096, true, false, 1, func(evs []Event) { events += len(evs) })
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}
