package probe

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// Errors of the package. They are wrapped with context; compare with
// errors.Is.
var (
	// ErrNotSupported means live probes are not available on this
	// platform; it is proc.ErrNotSupported.
	ErrNotSupported = proc.ErrNotSupported
	// ErrNoSites means a spec named no site in any module the process
	// maps (and, for a spec bound to the main executable, none there).
	ErrNoSites = errors.New("no probe site matches")
	// ErrRejected means the plan refuses to probe a site; the error is a
	// *RejectedError that says why.
	ErrRejected = errors.New("probe site rejected")
	// ErrTextMismatch means the bytes of a site in memory differ from the
	// file's: the site is not probed.
	ErrTextMismatch = errors.New("text in memory differs from the file")
	// ErrClosed means the tracer was detached or the process has exited.
	ErrClosed = errors.New("tracer closed")
	// ErrUnknownProbe means Remove was given a probe this tracer does not
	// hold.
	ErrUnknownProbe = errors.New("unknown probe")
	// ErrExecChanged means the ELF executable a command resolved to
	// (through PATH or as given) is not the file the new process runs: it
	// was replaced between its lookup and the exec. Spawn kills such a
	// process.
	ErrExecChanged = errors.New("the executable was replaced between its lookup and its exec")
)

// RejectedError describes a site that was not probed: the plan refused it
// (Reason and Detail come from plan.Decide), its text differs from the
// file, or the engine could not install it (the Reason* codes below). It
// matches ErrRejected under errors.Is (and ErrTextMismatch for a text that
// differs).
type RejectedError struct {
	Spec   string      // the spec that named the site
	Module string      // the file
	Symbol string      // the function and offset, "" if none
	Addr   uint64      // the link-time virtual address in Module
	Reason plan.Reason // the plan's reason code, or one of the engine's Reason* codes (ReasonTextMismatch for ErrTextMismatch)
	Detail string      // the sentence behind Reason
}

// ReasonTextMismatch is the Reason of a RejectedError for a site whose
// bytes in memory differ from the file's.
const ReasonTextMismatch plan.Reason = "text-mismatch"

// ReasonReturnNeedsTrampoline is the Reason of a RejectedError for a
// return probe at a function whose entry cannot take a trampoline: return
// probes are made by the trampoline's return handler.
const ReasonReturnNeedsTrampoline plan.Reason = "return-needs-trampoline"

// ReasonReturnByJump is the Reason of a RejectedError for a jump by which
// a Go function leaves without returning (a tail call): a return probe
// on a Go function is made of probes at its return instructions, and the
// returns that follow such a jump are not counted.
const ReasonReturnByJump plan.Reason = "return-by-jump"

// ReasonInTrampoline is the Reason of a RejectedError for a site whose
// instruction was moved into the trampoline of another site: the original
// bytes no longer run.
const ReasonInTrampoline plan.Reason = "in-trampoline"

// ReasonPatchFailed is the Reason of a RejectedError for a site whose
// text could not be written: the batch that installs it failed (Detail
// holds batchpatch's error), or the trampoline of its return probe could
// not be rebuilt with the entry counter its other probes need.
const ReasonPatchFailed plan.Reason = "patch-failed"

// NotFoundError says that a module a spec applies to was loaded but holds
// nothing the spec names: a misspelt function, or a USDT probe the file
// does not have. It matches elfscan.ErrNoSymbol under errors.Is; Err has the
// closest names the module has.
type NotFoundError struct {
	Spec   string // the spec
	Module string // the file
	Err    *elfscan.NoSymbolError
}

func (e *NotFoundError) Error() string {
	s := fmt.Sprintf("probe %q: %v in %s", e.Spec, elfscan.ErrNoSymbol, e.Module)
	if e.Err.Note != "" {
		s += ": " + e.Err.Note
	}
	if len(e.Err.Suggestions) > 0 {
		s += "; did you mean " + strings.Join(e.Err.Suggestions, " or ") + "?"
	}
	return s
}

func (e *NotFoundError) Unwrap() error { return e.Err }

func (e *RejectedError) Error() string {
	where := fmt.Sprintf("%s:%#x", e.Module, e.Addr)
	if e.Symbol != "" {
		where = fmt.Sprintf("%s:%s (%#x)", e.Module, e.Symbol, e.Addr)
	}
	return fmt.Sprintf("%s: %s refused: %s: %s", e.Spec, where, e.Reason, e.Detail)
}

// Unwrap returns ErrTextMismatch or ErrRejected.
func (e *RejectedError) Unwrap() error {
	if e.Reason == ReasonTextMismatch {
		return ErrTextMismatch
	}
	return ErrRejected
}

// SpecError reports a spec that could not be used: it does not parse
// (elfscan.ErrBadSpec), it names nothing (ErrNoSites), or every site it
// names was refused (a *RejectedError, possibly joined with others).
type SpecError struct {
	Spec string
	Err  error
}

