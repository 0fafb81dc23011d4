package batchpatch

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/probeopt/probeopt/proc"
)

// int3 is the x86-64 breakpoint instruction.
const int3 = 0xcc

// StopFreeOptions tune StopFree. A nil *StopFreeOptions means the
// defaults.
type StopFreeOptions struct {
	// Sync is called after each stage, before the next one starts. The
	// kernel serialises every CPU there (an IPI that runs a serialising
	// instruction); a tracer can, for example, have the tracee run
	// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE). nil means no
	// synchronisation beyond the ordering of the writes themselves.
	Sync func() error
	// Grace is how long StopFree keeps handling traps at the sites after
	// the last stage, for threads that ran an int3 just before it was
	// overwritten (the kernel's trap path can be preempted); 0 means 10 ms.
	Grace time.Duration
}

// StopFree applies the batch without stopping the world, with the
// protocol Linux uses for live kernel text (text_poke_bp):
//
//  1. write int3 over the first byte of every site; sync;
//  2. write every site's remaining bytes; sync;
//  3. write every site's first byte; sync.
//
// A thread that reaches a site meanwhile traps on the int3; StopFree holds
// it (the rest of the process runs on) and, once the site is complete and
// late traps have drained (StopFreeOptions.Grace), moves it back to the
// site to run the new instruction (Result.Held counts those traps). Each
// stage is written per page and read back. On failure every site gets its
// old bytes back in the reverse order and held threads re-run the old
// code.
//
// Only a patch that replaces exactly one whole instruction is safe this
// way: a thread already past the first byte of a multi-instruction range
// would run a mix. Use Apply for those. The batch's old bytes are checked
// against the process's text first, as in Apply. StopFree installs its
// own TrapHandler for its duration, chaining to the previous one for
// traps that are not its own. It works on linux/amd64 only (ErrNotSupported
// elsewhere).
func StopFree(p *proc.Process, ps []Patch, opts *StopFreeOptions) (*Result, error) {
	if err := stopFreeSupported(); err != nil {
		return nil, err
	}
	if err := Validate(ps); err != nil {
		return nil, err
	}
	sf, err := newStopFree(p, ps, opts)
	if err != nil {
		return nil, err
	}
	if err := sf.hold(); err != nil {
		return nil, err
	}
	failure := sf.apply()
	if failure != nil {
		failure = sf.undo(failure)
	}
	grace := 10 * time.Millisecond
	if opts != nil && opts.Grace > 0 {
		grace = opts.Grace
	}
	rerr, herr := sf.release(grace)
	res := sf.res
	if failure != nil {
		return res, failure
	}
	if rerr != nil {
		return res, fmt.Errorf("release held threads: %w", rerr)
	}
	if herr != nil {
		return res, fmt.Errorf("restore trap handler: %w", herr)
	}
	res.Applied = append(res.Applied, ps...)
	return res, nil
}

// stopFree is the state of one StopFree call.
type stopFree struct {
	p     *proc.Process
	ps    []Patch
	spans []*span
	sites map[uint64]bool // the patches' addresses, where threads are held
	sync  func() error
	res   *Result

	chain atomic.Pointer[proc.TrapHandler] // the previous handler, set once SetTrapHandler returns
	prev  proc.TrapHandler
	held  atomic.Int64 // traps held at the sites
}

// newStopFree reads the text the batch covers and checks the patches' old
// bytes against it.
func newStopFree(p *proc.Process, ps []Patch, opts *StopFreeOptions) (*stopFree, error) {
	sf := &stopFree{p: p, ps: ps, sync: func() error { return nil }}
	if opts != nil && opts.Sync != nil {
		sf.sync = opts.Sync
	}
	sf.spans = coalesce(ps, nil)
	if err := readSpans(p, sf.spans); err != nil {
		return nil, fmt.Errorf("read text: %w", err)
	}
	if i, err := checkOld(ps, sf.spans); err != nil {
		return nil, &PatchError{Index: i, Addr: ps[i].Addr, Err: err}
	}
	sf.sites = make(map[uint64]bool, len(ps))
	for _, q := range ps {
		sf.sites[q.Addr] = true
	}
	return sf, nil
}

