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
// traps that are not its own.
func StopFree(p *proc.Process, ps []Patch, opts *StopFreeOptions) (*Result, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	if err := Validate(ps); err != nil {
		return nil, err
	}
	sync := func() error { return nil }
	if opts != nil && opts.Sync != nil {
		sync = opts.Sync
	}
	spans := coalesce(ps, nil)
	if err := readSpans(p, spans); err != nil {
		return nil, fmt.Errorf("read text: %w", err)
	}
	if i, err := checkOld(ps, spans); err != nil {
		return nil, &PatchError{Index: i, Addr: ps[i].Addr, Err: err}
	}
	sites := make(map[uint64]bool, len(ps))
	for _, q := range ps {
		sites[q.Addr] = true
	}
	var chain atomic.Pointer[proc.TrapHandler] // set once SetTrapHandler returns
	var held atomic.Int64
	prev, err := p.SetTrapHandler(func(ctx *proc.TrapContext) proc.TrapAction {
		if sites[ctx.Addr] {
			held.Add(1)
			return proc.TrapHold
		}
		if h := chain.Load(); h != nil && *h != nil {
			return (*h)(ctx)
		}
		return proc.TrapPass
	})
	if err != nil {
		return nil, fmt.Errorf("install trap handler: %w", err)
	}
	chain.Store(&prev)
	release := func() error {
		return p.Release(func(ctx *proc.TrapContext) bool {
			if !sites[ctx.Addr] {
				return false
			}
			ctx.Regs.SetPC(ctx.Addr) // run the site again, now whole
			return true
		})
	}
	// stage builds the bytes of every span for one step of the protocol.
	stage := func(step int) [][]byte {
		out := make([][]byte, len(spans))
		for si, s := range spans {
			b := append([]byte(nil), s.cur...)
			for _, i := range s.patches {
				q := ps[i]
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
	res := &Result{}
	write := func(bufs [][]byte) error {
		back := make([]byte, 0, pageSize)
		for si, s := range spans {
			if err := p.WriteMemory(s.start, bufs[si]); err != nil {
				return &PatchError{Index: s.patches[0], Addr: ps[s.patches[0]].Addr, Err: err}
			}
			res.Writes++
			res.Bytes += len(bufs[si])
			back = back[:len(bufs[si])]
			if err := p.ReadMemory(s.start, back); err != nil {
				return &PatchError{Index: s.patches[0], Addr: ps[s.patches[0]].Addr, Err: err}
			}
			if i, err := s.compare(ps, bufs[si], back); err != nil {
				return &PatchError{Index: i, Addr: ps[i].Addr, Err: err}
			}
		}
		return nil
	}
	var failure error
	for step := 1; step <= 3 && failure == nil; step++ {
		if err := write(stage(step)); err != nil {
			failure = fmt.Errorf("stage %d: %w", step, err)
			break
		}
		if err := sync(); err != nil {
			failure = fmt.Errorf("sync after stage %d: %w", step, err)
		}
	}
	if failure != nil {
		// Undo in reverse: int3 first bytes with old tails, then old bytes.
		old := make([][]byte, len(spans))
		for si, s := range spans {
			old[si] = s.cur
		}
		if err := write(stage(1)); err == nil {
			_ = sync()
		}
		if err := write(old); err != nil {
			failure = &RollbackError{Err: failure, RestoreErr: err}
		}
		_ = sync()
	}
	grace := 10 * time.Millisecond
	if opts != nil && opts.Grace > 0 {
		grace = opts.Grace
	}
	derr := p.DrainTraps(grace)
	rerr := release()
	_, herr := p.SetTrapHandler(prev)
	res.Held = int(held.Load())
	if rerr == nil {
		rerr = derr
	}
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