func (e *SpecError) Error() string { return fmt.Sprintf("probe %q: %v", e.Spec, e.Err) }

// Unwrap returns the cause.
func (e *SpecError) Unwrap() error { return e.Err }

// Options tune Spawn and Attach. A nil *Options means the defaults.
type Options struct {
	// FollowForks traces the children of fork like their parent, counting
	// their hits under the same probes. By default a child's int3 bytes
	// are removed before it runs, and it is detached.
	FollowForks bool
	// Events asks for one Event per probe hit on the Events channel.
	Events bool
	// EventBuffer is the capacity of the Events channel; 0 means 65536.
	// Events that find it full are dropped and counted
	// (Stats.DroppedEvents): the hit path never waits for a reader.
	EventBuffer int
	// RingSize is the capacity, in events, of each thread's event ring
	// in the memory shared with the tracee: a power of two up to 2^20; 0
	// means DefaultRingSize (65536). A hit that finds its thread's ring
	// full is dropped and counted, per probe and per thread
	// (SiteStats.Dropped, Stats.ThreadDrops). Each ring takes RingSize*64
	// bytes of memory in the tracee and the tracer, as the thread first
	// records an event. 128 threads get rings of their own (fewer when
	// the rings would take more than 1 GiB together: 64 with 2^18 events
	// each, 16 with 2^20); the others record into a shared ring.
	RingSize int
	// OnEvents, when set with Events, receives the events in batches
	// instead of the Events channel: it is called on the reader's
	// goroutine with the events of a drain of the rings, 256 at most at
	// a time, and must not keep the slice (it is reused). Across calls, the trampolines' events
	// of a process come in the order of their hits' time stamp counters,
	// every thread's ring merged (an event waits for the next drain while
	// a ring may still hold an earlier one, 100 ms at most). The rings are not read
	// while it runs: a slow OnEvents fills them, and the hits it cannot
	// take are dropped and counted.
	OnEvents func([]Event)
	// RescanInterval is how often /proc/PID/maps is read to find
	// executable mappings the dynamic linker did not announce (0 means one
	// second; a negative value means never). The process is stopped only
	// when a new mapping is found.
	RescanInterval time.Duration
	// StepOnly single-steps every site, even those the plan would
	// emulate: for measurements and tests of the stepping path. It
	// implies NoTrampolines.
	StepOnly bool
	// NoTrampolines serves every site through traps (emulation or an
	// out-of-line copy), even those the plan would rewrite into a jump
	// to a trampoline.
	NoTrampolines bool
	// MaxPause bounds each stop of the process that writes the sites of
	// an Add or a Remove (batchpatch.Options.MaxPause): a batch that one
	// stop cannot write within it is written in several passes, the
	// process running between them, and a probe's site counts (and shows
	// in Stats) from the pass that wrote it. Staging the batch (its
	// sites resolved, its trampolines built) happens in the first stop
	// and is not bounded (the slots are written after it, while the
	// process runs); nor are the stops of a new module, an exec, a
	// fork's clean-up or Detach. 0 means one stop per batch. With a
	// bound, this program's garbage collector does not run from the
	// staging stop to the last pass (proc.HoldGC).
	// batchpatch.DefaultMaxPause is the recommended bound.
	MaxPause time.Duration
	// StopNice is the nice value the tracer's thread, and each thread of
	// the process until it has stopped, run at during the engine's stops
	// (proc.Options.StopNice): on a machine whose CPUs are busy, it keeps
	// the scheduler from lengthening them. It needs CAP_SYS_NICE (root)
	// for a negative value; 0 leaves the priorities alone.
	StopNice int
	// StopFIFO runs the tracer's thread under SCHED_FIFO during the
	// engine's stops (proc.Options.StopFIFO), so that the threads it
	// resumes at the end of a stop cannot preempt it before it has
	// resumed the others. It needs CAP_SYS_NICE (root).
	StopFIFO bool
	// OnPass, when set, is called after each pass of a bounded batch with
	// the sites written so far and the batch's number of sites (for a
	// progress display). It runs on the goroutine that called Add or
	// Remove and must not call the Tracer.
	OnPass func(done, total int)
	// ReturnDepth is the number of return probes one thread can have
	// armed at once (nested calls of probed functions): the returns of
	// deeper calls are not counted, but counted as missed
	// (SiteStats.DepthMissed). It is rounded up to 2^k-1; 0 means
	// trampoline.MaxDepth (63), the most is trampoline.MaxThreadDepth
	// (1023). Each traced thread's slot of the thread table takes 32
	// bytes a level (2 KiB at 63; 4,096 slots, memory as used).
	ReturnDepth int
	// VerifyInterval is how often the bytes of the installed sites are
	// compared with what the engine wrote, without stopping the process
	// (they are compared at each stop the engine makes too): a site whose
	// bytes another writer changed, a kernel uprobe above all, is made
	// safe and reported (SiteStats.Lost). 0 means DefaultVerifyInterval
	// (10 ms); a negative value means only at the stops. The interval
	// grows when comparing takes more than 2% of a CPU (tens of thousands
	// of sites).
	VerifyInterval time.Duration
	// NoGuardian traces without a guardian (package guardian): if the
	// tracing program then dies without detaching, an attached process's
	// thread that runs an int3 left in the text dies of SIGTRAP, and a
	// spawned process is killed. By default Attach and Spawn start one,
	// and the process is restored and runs on whatever the tracing program
	// dies of.
	NoGuardian bool
	// NoTrapGuard installs no SIGTRAP handler in a guarded x86-64 process
	// (see the package documentation): the program's sigaction queries
	// then see SIG_DFL while it is traced, and a thread whose trap stop
	// the tracing program had not collected when it died is killed by
	// its SIGTRAP. By default one is installed where SIGTRAP's
	// disposition is SIG_DFL.
	NoTrapGuard bool
}

