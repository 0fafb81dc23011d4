//go:build !(linux && amd64)

package guardian

import (
	"os"

	"github.com/probeopt/probeopt/proc"
)

// DefaultRecords is the capacity of a log when Options.Records is 0.
const DefaultRecords = 1 << 17

// Options tune Start. A nil *Options means the defaults.
type Options struct {
	// Records is the capacity of the undo log, in records; 0 means
	// DefaultRecords.
	Records int
	// Stderr receives the guardian's report; nil means standard error.
	Stderr *os.File
}

// Guard is the tracer's side of a guardian; none exists on this platform.
type Guard struct{}

// Start returns an error wrapping ErrNotSupported on this platform.
func Start(pid int, opts *Options) (*Guard, error) { return nil, ErrNotSupported }

// Pid returns 0.
func (g *Guard) Pid() int { return 0 }

// Record returns ErrNotSupported.
func (g *Guard) Record(recs ...Record) error { return ErrNotSupported }

// Borrow does nothing.
func (g *Guard) Borrow(tid int, saved *proc.Regs) {}

// Return does nothing.
func (g *Guard) Return() {}

// Serving does nothing.
func (g *Guard) Serving(tid int, regs *proc.Regs) {}

// Stepping does nothing.
func (g *Guard) Stepping(tid int) {}

// Reset does nothing.
func (g *Guard) Reset() {}

// Release returns nil.
func (g *Guard) Release() error { return nil }

// Restore returns ErrNotSupported.
func (g *Guard) Restore() error { return ErrNotSupported }
