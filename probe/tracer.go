package probe

import "github.com/probeopt/probeopt/proc"

// Tracer traces one program: the process it was given and, with
// Options.FollowForks, the children it forks. Its methods are safe for
// concurrent use.
type Tracer struct {
	tracerBackend // the platform's engine: tracer_linux.go; elsewhere tracerOps, unimplemented
}

// tracerOps is what a platform's engine does for a Tracer: each method
// implements the Tracer method of the same name (eventCh: Events). The
// linux engine (amd64 and arm64) defines them on *Tracer, whose state it
// embeds (tracerBackend); elsewhere (tracer_other.go) tracerBackend is
// this interface, which nothing implements, and Spawn and Attach fail with
// ErrNotSupported, so no Tracer exists.
type tracerOps interface {
	pid() int
	resume() error
	eventCh() <-chan Event
	exited() <-chan struct{}
	wait() (proc.ExitStatus, error)
	add(specs ...string) ([]*Probe, error)
	remove(probes ...*Probe) error
	stats() Stats
	detach() error
	kill() error
}

// Pid returns the process id of the traced program.
func (t *Tracer) Pid() int { return t.pid() }

// Resume lets the process run (after Spawn or Attach, once the probes are
// added). Calling it again does no harm.
func (t *Tracer) Resume() error { return t.resume() }

// Events returns the channel of probe hits (Options.Events). It is closed
// after the last event, once every traced process has exited or was
// detached (Exited is closed first).
func (t *Tracer) Events() <-chan Event { return t.eventCh() }

// Exited returns a channel closed once the process has exited or was
// detached.
func (t *Tracer) Exited() <-chan struct{} { return t.exited() }

// Wait waits until the process exits and returns its status; after Detach
// it returns an error wrapping ErrClosed.
func (t *Tracer) Wait() (proc.ExitStatus, error) { return t.wait() }

// Add resolves the specs in every module each traced process maps, plans
// every site, and installs the accepted ones in one batch per process. It
// returns the probes that were installed or wait for their modules; the
// error joins a *SpecError for each spec that was not (it does not parse,
// names nothing, or every site it names was refused) and any failure of a
// batch. Refused sites of the returned probes are listed in Stats.
func (t *Tracer) Add(specs ...string) ([]*Probe, error) { return t.add(specs...) }

// Remove removes probes, in one batch per process.
func (t *Tracer) Remove(probes ...*Probe) error { return t.remove(probes...) }

// Stats returns the counters of every probe.
func (t *Tracer) Stats() Stats { return t.stats() }

// Detach removes every probe (one batch per process), lets the threads the
// engine held go on, and detaches: the process runs on untraced, its text
// as in its files.
func (t *Tracer) Detach() error { return t.detach() }

// Kill kills the traced processes and waits until they are gone.
func (t *Tracer) Kill() error { return t.kill() }
