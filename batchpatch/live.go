package batchpatch

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/probeopt/probeopt/proc"
)

// Options tune a live pass. A nil *Options means the defaults.
type Options struct {
	// MaxSteps is how many single steps a thread that blocks a patch may
	// make to leave the range; 0 means 64, a negative value means none
	// (the patch is refused at once).
	MaxSteps int
	// StepTimeout bounds each single step (a thread blocked in a system
	// call never finishes its step); 0 means 10 ms.
	StepTimeout time.Duration
	// AllOrNothing refuses the whole batch, writing nothing, when any
	// patch is blocked. By default the other patches are applied and the
	// blocked ones listed in Result.Refused.
	AllOrNothing bool
	// Stuck, when set, tells from the code at a blocking thread's PC that
	// no single step will move the thread out of the range (a jump to
	// itself): given the bytes read at pc (up to MaxInstLen), it returns
	// why, and the patches the thread blocks are refused at once with that
	// reason; "" means stepping may help. The package does not decode
	// instructions: a caller that knows the instruction set supplies this.
	// Nil means every blocking thread is stepped, up to MaxSteps.
	Stuck func(code []byte, pc uint64) string

	// MaxPause bounds the pause of each pass: the time from the first
	// thread stopped to the last one resumed (proc.StopStats.Total), the
	// thread-PC checks and single steps included. A batch that one pass
	// cannot apply within it is applied in several passes, the process
	// running between them, and no unit (Patch.Unit) is ever split. The
	// size of each pass is predicted from the pause the previous pass
	// measured (see the package documentation). 0 means no bound: one
	// pass. DefaultMaxPause is the bound the project measured and
	// recommends. This program's garbage collector is held during the
	// passes (proc.HoldGC).
	MaxPause time.Duration
	// MaxPassPatches caps the patches of one pass, alone or with
	// MaxPause (a unit larger than the cap goes in a pass of its own);
	// 0 means no cap.
	MaxPassPatches int
	// PassGap is the least time the process runs between two passes;
	// 0 means DefaultPassGap, a negative value none.
	PassGap time.Duration
	// OnPass, when set, is called after each pass that wrote patches,
	// with the pass's figures and its patches, which are live from then
	// on (in address order). It runs while the process runs.
	OnPass func(PassStats, []Patch)
	// Landed, when set, is called in every pass (ApplyStopped's too)
	// right after its patches were written and read back, the world
	// still stopped, with those patches: a tracer makes their sites live
	// there, before any thread can run them. It runs on the tracer
	// thread and must use w, not the Process; its time counts in the
	// pause.
	Landed func(w World, applied []Patch)
	// BetweenPasses, when set, is called between two passes, the
	// process running, after PassGap: a tracer can serve there the work
	// that waits for it (a forked child). An error ends the batch: the
	// passes already made stay, and Apply returns it.
	BetweenPasses func() error

	hooks *testHooks
}

// MaxInstLen is how many bytes Options.Stuck is given: the longest
// instruction of the architectures the package serves (x86-64's 15).
const MaxInstLen = 15

func (o *Options) maxSteps() int {
	switch {
	case o == nil || o.MaxSteps == 0:
		return 64
	case o.MaxSteps < 0:
		return 0
	}
	return o.MaxSteps
}

func (o *Options) stepTimeout() time.Duration {
	if o == nil || o.StepTimeout <= 0 {
		return 10 * time.Millisecond
	}
	return o.StepTimeout
}

// Result reports a live pass.
type Result struct {
	Applied []Patch         // the patches written, in address order
	Refused []*BlockedError // patches not written because a thread stood in them
	Writes  int             // coalesced writes (at most one per page touched)
	Bytes   int             // bytes written
	Steps   int             // single steps made to move threads out of ranges
	Held    int             // traps on a site's int3 held until the site was whole (StopFree only)
	Stop    proc.StopStats  // the stop-the-world timing (zero if the world was already stopped); of the longest pass when there were several
	Passes  []PassStats     // one per stop-the-world pass, in order (none when the world was already stopped)

	phases phases           // the times of applyStopped's parts
	late   lateSet          // batch positions a pass's clock left for a later pass
	use    func(i int) bool // the batch positions written, until finish lists them in Applied
}

