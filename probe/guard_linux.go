//go:build linux && (amd64 || arm64)

package probe

import (
	"bytes"
	"fmt"
	"os"

	"github.com/probeopt/probeopt/guardian"
	"github.com/probeopt/probeopt/proc"
)

// The guardian of an attached process (package guardian): started by
// Attach before the process is seized; every range a
// batch writes is recorded in its undo log before the batch runs; released
// once the process is detached cleanly or has exited.

// guardKey names one record: where its bytes are (the site's address, or
// where its jump starts after the bytes it keeps), its kind and the bytes
// written there.
type guardKey struct {
	addr uint64
	kind guardian.Kind
	new  string
}

// trapGuard is the state of a target's trap guard, the SIGTRAP handler
// that covers trap stops the tracer had not collected when it died
// (trapguard_linux_amd64.go; none on arm64). Under Tracer.mu.
type trapGuard struct {
	area    uint64          // the trap guard's area, 0 when none is armed
	orig    []byte          // SIGTRAP's kernel sigaction before it
	n       int             // entries in its table
	has     map[uint64]bool // trap sites noted (in the table or pending)
	pending []uint64        // trap sites noted, not in the table yet
	why     string          // why none is armed for this image ("" when not tried)
	mem     *os.File        // /proc/PID/mem for writing the table
}

// reset forgets the trap guard (an exec replaced the image, or it was
// taken out).
func (g *trapGuard) reset() {
	if g.mem != nil {
		g.mem.Close()
	}
	*g = trapGuard{}
}

// guardRecord records, in the guardian's log, the original bytes of every
// site of the batch not recorded yet (under Tracer.mu, before the batch is
// written).
func (tg *target) guardRecord(b *staged) error { return tg.guardSites(b.next) }

// guardSites records the original bytes of every site of sites not
// recorded yet (under Tracer.mu).
func (tg *target) guardSites(sites map[uint64]*liveSite) error {
	if tg.guard == nil {
		return nil
	}
	var recs []guardian.Record
	var keys []guardKey
	for _, s := range sites {
		in := s.installPatch()
		r := guardian.Record{Addr: in.Addr, Kind: guardian.KindTrap, InstLen: len(s.ps.code), Orig: s.removePatch().New, New: in.New}
		if s.tramp != nil {
			r.Kind, r.InstLen = guardian.KindJump, 0
		}
		if r.Kind == guardian.KindTrap && bytes.Equal(in.New, trapInsn.bytes()) {
			tg.noteTrapSite(in.Addr) // before its int3 is written, as the record
		}
		k := guardKey{in.Addr, r.Kind, string(in.New)}
		if tg.guarded[k] {
			continue
		}
		recs = append(recs, r)
		keys = append(keys, k)
	}
	if len(recs) == 0 {
		return nil
	}
	if err := tg.guard.Record(recs...); err != nil {
		return fmt.Errorf("guardian of %d: %w", tg.pid, err)
	}
	for _, k := range keys {
		tg.guarded[k] = true
	}
	return nil
}

// borrowed is the target's proc.SyscallHandler: the guardian's log holds
// the registers of the thread a remote system call borrows, so that a
// tracer that dies in the middle of the call leaves the thread as it was
// (package guardian puts them back).
func (tg *target) borrowed(tid int, saved *proc.Regs, active bool) {
	if tg.guard == nil {
		return
	}
	if active {
		tg.guard.Borrow(tid, saved)
	} else {
		tg.guard.Return()
	}
}

// served records in the guardian's log the registers an emulation gives
// the thread of trap ctx, before proc sets them: a tracer that dies
// before the thread runs again leaves it just past the site, which the
// guardian must not take for a thread that ran the int3 and waits (see
// guardian.Guard.Serving).
func (tg *target) served(ctx *proc.TrapContext) {
	if tg.guard != nil {
		tg.guard.Serving(ctx.Tid, ctx.Regs)
	}
}

// stepServed records in the guardian's log the registers a single step
// over a site's instruction left thread tid with, once its stop is
// collected: until the world resumes, a tracer that dies leaves it just
// past the site as a thread that ran the int3 would stand (see served).
func (tg *target) stepServed(tid int, r *proc.Regs) {
	if tg.guard != nil {
		tg.guard.Serving(tid, r)
	}
}

// stepping is the target's proc.StepHandler: the guardian's log holds the
// thread in a single step, so that a tracer that dies before it collects
// the step's stop does not leave the thread to die of the step's SIGTRAP
// (package guardian discards it).
func (tg *target) stepping(tid int, active bool) {
	if tg.guard == nil {
		return
	}
	if !active {
		tid = 0
	}
	tg.guard.Stepping(tid)
}

// resetGuard empties the guardian's log after an exec (under Tracer.mu,
// before the new image is probed).
func (tg *target) resetGuard() {
	if tg.guard != nil {
		tg.guard.Reset()
		tg.guarded = map[guardKey]bool{}
	}
	tg.tguard.reset() // an exec resets the handlers and unmaps the area
}

// releaseGuard tells the guardian that the target needs it no more.
func (tg *target) releaseGuard() {
	if tg.guard != nil {
		_ = tg.guard.Release()
	}
}

// spawnGuard starts the guardian of a process Spawn started (stopped
// before its first instruction, killed if this program exits), then arms
// its stop latch and stops its kill on exit: from then on the death of
// this program leaves it to the guardian, as an attached process. Until
// then it would be killed, before it ran an instruction. nil without a
// guardian (Options.NoGuardian, or arm64: archSpawnGuard).
func spawnGuard(p *proc.Process, o *Options) (*guardian.Guard, error) {
	if o.NoGuardian || !archSpawnGuard {
		return nil, nil
	}
	g, err := guardian.Start(p.Pid(), nil)
	if err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	if err := p.Latch(); err != nil {
		_ = g.Release()
		return nil, fmt.Errorf("spawn: %w", err)
	}
	return g, nil
}

// guardChild starts the guardian of a followed child (a forked process,
// or a vfork child's new image) of a guarded tracer, records the sites it
// inherited (nil for none) and arms its stop latch, before it runs: from
// then on the death of the tracer leaves it restored and running, as the
// root process. The child is stopped; under Tracer.mu.
func (tg *target) guardChild(sites map[uint64]*liveSite) error {
	if tg.t.guard == nil {
		return nil
	}
	g, err := guardian.Start(tg.pid, nil)
	if err != nil {
		return fmt.Errorf("follow %d: %w", tg.pid, err)
	}
	tg.guard, tg.guarded = g, map[guardKey]bool{}
	err = tg.guardSites(sites)
	if err == nil {
		err = tg.p.Latch()
	}
	if err != nil {
		_ = g.Release()
		tg.guard, tg.guarded = nil, nil
		return fmt.Errorf("follow %d: %w", tg.pid, err)
	}
	return nil
}
