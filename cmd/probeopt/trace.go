package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// traceOptions are the flags of "trace".
type traceOptions struct {
	json        bool
	events      bool
	pid         int
	followForks bool
	output      string
	stepOnly    bool
	traps       bool

	// The event output (see traceevents.go).
	format   string
	ringSize int
	// goid adds each event's goroutine id (probe.Event.Goid) to the
	// text and JSON lines.
	goid bool
	// returnDepth is probe.Options.ReturnDepth.
	returnDepth int
	pause       tracePauseOptions // --max-pause: see trace_pause.go
}

// traceLong is the long help of trace.
const traceLong = `Start CMD (after "--") or attach to process PID, probe every site the SPECs
name in every module the process maps (the executable, its shared libraries,
and libraries loaded later with dlopen), and count the hits until the process
exits or probeopt gets SIGINT or SIGTERM; then print the count of every probe
and site. On a signal probeopt removes every probe and detaches, and the
process carries on untraced. Whenever probeopt lets a live process go (a
signal, a failure with -p), it says on stderr what is left in it: nothing
(the text of every file it maps executable equal to the file, no area of
probeopt's mapped), or each run of text that differs and each area; after
a failed detach, the process's guardian restores the sites it recorded
once probeopt exits, as it does when probeopt is killed.

SPEC is what scan takes (SYM, SYM+OFF, 0xADDR, usdt:PROVIDER:NAME, globs,
uprobe:PATH:SYM), optionally preceded by a module and a colon:
"libc.so.6:malloc", "*:free", "libpython*:usdt:python:*". A module matches
the base name of a mapped file, also without its suffixes ("libc.so" and
"libc" match "libc.so.6"), or the whole path when it has a "/". Without a module a function or address names
the main executable, and a USDT probe any module. PLT stubs match patterns
that end in "@plt". In a symbol glob "/" is an ordinary character: "*"
matches Go's "crypto/sha256.block" too. In a Go program no site is
rewritten over a place where the Go runtime resumes a goroutine (goexit+1,
asynchronous preemption points, a deferreturn call): such a site traps.
A return probe fires when the function returns:
SYM%return (with a module or a glob too), or the bpftrace forms
uretprobe:PATH:SYM and ur:PATH:SYM.

Each site is decided by the probeopt policy (see "probeopt explain"): a site
it rejects is refused with its reason on stderr and never written. Where the
plan allows it (most function entries), the site is rewritten into a jump to
a trampoline that counts the hit in memory shared with probeopt and runs the
displaced instructions: no trap, a few nanoseconds per hit. The other sites
get an int3 and trap: the displaced instruction is emulated where the plan
says so; otherwise it runs out of line, as a relocated copy in a slot that
jumps back (for instructions that cannot fault), or is single-stepped in
place (the original byte put back while every thread is stopped). Every
site is written in one stop of the whole process, or, with --max-pause, in
as many stops as it takes for none to last longer than DURATION (2ms is what
the project recommends, from docs/BENCHMARKS.md): the process runs between
them, and each probe counts from the stop that wrote its site; on a terminal
a progress line shows the sites written. The tracer runs under SCHED_FIFO
during those stops (--stop-fifo, as root), so that a thread it resumes
cannot hold back the others; on a busy machine --stop-nice -20 also keeps
the scheduler from lengthening them. --traps serves every site
through traps. Return probes need a trampoline; a thread has --return-depth
of them armed at once (63 by default), and the report counts the returns of
deeper calls it could not observe. A site that falls back from a
trampoline to an int3 is listed with why (up to 10 in the text, all in
--json: "fallback"). A spec none of whose sites
can be probed is an error; when no probe at all could be installed probeopt
stops (killing CMD, or detaching from PID) with exit status 1. A spec bound
to a library is checked when the library is mapped: at the end, a spec that
named nothing in a loaded module is an error with the closest names the
module has, and one whose module never loaded (or a USDT probe no loaded
module has) a warning.

Exit status: CMD's when CMD exits with a status other than 0 (128+N when
signal N kills it, as a shell says); otherwise 1 when a spec named nothing
in what was loaded or probeopt failed, 2 on a usage error, 0 when all went
well.

--events prints one line per hit: time, pid, thread, probe, address and the
six argument registers (rdi, rsi, rdx, rcx, r8, r9), or for a return probe
ret= and the value returned (rax). Each thread records its hits in a ring of
its own in memory shared with probeopt (--ring-size events each), which
probeopt drains in batches and merges by the time of the hit; a hit that
finds its ring full is dropped and counted, per probe and per thread, in the
report. --format json writes one JSON object per event (JSON lines, as
--json --events), --format bin the binary event format, with the report on
standard error. Both are written faster than text. --goid adds the goroutine
id of each hit to the text (goid=N at the end of the line) and JSON ("goid")
events: in a Go program, for a function compiled by Go for its register
ABI, the id runtime.Stack prints after "goroutine"; 0 (absent in JSON) for
other code. In a Go program the thread of an event is the kernel thread the
goroutine ran on; a static Go program's assembly functions then take traps.

The binary event format (little-endian; the Go package probe reads it with
NewEventReader): the magic "PRBOEVT1", the record size R (uint32, 88 now),
the number of probes N (uint32), and N times the probe id (uint32), the
length L of its spec (uint32) and L bytes of the spec; then one record of R
bytes per event: the time of the hit in Unix nanoseconds (int64), pid, tid,
probe id and flags (uint32 each; flag 1 marks the hit of a return probe), the
run-time address of the site (uint64), the six argument registers
(uint64 each; for a return, the value returned and five zeros), and the
goroutine id (uint64; 0 where there is none; every record has it, --goid or
not). A reader takes R from the header: later versions may append fields
(records of 80 bytes, before the goroutine id, read with a goroutine id of 0).

Kernel uprobes (bpftrace, perf) on the same functions: where it can,
probeopt keeps a site's first instruction in place and puts its jump after
it, so that a kernel uprobe at the function shares the site, each counting
every hit. A site where the kernel's int3 already is, inside what probeopt
would write, is refused ("kernel-uprobe"). probeopt compares its sites'
bytes with what it wrote every 10 ms and at each stop: a site another
writer changed is taken out (probeopt's bytes replaced by the file's) and
listed as lost, with why. A kernel uprobe on a byte of a jump can still
kill a thread that runs it before that check (see the limits in README.md).

The report is a table (probe, site, strategy, reason, hits) followed by
totals, or with --json one JSON object ("probes", each with its "sites" and
"refused" sites, and the totals); with --json --events each event is a JSON
object on its own line before it. --output writes them to a file rather than
standard output, which CMD shares, and the warnings with them (refused sites,
specs that never took effect): as lines of a text report, and in a JSON
report only as its fields; errors stay on standard error.

Needs Linux on x86-64 and permission to trace the process (ptrace).`

