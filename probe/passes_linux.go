//go:build linux && (amd64 || arm64)

package probe

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/proc"
)

// Bounded installs (Options.MaxPause). The commit of an Add or a Remove
// stages its batch in one stop as usual (plans, trampolines built; their
// slots are queued, see writeSlot), but instead of writing the sites' patches it
// makes the hit path's table serve every site the batch adds and keeps
// every site it removes (stagePasses): a table entry for an int3 not
// written yet, or already removed, is never used. runPasses then writes
// the patches with batchpatch in passes under the bound, each site a unit
// of its own (a trampoline's slot is written before its jump; an entry
// probe and the return probe sharing its slot are one site, one patch).
// Each pass, still stopped, makes the probes of its sites live (counters,
// USDT semaphores) or retires the sites it removed; between passes the
// tracer's lock is released, so that a forked child is served within one
// pass: it inherits the sites whose bytes it holds (the text it copied is
// whole per site). After the last pass the table holds the sites that
// stay.

// The staging stop of a bounded batch writes no slot: no thread can
// reach a new slot (a trampoline's, a boosted copy's) before the pass
// that writes its site's jump or int3, so writeSlot queues the code and
// runPasses writes it while the process runs, before the first pass,
// adjacent slots in one write; the guardian records the batch's sites
// then too, before any of them is written. The sites' bytes the stop compares with
// the file are read a page at a time (readText).

// slotWrite is the code of a new slot, queued by writeSlot.
type slotWrite struct {
	addr uint64
	code []byte
}

// writeSlot writes the code of a new slot, or queues it when the stop
// stages a bounded batch (see above). The world is stopped.
func (tg *target) writeSlot(w *proc.World, addr uint64, code []byte) error {
	if tg.bounded {
		tg.slots = append(tg.slots, slotWrite{addr, append([]byte(nil), code...)})
		return nil
	}
	return w.WriteMemory(addr, code)
}

// maxSlotWrite bounds one coalesced write of queued slots.
const maxSlotWrite = 64 << 10

// flushSlots writes the queued slots, adjacent ones in one write, while
// the process runs.
func (tg *target) flushSlots() error {
	ws := tg.slots
	tg.slots = nil
	slices.SortFunc(ws, func(a, b slotWrite) int { return cmp.Compare(a.addr, b.addr) })
	for i := 0; i < len(ws); {
		addr, buf := ws[i].addr, append([]byte(nil), ws[i].code...)
		j := i + 1
		for ; j < len(ws) && ws[j].addr == addr+uint64(len(buf)) && len(buf) < maxSlotWrite; j++ {
			buf = append(buf, ws[j].code...)
		}
		if err := tg.p.WriteMemory(addr, buf); err != nil {
			return fmt.Errorf("write %d slots at %#x: %w", j-i, addr, err)
		}
		i = j
	}
	return nil
}

// readText reads text at addr into buf during a commit through a cache
// of whole pages (one read per page for the many sites of a module),
// directly outside a commit or where a whole page cannot be read. The
// world is stopped.
func (tg *target) readText(w *proc.World, addr uint64, buf []byte) error {
	if tg.textPages == nil {
		return w.ReadMemory(addr, buf)
	}
	for done := 0; done < len(buf); {
		a := addr + uint64(done)
		page := a &^ (pageSize - 1)
		pg, ok := tg.textPages[page]
		if !ok {
			pg = make([]byte, pageSize)
			if w.ReadMemory(page, pg) != nil {
				pg = nil
			}
			tg.textPages[page] = pg
		}
		if pg == nil {
			return w.ReadMemory(addr, buf)
		}
		done += copy(buf[done:], pg[a-page:])
	}
	return nil
}

// warmPlans plans, while the process runs, the sites the new probes name
// in the modules the target knows (the plans are cached per file), so
// that the stop that stages a bounded batch finds them decided. A module
// mapped since the last look is planned in that stop.
func (tg *target) warmPlans(probes []*probeState) {
	for _, mod := range tg.modules {
		for _, p := range probes {
			if mod.resolved[p.ID] || p.internal || !p.sp.matchesModule(mod.fi.path, mod.main) {
				continue
			}
			sites, err := mod.fi.resolve(&p.sp)
			if err != nil {
				continue
			}
			for i := range sites {
				if sites[i].OffsetErr == nil {
					_, _ = mod.fi.plan(&sites[i], tg.t.vendor)
				}
			}
		}
	}
}

// stagePasses keeps b for runPasses and publishes the table of every
// site the batch adds or removes (the world is stopped).
func (tg *target) stagePasses(b *staged) {
	batchpatch.Sort(b.patches)
	tg.staged = b
	all := make(map[uint64]*liveSite, len(b.next)+len(b.removed))
	for a, s := range b.next {
		all[a] = s
	}
	tg.removing = make(map[uint64]bool, len(b.removed))
	for _, s := range b.removed {
		all[s.addr] = s
		tg.removing[s.addr] = true
	}
	tg.sites = all
	tg.publish()
}

