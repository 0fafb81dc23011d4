//go:build linux && (amd64 || arm64)

package probe

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/proc"
)

// A commit makes a staged set of sites the installed set of a target in
// one batch, in phases (commit runs them in order):
//
//  1. dropRemoved: the references of removed probes go, and so do the
//     sites left with none;
//  2. buildTrampolines: every new site the plan gives a trampoline gets
//     one, unless its replaced bytes hold another site;
//  3. restageInstalled: an installed trampoline whose handlers no longer
//     match its probes is rebuilt, and return probes at installed sites
//     served by traps are refused;
//  4. stageNew: every new site is checked (return probes need a
//     trampoline; a trap site's text must be the file's) and its install
//     patch staged;
//  5. stageRemovals: the removal patch of every installed site that goes;
//  6. apply: the patches in one batchpatch pass (nothing changes if it
//     fails);
//  7. install: semaphores, retired sites, counters and the hit path's
//     table follow.

// staged is a commit in progress: the sites it makes installed, the
// patches that get there, the sites they add and remove, and where the
// refusals go.
type staged struct {
	next    map[uint64]*liveSite
	res     *batchResult
	fresh   []*liveSite // the sites of next not installed yet, by address
	patches []batchpatch.Patch
	added   []*liveSite
	removed []*liveSite
}

// rejected is the RejectedError of probe reference r at site s.
func (s *liveSite) rejected(r ref, reason plan.Reason, detail string) RejectedError {
	return RejectedError{Spec: r.p.Spec, Module: s.mod.fi.path, Symbol: s.ps.symbol, Addr: s.ps.vaddr, Reason: reason, Detail: detail}
}

// refuse refuses every probe of site s and drops the site from the batch.
func (b *staged) refuse(s *liveSite, reason plan.Reason, detail string) {
	for _, r := range s.refs {
		b.res.refuse(r.p, s.rejected(r, reason, detail))
	}
	delete(b.next, s.addr)
}

// refuseRefs refuses the probes of site s that drop selects, with reason,
// and keeps the others.
func (b *staged) refuseRefs(s *liveSite, drop func(ref) bool, reason plan.Reason, detail string) {
	kept := s.refs[:0]
	for _, r := range s.refs {
		if drop(r) {
			b.res.refuse(r.p, s.rejected(r, reason, detail))
			continue
		}
		kept = append(kept, r)
	}
	s.refs = kept
}

// dropReturns refuses the return probes of site s: they need a
// trampoline, and the site has none (or one without a return handler).
func (b *staged) dropReturns(s *liveSite, why string) {
	b.refuseRefs(s, ref.hijacks, ReasonReturnNeedsTrampoline, why)
}

// commit makes next the installed set of the target in one batch: int3
// bytes written at the new sites, original bytes back at the sites that
// went, sites without probes dropped, and the hit path's table replaced.
// The world is stopped. A site whose text differs from its file is refused.
// When the batch fails, nothing changes.
func (tg *target) commit(w *proc.World, next map[uint64]*liveSite, res *batchResult) {
	tg.textPages = map[uint64][]byte{}
	defer func() { tg.textPages = nil }()
	dropRemoved(next)
	b := &staged{next: next, res: res, fresh: tg.newSites(next)}
	if tg.t.wantTrampolines() {
		tg.buildTrampolines(w, b.fresh)
	}
	tg.restageInstalled(w, b)
	tg.stageNew(w, b)
	tg.stageRemovals(b)
	if len(b.patches) > 0 && tg.bounded {
		tg.stagePasses(b) // the guardian records the sites after the stop
		return
	}
	if len(b.patches) > 0 && !tg.apply(w, b) {
		return
	}
	tg.install(w, b)
}

