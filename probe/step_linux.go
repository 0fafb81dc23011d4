//go:build linux && (amd64 || arm64)

package probe

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/proc"
)

// held is a thread the trap handler keeps stopped for the service
// goroutine: to execute the displaced instruction (step), or, for the
// dynamic linker's rendezvous, until new modules are probed.
type held struct {
	tid        int
	addr       uint64
	step       bool // stopped at addr, the instruction not executed yet
	rendezvous bool
	refs       []ref
}

// xolExecutor executes the instruction an int3 displaced, for threads held
// at the site, while every thread of the process is stopped. The in-place
// method is the one there is: a single step of a relocated copy in a slot
// (xol.X86Copy.Enter and Fixup) would be another, once the step can be made
// without stopping the world. (Copies that need no step, the boosted ones,
// do not come here: see slot_linux.go.)
type xolExecutor interface {
	// run executes the instruction of s once for each of tids, which are
	// stopped at s.addr. It returns, per thread, nil or why it could not,
	// and how many signals it delivered after the instruction rather than
	// before.
	run(w *proc.World, s *liveSite, tids []int) ([]error, int)
}

// inPlace puts the original byte back, single-steps each thread over the
// original instruction at its own address, and writes the int3 again.
// Every other thread is stopped meanwhile, so none can run past the site
// unseen. served, if set, is told the registers each step left a thread
// with (target.stepServed).
type inPlace struct {
	served func(tid int, r *proc.Regs)
}

// Bounds of one step of a held thread.
const (
	stepTimeout = time.Second
	// maxSteps bounds the steps of one execution: a string instruction
	// with a repeat prefix takes one per iteration. A thread still at the
	// site afterwards traps again and goes on (its hit is counted again).
	maxSteps = 1 << 14
)

func (x inPlace) run(w *proc.World, s *liveSite, tids []int) ([]error, int) {
	errs := make([]error, len(tids))
	orig := s.ps.trap().bytes()
	if err := w.WriteMemory(s.addr, orig); err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("restore the byte at %#x: %w", s.addr, err)
		}
		return errs, 0
	}
	deferred := 0
	for i, tid := range tids {
		var d int
		d, errs[i] = stepOver(w, tid, s.addr, x.served)
		deferred += d
	}
	if err := w.WriteMemory(s.addr, trapInsn.bytes()); err != nil {
		// The site now runs unprobed; the caller drops it.
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("%w: write the breakpoint at %#x again: %w", errSiteLost, s.addr, err)
			}
		}
	}
	return errs, deferred
}

// errSiteLost means a site's int3 could not be written back after a step.
var errSiteLost = errors.New("site lost")

// stepOver executes the instruction at addr for thread tid, which stands
// there. A signal that stops the thread before the instruction runs is
// kept (proc queues it again when the world resumes) and the step made
// again, so the signal is delivered after the instruction, as Linux
// delivers signals after its own out-of-line step. A fault of the
// instruction itself ends the step: the thread stays at addr with the
// signal, as on the CPU.
//
// It returns the number of signals it deferred so. served, if not nil, is
// told the registers the step left the thread with.
func stepOver(w *proc.World, tid int, addr uint64, served func(tid int, r *proc.Regs)) (int, error) {
	deferred := 0
	for n := 0; n < maxSteps; n++ {
		err := w.Step(tid, stepTimeout)
		deferred += w.StepSignals(tid) // kept by proc, the step made again
		if err != nil {
			return deferred, err
		}
		r, err := w.Regs(tid)
		if err != nil {
			return deferred, err
		}
		if r.PC() != addr {
			if served != nil {
				served(tid, &r)
			}
			return deferred, nil
		}
		switch sig := threadSignal(w, tid); sig {
		case 0:
			// A string instruction between two iterations (or a jump to
			// itself): step on.
		case int(unix.SIGSEGV), int(unix.SIGBUS), int(unix.SIGFPE), int(unix.SIGILL):
			return deferred, nil
		default:
			deferred++
		}
	}
	return deferred, nil
}

// threadSignal returns the signal the stop of thread tid holds, 0 if none.
func threadSignal(w *proc.World, tid int) int {
	ths, err := w.Threads()
	if err != nil {
		return 0
	}
	for _, th := range ths {
		if th.Tid == tid {
			return th.Signal
		}
	}
	return 0
}

// hold queues a thread the handler keeps stopped and wakes the service.
func (tg *target) hold(h held) {
	tg.hmu.Lock()
	tg.held = append(tg.held, h)
	tg.hmu.Unlock()
	select {
	case tg.wake <- struct{}{}:
	default:
	}
}

// takeHeld returns the queued threads and empties the queue.
func (tg *target) takeHeld() []held {
	tg.hmu.Lock()
	defer tg.hmu.Unlock()
	h := tg.held
	tg.held = nil
	return h
}

// serveLoop runs the service of held threads until the target ends.
func (tg *target) serveLoop() {
	defer tg.t.wg.Done()
	for {
		select {
		case <-tg.wake:
		case <-tg.gone:
			return
		}
		tg.serve()
	}
}

// serve executes the displaced instruction of every held thread in one
// stop of the world, probes the modules the dynamic linker announced, and
// releases the threads.
func (tg *target) serve() {
	t := tg.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if tg.closed {
		return
	}
	released := map[int]bool{}
	_, err := tg.p.Stopped(func(w *proc.World) error {
		if tg.sync(w) {
			tg.rescanStopped(w)
		}
		hs := tg.takeHeld()
		if len(hs) == 0 {
			return nil
		}
		rescan := false
		byAddr := map[uint64][]int{}
		var order []uint64
		for _, h := range hs {
			released[h.tid] = true
			if h.rendezvous {
				rescan = true
			}
			if !h.step {
				continue
			}
			if _, ok := byAddr[h.addr]; !ok {
				order = append(order, h.addr)
			}
			byAddr[h.addr] = append(byAddr[h.addr], h.tid)
			for _, r := range h.refs {
				r.c.stepped.Add(1)
			}
			if len(h.refs) > 0 { // not the engine's own site
				t.stepped.Add(1)
			}
		}
		for _, addr := range order {
			s := tg.sites[addr]
			if s == nil {
				continue // removed meanwhile: the original byte is back
			}
			errs, deferred := tg.xol.run(w, s, byAddr[addr])
			t.deferred.Add(uint64(deferred))
			for _, err := range errs {
				if errors.Is(err, errSiteLost) {
					tg.lost(addr)
					break
				}
			}
		}
		if rescan {
			tg.rescanStopped(w)
		}
		return nil
	})
	if err != nil && len(released) == 0 {
		return
	}
	_ = tg.p.Release(func(ctx *proc.TrapContext) bool { return released[ctx.Tid] })
}