func newTraceCmd() *cobra.Command {
	var o traceOptions
	cmd := &cobra.Command{
		Use:   "trace [flags] SPEC... (-p PID | -- CMD [ARGS...])",
		Short: "Probe a running process or a command and count the hits of each probe",
		Long:  traceLong,
		Example: `  probeopt trace main 'parse_*' -- ./server --port 8080
  probeopt trace --events libc.so.6:malloc -p 1234
  probeopt trace --json -o counts.json '*' -- /usr/bin/sort big.txt
  probeopt trace --events --format bin -o hits.bin --ring-size 65536 hot -- ./server`,
		Args: func(cmd *cobra.Command, args []string) error { return nil },
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			specs, argv := args, []string(nil)
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				specs, argv = args[:dash], args[dash:]
			}
			if err := o.check(specs, argv); err != nil {
				return err
			}
			return runTrace(cmd, &o, specs, argv)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print the report (and the events) as JSON")
	f.BoolVar(&o.events, "events", false, "print one line per probe hit")
	f.IntVarP(&o.pid, "pid", "p", 0, "attach to the running process `PID`")
	f.BoolVar(&o.followForks, "follow-forks", false, "trace the children the process forks too (by default their probes are removed and they run untraced)")
	f.StringVarP(&o.output, "output", "o", "", "write the report and events to `FILE` instead of standard output")
	f.BoolVar(&o.stepOnly, "step-only", false, "single-step every site, even those the plan emulates or gives a trampoline (for measurements)")
	f.BoolVar(&o.traps, "traps", false, "serve every site through traps (emulation or out-of-line), no trampolines")

	// The event output: its form and the rings it is drained from.
	f.StringVar(&o.format, "format", formatText, "the form of --events: text, json (JSON lines) or bin (the binary event format; the report then goes to standard error)")
	f.BoolVar(&o.goid, "goid", false, "with --events, add the goroutine id of each hit in a Go function (goid=N in text, \"goid\" in JSON; 0 or absent where there is none; binary records always carry it)")
	f.IntVar(&o.ringSize, "ring-size", 0, "capacity of each thread's event ring in `EVENTS` (a power of two up to 1048576; 0 means 65536)")
	f.IntVar(&o.returnDepth, "return-depth", 0, fmt.Sprintf("how many return probes a thread can have armed at once, `N` nested calls (rounded up to 2^k-1, at most %d; 0 means %d): the returns of deeper calls are not counted, and the report says how many", trampoline.MaxThreadDepth, trampoline.MaxDepth))
	addTracePauseFlags(f, &o.pause)
	return cmd
}