// DefaultRingSize is the capacity of each thread's event ring in events
// when Options.RingSize is 0: 4 MiB a thread, 26 ms of events at 2.5 M
// events per second, so that a reader that polls each millisecond and
// misses a few time slices on a busy machine drops nothing.
const DefaultRingSize = 1 << 16

// ErrOptions means an Options field is out of range.
var ErrOptions = errors.New("invalid options")

// check validates the options.
func (o *Options) check() error {
	if n := o.RingSize; n < 0 || n > 1<<20 || n&(n-1) != 0 {
		return fmt.Errorf("ring size %d (want a power of two up to 1048576): %w", n, ErrOptions)
	}
	if n := o.ReturnDepth; n < 0 || n > trampoline.MaxThreadDepth {
		return fmt.Errorf("return depth %d (want 0 to %d): %w", n, trampoline.MaxThreadDepth, ErrOptions)
	}
	if n := o.StopNice; n < -20 || n > 19 {
		return fmt.Errorf("stop nice value %d (want -20 to 19): %w", n, ErrOptions)
	}
	return nil
}

// SpawnOptions tune Spawn. A nil *SpawnOptions means the defaults.
type SpawnOptions struct {
	Options
	Dir    string   // working directory; "" means the caller's
	Env    []string // environment; nil means the caller's
	Stdin  *os.File // nil means /dev/null
	Stdout *os.File // nil means /dev/null
	Stderr *os.File // nil means /dev/null
}

// Probe is a handle on the sites one spec named, returned by Add and taken
// by Remove.
type Probe struct {
	ID   int    // unique within the tracer, from 1
	Spec string // the spec as given
}

// Event is one hit of one probe.
type Event struct {
	Probe int       // Probe.ID
	Pid   int       // the process
	Tid   int       // the thread
	Addr  uint64    // the run-time address of the site
	Time  time.Time // when the tracer served the trap
	// Args are the first six integer argument registers of the calling
	// convention at the site: rdi, rsi, rdx, rcx, r8, r9 on x86-64; in a
	// function of a Go program's function table, rax, rbx, rcx, rdi,
	// rsi, r8, the first six of Go's register ABI (an assembly function
	// of the Go runtime takes its arguments on the stack: its Args are
	// these registers all the same). Zero for a return.
	Args [6]uint64
	// Return marks the hit of a return probe: the function at Addr
	// returned Ret (rax on x86-64). For a Go function, Addr is the
	// return instruction it returned by.
	Return bool
	Ret    uint64
	// Goid is the id of the goroutine that hit the probe (runtime.g's
	// goid, the number runtime.Stack prints after "goroutine"), for a site
	// in Go code compiled for Go's register ABI whose runtime layout is
	// known (from the program's DWARF, or its Go release); 0 elsewhere
	// and for a hit without a goroutine.
	Goid uint64
}