// PassStats are the figures of one stop-the-world pass of Apply.
type PassStats struct {
	Patches int           // patches written
	Units   int           // units written (Patch.Unit)
	Refused int           // patches held back by a thread in this pass
	Steps   int           // single steps made
	Pages   int           // pages written (one coalesced write each)
	Pause   time.Duration // from the first thread stopped to the last resumed (proc.StopStats.Total)
	// Deferred counts the units a bounded pass left for the next one
	// because its clock said they would not fit (see Options.MaxPause).
	Deferred int
	// Where the pause went; the phases add up to Pause.
	Stop     time.Duration // interrupting every thread until all were stopped
	Read     time.Duration // reading the text and comparing the old bytes
	Check    time.Duration // listing the threads, checking their PCs, single steps
	Write    time.Duration // the coalesced writes
	ReadBack time.Duration // reading the written pages back and comparing them
	Other    time.Duration // the rest of the work done stopped: choosing what fits, the Landed hook
	Resume   time.Duration // resuming every thread
}

// phases are the parts of a pass that applyStopped times.
type phases struct {
	read, check, write, back time.Duration
}

// fill sets the phases of st from ph and the stop's figures (fn is how
// long the function run in the stop took), the rest of the pause going to
// Resume.
func (st *PassStats) fill(ph phases, stop proc.StopStats, fn time.Duration) {
	st.Stop, st.Read, st.Check, st.Write, st.ReadBack = stop.Stop, ph.read, ph.check, ph.write, ph.back
	st.Resume = max(0, stop.Total-stop.Stop-fn)
	st.Other = max(0, fn-ph.read-ph.check-ph.write-ph.back)
}

// LongestPause returns the longest pause of the passes, 0 with none.
func (r *Result) LongestPause() time.Duration {
	var d time.Duration
	if r == nil {
		return 0
	}
	for _, ps := range r.Passes {
		d = max(d, ps.Pause)
	}
	return d
}

// Err returns nil when every patch was applied, else an error wrapping
// ErrBlocked that lists the first refusal. It is for the default mode,
// where the other patches are applied and the pass returns no error: with
// Options.AllOrNothing a refusal is the pass's error, and a pass that
// returns nil applied every patch.
func (r *Result) Err() error {
	if r == nil || len(r.Refused) == 0 {
		return nil
	}
	if len(r.Refused) == 1 {
		return r.Refused[0]
	}
	return fmt.Errorf("%w (and %d more)", r.Refused[0], len(r.Refused)-1)
}

// World is what a live pass needs of a stopped process; *proc.World
// provides it.
type World interface {
	Memory
	Threads() ([]proc.ThreadInfo, error)
	Step(tid int, timeout time.Duration) error
	Refresh() error
}

// Apply validates the batch and applies it to the live process in one
// stop-the-world pass, or in several when Options.MaxPause or
// Options.MaxPassPatches asks (see the package documentation). Patches blocked by
// a thread are listed in Result.Refused, not written; any other failure
// leaves the text as it was and returns an error naming the patch (a
// *PatchError, wrapping a *MismatchError when bytes differ).
func Apply(p *proc.Process, ps []Patch, opts *Options) (*Result, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	if err := Validate(ps); err != nil {
		return nil, err
	}
	if opts.bounded() {
		return applyPasses(p, ps, opts)
	}
	var res *Result
	var fn time.Duration
	stats, err := p.Stopped(func(w *proc.World) error {
		var err error
		t0 := time.Now()
		res, err = applyStopped(w, ps, identity(len(ps)), opts, nil)
		fn = time.Since(t0)
		return err
	})
	if res != nil {
		res.finish(ps)
		res.Stop = stats
		st := PassStats{Patches: len(res.Applied), Units: countUnits(res.Applied), Refused: len(res.Refused), Steps: res.Steps, Pages: res.Writes, Pause: stats.Total}
		st.fill(res.phases, stats, fn)
		res.Passes = []PassStats{st}
	}
	return res, err
}

