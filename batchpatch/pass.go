package batchpatch

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/probeopt/probeopt/proc"
)

// Defaults of a bounded batch (Options.MaxPause), from the passes
// measured on a 2-vCPU VM (AMD EPYC, Linux 6.18) with the target of
// `probeopt bench patch` (docs/BENCHMARKS.md).
const (
	// DefaultMaxPause is the pause bound the project recommends: on an
	// idle machine of that kind one pass of 4,096 patches took 1.3 to
	// 1.9 ms, stop and resume included, so a 2 ms pass writes thousands
	// of patches and 100,000 take a few dozen passes.
	DefaultMaxPause = 2 * time.Millisecond
	// DefaultPassGap is how long the process runs between two passes
	// by default: a quarter of DefaultMaxPause, enough for the threads
	// of a process to be scheduled again between two stops without
	// making the passes much slower in total.
	DefaultPassGap = 500 * time.Microsecond
	// firstPatchCost is the per-patch work the first pass of a bounded
	// batch is sized with, before any pass has been measured: about
	// twice the 0.4 us a patch cost in a 4,096-patch pass (its share of
	// the stop included), so that the first pass stays under the bound.
	firstPatchCost = 800 * time.Nanosecond
	// passHeadroom is the share of MaxPause a pass is sized to: the
	// rest absorbs the noise of a shared machine.
	passHeadroom = 0.75
	// passGrowth caps how much larger than the previous pass the next
	// one may be, so that one fast pass measured in a quiet moment does
	// not size a pass far past the bound.
	passGrowth = 2
	// passRetries is how many more passes a unit a thread held back is
	// tried in before it is refused.
	passRetries = 3
)

// bounded reports whether the options split a batch into passes.
func (o *Options) bounded() bool {
	return o != nil && (o.MaxPause > 0 || o.MaxPassPatches > 0)
}

func (o *Options) passGap() time.Duration {
	switch {
	case o == nil || o.PassGap == 0:
		return DefaultPassGap
	case o.PassGap < 0:
		return 0
	}
	return o.PassGap
}

// unit is the patches of one Patch.Unit, by batch index, and how many
// times a thread has held it back.
type unit struct {
	idx   []int
	tries int
}

// units groups a sorted batch into units, in the order of their first
// patch.
func units(ps []Patch) []*unit {
	var out []*unit
	byID := map[uint64]*unit{}
	for i, p := range ps {
		if p.Unit != 0 {
			if u := byID[p.Unit]; u != nil {
				u.idx = append(u.idx, i)
				continue
			}
		}
		u := &unit{idx: []int{i}}
		if p.Unit != 0 {
			byID[p.Unit] = u
		}
		out = append(out, u)
	}
	return out
}

// countUnits returns the number of units among ps.
func countUnits(ps []Patch) int {
	n := 0
	seen := map[uint64]bool{}
	for _, p := range ps {
		if p.Unit == 0 || !seen[p.Unit] {
			n++
		}
		if p.Unit != 0 {
			seen[p.Unit] = true
		}
	}
	return n
}

// holdUnits extends the patches a thread blocks to their whole units: a
// unit is written whole or not at all.
func holdUnits(ps []Patch, blocked map[int]*BlockedError) {
	if len(blocked) == 0 {
		return
	}
	held := map[uint64]*BlockedError{}
	for i, b := range blocked {
		if u := ps[i].Unit; u != 0 && held[u] == nil {
			held[u] = b
		}
	}
	if len(held) == 0 {
		return
	}
	for i, p := range ps {
		b := held[p.Unit]
		if p.Unit == 0 || b == nil || blocked[i] != nil {
			continue
		}
		blocked[i] = &BlockedError{Addr: p.Addr, Tid: b.Tid, PC: b.PC,
			Reason: fmt.Sprintf("the patch at %#x of its unit is held back: %s", b.Addr, b.Reason)}
	}
}

// passSizer predicts how many patches the next pass can take within the
// bound. A pass costs the stop of the world (from the first thread
// interrupted until all are stopped: it depends on the threads and on how
// busy the machine is, not on the patches) plus the work done stopped
// (checks, single steps, writes, read-back, resume), which grows with the
// patches. Each pass measures both: its stop, and its work per patch. The
// next pass gets the patches that fit, at the median work per patch of
// the last few passes, in what the bound leaves after their median stop
// (at least a quarter of the bound, so that slow stops do not shrink
// passes to nothing). The medians keep one pass that the machine delayed
// (the tracer preempted while the world was stopped) from shrinking the
// next ones.
type passSizer struct {
	target time.Duration   // the pause a pass is sized to
	cap    int             // Options.MaxPassPatches, 0 for none
	last   int             // the size of the previous pass, 0 before the first
	stops  []time.Duration // stop times of the last passes
	costs  []time.Duration // work per patch of the last passes
}

// passHistory is how many passes the medians are taken over.
const passHistory = 5

func newPassSizer(o *Options) *passSizer {
	s := &passSizer{cap: o.MaxPassPatches}
	if o.MaxPause > 0 {
		s.target = max(1, time.Duration(float64(o.MaxPause)*passHeadroom))
	}
	return s
}