// check checks the command line of trace: the specs, and the command
// (argv, after "--") or the pid, with the flags.
func (o *traceOptions) check(specs, argv []string) error {
	if len(specs) == 0 {
		return usagef("trace: missing SPEC argument")
	}
	if err := checkProcessArgs("trace", o.pid, argv); err != nil {
		return err
	}
	switch {
	case o.format != formatText && o.format != formatJSON && o.format != formatBin:
		return usagef("trace: --format %q (want text, json or bin)", o.format)
	case o.ringSize < 0 || o.ringSize > 1<<20 || o.ringSize&(o.ringSize-1) != 0:
		return usagef("trace: --ring-size %d (want a power of two up to 1048576)", o.ringSize)
	case o.returnDepth < 0 || o.returnDepth > trampoline.MaxThreadDepth:
		return usagef("trace: --return-depth %d (want 0 to %d)", o.returnDepth, trampoline.MaxThreadDepth)
	case o.goid && !o.events:
		return usagef("trace: --goid needs --events")
	}
	return o.pause.check()
}

// checkProcessArgs checks the process of command name's line: -p PID or
// a command after "--" (argv), one of them.
func checkProcessArgs(name string, pid int, argv []string) error {
	switch {
	case pid != 0 && argv != nil:
		return usagef("%s: -p and a command after -- are exclusive", name)
	case pid == 0 && len(argv) == 0:
		return usagef("%s: give a command after -- or a process with -p", name)
	case pid < 0:
		return usagef("%s: invalid -p %d", name, pid)
	}
	return nil
}

// traceReport is what "trace --json" prints.
type traceReport struct {
	Pid       int          `json:"pid"`
	Command   []string     `json:"command,omitempty"`
	Exit      *traceExit   `json:"exit,omitempty"`
	Detached  bool         `json:"detached,omitempty"`
	Probes    []traceProbe `json:"probes"`
	Traps     uint64       `json:"traps"`
	Emulated  uint64       `json:"emulated"`
	Boosted   uint64       `json:"boosted"`
	Stepped   uint64       `json:"stepped"`
	Fallbacks uint64       `json:"fallbacks"`
	// VforkHits are the hits of vfork children before they exec'd, in
	// their parents' memory: no site counts them.
	VforkHits uint64 `json:"vfork_hits"`
	Dropped   uint64 `json:"dropped_events"`
	// ThreadDrops are the events each thread dropped (its ring was full).
	ThreadDrops []traceThreadDrops `json:"thread_drops,omitempty"`
	XOL         string             `json:"xol_method"`
	Batches     int                `json:"batches"`
	Elapsed     time.Duration      `json:"elapsed_ns"`
	// Bounded pauses (trace_pause.go).
	tracePauseReport
}

// traceThreadDrops is the count of events one thread dropped.
type traceThreadDrops struct {
	Pid     int    `json:"pid"`
	Tid     int    `json:"tid"`
	Dropped uint64 `json:"dropped_events"`
}

// traceExit is how the traced process ended.
type traceExit struct {
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
}

// traceProbe is one probe of the report.
type traceProbe struct {
	ID      int    `json:"id"`
	Spec    string `json:"spec"`
	Hits    uint64 `json:"hits"`
	Dropped uint64 `json:"dropped_events,omitempty"`
	// DepthMissed counts the returns of a return probe not observed:
	// deeper than the return-probe depth (probe.SiteStats.DepthMissed).
	DepthMissed uint64        `json:"depth_missed,omitempty"`
	Pending     bool          `json:"pending,omitempty"`
	Sites       []traceSite   `json:"sites"`
	Refused     []traceRefuse `json:"refused,omitempty"`
	// NotFound are the loaded modules the spec applies to that hold
	// nothing it names.
	NotFound []traceNotFound `json:"not_found,omitempty"`
}