// Revert undoes patches applied by Apply: it applies their inverses in one
// pass, with the same checks.
func Revert(p *proc.Process, ps []Patch, opts *Options) (*Result, error) {
	inv := make([]Patch, len(ps))
	for i, q := range ps {
		inv[i] = q.Inverse()
	}
	return Apply(p, inv, opts)
}

// ApplyStopped is Apply for a world that is already stopped: the caller
// runs it inside proc.Process.Stopped, possibly with other work in the
// same pause. The batch must be valid (Validate).
func ApplyStopped(w World, ps []Patch, opts *Options) (*Result, error) {
	if err := Validate(ps); err != nil {
		return nil, err
	}
	res, err := applyStopped(w, ps, identity(len(ps)), opts, nil)
	res.finish(ps)
	return res, err
}

// applyStopped is ApplyStopped for a valid batch; index maps a position
// in ps to the caller's numbering, for errors. With a cut (a bounded
// pass), units that the clock says would end the pause past the bound are
// not written but marked in Result.late.
func applyStopped(w World, ps []Patch, index []int, opts *Options, cut *passCut) (*Result, error) {
	res := &Result{}
	t0 := time.Now()
	// Compare-and-swap first: nothing is stepped for a batch that cannot
	// apply anyway.
	spans := coalesce(ps, nil)
	if err := readSpans(w, spans); err != nil {
		return nil, fmt.Errorf("read text: %w", err)
	}
	if i, err := checkOld(ps, spans); err != nil {
		return nil, &PatchError{Index: index[i], Addr: ps[i].Addr, Err: err}
	}
	t1 := time.Now()
	res.phases.read = t1.Sub(t0)
	blocked, steps, err := clearThreads(w, ps, opts)
	res.Steps = steps
	res.phases.check = time.Since(t1)
	if err != nil {
		return res, err
	}
	holdUnits(ps, blocked)
	for _, b := range blocked {
		res.Refused = append(res.Refused, b)
	}
	sort.Slice(res.Refused, func(i, j int) bool { return res.Refused[i].Addr < res.Refused[j].Addr })
	if len(blocked) > 0 && opts != nil && opts.AllOrNothing {
		return res, fmt.Errorf("batch refused: %w", res.Err())
	}
	var late lateSet
	if cut != nil {
		late = cut.late(w, ps, blocked, res.phases.read/time.Duration(max(1, len(spans))))
		res.late = late
	}
	use := func(i int) bool { return blocked[i] == nil && !late.has(i) }
	var hooks *testHooks
	if opts != nil {
		hooks = opts.hooks
	}
	var st txStats
	if len(blocked) == 0 && steps == 0 {
		// No thread ran since the text was read: write what was
		// checked, without reading it again.
		if late.n > 0 {
			spans = narrow(ps, spans, use)
		}
		fill(ps, spans)
		st, err = writeSpans(w, ps, index, spans, hooks)
	} else {
		st, err = transact(w, ps, use, index, hooks)
	}
	res.phases.write, res.phases.back = st.write, st.back
	if err != nil {
		return res, err
	}
	res.Writes, res.Bytes = st.writes, st.bytes
	// The list of applied patches is made here only for Landed: an
	// allocation in the stop can make the tracer help the garbage
	// collector while every thread waits (see Result.finish).
	res.use = use
	if opts != nil && opts.Landed != nil {
		res.finish(ps)
		if len(res.Applied) > 0 {
			opts.Landed(w, res.Applied)
		}
	}
	return res, nil
}