// runPasses writes the batch stagePasses kept, in passes under
// Options.MaxPause (see above). It is called with Tracer.mu held and the
// world running, and returns with it held.
func (t *Tracer) runPasses(tg *target, res *batchResult) {
	b := tg.staged
	tg.staged = nil
	if b == nil {
		tg.slots = nil // nothing will jump to them
		return
	}
	// The slots, and the guardian's record of the sites, before any
	// pass writes a site (the process runs).
	err := tg.flushSlots()
	if err == nil {
		err = tg.guardRecord(b)
	}
	tg.passing = true
	var r *batchpatch.Result
	if err == nil {
		r, err = batchpatch.Apply(tg.p, b.patches, t.passOptions(tg, b))
	}
	tg.passing = false
	tg.removing = nil
	tg.settlePasses(b, r, err, res)
}

// passSites are a bounded batch's sites by the address of their patch:
// a jump may start after the bytes a site keeps (an endbr64, a first
// instruction).
type passSites struct {
	added, removed, next map[uint64]*liveSite
}

func newPassSites(b *staged) passSites {
	ps := passSites{
		added:   make(map[uint64]*liveSite, len(b.added)),
		removed: make(map[uint64]*liveSite, len(b.removed)),
		next:    make(map[uint64]*liveSite, len(b.next)),
	}
	for _, s := range b.added {
		ps.added[s.installPatch().Addr] = s
	}
	for _, s := range b.removed {
		ps.removed[s.removePatch().Addr] = s
	}
	for _, s := range b.next {
		ps.next[s.installPatch().Addr] = s
	}
	return ps
}

// landed makes the sites of the patches a pass applied live, or retires
// the ones it removed (the world is stopped: w, when it is a proc.World).
func (tg *target) landed(ps passSites, w batchpatch.World, applied []batchpatch.Patch) {
	pw, _ := w.(*proc.World)
	for _, p := range applied {
		if s := ps.added[p.Addr]; s != nil && pw != nil {
			tg.semaphore(pw, s, +1)
		}
		if s := ps.removed[p.Addr]; s != nil {
			if pw != nil {
				tg.semaphore(pw, s, -1)
			}
			tg.retire(s)
			tg.forget(s)
			delete(tg.removing, s.addr)
			continue
		}
		if s := ps.next[p.Addr]; s != nil {
			s.goLive()
		}
	}
}

// passOptions are the options of batch b's passes: each patch a unit,
// the bound, the sites going live as their pass lands, the tracer's
// figures and progress, and the lock released between passes.
func (t *Tracer) passOptions(tg *target, b *staged) *batchpatch.Options {
	steps := -1
	for i := range b.patches {
		b.patches[i].Unit = b.patches[i].Addr
		if mayStep(b.patches[i]) {
			steps = 0
		}
	}
	ps := newPassSites(b)
	opts := patchOptions(steps)
	opts.MaxPause = t.opts.MaxPause
	opts.PassGap = -1 // slept with the lock released, below
	opts.Landed = func(w batchpatch.World, applied []batchpatch.Patch) { tg.landed(ps, w, applied) }
	done, total := 0, len(b.patches)
	opts.OnPass = func(st batchpatch.PassStats, applied []batchpatch.Patch) {
		t.batches++
		t.patches += len(applied)
		t.longestPause = max(t.longestPause, st.Pause)
		done += len(applied)
		if t.opts.OnPass != nil {
			t.opts.OnPass(done, total)
		}
	}
	opts.BetweenPasses = func() error {
		t.mu.Unlock()
		time.Sleep(batchpatch.DefaultPassGap)
		t.mu.Lock()
		if tg.closed || t.closed {
			return ErrClosed
		}
		return nil
	}
	return opts
}

// settlePasses records the outcome of batch b's passes (r, err): the
// error, the probes whose sites were not written, and the table of the
// sites that stay: the batch's, less the additions that were not
// written, plus the removals that were not.
func (tg *target) settlePasses(b *staged, r *batchpatch.Result, err error, res *batchResult) {
	applied := map[uint64]bool{}
	if r != nil {
		for _, p := range r.Applied {
			applied[p.Addr] = true
		}
		if err == nil {
			err = r.Err()
		}
	}
	if err != nil && !(errors.Is(err, proc.ErrShortIO) && len(b.patches) > 0 && tg.memoryGone(b.patches[0].Addr)) {
		// (A process that exited between passes, a followed child
		// above all, lost its memory and its sites with it: no error.)
		res.errs = append(res.errs, fmt.Errorf("install %d, remove %d probe sites in %d: %w", len(b.added), len(b.removed), tg.pid, err))
	}
	if tg.closed {
		return
	}
	final := make(map[uint64]*liveSite, len(b.next))
	for a, s := range b.next {
		final[a] = s
	}
	for _, s := range b.added {
		if applied[s.installPatch().Addr] {
			continue
		}
		delete(final, s.addr)
		why := "the pass that would install it did not run"
		if err != nil {
			why = err.Error()
		}
		for _, r := range s.refs {
			res.refuse(r.p, s.rejected(r, ReasonPatchFailed, why))
		}
	}
	for _, s := range b.removed {
		if !applied[s.removePatch().Addr] {
			final[s.addr] = s
		}
	}
	tg.sites = final
	tg.publish()
}

// memoryGone reports whether the process has no memory at addr (a
// text address it had) any more: it exited, or is exiting past the release
// of its memory.
func (tg *target) memoryGone(addr uint64) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(tg.pid) + "/mem")
	if err != nil {
		return true
	}
	defer f.Close()
	var b [1]byte
	n, _ := f.ReadAt(b[:], int64(addr))
	return n == 0
}
