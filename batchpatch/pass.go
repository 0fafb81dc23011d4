package batchpatch

import (
	"errors"
	"fmt"
	"slices"
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
	// of patches and 100,000 take a few dozen passes (29 to 135, the
	// median pass 0.8 to 2.7 ms, in this round's runs on a loaded machine,
	// docs/BENCHMARKS.md; no quiet run has confirmed it since).
	DefaultMaxPause = 2 * time.Millisecond
	// DefaultPassGap is how long the process runs between two passes
	// by default: a quarter of DefaultMaxPause, enough for the threads
	// of a process to be scheduled again between two stops without
	// making the passes much slower in total.
	DefaultPassGap = 500 * time.Microsecond
	// firstPageCost is the cost of a page the first pass of a bounded
	// batch is sized with when reading a sample of the batch's pages
	// (calibrate) fails.
	firstPageCost = 20 * time.Microsecond
	// calibrationPages is how many of the batch's pages calibrate reads.
	calibrationPages = 16
	// firstPageFactor is how many reads of a page the first pass counts
	// for each of its pages: a read, a write, a read back, and margin.
	firstPageFactor = 4.0
	// writeReadRatio is how many reads of a page the write and the read
	// back of a page count for when a pass's clock decides what fits
	// before any pass has measured them.
	writeReadRatio = 3.0
	// cutHeadroom is the share of MaxPause a pass's clock lets it run
	// to: the prediction it makes is a late and direct one.
	cutHeadroom = 0.9
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

// passSizer predicts what the next pass can take within the bound. A
// pass costs a fixed part, which depends on the threads and on how busy
// the machine is but not on the patches (interrupting every thread until
// all are stopped, listing them and checking their PCs, resuming them),
// plus a part per page it writes (reading the page, writing it, reading
// it back: three /proc/PID/mem calls, whatever the number of patches in
// the page). Each pass measures both; the next one takes the units whose
// pages fit, at the median cost per page of the last few passes, in what
// the sizing target leaves after their median fixed part (at least a
// quarter of it, so that slow stops do not shrink passes to nothing). The
// medians keep one pass that the machine delayed (the tracer preempted
// while the world was stopped) from shrinking the next ones. Before any
// pass is measured, the fixed part is taken as a quarter of the target
// and a page costs what reading a sample of the batch's pages took, while
// the process runs, times firstPageFactor.
type passSizer struct {
	target  time.Duration   // the pause a pass is sized to
	cap     int             // Options.MaxPassPatches, 0 for none
	last    int             // the pages of the previous pass, 0 before the first
	page0   time.Duration   // the cost of a page before any pass is measured
	fixed   []time.Duration // fixed parts of the last passes
	perPage []time.Duration // costs per page of the last passes
	resume  []time.Duration // resumes of the last passes
	write   []time.Duration // write and read back per page of the last passes
}

// passHistory is how many passes the medians are taken over.
const passHistory = 5

func newPassSizer(o *Options) *passSizer {
	s := &passSizer{cap: o.MaxPassPatches, page0: firstPageCost}
	if o.MaxPause > 0 {
		s.target = max(1, time.Duration(float64(o.MaxPause)*passHeadroom))
	}
	return s
}

// pages returns how many pages the next pass may write (at least one),
// 1<<30 without a pause bound.
func (s *passSizer) pages() int {
	if s.target <= 0 {
		return 1 << 30
	}
	fixed, cost := s.target/4, s.page0 // until a pass is measured
	if len(s.perPage) > 0 {
		fixed, cost = medianDur(s.fixed), medianDur(s.perPage)
	}
	budget := max(s.target-fixed, s.target/4)
	n := max(1, int(budget/max(cost, 1)))
	if s.last > 0 {
		n = min(n, passGrowth*s.last)
	}
	return n
}

// patches returns how many patches the next pass may take.
func (s *passSizer) patches() int {
	if s.cap > 0 {
		return s.cap
	}
	return 1 << 30
}

// measured records a pass that was given planned pages, and its
// figures. The next pass may grow from what this one was given, not from
// what its clock let it write: a pass closed early by a slow stop does
// not shrink the ones after it.
func (s *passSizer) measured(planned int, st PassStats) {
	if st.Pages <= 0 || st.Pause <= 0 {
		return
	}
	pages := time.Duration(st.Pages)
	s.last = max(planned, st.Pages)
	s.fixed = append(s.fixed, st.Stop+st.Check+st.Resume)
	s.perPage = append(s.perPage, (st.Read+st.Write+st.ReadBack+st.Other)/pages)
	s.resume = append(s.resume, st.Resume)
	s.write = append(s.write, (st.Write+st.ReadBack)/pages)
	if len(s.perPage) > passHistory {
		s.fixed, s.perPage, s.resume, s.write = s.fixed[1:], s.perPage[1:], s.resume[1:], s.write[1:]
	}
}

// cut returns how the next pass closes early under bound (nil: no bound).
func (s *passSizer) cut(bound time.Duration) *passCut {
	if bound <= 0 {
		return nil
	}
	c := &passCut{bound: time.Duration(float64(bound) * cutHeadroom)}
	if len(s.write) > 0 {
		c.resume, c.perPage = medianDur(s.resume), medianDur(s.write)
	}
	return c
}

// passCut closes a bounded pass early: once the text is read and the
// threads are checked, the clock says how much of the bound is left, and
// the units whose pages would not be written and read back in it, the
// threads resumed, are left for the next pass (always keeping the first,
// so that every pass makes progress).
type passCut struct {
	bound   time.Duration        // the pause the pass must end within
	resume  time.Duration        // predicted resume of every thread; 0: as long as the stop took
	perPage time.Duration        // predicted write and read-back of a page; 0: from this pass's read
	units   [][]int              // the pass's units, by batch position, in the order they were taken
	cum     []int                // the distinct pages of units[:k+1], for each k (count)
	clock   func() time.Duration // replaces the World's clock in tests
}

// count sets c.cum from the pass's batch ps, before the stop: late then
// walks no page of a unit while no thread holds one back.
func (c *passCut) count(ps []Patch) {
	pages := map[uint64]bool{}
	c.cum = make([]int, len(c.units))
	for k, u := range c.units {
		for _, i := range u {
			for a := ps[i].Addr &^ (pageSize - 1); a < ps[i].End(); a += pageSize {
				pages[a] = true
			}
		}
		c.cum[k] = len(pages)
	}
}

// lateSet marks the batch positions of the units a pass's clock left
// for the next pass (n of them; at nil when none). It is made in the
// stop, with one allocation and no map: a pass that runs late may leave
// tens of thousands of units.
type lateSet struct {
	at []bool
	n  int
}

func (l lateSet) has(i int) bool { return l.at != nil && l.at[i] }

// late returns the batch positions of the units that do not fit.
// readPerPage is what reading a page cost in this pass.
func (c *passCut) late(w World, ps []Patch, blocked map[int]*BlockedError, readPerPage time.Duration) lateSet {
	var paused time.Duration
	if clock, ok := w.(interface{ Paused() time.Duration }); ok {
		paused = clock.Paused()
	} else if c.clock == nil {
		return lateSet{}
	}
	if c.clock != nil {
		paused = c.clock()
	}
	resume, perPage := c.resume, c.perPage
	if perPage <= 0 {
		perPage = time.Duration(float64(readPerPage) * writeReadRatio)
		resume = paused // the stop is all the pass has measured of its threads
	}
	left := c.bound - paused - resume
	fit := int(left / max(perPage, 1)) // pages
	if len(blocked) == 0 && len(c.cum) == len(c.units) && len(c.units) > 0 {
		// The units that fit are a prefix, the first always among them.
		k := max(1, sort.SearchInts(c.cum, fit+1))
		var late lateSet
		for _, u := range c.units[k:] {
			if late.at == nil {
				late.at = make([]bool, len(ps))
			}
			for _, i := range u {
				late.at[i] = true
			}
			late.n += len(u)
		}
		return late
	}
	pages := map[uint64]bool{}
	var late lateSet
	kept := 0
	for _, u := range c.units {
		if blocked[u[0]] != nil {
			continue // held back anyway
		}
		if late.at == nil {
			add := 0
			for _, i := range u {
				for a := ps[i].Addr &^ (pageSize - 1); a < ps[i].End(); a += pageSize {
					if !pages[a] {
						add++
					}
				}
			}
			if kept == 0 || len(pages)+add <= fit {
				for _, i := range u {
					for a := ps[i].Addr &^ (pageSize - 1); a < ps[i].End(); a += pageSize {
						pages[a] = true
					}
				}
				kept++
				continue
			}
			late.at = make([]bool, len(ps))
		}
		for _, i := range u {
			late.at[i] = true
		}
		late.n += len(u)
	}
	return late
}

// calibrate times reading up to calibrationPages pages of the first
// units of the queue while the process runs, and returns the first
// pass's cost per page (firstPageFactor times the read), 0 when nothing
// could be read.
func calibrate(mem Memory, ps []Patch, queue []*unit) time.Duration {
	var pages []uint64
	seen := map[uint64]bool{}
	for _, u := range queue {
		for _, i := range u.idx {
			a := ps[i].Addr &^ (pageSize - 1)
			if !seen[a] {
				seen[a] = true
				pages = append(pages, a)
			}
		}
		if len(pages) >= calibrationPages {
			break
		}
	}
	buf := make([]byte, pageSize)
	t0 := time.Now()
	n := 0
	for _, a := range pages {
		if mem.ReadMemory(a, buf) == nil {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return time.Duration(float64(time.Since(t0)) / float64(n) * firstPageFactor)
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
// ps. With a time bound this program's garbage collector is held until
// the last pass ends (proc.HoldGC).
func applyPasses(p *proc.Process, ps []Patch, opts *Options) (*Result, error) {
	if opts.MaxPause > 0 {
		defer proc.HoldGC()()
	}
	res := &Result{}
	queue := units(ps)
	sizer := newPassSizer(opts)
	if opts.MaxPause > 0 {
		if c := calibrate(p, ps, queue); c > 0 {
			sizer.page0 = c
		}
	}
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
		take, index, planned := takeUnits(ps, &queue, sizer.pages(), sizer.patches())
		batch, pos := passBatch(ps, index)
		cut := passCutFor(sizer, opts, take, pos, batch)
		pr, stats, st, err := runPass(p, batch, index, opts, cut)
		if pr != nil {
			res.Steps += pr.Steps
			res.Writes += pr.Writes
			res.Bytes += pr.Bytes
		}
		sizer.measured(planned, st)
		refusedPass := err != nil && opts.AllOrNothing && errors.Is(err, ErrBlocked)
		if pr == nil || (err != nil && !refusedPass) {
			res.addPass(st, stats)
			Sort(res.Applied)
			return res, fmt.Errorf("pass %d (%d patches): %w", pass+1, len(batch), err)
		}
		var again []*unit
		again, queue = requeue(pr, batch, index, take, queue, refusedPass, refused, &st)
		queue = append(again, queue...)
		res.addPass(st, stats)
		if refusedPass {
			continue
		}
		res.Applied = append(res.Applied, pr.Applied...)
		if opts.OnPass != nil && len(pr.Applied) > 0 {
			opts.OnPass(st, pr.Applied)
		}
	}
	return finishPasses(res, refused, opts)
}

// passBatch returns the patches of ps at index, in that order, and the
// position in the batch of each index.
func passBatch(ps []Patch, index []int) ([]Patch, map[int]int) {
	batch := make([]Patch, len(index))
	pos := make(map[int]int, len(index))
	for k, i := range index {
		batch[k] = ps[i]
		pos[i] = k
	}
	return batch, pos
}

// passCutFor returns the clock that may close a pass early under the bound
// (nil without one), with the units taken named by their positions in
// the pass's batch (pos).
func passCutFor(sizer *passSizer, opts *Options, take []*unit, pos map[int]int, batch []Patch) *passCut {
	cut := sizer.cut(opts.MaxPause)
	if cut == nil {
		return nil
	}
	if opts.hooks != nil {
		cut.clock = opts.hooks.paused
	}
	for _, u := range take {
		local := make([]int, len(u.idx))
		for k, i := range u.idx {
			local[k] = pos[i]
		}
		cut.units = append(cut.units, local)
	}
	cut.count(batch)
	return cut
}

// runPass stops the process, applies batch in that stop and resumes it.
// It returns the pass's result (nil when the stop itself failed), the
// stop's timings and the pass's figures.
func runPass(p *proc.Process, batch []Patch, index []int, opts *Options, cut *passCut) (*Result, proc.StopStats, PassStats, error) {
	var pr *Result
	var fn time.Duration
	stats, err := p.Stopped(func(w *proc.World) error {
		var err error
		t0 := time.Now()
		pr, err = applyStopped(w, batch, index, opts, cut)
		fn = time.Since(t0)
		return err
	})
	st := PassStats{Pause: stats.Total}
	pr.finish(batch)
	if pr != nil {
		st.Patches, st.Units, st.Refused, st.Steps, st.Pages = len(pr.Applied), countUnits(pr.Applied), len(pr.Refused), pr.Steps, pr.Writes
		st.fill(pr.phases, stats, fn)
	}
	return pr, stats, st, err
}

// requeue sorts the units a pass took by what became of them. Units a
// thread held back go to the end of the queue, a few times, then are
// refused (into refused, by index in ps). With AllOrNothing
// (refusedPass) a held-back unit held back the whole pass: the others go
// back to the front, as do the units the pass's clock left (counted in
// st.Deferred). It returns the units for the front and the queue.
func requeue(pr *Result, batch []Patch, index []int, take, queue []*unit, refusedPass bool, refused map[int]*BlockedError, st *PassStats) ([]*unit, []*unit) {
	held := map[int]*BlockedError{}
	for _, b := range pr.Refused {
		for k, q := range batch {
			if q.Addr == b.Addr {
				held[index[k]] = b
			}
		}
	}
	late := map[int]bool{}
	for k := range index {
		if pr.late.has(k) {
			late[index[k]] = true
		}
	}
	var again []*unit
	for _, u := range take {
		switch {
		case late[u.idx[0]] && held[u.idx[0]] == nil:
			again = append(again, u)
			st.Deferred++
			continue
		case held[u.idx[0]] == nil:
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
	return again, queue
}

// addPass records a pass's figures, and its stop as the result's Stop
// when it was the longest so far.
func (r *Result) addPass(st PassStats, stop proc.StopStats) {
	r.Passes = append(r.Passes, st)
	if stop.Total >= r.Stop.Total {
		r.Stop = stop
	}
}

// finishPasses sorts what the passes applied and refused into res, and
// returns the error of a batch refused under AllOrNothing.
func finishPasses(res *Result, refused map[int]*BlockedError, opts *Options) (*Result, error) {
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

// takeUnits takes whole units from the front of the queue, in order,
// while they touch at most pages pages and hold at most patches patches
// (always at least one unit), and returns them with their patches'
// positions in ps, sorted, and the pages they touch.
func takeUnits(ps []Patch, queue *[]*unit, pages, patches int) ([]*unit, []int, int) {
	var take []*unit
	seen := map[uint64]bool{}
	n := 0
	for len(*queue) > 0 {
		u := (*queue)[0]
		var add []uint64
		for _, i := range u.idx {
			for a := ps[i].Addr &^ (pageSize - 1); a < ps[i].End(); a += pageSize {
				if !seen[a] && !slices.Contains(add, a) {
					add = append(add, a)
				}
			}
		}
		if len(take) > 0 && (len(seen)+len(add) > pages || n+len(u.idx) > patches) {
			break
		}
		for _, a := range add {
			seen[a] = true
		}
		take = append(take, u)
		n += len(u.idx)
		*queue = (*queue)[1:]
	}
	var index []int
	for _, u := range take {
		index = append(index, u.idx...)
	}
	sort.Ints(index)
	return take, index, len(seen)
}