// finish lists the applied patches of a pass of ps (once the world runs
// again, unless Landed needed them in the stop).
func (r *Result) finish(ps []Patch) {
	if r == nil || r.use == nil {
		return
	}
	use := r.use
	r.use = nil
	r.Applied = make([]Patch, 0, len(ps))
	for i := range ps {
		if use(i) {
			r.Applied = append(r.Applied, ps[i])
		}
	}
}

// block finds a patch that the PC blocks: pc strictly inside the range,
// or anywhere in a guard range. It returns -1 when the PC blocks none.
func block(ps []Patch, pc uint64) int {
	// The last patch starting below pc is the only one pc can be strictly
	// inside.
	i := sort.Search(len(ps), func(i int) bool { return ps[i].Addr >= pc }) - 1
	if i >= 0 && ps[i].strictlyInside(pc) {
		return i
	}
	for i := range ps {
		if len(ps[i].Guard) > 0 && ps[i].guards(pc) {
			return i
		}
	}
	return -1
}

// blockedBy appends to out every patch that the PC blocks (see block), in
// batch order.
func blockedBy(ps []Patch, pc uint64, out []int) []int {
	in := sort.Search(len(ps), func(i int) bool { return ps[i].Addr >= pc }) - 1
	if in >= 0 && !ps[in].strictlyInside(pc) {
		in = -1
	}
	for i := range ps {
		if i == in || (len(ps[i].Guard) > 0 && ps[i].guards(pc)) {
			out = append(out, i)
		}
	}
	return out
}

// hit is one patch a thread blocks, and the PC that blocks it.
type hit struct {
	patch int
	pc    uint64
}

// blockers lists, for each thread, every patch that its PC or the PC of
// its restarted system call blocks. A thread that blocks several patches
// (it stands in the guard shared by many, or its PC and its restart PC
// fall in different ranges) keeps all of them back until it has moved.
func blockers(ps []Patch, threads []proc.ThreadInfo) map[int][]hit {
	out := map[int][]hit{}
	var idx []int
	for _, th := range threads {
		if th.Exiting {
			continue
		}
		var hits []hit
		if th.PC != 0 {
			idx = blockedBy(ps, th.PC, idx[:0])
			for _, i := range idx {
				hits = append(hits, hit{i, th.PC})
			}
		}
		if th.RestartPC != 0 && th.RestartPC != th.PC {
			idx = blockedBy(ps, th.RestartPC, idx[:0])
			var have map[int]bool
			if len(idx) > 0 && len(hits) > 0 {
				have = make(map[int]bool, len(hits))
				for _, h := range hits {
					have[h.patch] = true
				}
			}
			for _, i := range idx {
				if !have[i] {
					hits = append(hits, hit{i, th.RestartPC})
				}
			}
		}
		if len(hits) > 0 {
			out[th.Tid] = hits
		}
	}
	return out
}

// refuse records every patch of hits as blocked by thread tid, unless
// another thread blocked it first. When the thread blocks more than one
// patch, the reason says how many.
func refuse(blocked map[int]*BlockedError, ps []Patch, tid int, hits []hit, reason string) {
	if len(hits) > 1 {
		reason = fmt.Sprintf("%s (the thread blocks %d patches of the batch)", reason, len(hits))
	}
	for _, h := range hits {
		if blocked[h.patch] == nil {
			blocked[h.patch] = &BlockedError{Addr: ps[h.patch].Addr, Tid: tid, PC: h.pc, Reason: reason}
		}
	}
}

