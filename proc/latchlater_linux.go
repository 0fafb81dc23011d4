//go:build linux && (amd64 || arm64)

package proc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Latch implements Process.Latch: the options of every thread are set
// again without PTRACE_O_EXITKILL, and the latch is armed as Attach arms
// it (armLatch).
func (p *ptraceProcess) Latch() error {
	return p.run(func() error {
		if !p.stopped {
			return fmt.Errorf("latch %d: %w", p.pid, ErrRunning)
		}
		if p.done {
			return ErrExited
		}
		p.opts.KillOnExit = false
		p.opts.StopLatch = true
		opts := ptraceOptions(&p.opts)
		for _, th := range p.threads {
			if th.gone || th.exiting || th.parked || !th.stopped {
				continue
			}
			if err := ptrace(unix.PTRACE_SETOPTIONS, th.tid, 0, opts); err != nil && err != unix.ESRCH {
				return &ThreadError{Tid: th.tid, Op: "set options", Err: err}
			}
		}
		if p.latch.armed {
			return nil
		}
		return p.t.armLatch(p)
	})
}