// dropRemoved drops the references of removed probes from the sites of
// next, and the sites left with no reason to stay.
func dropRemoved(next map[uint64]*liveSite) {
	for addr, s := range next {
		kept := s.refs[:0]
		for _, r := range s.refs {
			if !r.p.removed {
				kept = append(kept, r)
			}
		}
		s.refs = kept
		if len(s.refs) == 0 && !s.rendezvous && !s.unhijack && !s.rehijack {
			delete(next, addr)
		}
	}
}

// newSites returns the sites of next that are not installed, by address.
func (tg *target) newSites(next map[uint64]*liveSite) []*liveSite {
	var fresh []*liveSite
	for addr, s := range next {
		if tg.sites[addr] == nil {
			fresh = append(fresh, s)
		}
	}
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].addr < fresh[j].addr })
	return fresh
}

// buildTrampolines makes the trampolines of the new sites the plan gives
// one (not the dynamic linker's rendezvous, which must trap). One whose
// replaced bytes hold another site, new or installed, or that cannot be
// made, is dropped with the reason in trampErr: the site falls back to
// its trap strategy.
func (tg *target) buildTrampolines(w *proc.World, fresh []*liveSite) {
	// Every site address, new and installed, sorted: a trampoline's
	// replaced bytes are checked with one search.
	all := make([]uint64, 0, len(fresh)+len(tg.sites))
	for _, s := range fresh {
		all = append(all, s.addr)
	}
	for a := range tg.sites {
		all = append(all, a)
	}
	slices.Sort(all)
	for _, s := range fresh {
		if s.ps.tramp == nil || s.rendezvous {
			continue
		}
		if err := tg.goThreadTrap(s); err != nil {
			s.trampErr = err // gothread_linux_amd64.go
			continue
		}
		err := tg.buildTrampoline(w, s)
		if err == nil {
			lo, hi := s.tramp.span()
			for i, _ := slices.BinarySearch(all, lo); i < len(all) && all[i] < hi; i++ {
				if all[i] != s.addr {
					err = fmt.Errorf("the site at %#x lies in the bytes the jump replaces", all[i])
					break
				}
			}
		}
		if err != nil {
			s.tramp = nil
			s.trampErr = err
		}
	}
}

// restageInstalled brings the installed sites that stay in line with
// their probes. A return probe needs a trampoline: it is refused at a site
// served by traps. An installed trampoline without a handler its probes
// now need (the return, or the entry counter), or with one they no longer
// need, gets a new slot and its jump moves there; where that fails, the
// probes the installed slot cannot serve are refused (a handler no probe
// needs stays).
func (tg *target) restageInstalled(w *proc.World, b *staged) {
	for addr, s := range b.next {
		if tg.sites[addr] == nil {
			continue
		}
		if s.tramp == nil {
			if s.wantsReturn() || s.hasPrograms() {
				b.dropNeedTrampoline(s, "the site is served by traps: "+s.ps.decision.Detail)
			}
			continue
		}
		if !s.needsRebuild() {
			continue
		}
		if err := tg.buildTrampoline(w, s); err != nil {
			if s.wantsReturn() && !s.tramp.ret {
				b.dropReturns(s, err.Error())
			}
			if !s.sameCalls() {
				b.dropMissingPrograms(s, err.Error())
			}
			if s.wantsEntry() && !s.tramp.entry {
				b.refuseRefs(s, func(r ref) bool { return !r.hijacks() }, ReasonPatchFailed,
					"the trampoline of the site's return probe could not be rebuilt with an entry counter: "+err.Error())
			}
			continue
		}
		b.patches = append(b.patches, s.installPatch())
	}
}