// traceNotFound is a module a spec applies to that holds nothing it names.
type traceNotFound struct {
	Module      string   `json:"module"`
	Error       string   `json:"error"`
	Suggestions []string `json:"suggestions,omitempty"`
}

// traceSite is one installed site of the report.
type traceSite struct {
	Pid         int           `json:"pid"`
	Module      string        `json:"module"`
	Symbol      string        `json:"symbol,omitempty"`
	Addr        uint64        `json:"addr"`
	RuntimeAddr uint64        `json:"runtime_addr"`
	Strategy    plan.Strategy `json:"strategy"`
	Reason      plan.Reason   `json:"reason"`
	Hits        uint64        `json:"hits"`
	Emulated    uint64        `json:"emulated"`
	Boosted     uint64        `json:"boosted"`
	Stepped     uint64        `json:"stepped"`
	Live        bool          `json:"live"`
	DepthMissed uint64        `json:"depth_missed,omitempty"`
	// Lost says why a site was taken out while its module stayed mapped
	// (probe.SiteStats.Lost), LostDetail what was found and done.
	Lost       plan.Reason `json:"lost,omitempty"`
	LostDetail string      `json:"lost_detail,omitempty"`
	// Fallback says why a site the plan gave a trampoline takes traps.
	Fallback string `json:"fallback,omitempty"`
}

// traceRefuse is one refused site of the report.
type traceRefuse struct {
	Module string      `json:"module,omitempty"`
	Symbol string      `json:"symbol,omitempty"`
	Addr   uint64      `json:"addr"`
	Reason plan.Reason `json:"reason"`
	Detail string      `json:"detail"`
}

// traceEvent is one event of "trace --json --events".
type traceEvent struct {
	Time  time.Time `json:"time"`
	Pid   int       `json:"pid"`
	Tid   int       `json:"tid"`
	Probe int       `json:"probe"`
	Spec  string    `json:"spec"`
	Addr  uint64    `json:"addr"`
	Args  []uint64  `json:"args,omitempty"`
	// Return marks the hit of a return probe; Ret is the value returned.
	Return bool   `json:"return,omitempty"`
	Ret    uint64 `json:"ret,omitempty"`
	// Goid is the goroutine id of a hit in a Go function (--goid).
	Goid uint64 `json:"goid,omitempty"`
}