// SiteStats describes one probe site in one process.
type SiteStats struct {
	Pid    int    // the process
	Module string // the file
	Symbol string // the function and offset ("main", "parse+0x10"), "" if none
	// Addr is the link-time virtual address in Module (what scan prints);
	// RuntimeAddr where it is mapped in the process.
	Addr        uint64
	RuntimeAddr uint64
	Strategy    plan.Strategy
	Reason      plan.Reason
	Detail      string
	// Hits counts the hits of this probe at this site; Emulated, Boosted
	// and Stepped say how the instruction was executed: emulated, run as a
	// relocated copy in a slot without a second trap, or single-stepped in
	// place (a hit whose emulation was refused at run time is stepped).
	Hits, Emulated, Boosted, Stepped uint64
	// Dropped counts the events of this site that were not delivered:
	// their thread's ring (or the shared ring) was full. With Events,
	// Hits equals the events delivered plus Dropped.
	Dropped uint64
	// DepthMissed counts, for a return probe, the calls whose return is
	// not counted: the thread already had trampoline.MaxDepth (63)
	// returns armed (a recursion deeper than that, say). Hits plus
	// DepthMissed, less the frames still live or left by longjmp and
	// exceptions, is the number of calls.
	DepthMissed uint64
	// AtReturn marks a return instruction of a Go function that stands for
	// the function's return probe: its hits are returns (a Go function's
	// return probe is a probe at each of them).
	AtReturn bool
	// Live is false once the site is gone: its module was unmapped, the
	// process exec'd or exited, or the site was taken out (Lost).
	Live bool
	// Lost is set when the site was taken out while its module stayed
	// mapped, because its bytes in memory were no longer what probeopt
	// wrote: ReasonKernelUprobe when a kernel uprobe wrote its int3 over
	// them or, going, wrote the file's byte back; ReasonTextMismatch for
	// another change. LostDetail says what was found and what was done
	// (the bytes probeopt wrote that were still there get the file's back).
	// Hits stop counting then.
	Lost       plan.Reason
	LostDetail string
	// Fallback says why a site the plan gave a trampoline is served by
	// traps instead ("" when it has its trampoline or the plan gave it
	// none).
	Fallback string
}

// ProbeStats describes one probe.
type ProbeStats struct {
	Probe
	// Hits is the sum of the hits of every site, live or gone, in every
	// traced process; Dropped the sum of their dropped events, and
	// DepthMissed of their returns not counted (SiteStats.DepthMissed).
	Hits, Dropped, DepthMissed uint64
	// Sites are the sites installed, in every traced process.
	Sites []SiteStats
	// Refused are the sites the spec named that were not installed, each
	// with its reason.
	Refused []RejectedError
	// NotFound lists the modules the spec applies to that were loaded but
	// hold nothing it names, with the closest names in each (for a spec
	// bound to a module, or one of the main executable).
	NotFound []NotFoundError
	// Pending is set for a spec bound to modules of which none has been
	// mapped yet (nor, for a USDT spec without a module, any that has the
	// probe): it takes effect when one is.
	Pending bool
}

// ThreadDrops is the count of events one thread dropped.
type ThreadDrops struct {
	Pid, Tid int
	Dropped  uint64
}

// Stats is a snapshot of a tracer's counters.
type Stats struct {
	Probes []ProbeStats // in the order they were added
	// DroppedEvents counts events that were not delivered: those that
	// found a ring in the tracee full and those that found the Events
	// channel full.
	DroppedEvents uint64
	// ThreadDrops lists, per thread that dropped events because its ring
	// was full, how many (threads that had no ring of their own record
	// in a shared ring, whose drops are in DroppedEvents only).
	ThreadDrops []ThreadDrops
	// Traps counts the traps served at the probes' sites; InternalTraps
	// those at the engine's own (the dynamic linker's rendezvous, where
	// new modules are found), which no probe counts. Emulated, Boosted and
	// Stepped say how the displaced instructions of Traps ran (see
	// SiteStats); Fallbacks the
	// emulations refused at run time (an access another thread could see
	// half-done, a fault...) that were stepped instead.
	Traps, InternalTraps, Emulated, Boosted, Stepped, Fallbacks uint64
	// VforkHits counts the hits that children made by vfork (or
	// posix_spawn) made at their parents' sites, in their parents'
	// memory, before they exec'd or exited: they are not counted as the
	// parent's (a kernel uprobe of the parent's pid does not count them
	// either), nor, before the exec, as the child's. Hits a child made at
	// a trampoline while its parent thread had no stripe of its own (see
	// Options.RingSize) are not told apart: they stay the parent's.
	VforkHits uint64
	// DeferredSignals counts the signals that stopped a thread about to
	// be stepped, before the instruction: each was delivered after it.
	DeferredSignals uint64
	// XOLMethod says how the instructions that are not emulated are
	// executed: out of line, in a slot, as a relocated copy that jumps back
	// (no second trap), for the instructions that cannot fault; the others
	// single-stepped in place (the original byte put back while every
	// thread is stopped, the thread stepped, the int3 written again).
	XOLMethod string
	// Batches counts the stop-the-world passes that wrote text, and
	// Patches the bytes they wrote.
	Batches, Patches int
	// LongestPause is the longest pause of a pass of a bounded batch
	// (Options.MaxPause), from the first thread stopped to the last one
	// resumed; 0 without a bound. LongestStage is the longest stop that
	// staged such a batch (resolved its new sites and built their
	// trampolines, before the passes): it is not bounded.
	LongestPause, LongestStage time.Duration
}