// stageNew checks every new site and stages its install patch: the jump
// to its trampoline, or an int3 (see stageTrap). An unwinder entry
// without a trampoline is left alone, and the return probes of a site
// without one are refused.
func (tg *target) stageNew(w *proc.World, b *staged) {
	over := trampolineSpans(b.next)
	for _, s := range b.fresh {
		if s.tramp == nil && (s.unhijack || s.rehijack) {
			// A trap on every exception would cost more than the
			// unwinder entry saves.
			s.unhijack, s.rehijack = false, false
			if len(s.refs) == 0 && !s.rendezvous {
				delete(b.next, s.addr)
				continue
			}
		}
		if s.tramp == nil && (s.wantsReturn() || s.hasPrograms()) {
			why := "the site cannot take a trampoline"
			if !archTrampolines || (!archTrampEvents && tg.t.opts.Events) {
				why = "the engine makes no trampolines on this architecture yet (with Options.Events)"
			} else if !tg.t.wantTrampolines() {
				why = "Options.NoTrampolines (or StepOnly) forbids trampolines"
			} else if s.trampErr != nil {
				why = fmt.Sprintf("the trampoline could not be made: %v", s.trampErr)
			} else if s.ps.tramp == nil {
				why = "the plan gives the site no trampoline: " + s.ps.decision.Detail
			}
			b.dropNeedTrampoline(s, why)
			if len(s.refs) == 0 && !s.rendezvous {
				delete(b.next, s.addr)
				continue
			}
		}
		if s.tramp == nil && !tg.stageTrap(w, b, s, over) {
			continue
		}
		b.patches = append(b.patches, s.installPatch())
		b.added = append(b.added, s)
	}
}

// stageTrap checks a new site served by traps and prepares it: refused
// (and false returned) when its instruction was moved into another site's
// trampoline, when the plan rejects it, or when its text in memory is not
// the file's; an XOL site gets its boosted copy where it can have one.
func (tg *target) stageTrap(w *proc.World, b *staged, s *liveSite, over spans) bool {
	if in := over.site(s.addr); in != nil {
		b.refuse(s, ReasonInTrampoline, fmt.Sprintf("the instruction was moved to the trampoline of the site at %#x", in.addr))
		return false
	}
	if s.ps.decision.Strategy == plan.Reject {
		detail := s.ps.decision.Detail
		if s.trampErr != nil {
			detail += fmt.Sprintf("; the trampoline could not be made: %v", s.trampErr)
		}
		b.refuse(s, s.ps.decision.Reason, detail)
		return false
	}
	buf := make([]byte, len(s.ps.code))
	if err := tg.readText(w, s.addr, buf); err != nil || !bytes.Equal(buf, s.ps.code) {
		if why, ok := tg.heldByKernel(w, s, s.addr, buf, s.ps.code); ok && err == nil {
			b.refuse(s, ReasonKernelUprobe, why)
			return false
		}
		detail := fmt.Sprintf("memory holds %x at %#x, the file %x", buf, s.addr, s.ps.code)
		if err != nil {
			detail = fmt.Sprintf("read %#x: %v", s.addr, err)
		}
		b.refuse(s, ReasonTextMismatch, detail)
		return false
	}
	if s.ps.decision.Strategy == plan.XOL && !tg.t.opts.StepOnly {
		s.boost = tg.boost(w, s)
	}
	return true
}

// stageRemovals stages the removal patch of every installed site that is
// not in the batch's set.
func (tg *target) stageRemovals(b *staged) {
	for addr, s := range tg.sites {
		if b.next[addr] != nil {
			continue
		}
		b.removed = append(b.removed, s)
		b.patches = append(b.patches, s.removePatch())
	}
}