// clearThreads moves every thread out of the ranges of the batch, by
// single steps of that thread alone, and returns the patches still
// blocked, by batch index. A thread that cannot be moved out blocks every
// patch its PCs fall in.
func clearThreads(w World, ps []Patch, opts *Options) (map[int]*BlockedError, int, error) {
	blocked := map[int]*BlockedError{}
	threads, err := w.Threads()
	if err != nil {
		return nil, 0, fmt.Errorf("list threads: %w", err)
	}
	in := blockers(ps, threads)
	if len(in) == 0 {
		return blocked, 0, nil
	}
	byTid := map[int]proc.ThreadInfo{}
	for _, th := range threads {
		byTid[th.Tid] = th
	}
	steps := 0
	stepped := false
	tids := make([]int, 0, len(in))
	for tid := range in {
		tids = append(tids, tid)
	}
	sort.Ints(tids)
	for _, tid := range tids {
		n, reason := stepOut(w, ps, byTid[tid], opts)
		steps += n
		stepped = stepped || n > 0
		if reason != "" {
			refuse(blocked, ps, tid, in[tid], reason)
		}
	}
	if !stepped {
		return blocked, steps, nil
	}
	// A step may have created a thread (clone) or moved one thread into
	// another range: stop any newcomer and check everything again.
	if err := w.Refresh(); err != nil {
		return nil, steps, fmt.Errorf("refresh threads: %w", err)
	}
	if threads, err = w.Threads(); err != nil {
		return nil, steps, fmt.Errorf("list threads: %w", err)
	}
	again := blockers(ps, threads)
	tids = tids[:0]
	for tid := range again {
		tids = append(tids, tid)
	}
	sort.Ints(tids)
	for _, tid := range tids {
		refuse(blocked, ps, tid, again[tid], "inside the range after the other threads were stepped")
	}
	return blocked, steps, nil
}

// stepOut single-steps one thread until neither its PC nor its restart PC
// blocks a patch. It returns the steps made and, on failure, why.
func stepOut(w World, ps []Patch, th proc.ThreadInfo, opts *Options) (int, string) {
	if th.Parked {
		return 0, "blocked in vfork until its child execs or exits"
	}
	limit := opts.maxSteps()
	for n := 0; ; n++ {
		if why := opts.stuck(w, th); why != "" {
			return n, why
		}
		if n >= limit {
			if limit == 0 {
				return n, "stepping out of the range is disabled"
			}
			return n, fmt.Sprintf("still inside after %d single steps", n)
		}
		err := w.Step(th.Tid, opts.stepTimeout())
		if errors.Is(err, proc.ErrStepTimeout) {
			why := "did not finish a single step in time"
			if th.RestartPC != 0 || th.InSyscall {
				why = "blocked in a system call"
			}
			return n + 1, why
		}
		if err != nil {
			if errors.Is(err, proc.ErrNoThread) && exited(w, th.Tid) {
				return n + 1, "" // it runs no user code again
			}
			return n + 1, "single step failed: " + err.Error()
		}
		threads, err := w.Threads()
		if err != nil {
			return n + 1, "list threads: " + err.Error()
		}
		found := false
		for _, t := range threads {
			if t.Tid == th.Tid {
				th, found = t, true
			}
		}
		if !found {
			return n + 1, "" // it exited
		}
		if (th.PC == 0 || block(ps, th.PC) < 0) && (th.RestartPC == 0 || block(ps, th.RestartPC) < 0) {
			return n + 1, ""
		}
	}
}

// exited reports whether thread tid has exited or is exiting, as the
// world lists it now.
func exited(w World, tid int) bool {
	threads, err := w.Threads()
	if err != nil {
		return false
	}
	for _, t := range threads {
		if t.Tid == tid {
			return t.Exiting
		}
	}
	return true
}

// stuck asks Options.Stuck whether stepping the thread cannot help, from
// the code at its PC. It returns "" when stepping may help, when there is
// no Stuck, and when the code cannot be read.
func (o *Options) stuck(w World, th proc.ThreadInfo) string {
	if o == nil || o.Stuck == nil {
		return ""
	}
	var buf [MaxInstLen]byte
	if err := w.ReadMemory(th.PC, buf[:]); err != nil {
		return ""
	}
	return o.Stuck(buf[:], th.PC)
}
