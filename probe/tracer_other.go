//go:build !(linux && amd64)

package probe

import (
	"fmt"

	"github.com/probeopt/probeopt/proc"
)

// Tracer traces one program. On this platform none can exist: Spawn and
// Attach fail with an error wrapping ErrNotSupported.
type Tracer struct{}

func notSupported(op string) error { return fmt.Errorf("probe: %s: %w", op, ErrNotSupported) }

// Spawn fails: live probes run on linux/amd64 only.
func Spawn(argv []string, opts *SpawnOptions) (*Tracer, error) { return nil, notSupported("spawn") }

// Attach fails: live probes run on linux/amd64 only.
func Attach(pid int, opts *Options) (*Tracer, error) { return nil, notSupported("attach") }

// Pid returns 0.
func (t *Tracer) Pid() int { return 0 }

// Resume fails.
func (t *Tracer) Resume() error { return notSupported("resume") }

// Events returns nil.
func (t *Tracer) Events() <-chan Event { return nil }

// Exited returns a closed channel.
func (t *Tracer) Exited() <-chan struct{} { c := make(chan struct{}); close(c); return c }

// Wait fails.
func (t *Tracer) Wait() (proc.ExitStatus, error) { return proc.ExitStatus{}, notSupported("wait") }

// Add fails.
func (t *Tracer) Add(specs ...string) ([]*Probe, error) { return nil, notSupported("add") }

// Remove fails.
func (t *Tracer) Remove(probes ...*Probe) error { return notSupported("remove") }

// Stats returns nothing.
func (t *Tracer) Stats() Stats { return Stats{} }

// Detach fails.
func (t *Tracer) Detach() error { return notSupported("detach") }

// Kill fails.
func (t *Tracer) Kill() error { return notSupported("kill") }