// apply writes the batch's patches in one pass, all or nothing. When it
// fails it records the error, refuses the probes of the new sites
// (ReasonPatchFailed) and returns false: nothing was written.
func (tg *target) apply(w *proc.World, b *staged) bool {
	batchpatch.Sort(b.patches)
	// A thread can stand strictly inside the bytes a jump replaces (or in
	// a slot being removed) only when trampolines are involved; it is
	// then stepped out. A breakpoint (int3, or an aligned brk word) has no inside.
	steps := -1
	for _, p := range b.patches {
		if mayStep(p) {
			steps = 0
		}
	}
	err := tg.guardRecord(b) // the guardian knows every range before it changes
	if err == nil {
		_, err = batchpatch.ApplyStopped(w, b.patches, patchOptions(steps))
	}
	if err != nil {
		b.res.errs = append(b.res.errs, fmt.Errorf("install %d, remove %d probe sites in %d: %w", len(b.added), len(b.removed), tg.pid, err))
		for _, s := range b.added {
			for _, r := range s.refs {
				b.res.refuse(r.p, s.rejected(r, ReasonPatchFailed, err.Error()))
			}
		}
		return false
	}
	tg.t.batches++
	tg.t.patches += len(b.patches)
	return true
}

// install makes the batch's set the installed one once its text is
// written: USDT semaphores counted up and down, removed sites retired,
// the counters of new probes listed, and the hit path's table replaced.
func (tg *target) install(w *proc.World, b *staged) {
	for _, s := range b.added {
		tg.semaphore(w, s, +1)
	}
	for _, s := range b.removed {
		tg.semaphore(w, s, -1)
		tg.retire(s)
		tg.forget(s)
	}
	tg.sites = b.next
	for _, s := range b.next {
		s.goLive()
	}
	tg.publish()
}

// goLive marks the counters of the probes of site s live, once its text
// is written: they count from then on, and Stats lists them.
func (s *liveSite) goLive() {
	for _, r := range s.refs {
		if r.c.tramp == nil && s.tramp != nil {
			r.c.tramp, r.c.ret = s.tramp, r.hijacks()
			r.c.decision = *s.ps.tramp
		}
		if s.tramp == nil && s.trampErr != nil && r.c.fallback == "" {
			r.c.fallback = "the trampoline could not be made: " + s.trampErr.Error()
		}
		if r.c.live.CompareAndSwap(false, true) {
			r.p.counters = append(r.p.counters, r.c)
		}
	}
}

// mayStep reports whether a thread can stand where patch p must not find
// one, to be stepped out: strictly inside the bytes of a jump longer than
// a breakpoint, or in a slot being removed (a guard range; on arm64 the b
// is one word, as long as the brk). A breakpoint has no inside.
func mayStep(p batchpatch.Patch) bool { return len(p.New) > len(trapInsn) || len(p.Guard) > 0 }

// patchOptions are the options of the engine's text passes: all or
// nothing (so the pass's error is the only one to check), maxSteps single
// steps for a thread in the way (see batchpatch.Options.MaxSteps), and a
// thread that spins on a jump to itself refused at once.
func patchOptions(maxSteps int) *batchpatch.Options {
	return &batchpatch.Options{AllOrNothing: true, MaxSteps: maxSteps, StepTimeout: rangeStepTimeout, Stuck: spinsOnSelf}
}

// rangeStepTimeout bounds each single step of a thread out of a range a batch
// replaces. No such range holds a system call instruction (neither a
// detour nor a trap site displaces one), so no thread there is blocked in
// the kernel: a step that takes long is one the machine is too busy to
// schedule (batchpatch's 10 ms default refused the removal of a probe
// under a load of 18 on 2 CPUs).
const rangeStepTimeout = 200 * time.Millisecond

// spinsOnSelf is batchpatch.Options.Stuck for x86-64: a relative jump,
// loop or xbegin to its own address, which no single step leaves, is
// named; anything else, or code that does not decode, may be stepped.
func spinsOnSelf(code []byte, pc uint64) string {
	if engineArch != decode.X86_64 {
		return "" // stepped, up to the bound
	}
	var inst decode.X86Inst
	if err := (decode.X86Decoder{}).Decode(code, pc, &inst); err != nil {
		return ""
	}
	if inst.Branch.Relative() && inst.Branch != decode.BranchCall && inst.Target == pc && inst.Branch != decode.BranchJcc {
		return fmt.Sprintf("spins on %s to itself", inst.Mnemonic)
	}
	return ""
}