// runTrace runs the trace command: start the tracer with its probes, let
// the process run until it ends or a signal arrives, then print the report
// and say how the process ended.
func runTrace(cmd *cobra.Command, o *traceOptions, specs, argv []string) error {
	out := cmd.OutOrStdout()
	stderr := cmd.ErrOrStderr()
	if o.output != "" {
		f, err := os.Create(o.output)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	// Signals that arrive while the probes are being installed wait: the
	// process is stopped then, and is detached or killed afterwards.
	sigs, stopSignals := notifyStop()
	defer stopSignals()

	// Events as JSON lines or binary records are written in the batches
	// the tracer drains; the binary form leaves the report to stderr.
	var sink *eventSink
	if o.events && (o.format == formatBin || o.format == formatJSON || o.json) {
		format := o.format
		if format == formatText {
			format = formatJSON
		}
		sink = newEventSink(format, out)
		sink.goid = o.goid
		if format == formatBin {
			out = stderr
		}
	}
	// With --output the warnings go to the report, not to the standard
	// error CMD shares: as lines before a text report, and in a JSON
	// report or beside binary events only as its fields.
	warn := stderr
	if o.output != "" && out != stderr {
		warn = out
		if o.json || sink != nil {
			warn = io.Discard
		}
	}
	tr, probes, err := startTrace(o, specs, argv, stderr, warn, sink)
	if err != nil {
		return err
	}
	if sink != nil {
		if err := sink.start(probes); err != nil {
			abandonTracer(tr, o.pid, stderr)
			return err
		}
	}
	specOf := map[int]string{}
	for _, p := range probes {
		specOf[p.ID] = p.Spec
	}
	start := time.Now()
	if err := tr.Resume(); err != nil && !errors.Is(err, proc.ErrExited) {
		abandonTracer(tr, o.pid, stderr)
		return err
	}
	// A process already gone (killed while the probes were installed) is
	// reported below like one that ends while traced.
	detached, elapsed := followTrace(tr, o, out, stderr, sigs, specOf, start, sink != nil)
	rep, waitErr := newTraceReport(tr, argv, detached, elapsed)
	if sink != nil {
		if err := sink.flush(); err != nil {
			return err
		}
	}
	rep.tracePauseReport = newTracePauseReport(&o.pause, tr.Stats()) // bounded pauses (trace_pause.go)
	if err := writeReport(out, o.json, rep, func() error { return printTraceReport(out, rep) }); err != nil {
		return err
	}
	return traceEnd(stderr, warn, rep, waitErr, o.pid)
}

// startTrace attaches to o.pid or spawns argv, adds the probes of specs
// (printing why each spec or site was refused) and returns the tracer, the
// process still stopped. With no probe it lets the process go (detached,
// or killed when spawned) and returns errReported.
func startTrace(o *traceOptions, specs, argv []string, stderr, warn io.Writer, sink *eventSink) (*probe.Tracer, []*probe.Probe, error) {
	opts := probe.Options{FollowForks: o.followForks, Events: o.events, StepOnly: o.stepOnly, NoTrampolines: o.traps, RingSize: o.ringSize, ReturnDepth: o.returnDepth}
	if sink != nil {
		opts.OnEvents = sink.write
	}
	// Bounded pauses (trace_pause.go).
	progressDone := o.pause.apply(&opts, stderr)
	tr, err := startTracer(o.pid, argv, &opts)
	if err != nil {
		return nil, nil, err
	}
	if err := o.pause.beforeAdd(tr, o.pid != 0); err != nil { // bounded pauses (trace_pause.go)
		abandonTracer(tr, o.pid, stderr)
		return nil, nil, err
	}
	probes, addErr := tr.Add(specs...)
	progressDone()
	if addErr != nil {
		for _, line := range strings.Split(addErr.Error(), "\n") {
			fmt.Fprintf(stderr, "probeopt: %s\n", line)
		}
		// Nothing close in the executable: it may be a wrapper that
		// runs the program meant.
		if o.pid == 0 && errors.Is(addErr, probe.ErrNoSites) && !strings.Contains(addErr.Error(), "did you mean") {
			fmt.Fprintf(stderr, "probeopt: a spec without a module names functions of %s, the program CMD starts; to probe a program it runs in turn (through env, a shell script, time...), name that program's module or library: PROG:SYM, LIB:SYM\n", argv[0])
		}
	}
	if len(probes) == 0 {
		abandonTracer(tr, o.pid, stderr)
		return nil, nil, errReported
	}
	warnRefused(warn, tr)
	return tr, probes, nil
}

// followTrace prints the events (with o.events, unless sunk: an
// eventSink writes them) while the process runs, until it exits or a
// signal arrives; on a signal it removes the probes and detaches
// (detached is then true). elapsed is the time from start to the exit or
// the signal.
func followTrace(tr *probe.Tracer, o *traceOptions, out, stderr io.Writer, sigs <-chan os.Signal, specOf map[int]string, start time.Time, sunk bool) (detached bool, elapsed time.Duration) {
	var wg sync.WaitGroup
	stopEvents := make(chan struct{})
	if o.events && !sunk {
		wg.Add(1)
		go func() {
			defer wg.Done()
			printEvents(out, o.json, o.goid, tr.Events(), stopEvents, specOf)
		}()
	}
	detached = awaitExitOrSignal(tr, sigs, stderr)
	elapsed = time.Since(start)
	close(stopEvents)
	wg.Wait()
	return detached, elapsed
}

// newTraceReport makes the report from the tracer's statistics and, for a
// process that was not detached, its exit status (the error of the wait
// is returned apart).
func newTraceReport(tr *probe.Tracer, argv []string, detached bool, elapsed time.Duration) (*traceReport, error) {
	st := tr.Stats()
	rep := &traceReport{Pid: tr.Pid(), Command: argv, Detached: detached, Elapsed: elapsed,
		Traps: st.Traps, Emulated: st.Emulated, Boosted: st.Boosted, Stepped: st.Stepped, Fallbacks: st.Fallbacks,
		VforkHits: st.VforkHits, Dropped: st.DroppedEvents, XOL: st.XOLMethod, Batches: st.Batches}
	var waitErr error
	if !detached {
		es, err := tr.Wait()
		if err == nil {
			rep.Exit = &traceExit{Code: es.Code, Signal: es.Signal}
		}
		waitErr = err
	}
	for _, p := range st.Probes {
		tp := traceProbe{ID: p.ID, Spec: p.Spec, Hits: p.Hits, Dropped: p.Dropped, DepthMissed: p.DepthMissed, Pending: p.Pending, Sites: []traceSite{}}
		for _, s := range p.Sites {
			tp.Sites = append(tp.Sites, traceSite{Pid: s.Pid, Module: s.Module, Symbol: s.Symbol, Addr: s.Addr, RuntimeAddr: s.RuntimeAddr,
				Strategy: s.Strategy, Reason: s.Reason, Hits: s.Hits, Emulated: s.Emulated, Boosted: s.Boosted, Stepped: s.Stepped, Live: s.Live,
				Lost: s.Lost, LostDetail: s.LostDetail, Fallback: s.Fallback, DepthMissed: s.DepthMissed})
		}
		for _, r := range p.Refused {
			tp.Refused = append(tp.Refused, traceRefuse{Module: r.Module, Symbol: r.Symbol, Addr: r.Addr, Reason: r.Reason, Detail: r.Detail})
		}
		for _, nf := range p.NotFound {
			tp.NotFound = append(tp.NotFound, traceNotFound{Module: nf.Module, Error: nf.Error(), Suggestions: nf.Err.Suggestions})
		}
		rep.Probes = append(rep.Probes, tp)
	}
	for _, d := range st.ThreadDrops {
		rep.ThreadDrops = append(rep.ThreadDrops, traceThreadDrops{Pid: d.Pid, Tid: d.Tid, Dropped: d.Dropped})
	}
	return rep, waitErr
}

// traceEnd says on stderr what the user named that was never probed (a
// spec with no site: not in the modules that were loaded, or bound to a
// module that never was) and how the process ended when the counts may be
// incomplete or the exit is news (an attached process that exited). It
// returns the command's outcome: CMD's exit status when CMD failed
// (128+N when signal N killed it, as a shell says), errReported when a
// spec named nothing in what was loaded or the wait failed, nil otherwise.
func traceEnd(stderr, warn io.Writer, rep *traceReport, waitErr error, pid int) error {
	var failed error
	for _, p := range rep.Probes {
		if len(p.Sites) > 0 {
			continue
		}
		for _, nf := range p.NotFound {
			fmt.Fprintf(stderr, "probeopt: %s\n", nf.Error)
			failed = errReported
		}
		if p.Pending {
			fmt.Fprintf(warn, "probeopt: warning: probe %q: %s\n", p.Spec, pendingText(p.Spec))
		}
	}
	switch {
	case waitErr != nil:
		fmt.Fprintf(stderr, "probeopt: process %d: %v\n", rep.Pid, waitErr)
		return errReported
	case rep.Exit != nil && rep.Exit.Signal != 0:
		// The counts may miss hits: the program did not run to its end.
		fmt.Fprintf(stderr, "probeopt: process %d was killed by signal %d (%v) while traced; the counts are those until then\n",
			rep.Pid, rep.Exit.Signal, syscall.Signal(rep.Exit.Signal))
		return &exitCodeError{128 + rep.Exit.Signal}
	case rep.Exit != nil && pid != 0:
		fmt.Fprintf(stderr, "probeopt: process %d exited with status %d while traced\n", rep.Pid, rep.Exit.Code)
	case rep.Exit != nil && rep.Exit.Code != 0:
		return &exitCodeError{rep.Exit.Code}
	}
	return failed
}

// pendingText says why a spec without a site never took effect.
func pendingText(spec string) string {
	if strings.HasPrefix(spec, "usdt:") || strings.HasPrefix(spec, "U:") {
		return "no loaded module has that USDT probe"
	}
	if mod, _, ok := strings.Cut(spec, ":"); ok && strings.ContainsAny(mod, "*?[") {
		return "no loaded module it names has it"
	}
	return "no module it names was loaded"
}

// messageError is an error shown with a message of its own, for a cause
// whose text would not tell a user what happened; errors.Is and As still
// see the cause.
type messageError struct {
	msg string
	err error
}

func (e *messageError) Error() string { return e.msg }
func (e *messageError) Unwrap() error { return e.err }

// traceStartError adds to an error of Spawn or Attach (pid 0 for Spawn)
// what the user can do about it.
func traceStartError(err error, pid int) error {
	switch {
	case pid != 0 && pid == os.Getpid():
		return &messageError{fmt.Sprintf("attach %d: that is probeopt itself, which cannot trace its own process", pid), err}
	case pid != 0 && errors.Is(err, syscall.EPERM) && isKernelThread(pid):
		return &messageError{fmt.Sprintf("attach %d: process %d is a kernel thread, which runs no user code to probe and cannot be traced", pid, pid), err}
	case errors.Is(err, syscall.EPERM):
		return &messageError{err.Error() + ": " + ptraceHint(pid), err}
	case pid != 0 && errors.Is(err, proc.ErrExited):
		return &messageError{fmt.Sprintf("attach %d: no such process", pid), err}
	}
	return err
}

// ptraceHint says why ptrace may have been refused and what to do: trace
// as root or with CAP_SYS_PTRACE, and what kernel.yama.ptrace_scope allows.
func ptraceHint(pid int) string {
	var b strings.Builder
	if pid != 0 {
		fmt.Fprintf(&b, "not allowed to trace process %d", pid)
		if uid, ok := processUID(pid); ok {
			fmt.Fprintf(&b, " (uid %d)", uid)
		}
		b.WriteString("; trace a process of your own user, or run probeopt as root or with CAP_SYS_PTRACE")
	} else {
		b.WriteString("ptrace is not allowed here; run probeopt as root or with CAP_SYS_PTRACE (a container may forbid ptrace altogether)")
	}
	scope, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	switch v := strings.TrimSpace(string(scope)); {
	case err != nil:
		b.WriteString("; kernel.yama.ptrace_scope is not set on this system")
	case v == "0":
		b.WriteString("; kernel.yama.ptrace_scope is 0 (no restriction)")
	case v == "1":
		b.WriteString("; kernel.yama.ptrace_scope is 1: only a parent may trace a process of your user without CAP_SYS_PTRACE (sysctl kernel.yama.ptrace_scope=0 lifts that)")
	case v == "2":
		b.WriteString("; kernel.yama.ptrace_scope is 2: only CAP_SYS_PTRACE may attach")
	default:
		b.WriteString("; kernel.yama.ptrace_scope is " + v + ": no process may be traced")
	}
	return b.String()
}

// printEvents prints events until stop is closed, then those still queued
// (with goid, each with its goroutine id).
func printEvents(w io.Writer, asJSON, goid bool, events <-chan probe.Event, stop <-chan struct{}, specOf map[int]string) {
	enc := json.NewEncoder(w)
	print := func(e probe.Event) {
		if asJSON {
			te := traceEvent{Time: e.Time, Pid: e.Pid, Tid: e.Tid, Probe: e.Probe, Spec: specOf[e.Probe], Addr: e.Addr, Return: e.Return, Ret: e.Ret}
			if !e.Return {
				te.Args = e.Args[:]
			}
			if goid {
				te.Goid = e.Goid
			}
			_ = enc.Encode(te)
			return
		}
		end := "\n"
		if goid {
			end = " goid=" + strconv.FormatUint(e.Goid, 10) + "\n"
		}
		if e.Return {
			fmt.Fprintf(w, "%s %d %d %s %#x ret=%#x%s", e.Time.Format("15:04:05.000000"), e.Pid, e.Tid, specOf[e.Probe], e.Addr, e.Ret, end)
			return
		}
		fmt.Fprintf(w, "%s %d %d %s %#x %#x %#x %#x %#x %#x %#x%s", e.Time.Format("15:04:05.000000"), e.Pid, e.Tid,
			specOf[e.Probe], e.Addr, e.Args[0], e.Args[1], e.Args[2], e.Args[3], e.Args[4], e.Args[5], end)
	}
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return // closed after the last event
			}
			print(e)
		case <-stop:
			for {
				select {
				case e, ok := <-events:
					if !ok {
						return
					}
					print(e)
				default:
					return
				}
			}
		}
	}
}