// hold installs the trap handler that holds a thread trapping at a site
// and passes every other trap to the previous handler.
func (sf *stopFree) hold() error {
	prev, err := sf.p.SetTrapHandler(func(ctx *proc.TrapContext) proc.TrapAction {
		if sf.sites[ctx.Addr] {
			sf.held.Add(1)
			return proc.TrapHold
		}
		if h := sf.chain.Load(); h != nil && *h != nil {
			return (*h)(ctx)
		}
		return proc.TrapPass
	})
	if err != nil {
		return fmt.Errorf("install trap handler: %w", err)
	}
	sf.prev = prev
	sf.chain.Store(&prev)
	sf.res = &Result{}
	return nil
}

// apply writes the three stages of the protocol, each followed by a sync,
// and returns the first failure.
func (sf *stopFree) apply() error {
	for step := 1; step <= 3; step++ {
		if err := sf.write(sf.stage(step)); err != nil {
			return fmt.Errorf("stage %d: %w", step, err)
		}
		if err := sf.sync(); err != nil {
			return fmt.Errorf("sync after stage %d: %w", step, err)
		}
	}
	return nil
}

// undo puts the old bytes back after failure, in the reverse order: int3
// first bytes with old tails, then the old bytes. It returns failure, or a
// *RollbackError when the old bytes could not be written.
func (sf *stopFree) undo(failure error) error {
	old := make([][]byte, len(sf.spans))
	for si, s := range sf.spans {
		old[si] = s.cur
	}
	if err := sf.write(sf.stage(1)); err == nil {
		_ = sf.sync()
	}
	if err := sf.write(old); err != nil {
		failure = &RollbackError{Err: failure, RestoreErr: err}
	}
	_ = sf.sync()
	return failure
}

// stage builds the bytes of every span for one step of the protocol.
func (sf *stopFree) stage(step int) [][]byte {
	out := make([][]byte, len(sf.spans))
	for si, s := range sf.spans {
		b := append([]byte(nil), s.cur...)
		for _, i := range s.patches {
			q := sf.ps[i]
			for a := max(q.Addr, s.start); a < min(q.End(), s.start+uint64(len(b))); a++ {
				k := a - q.Addr
				switch {
				case k == 0 && step < 3:
					b[a-s.start] = int3
				case k == 0:
					b[a-s.start] = q.New[0]
				case step >= 2:
					b[a-s.start] = q.New[k]
				}
			}
		}
		out[si] = b
	}
	return out
}

// write writes one buffer per span and reads each back.
func (sf *stopFree) write(bufs [][]byte) error {
	back := make([]byte, 0, pageSize)
	for si, s := range sf.spans {
		first := s.patches[0]
		if err := sf.p.WriteMemory(s.start, bufs[si]); err != nil {
			return &PatchError{Index: first, Addr: sf.ps[first].Addr, Err: err}
		}
		sf.res.Writes++
		sf.res.Bytes += len(bufs[si])
		back = back[:len(bufs[si])]
		if err := sf.p.ReadMemory(s.start, back); err != nil {
			return &PatchError{Index: first, Addr: sf.ps[first].Addr, Err: err}
		}
		if i, err := s.compare(sf.ps, bufs[si], back); err != nil {
			return &PatchError{Index: i, Addr: sf.ps[i].Addr, Err: err}
		}
	}
	return nil
}

// release lets late traps drain for grace, moves every held thread back to
// its site to run it again (now whole, or old again after an undo), and
// puts the previous trap handler back. It returns the error of the drain
// or the release, and that of restoring the handler, and sets Result.Held.
func (sf *stopFree) release(grace time.Duration) (rerr, herr error) {
	derr := sf.p.DrainTraps(grace)
	rerr = sf.p.Release(func(ctx *proc.TrapContext) bool {
		if !sf.sites[ctx.Addr] {
			return false
		}
		ctx.Regs.SetPC(ctx.Addr) // run the site again, now whole
		return true
	})
	_, herr = sf.p.SetTrapHandler(sf.prev)
	sf.res.Held = int(sf.held.Load())
	if rerr == nil {
		rerr = derr
	}
	return rerr, herr
}
