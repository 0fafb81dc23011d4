//go:build linux && (amd64 || arm64)

package proc

import (
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The stop latch (Options.StopLatch). The kernel keeps a process's
// "group stop in effect" state (SIGNAL_STOP_STOPPED) while its tracer
// lets the threads run out of their group stops with PTRACE_CONT; when the
// tracer goes away, every thread that is detached from it while that state
// holds is stopped again (a group stop), wherever it was, instead of
// running on. The latch is armed by sending SIGSTOP to the process and
// resuming the group stop it causes with PTRACE_CONT; SIGCONT disarms it
// (the kernel clears the state), so a SIGCONT the program receives is
// followed by a new SIGSTOP.
//
// While the latch holds, the kernel reports every PTRACE_EVENT_STOP with
// the stop signal (an interrupt looks like a group stop): such a stop is a
// real group stop only when a stop signal was delivered to the program
// since (realStop); otherwise it is resumed with PTRACE_CONT.

// latch is the stop-latch state of a process (owned by the tracer).
type latch struct {
	armed  bool // SIGSTOP sent: the latch holds unless a SIGCONT came since
	ours   bool // the SIGSTOP we sent has not been dequeued yet
	real   bool // the program was really stopped (job control) since
	rearm  bool // a SIGCONT is being delivered: send SIGSTOP again after it
	failed error
}

// armLatch arms the latch of p, whose world is stopped, and returns once
// it holds: every thread has taken the group stop of the latch's SIGSTOP
// (the kernel's state is set only when the last one has), and is stopped
// again. Until then a tracer that dies would leave the process unlatched:
// the SIGSTOP may still be queued behind a SIGTRAP, which the kernel
// dequeues first.
func (t *tracer) armLatch(p *ptraceProcess) error {
	p.latch.arm(p.pid)
	if p.latch.failed != nil {
		return fmt.Errorf("arm the stop latch: %w", p.latch.failed)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		pending := 0
		for _, th := range p.threads {
			if th.gone || th.exiting || th.parked || th.latched {
				continue
			}
			pending++
			if th.stopped && !th.held {
				// Resumed with its signal (the SIGSTOP's delivery stop
				// injects it) or into the pending group stop.
				t.resumeThread(th)
			}
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("arm the stop latch: %d threads did not stop", pending)
		}
		if _, err := t.waitUntil(func() bool {
			for _, th := range p.threads {
				if !th.gone && !th.exiting && !th.parked && !th.latched && th.stopped {
					return true
				}
			}
			return p.done
		}, 100*time.Millisecond); err != nil {
			return err
		}
		if p.done {
			return ErrExited
		}
	}
}

// arm sends the latch's SIGSTOP.
func (l *latch) arm(pid int) {
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		l.failed = err
		return
	}
	l.armed, l.ours = true, true
}

// groupStop reports whether an EVENT_STOP with signal sig is a group stop
// to respect (resume with PTRACE_LISTEN).
func (l *latch) groupStop(sig int) bool {
	if !isStopSignal(sig) {
		return false
	}
	return !l.armed || l.real
}

// signalStop notes the signal-delivery stop of sig, about to be delivered
// to the program of process pid.
func (l *latch) signalStop(pid, sig int) {
	if !l.armed {
		return
	}
	switch {
	case sig == int(unix.SIGSTOP) && l.ours:
		l.ours = false
	case sig == int(unix.SIGCONT):
		l.real, l.rearm = false, true
	case isStopSignal(sig) && stopsByDefault(pid, sig):
		l.real = true
	}
}

// resumed is called once a thread of process pid was resumed: a SIGCONT
// delivered disarmed the latch, which is armed again.
func (l *latch) resumed(pid int) {
	if l.rearm {
		l.rearm = false
		l.arm(pid)
	}
}

// stopsByDefault reports whether stop signal sig stops process pid: it is
// SIGSTOP, or it is neither caught nor ignored (/proc/PID/status).
func stopsByDefault(pid, sig int) bool {
	if sig == int(unix.SIGSTOP) {
		return true
	}
	s, err := readProcStatus(pid, 0)
	if err != nil {
		return false
	}
	for _, k := range []string{"SigIgn", "SigCgt"} {
		if v, ok := statusValue(s, k); ok {
			m, err := strconv.ParseUint(v, 16, 64)
			if err != nil || m&(1<<(sig-1)) != 0 {
				return false
			}
		}
	}
	return true
}