// maxNotes bounds the fallback lines of the text report (--json lists
// every one).
const maxNotes = 10

// printSiteNotes prints the sites taken out while live (a kernel uprobe
// came over them...) and those that fell back from a trampoline to traps,
// with why.
func printSiteNotes(w io.Writer, rep *traceReport) {
	var fallbacks []string
	for _, p := range rep.Probes {
		for _, s := range p.Sites {
			name := shortModule(s.Module)
			if s.Symbol != "" {
				name += ":" + s.Symbol
			}
			if s.DepthMissed > 0 {
				fmt.Fprintf(w, "depth  %s (%#x): %d returns not counted, deeper than the return probes a thread can have armed (--return-depth)\n", name, s.Addr, s.DepthMissed)
			}
			if s.Lost != "" {
				fmt.Fprintf(w, "lost   %s (%#x) after %d hits: %s: %s\n", name, s.Addr, s.Hits, s.Lost, s.LostDetail)
			}
			if s.Fallback != "" {
				fallbacks = append(fallbacks, fmt.Sprintf("  %s (%#x): %s", name, s.Addr, s.Fallback))
			}
		}
	}
	if len(fallbacks) == 0 {
		return
	}
	fmt.Fprintf(w, "traps  %d site(s) take traps instead of a trampoline:\n", len(fallbacks))
	for _, l := range fallbacks[:min(len(fallbacks), maxNotes)] {
		fmt.Fprintln(w, l)
	}
	if len(fallbacks) > maxNotes {
		fmt.Fprintf(w, "  ... and %d more (--json lists them all)\n", len(fallbacks)-maxNotes)
	}
}