// next returns the number of patches the next pass should take (at least
// one).
func (s *passSizer) next() int {
	n := 1 << 30
	if s.target > 0 {
		stop, cost := s.target/4, firstPatchCost // until a pass is measured
		if len(s.costs) > 0 {
			stop, cost = medianDur(s.stops), medianDur(s.costs)
		}
		budget := max(s.target-stop, s.target/4)
		n = max(1, int(budget/max(cost, 1)))
		if s.last > 0 {
			n = min(n, passGrowth*s.last)
		}
	}
	if s.cap > 0 {
		n = min(n, s.cap)
	}
	return n
}

// measured records a pass of n patches and its stop figures.
func (s *passSizer) measured(n int, st proc.StopStats) {
	if n <= 0 || st.Total <= 0 {
		return
	}
	s.last = n
	s.stops = append(s.stops, st.Stop)
	s.costs = append(s.costs, st.Pause/time.Duration(n))
	if len(s.costs) > passHistory {
		s.stops, s.costs = s.stops[1:], s.costs[1:]
	}
}

// medianDur returns the median of ds (the upper one of an even count).
func medianDur(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// applyPasses applies a valid batch in as many passes as the bound asks
// (see Options.MaxPause). The process runs between passes. A pass that
// fails is rolled back alone: the passes before it stay applied and are
// in the Result, with the error naming the failed patch by its index in
// ps.
func applyPasses(p *proc.Process, ps []Patch, opts *Options) (*Result, error) {
	res := &Result{}
	queue := units(ps)
	sizer := newPassSizer(opts)
	gap := opts.passGap()
	refused := map[int]*BlockedError{}
	for pass := 0; len(queue) > 0; pass++ {
		if pass > 0 && gap > 0 {
			time.Sleep(gap)
		}
		if pass > 0 && opts.BetweenPasses != nil {
			if err := opts.BetweenPasses(); err != nil {
				Sort(res.Applied)
				return res, fmt.Errorf("after pass %d: %w", pass, err)
			}
		}
		// Take whole units, in address order, up to the predicted size;
		// always at least one.
		want := sizer.next()
		var take []*unit
		n := 0
		for len(queue) > 0 && (len(take) == 0 || n+len(queue[0].idx) <= want) {
			take = append(take, queue[0])
			n += len(queue[0].idx)
			queue = queue[1:]
		}
		var index []int
		for _, u := range take {
			index = append(index, u.idx...)
		}
		sort.Ints(index)
		batch := make([]Patch, len(index))
		for k, i := range index {
			batch[k] = ps[i]
		}
		var pr *Result
		stats, err := p.Stopped(func(w *proc.World) error {
			var err error
			pr, err = applyStopped(w, batch, index, opts)
			return err
		})
		st := PassStats{Pause: stats.Total}
		if pr != nil {
			st.Patches, st.Units, st.Refused, st.Steps = len(pr.Applied), countUnits(pr.Applied), len(pr.Refused), pr.Steps
			res.Steps += pr.Steps
			res.Writes += pr.Writes
			res.Bytes += pr.Bytes
		}
		res.Passes = append(res.Passes, st)
		if stats.Total >= res.Stop.Total {
			res.Stop = stats
		}
		sizer.measured(len(batch), stats)
		refusedPass := err != nil && opts.AllOrNothing && errors.Is(err, ErrBlocked)
		if pr == nil || (err != nil && !refusedPass) {
			Sort(res.Applied)
			return res, fmt.Errorf("pass %d (%d patches): %w", pass+1, len(batch), err)
		}
		// Units a thread held back go to the end of the queue, a few
		// times, then are refused. With AllOrNothing a held-back unit
		// held back the whole pass: the others go back to the front.
		held := map[int]*BlockedError{}
		for _, b := range pr.Refused {
			for k, q := range batch {
				if q.Addr == b.Addr {
					held[index[k]] = b
				}
			}
		}
		var again []*unit
		for _, u := range take {
			if held[u.idx[0]] == nil {
				if refusedPass {
					again = append(again, u)
				}
				continue
			}
			u.tries++
			if u.tries > passRetries {
				for _, i := range u.idx {
					refused[i] = held[i]
				}
				continue
			}
			queue = append(queue, u)
		}
		if refusedPass {
			queue = append(again, queue...)
			continue
		}
		res.Applied = append(res.Applied, pr.Applied...)
		if opts.OnPass != nil && len(pr.Applied) > 0 {
			opts.OnPass(st, pr.Applied)
		}
	}
	Sort(res.Applied)
	for _, b := range refused {
		res.Refused = append(res.Refused, b)
	}
	sort.Slice(res.Refused, func(i, j int) bool { return res.Refused[i].Addr < res.Refused[j].Addr })
	if len(res.Refused) > 0 && opts.AllOrNothing {
		return res, fmt.Errorf("batch refused after %d passes: %w", len(res.Passes), res.Err())
	}
	return res, nil
}
