package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/probeopt/probeopt/probe"
)

// The bounded pauses of "trace" (--max-pause): the flag, the progress of
// a long install on a terminal, and the report's passes and longest
// pause.

// tracePauseOptions are the flags of "trace" about pauses.
type tracePauseOptions struct {
	maxPause time.Duration
	stopNice int
	stopFIFO bool
}

func addTracePauseFlags(f *pflag.FlagSet, o *tracePauseOptions) {
	f.DurationVar(&o.maxPause, "max-pause", 0, "stop the process at most `DURATION` at a time to write probes (e.g. 2ms): a larger batch is written in several passes; 0 writes each batch in one stop")
	f.IntVar(&o.stopNice, "stop-nice", 0, "run the tracer, and each thread until it has stopped, at nice `N` (-20 to 19) during the stops that write probes, so that a busy machine's scheduler does not lengthen them (needs root); 0 leaves the priorities alone")
	f.BoolVar(&o.stopFIFO, "stop-fifo", true, "run the tracer under SCHED_FIFO during the stops that write probes, so that a thread it resumes cannot hold back the others (needs root; left alone without it)")
}

// check rejects a negative bound and a nice value out of range.
func (o *tracePauseOptions) check() error {
	if o.maxPause < 0 {
		return usagef("trace: --max-pause must not be negative, got %v", o.maxPause)
	}
	if o.stopNice < -20 || o.stopNice > 19 {
		return usagef("trace: --stop-nice must be between -20 and 19, got %d", o.stopNice)
	}
	return nil
}

// apply sets the tracer options of the flags: the bound, the nice value
// and policy of the stops, and a progress
// line on stderr while the passes of a batch run, when it is a terminal.
// The returned function erases the line.
func (o *tracePauseOptions) apply(opts *probe.Options, stderr io.Writer) (done func()) {
	opts.MaxPause, opts.StopNice, opts.StopFIFO = o.maxPause, o.stopNice, o.stopFIFO
	if o.maxPause <= 0 || !isTerminal(stderr) {
		return func() {}
	}
	var prog *progress
	opts.OnPass = func(n, total int) {
		if prog == nil || prog.total != total {
			prog.done()
			prog = newProgress(stderr, "probeopt: installing", "sites live", total)
		}
		prog.update(n)
	}
	return func() { prog.done() }
}

// beforeAdd lets an attached process run before the probes are added
// under a bound: the passes then pause a running process, which is what
// the bound is for (a spawned command is held at its first instruction
// until its probes are in, as without a bound).
func (o *tracePauseOptions) beforeAdd(tr *probe.Tracer, attached bool) error {
	if o.maxPause <= 0 || !attached {
		return nil
	}
	return tr.Resume()
}

// tracePauseReport is the part of the trace report about pauses.
type tracePauseReport struct {
	MaxPause     time.Duration `json:"max_pause_ns,omitempty"`
	Passes       int           `json:"passes"`
	LongestPause time.Duration `json:"longest_pause_ns,omitempty"`
	// LongestStage is the longest stop that planned a bounded batch
	// before its passes: it is not bounded.
	LongestStage time.Duration `json:"longest_stage_ns,omitempty"`
}

func newTracePauseReport(o *tracePauseOptions, st probe.Stats) tracePauseReport {
	return tracePauseReport{MaxPause: o.maxPause, Passes: st.Batches, LongestPause: st.LongestPause, LongestStage: st.LongestStage}
}

// printTracePause prints the passes line of the report.
func printTracePause(w io.Writer, r *tracePauseReport) {
	if r.MaxPause <= 0 {
		fmt.Fprintf(w, "passes %d stop(s) of the process wrote text\n", r.Passes)
		return
	}
	fmt.Fprintf(w, "passes %d stop(s) of the process wrote text, each bounded by %v: longest %v (planning stop %v, not bounded)\n",
		r.Passes, r.MaxPause, r.LongestPause.Round(time.Microsecond), r.LongestStage.Round(time.Microsecond))
}