// printTraceReport prints the table of probes and sites, then the totals.
func printTraceReport(w io.Writer, rep *traceReport) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PROBE\tSITE\tADDRESS\tSTRATEGY\tREASON\tHITS")
	sites, refused := 0, 0
	for _, p := range rep.Probes {
		ss := append([]traceSite(nil), p.Sites...)
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].Hits > ss[j].Hits })
		for _, s := range ss {
			name := shortModule(s.Module)
			if s.Symbol != "" {
				name += ":" + s.Symbol
			}
			if len(rep.Probes) > 0 && s.Pid != rep.Pid {
				name += " (pid " + strconv.Itoa(s.Pid) + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%#x\t%s\t%s\t%d\n", p.Spec, name, s.Addr, s.Strategy, s.Reason, s.Hits)
		}
		if p.Pending {
			fmt.Fprintf(tw, "%s\t(no module matched)\t-\t-\t-\t0\n", p.Spec)
		}
		if len(ss) == 0 {
			for _, nf := range p.NotFound {
				fmt.Fprintf(tw, "%s\t(not in %s)\t-\t-\t-\t0\n", p.Spec, shortModule(nf.Module))
			}
		}
		if len(ss) > 1 {
			fmt.Fprintf(tw, "%s\t(total, %d sites)\t\t\t\t%d\n", p.Spec, len(ss), p.Hits)
		}
		sites += len(ss)
		refused += len(p.Refused)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var trampSites int
	var trampHits uint64
	for _, p := range rep.Probes {
		for _, s := range p.Sites {
			if s.Strategy == plan.TrampolineNop || s.Strategy == plan.TrampolineDetour {
				trampSites++
				trampHits += s.Hits
			}
		}
	}
	fmt.Fprintf(w, "\nprobes %d, sites %d (%d with a trampoline), refused %d\n", len(rep.Probes), sites, trampSites, refused)
	printSiteNotes(w, rep)
	fmt.Fprintf(w, "hits   %d without a trap (trampolines)\n", trampHits)
	fmt.Fprintf(w, "traps  %d: %d emulated, %d run out of line in a slot, %d single-stepped in place (%d of them left to the CPU by the emulation)\n",
		rep.Traps, rep.Emulated, rep.Boosted, rep.Stepped, rep.Fallbacks)
	if rep.VforkHits > 0 {
		fmt.Fprintf(w, "vfork  %d hits of vfork children before they exec'd, in their parents' memory, counted at no site\n", rep.VforkHits)
	}
	if rep.Dropped > 0 {
		fmt.Fprintf(w, "events %d dropped\n", rep.Dropped)
		for _, p := range rep.Probes {
			if p.Dropped > 0 {
				fmt.Fprintf(w, "  probe %s: %d dropped\n", p.Spec, p.Dropped)
			}
		}
		for _, d := range rep.ThreadDrops {
			fmt.Fprintf(w, "  thread %d (pid %d): %d dropped\n", d.Tid, d.Pid, d.Dropped)
		}
	}
	// Bounded pauses (trace_pause.go).
	printTracePause(w, &rep.tracePauseReport)
	switch {
	case rep.Detached:
		fmt.Fprintf(w, "process %d detached after %v, still running\n", rep.Pid, rep.Elapsed.Round(time.Millisecond))
	case rep.Exit != nil && rep.Exit.Signal != 0:
		fmt.Fprintf(w, "process %d killed by signal %d after %v\n", rep.Pid, rep.Exit.Signal, rep.Elapsed.Round(time.Millisecond))
	case rep.Exit != nil:
		fmt.Fprintf(w, "process %d exited with status %d after %v\n", rep.Pid, rep.Exit.Code, rep.Elapsed.Round(time.Millisecond))
	}
	return nil
}

// shortModule shortens a module path to its base name.
func shortModule(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
