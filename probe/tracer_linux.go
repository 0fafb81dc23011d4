//go:build linux && (amd64 || arm64)

package probe

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/guardian"
	"github.com/probeopt/probeopt/internal/hostcpu"
	"github.com/probeopt/probeopt/proc"
)

// tracerBackend is the linux engine (amd64, arm64) behind a Tracer (see
// tracer.go): embedded in it, so the engine's methods take a *Tracer.
type tracerBackend = liveTracer

var _ tracerOps = (*Tracer)(nil)

// liveTracer is the state of the live engine.
type liveTracer struct {
	opts   Options
	vendor decode.Vendor
	// emu is the emulator of this CPU: its vendor and address width;
	// emuOK is false on a CPU it cannot follow exactly (see hostEmulator).
	emu   hostEmu
	emuOK bool
	files fileCache

	// mu orders the control operations (adding and removing probes,
	// new modules, forks, execs, single steps, detaching). It is always
	// taken before a call that stops a process, never inside one; the hit
	// path never takes it.
	mu      sync.Mutex
	probes  []*probeState
	nextID  int
	root    *target
	targets map[int]*target
	closed  bool
	guard   *guardian.Guard // the root target's guardian (Attach), nil without one
	// bpfLoaded is set once a BPF object was loaded (LoadBPF): return
	// trampolines are made able to call programs.
	bpfLoaded bool
	batches   int
	patches   int
	// threadDrops keeps the events dropped per thread (pid, tid) of the
	// targets that are gone.
	threadDrops map[[2]int]uint64
	// longestPause is the longest pass of a bounded batch, longestStage
	// the longest stop that staged one.
	longestPause, longestStage time.Duration
	// opMu orders Add, Remove and Detach: a bounded batch releases mu
	// between its passes (see runPasses), and no other of them may start
	// meanwhile. It is taken before mu.
	opMu sync.Mutex

	events      chan Event
	closeEvents sync.Once
	dropped     atomic.Uint64
	traps       atomic.Uint64
	// internalTraps counts the traps of the engine's own sites (the
	// dynamic linker's rendezvous), not in traps.
	internalTraps atomic.Uint64
	// vforkTargets are the targets by pid, for onVfork (which runs on the
	// tracer thread and cannot take mu); vforkHits counts the hits of
	// vfork children at their parents' sites (Stats.VforkHits).
	vforkTargets sync.Map
	vforkHits    atomic.Uint64
	// emulated, stepped and fallbacks count the executions of displaced
	// instructions.
	emulated, stepped, fallbacks atomic.Uint64
	deferred, boosted            atomic.Uint64

	wg      sync.WaitGroup
	done    chan struct{} // closed when the root process has exited or was detached
	status  proc.ExitStatus
	waitErr error
}

// probeState is a probe and its sites (under Tracer.mu).
type probeState struct {
	Probe
	sp       spec
	internal bool
	// prog is the BPF program the probe runs at its sites (BPF.Attach),
	// nil for a counting probe.
	prog     *bpfProg
	removed  bool
	counters []*siteCounter
	refused  []RejectedError
	errs     []error // why the spec could not be resolved in some module
	// suggest are close names of the main executable, for a spec that
	// names none of its functions.
	suggest []string
	// notFound are the loaded modules the spec applies to that hold
	// nothing it names, by path (ProbeStats.NotFound).
	notFound map[string]*elfscan.NoSymbolError
}

// xolMethod is what Stats.XOLMethod says.
const xolMethod = "out-of-line copies in slots without a second trap (xol.RelocateX86, boosted) for instructions that cannot fault; in-place single steps otherwise"

// procOptions are the options of every traced process: forked children
// are always kept (and stopped) at first, so that their int3 bytes can be
// removed before they run, even when they are not followed; vfork
// children's hits are told apart through vw; the stops at
// Options.StopNice and StopFIFO.
func procOptions(o *Options, vw *vforkWatch) proc.Options {
	return proc.Options{FollowForks: true, HoldExec: true, EventBuffer: 1 << 14, OnVfork: vw.on, StopNice: o.StopNice, StopFIFO: o.StopFIFO}
}

// spawnLookedUp, when not nil, is called by Spawn between the lookup of the
// command and its exec (a test hook).
var spawnLookedUp func(path string)

// Spawn starts argv (argv[0] is looked up in PATH) as a traced process and
// returns it stopped before its first instruction, with no probes: call
// Add, then Resume. If the calling program dies without detaching, the
// process runs on restored by its guardian (see Options.NoGuardian; without
// one, and on arm64, which has no guardian, it is killed, as it is when the calling program dies before Spawn
// has returned). When argv[0] resolves to an ELF file, the process must
// run that very file (same device and inode, checked after the exec, before
// the file is read for probe sites): one replaced in between gives an error
// wrapping ErrExecChanged. (A script runs its interpreter, which is not
// checked.)
func Spawn(argv []string, opts *SpawnOptions) (*Tracer, error) {
	var o SpawnOptions
	if opts != nil {
		o = *opts
	}
	if err := o.Options.check(); err != nil {
		return nil, err
	}
	// The identity of the file the lookup found, taken from the open file
	// whose first bytes say it is ELF. A failed lookup is left to
	// proc.Spawn, which reports it.
	var looked *unix.Stat_t
	path := ""
	if len(argv) > 0 {
		path, _ = exec.LookPath(argv[0])
	}
	check := path
	if o.Dir != "" && path != "" && !filepath.IsAbs(path) {
		check = filepath.Join(o.Dir, path) // where the exec finds it
	}
	if f, err := os.Open(check); path != "" && err == nil {
		var magic [4]byte
		var st unix.Stat_t
		if n, _ := f.ReadAt(magic[:], 0); n == 4 && string(magic[:]) == "\x7fELF" && unix.Fstat(int(f.Fd()), &st) == nil {
			looked = &st
		}
		f.Close()
	}
	if spawnLookedUp != nil {
		spawnLookedUp(path)
	}
	vw := &vforkWatch{}
	p, err := proc.Spawn(argv, &proc.SpawnOptions{Options: procOptions(&o.Options, vw), Dir: o.Dir, Env: o.Env, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr})
	if err != nil {
		return nil, err
	}
	if looked != nil {
		var ran unix.Stat_t
		if err := unix.Stat("/proc/"+strconv.Itoa(p.Pid())+"/exe", &ran); err != nil || ran.Dev != looked.Dev || ran.Ino != looked.Ino {
			_ = p.Kill()
			if err != nil {
				return nil, fmt.Errorf("spawn %s: check the executable: %w", argv[0], err)
			}
			return nil, fmt.Errorf("spawn %s: %s was device %d inode %d when looked up, the process runs device %d inode %d: %w",
				argv[0], path, looked.Dev, looked.Ino, ran.Dev, ran.Ino, ErrExecChanged)
		}
	}
	t := newTracer(o.Options)
	vw.t.Store(t)
	if t.guard, err = spawnGuard(p, &o.Options); err != nil {
		_ = p.Kill()
		return nil, err
	}
	if err := t.start(p); err != nil {
		_ = p.Kill()
		if t.guard != nil {
			_ = t.guard.Release()
		}
		return nil, err
	}
	return t, nil
}

// Attach traces the running process pid and returns it stopped, with no
// probes: call Add, then Resume.
func Attach(pid int, opts *Options) (*Tracer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	vw := &vforkWatch{}
	po := procOptions(&o, vw)
	var g *guardian.Guard
	if !o.NoGuardian && pid > 0 {
		// Started first: from the moment the latch is armed, a process
		// whose tracer dies stops, and only the guardian lets it go.
		var err error
		if g, err = guardian.Start(pid, nil); err != nil {
			return nil, fmt.Errorf("attach %d: %w", pid, err)
		}
		po.StopLatch = true
	}
	p, err := proc.Attach(pid, &po)
	if err != nil {
		if g != nil {
			_ = g.Release()
		}
		return nil, err
	}
	t := newTracer(o)
	vw.t.Store(t)
	t.guard = g
	if err := t.start(p); err != nil {
		_ = p.Detach()
		if g != nil {
			_ = g.Release()
		}
		return nil, err
	}
	return t, nil
}

func newTracer(o Options) *Tracer {
	n := o.EventBuffer
	if n <= 0 {
		n = 1 << 16
	}
	if o.RescanInterval == 0 {
		o.RescanInterval = time.Second
	}
	if o.RingSize == 0 {
		o.RingSize = DefaultRingSize
	}
	if o.VerifyInterval == 0 {
		o.VerifyInterval = DefaultVerifyInterval
	}
	emu, emuOK := hostEmulator(hostcpu.Host())
	return &Tracer{tracerBackend{opts: o, vendor: hostVendor(), emu: emu, emuOK: emuOK, targets: map[int]*target{}, events: make(chan Event, n), done: make(chan struct{})}}
}

// start makes p the root target: the trap handler, the modules mapped now
// (and the dynamic linker's rendezvous probe), the service goroutines.
func (t *Tracer) start(p *proc.Process) error {
	tg, err := t.trace(p, nil, nil)
	if tg != nil {
		t.mu.Lock()
		t.root = tg
		t.mu.Unlock()
	}
	return err
}

// trace traces the stopped process p, whose installed sites are sites (a
// forked child's inherited int3 bytes and jumps; nil for none) and whose
// trampoline state is ts (a forked child's, see forkTrampolines; nil for
// none): it installs the trap handler, probes what is mapped and starts
// the goroutines. The world stays as it is (stopped).
func (t *Tracer) trace(p *proc.Process, sites map[uint64]*liveSite, ts *trampState) (*target, error) {
	tg, err := newTarget(t, p)
	if err != nil {
		return nil, err
	}
	if t.root == nil && t.guard != nil {
		tg.guard, tg.guarded = t.guard, map[guardKey]bool{}
	} else if t.root != nil {
		t.mu.Lock()
		err := tg.guardChild(sites) // guard_linux_amd64.go
		t.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	tg.ts = ts
	if ts != nil {
		tg.live.Store(ts)
	}
	if sites != nil {
		tg.sites = sites
		tg.publish()
	}
	if _, err := p.SetTrapHandler(tg.trap); err != nil {
		return nil, err
	}
	// A thread's events are read before it is gone (its thread id is
	// then still in its thread control block), and its stripe of the
	// data area is reclaimed.
	if err := p.SetExitHandler(tg.threadExit); err != nil {
		return nil, err
	}
	if err := p.SetSyscallHandler(tg.borrowed); err != nil {
		return nil, err
	}
	if err := p.SetStepHandler(tg.stepping); err != nil {
		return nil, err
	}
	t.mu.Lock()
	var res batchResult
	_, err = p.Stopped(func(w *proc.World) error {
		if t.root == nil {
			// An earlier tracer's areas, before any of ours.
			tg.reclaimLeft(w)
		}
		if tg.ts != nil && tg.ts.ring == nil && t.opts.Events {
			// A followed child's own ring (forkTrampolines).
			tg.ts.ring = tg.newRingReader(w, tg.ts.view)
			tg.ring.Store(tg.ts.ring)
			tg.publish()
		}
		res = tg.rescanStopped(w)
		return nil
	})
	t.targets[tg.pid] = tg
	t.vforkTargets.Store(tg.pid, tg)
	t.record(&res)
	t.mu.Unlock()
	if err == nil && len(res.errs) > 0 {
		err = res.errs[0]
	}
	t.wg.Add(2)
	go tg.eventLoop()
	go tg.serveLoop()
	if t.opts.RescanInterval > 0 {
		t.wg.Add(1)
		go tg.rescanLoop(t.opts.RescanInterval)
	}
	if t.opts.VerifyInterval > 0 {
		t.wg.Add(1)
		go tg.verifyLoop(t.opts.VerifyInterval)
	}
	return tg, err
}

func (t *Tracer) pid() int { return t.root.pid }

func (t *Tracer) resume() error {
	if err := t.root.p.Resume(); err != nil {
		return fmt.Errorf("resume %d: %w", t.root.pid, err)
	}
	return nil
}

func (t *Tracer) eventCh() <-chan Event { return t.events }

func (t *Tracer) exited() <-chan struct{} { return t.done }

func (t *Tracer) wait() (proc.ExitStatus, error) {
	<-t.done
	return t.status, t.waitErr
}

func (t *Tracer) add(specs ...string) ([]*Probe, error) { return t.addProbes(specs, nil) }

// addProbes adds probes of specs, running program prog at their sites
// when it is not nil.
func (t *Tracer) addProbes(specs []string, prog *bpfProg) ([]*Probe, error) {
	parsed := make([]spec, len(specs))
	for i, s := range specs {
		sp, err := parseSpec(s)
		if err != nil {
			return nil, &SpecError{Spec: s, Err: err}
		}
		parsed[i] = sp
	}
	t.opMu.Lock()
	defer t.opMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	var added []*probeState
	for _, sp := range parsed {
		t.nextID++
		p := &probeState{Probe: Probe{ID: t.nextID, Spec: sp.text}, sp: sp, prog: prog}
		t.probes = append(t.probes, p)
		added = append(added, p)
	}
	var errs []error
	for _, tg := range t.targetList() {
		var res batchResult
		tg.bounded = t.opts.MaxPause > 0
		if tg.bounded {
			tg.warmPlans(added)
		}
		if err := t.stopThenPasses(tg, &res, func(w *proc.World) { res = tg.rescanStopped(w) }); err != nil {
			errs = append(errs, err)
		}
		t.record(&res)
		errs = append(errs, res.errs...)
	}
	var out []*Probe
	failed := map[*probeState]bool{}
	for _, p := range added {
		if err := t.verdict(p); err != nil {
			p.removed = true
			failed[p] = true
			errs = append(errs, &SpecError{Spec: p.Spec, Err: err})
			continue
		}
		pr := p.Probe
		out = append(out, &pr)
	}
	if len(failed) > 0 {
		// A probe that failed was never installed: it is forgotten.
		kept := t.probes[:0]
		for _, p := range t.probes {
			if !failed[p] {
				kept = append(kept, p)
			}
		}
		t.probes = kept
	}
	return out, errors.Join(errs...)
}

// record keeps what a batch found per probe.
func (t *Tracer) record(res *batchResult) {
	for p, rs := range res.refused {
		p.refused = append(p.refused, rs...)
	}
	for p, es := range res.specErrs {
		p.errs = append(p.errs, es...)
	}
}

// verdict says why a probe just added is not usable, or nil.
func (t *Tracer) verdict(p *probeState) error {
	live := 0
	for _, c := range p.counters {
		if c.live.Load() {
			live++
		}
	}
	if live > 0 {
		return nil
	}
	if len(p.refused) > 0 || len(p.errs) > 0 {
		errs := append([]error(nil), p.errs...)
		for i := range p.refused {
			errs = append(errs, &p.refused[i])
		}
		return errors.Join(errs...)
	}
	if p.sp.module != "" || p.sp.es.Kind == elfscan.SpecUSDT {
		return nil // waits for a module that is not mapped yet
	}
	if t.root.mainModule() == nil {
		return errNoModule
	}
	if nse := p.notFound[t.root.mainModule().fi.path]; nse != nil && nse.Note != "" {
		return fmt.Errorf("%w: %s", ErrNoSites, nse.Note)
	}
	if len(p.suggest) > 0 {
		return fmt.Errorf("%w; did you mean %s?", ErrNoSites, strings.Join(p.suggest, " or "))
	}
	return ErrNoSites
}

// mainModule returns the module of the executable, nil if none.
func (tg *target) mainModule() *module {
	for _, m := range tg.modules {
		if m.main {
			return m
		}
	}
	return nil
}

func (t *Tracer) remove(probes ...*Probe) error {
	t.opMu.Lock()
	defer t.opMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	for _, pr := range probes {
		if pr == nil {
			return fmt.Errorf("remove a nil probe: %w", ErrUnknownProbe)
		}
		p := t.probeByID(pr.ID)
		if p == nil || p.removed {
			return fmt.Errorf("remove probe %d (%s): %w", pr.ID, pr.Spec, ErrUnknownProbe)
		}
	}
	for _, pr := range probes {
		t.probeByID(pr.ID).removed = true
	}
	var errs []error
	for _, tg := range t.targetList() {
		var res batchResult
		tg.bounded = t.opts.MaxPause > 0
		if err := t.stopThenPasses(tg, &res, func(w *proc.World) {
			tg.sync(w)
			tg.verifyStopped(w)
			tg.commit(w, tg.cloneSites(), &res)
		}); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, res.errs...)
	}
	return errors.Join(errs...)
}

// stopThenPasses runs stage in one stop of target tg's threads, then the
// passes a bounded batch staged there (runPasses), and clears tg.bounded.
// It returns the stop's error only when tg is the root target (Add and
// Remove report no stop error of a followed child). A bounded batch holds
// this program's garbage collector throughout (proc.HoldGC).
func (t *Tracer) stopThenPasses(tg *target, res *batchResult, stage func(w *proc.World)) error {
	if tg.bounded && t.opts.MaxPause > 0 {
		defer proc.HoldGC()() // from the staging stop to the last pass
	}
	stop, err := tg.p.Stopped(func(w *proc.World) error {
		stage(w)
		return nil
	})
	tg.bounded = false
	if tg.staged != nil {
		t.longestStage = max(t.longestStage, stop.Total)
	}
	t.runPasses(tg, res)
	if tg != t.root {
		return nil
	}
	return err
}

func (t *Tracer) probeByID(id int) *probeState {
	for _, p := range t.probes {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// targetList returns the targets, the root first.
func (t *Tracer) targetList() []*target {
	var out []*target
	if t.root != nil && !t.root.closed {
		out = append(out, t.root)
	}
	pids := make([]int, 0, len(t.targets))
	for pid := range t.targets {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		if tg := t.targets[pid]; tg != t.root && !tg.closed {
			out = append(out, tg)
		}
	}
	return out
}

func (t *Tracer) stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := Stats{
		DroppedEvents:   t.dropped.Load(),
		Traps:           t.traps.Load(),
		InternalTraps:   t.internalTraps.Load(),
		VforkHits:       t.vforkHits.Load(),
		Emulated:        t.emulated.Load(),
		Stepped:         t.stepped.Load(),
		Boosted:         t.boosted.Load(),
		Fallbacks:       t.fallbacks.Load(),
		DeferredSignals: t.deferred.Load(),
		XOLMethod:       xolMethod,
		Batches:         t.batches,
		Patches:         t.patches,
		LongestPause:    t.longestPause,
		LongestStage:    t.longestStage,
	}
	for _, p := range t.probes {
		if p.internal {
			continue
		}
		ps := ProbeStats{Probe: p.Probe, Refused: append([]RejectedError(nil), p.refused...)}
		for _, c := range p.counters {
			s := SiteStats{Pid: c.pid, Module: c.module, Symbol: c.symbol, Addr: c.vaddr, RuntimeAddr: c.addr,
				Strategy: c.decision.Strategy, Reason: c.decision.Reason, Detail: c.decision.Detail,
				Hits: c.Hits(), Emulated: c.emulated.Load(), Stepped: c.stepped.Load(), Boosted: c.boosted.Load(), Live: c.live.Load(),
				Dropped: c.Dropped(), DepthMissed: c.DepthMissed(), AtReturn: c.atRet, Lost: c.lost, LostDetail: c.lostDetail, Fallback: c.fallback}
			ps.Hits += s.Hits
			ps.Dropped += s.Dropped
			ps.DepthMissed += s.DepthMissed
			ps.Sites = append(ps.Sites, s)
		}
		for _, m := range slices.Sorted(maps.Keys(p.notFound)) {
			ps.NotFound = append(ps.NotFound, NotFoundError{Spec: p.Spec, Module: m, Err: p.notFound[m]})
		}
		ps.Pending = !p.removed && len(p.counters) == 0 && len(p.notFound) == 0 && (p.sp.module != "" || p.sp.es.Kind == elfscan.SpecUSDT)
		st.Probes = append(st.Probes, ps)
	}
	drops := map[[2]int]uint64{}
	for k, n := range t.threadDrops {
		drops[k] += n
	}
	for _, tg := range t.targets {
		for tid, n := range tg.threadDrops() {
			drops[[2]int{tg.pid, tid}] += n
		}
	}
	for k, n := range drops {
		st.ThreadDrops = append(st.ThreadDrops, ThreadDrops{Pid: k[0], Tid: k[1], Dropped: n})
	}
	slices.SortFunc(st.ThreadDrops, func(a, b ThreadDrops) int { return cmp.Or(cmp.Compare(a.Pid, b.Pid), cmp.Compare(a.Tid, b.Tid)) })
	return st
}

// threadDrops returns the events each thread of the target dropped
// because its ring was full: the retired threads' and the live ones'
// (under Tracer.mu).
func (tg *target) threadDrops() map[int]uint64 {
	ts := tg.ts
	if ts == nil {
		return nil
	}
	out := map[int]uint64{}
	ts.dropsMu.Lock()
	for tid, n := range ts.drops {
		out[tid] += n
	}
	ts.dropsMu.Unlock()
	for _, st := range ts.view.Stripes() {
		if n := ts.view.ThreadDropped(st.Slot); n > 0 {
			out[tg.tcbTid(st.Key, ts.tidOff, nil)] += n
		}
	}
	return out
}

func (t *Tracer) detach() error {
	t.opMu.Lock()
	defer t.opMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	t.closed = true
	var errs []error
	list := t.targetList()
	for i := len(list) - 1; i >= 0; i-- {
		err := list[i].detach()
		if err != nil && !errors.Is(err, proc.ErrExited) {
			// The guardian restores what is left once this program exits.
			errs = append(errs, fmt.Errorf("detach %d: %w", list[i].pid, err))
			continue
		}
		list[i].releaseGuard()
	}
	return errors.Join(errs...)
}

func (t *Tracer) kill() error {
	t.mu.Lock()
	list := t.targetList()
	t.closed = true
	t.mu.Unlock()
	var errs []error
	for _, tg := range list {
		if err := tg.p.Kill(); err != nil && !errors.Is(err, proc.ErrExited) && !errors.Is(err, proc.ErrDetached) {
			errs = append(errs, err)
		}
	}
	<-t.done
	return errors.Join(errs...)
}

// detach restores the target's text and detaches it (under Tracer.mu).
func (tg *target) detach() error {
	inflight := false
	var res batchResult
	_, err := tg.p.Stopped(func(w *proc.World) error {
		tg.sync(w)
		tg.verifyStopped(w)
		tg.commit(w, map[uint64]*liveSite{}, &res)
		if len(res.errs) > 0 {
			// The batch failed as a whole (a site no longer holds our
			// int3: the program rewrote its text, say): restore, one by
			// one, every site that still does, and leave the others.
			if err := tg.restoreEach(w); err != nil {
				return errors.Join(res.errs[0], err)
			}
		}
		inflight = tg.inflight(w)
		return nil
	})
	if err != nil {
		return err
	}
	// Every held thread stands at an original instruction now.
	_ = tg.p.Release(nil)
	for i := 0; inflight && i < 1000; i++ {
		time.Sleep(time.Millisecond)
		_, err := tg.p.Stopped(func(w *proc.World) error {
			inflight = tg.inflight(w)
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(res.errs) == 0 {
		// Every site is gone: the areas go too when nothing is in them.
		_, _ = tg.p.Stopped(func(w *proc.World) error { tg.reclaimLeft(w); return nil })
	}
	tg.closed = true
	_, _ = tg.p.SetTrapHandler(nil)
	return tg.p.Detach()
}

// restoreEach puts the original bytes back at every installed site that
// still holds our int3 or jump, one patch at a time, and forgets every
// site. The world is stopped.
func (tg *target) restoreEach(w *proc.World) error {
	var errs []error
	for addr, s := range tg.sites {
		p := s.removePatch()
		cur := make([]byte, len(p.Old))
		if w.ReadMemory(p.Addr, cur) == nil && bytes.Equal(cur, p.Old) {
			steps := -1
			if mayStep(p) {
				steps = 0
			}
			if _, err := batchpatch.ApplyStopped(w, []batchpatch.Patch{p}, patchOptions(steps)); err != nil {
				errs = append(errs, fmt.Errorf("restore %#x: %w", addr, err))
				continue
			}
		}
		tg.semaphore(w, s, -1)
		tg.retire(s)
		tg.forget(s)
	}
	tg.sites = map[uint64]*liveSite{}
	tg.publish()
	return errors.Join(errs...)
}

// inflight reports whether a thread has executed one of the removed int3
// bytes without its SIGTRAP being served yet (it can be reported after an
// interrupt stop): such a thread must see the handler, which sends it back
// to the original instruction, before the process is detached.
func (tg *target) inflight(w *proc.World) bool {
	ths, err := w.Threads()
	if err != nil {
		return false
	}
	for _, th := range ths {
		if _, ok := tg.retired[th.PC-trapPCAdjust]; ok && sigPending(tg.pid, th.Tid, int(unix.SIGTRAP)) {
			return true
		}
	}
	return false
}

// sigPending reports whether signal sig is pending for thread tid.
func sigPending(pid, tid, sig int) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SigPnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(sig-1)) != 0
		}
	}
	return false
}

// eventLoop follows the process's events until it is gone.
func (tg *target) eventLoop() {
	defer tg.t.wg.Done()
	for {
		select {
		case ev := <-tg.p.Events():
			tg.t.onEvent(tg, ev)
		case <-tg.p.Exited():
			for {
				select {
				case ev := <-tg.p.Events():
					tg.t.onEvent(tg, ev)
					continue
				default:
				}
				break
			}
			tg.t.onGone(tg)
			return
		}
	}
}

// onEvent handles one event of a target.
func (t *Tracer) onEvent(tg *target, ev proc.Event) {
	switch ev.Kind {
	case proc.EventClone:
		tg.multi.Store(true)
		t.mu.Lock()
		if tg.ts != nil && tg.ts.ring != nil {
			tg.ts.ring.threadStarted(ev.NewPid)
		}
		t.mu.Unlock()
	case proc.EventThreadExit:
		t.mu.Lock()
		var ring *ringReader
		if tg.ts != nil {
			ring = tg.ts.ring
		}
		t.mu.Unlock()
		if ring != nil {
			ring.drain()
		}
	case proc.EventFork:
		if ev.Child != nil {
			t.onFork(tg, ev.Child)
		}
	case proc.EventExec:
		switch {
		case ev.Child != nil:
			t.onNewImage(ev.Child)
		case ev.Pid == tg.pid:
			t.onExec(tg)
		}
	}
}

// onFork handles a forked child, stopped: followed, or cleaned of the int3
// bytes it inherited and detached.
func (t *Tracer) onFork(parent *target, child *proc.Process) {
	// The child may not have reported its first stop yet although it is
	// delivered as stopped: Stop waits for it (Stopped and Detach would
	// take the world as stopped already, and a stop that comes after
	// Detach leaves the child stopped and traced for ever).
	if err := child.Stop(); err != nil {
		return
	}
	t.mu.Lock()
	if !t.opts.FollowForks || t.closed {
		defer t.mu.Unlock()
		var restore []batchpatch.Patch
		for _, s := range parent.sites {
			restore = append(restore, s.removePatch())
		}
		for a, b := range parent.retired {
			restore = append(restore, batchpatch.Patch{Addr: a, Old: trapInsn.bytes(), New: b.bytes()})
		}
		for _, p := range parent.retiredTramps {
			restore = append(restore, p)
		}
		_, err := child.Stopped(func(w *proc.World) error { return cleanChild(w, restore) })
		if err != nil {
			// The child keeps int3 bytes it cannot survive without us:
			// better it never runs.
			_ = child.Kill()
			return
		}
		_ = child.Detach()
		return
	}
	inherited := map[uint64]*liveSite{}
	var cts *trampState
	_, err := child.Stopped(func(w *proc.World) error {
		if parent.ts != nil {
			// The child's trampolines count in a data area of its own;
			// failing that, in the parent's (a shared mapping it
			// inherited), where they are counted once, at the parent's
			// sites.
			cts, _ = forkTrampolines(w, child.Pid(), parent.ts)
		}
		var restore []batchpatch.Patch
		for a, s := range parent.sites {
			if parent.removing[a] {
				// A bounded Remove has not reached it yet: the
				// child does not keep it.
				restore = append(restore, s.removePatch())
				continue
			}
			if holds(w, s.installPatch()) {
				tramp := s.tramp
				if tramp != nil && cts != nil {
					own := *tramp
					own.view, own.excl = cts.view, &cts.excl
					tramp = &own
				}
				c := &liveSite{addr: a, ps: s.ps, mod: s.mod, rendezvous: s.rendezvous, sema: s.sema, tramp: tramp,
					unhijack: s.unhijack, rehijack: s.rehijack}
				for _, r := range s.refs {
					c.refs = append(c.refs, ref{p: r.p, c: &siteCounter{pid: child.Pid(), module: r.c.module, symbol: r.c.symbol, vaddr: r.c.vaddr, addr: a, decision: r.c.decision,
						tramp: tramp, shared: tramp != nil && cts == nil, ret: r.c.ret, atRet: r.c.atRet}})
				}
				inherited[a] = c
			}
		}
		// Sites the parent removed after the fork: the child still has
		// their int3 bytes or jumps.
		for a, orig := range parent.retired {
			restore = append(restore, batchpatch.Patch{Addr: a, Old: trapInsn.bytes(), New: orig.bytes()})
		}
		for _, p := range parent.retiredTramps {
			restore = append(restore, p)
		}
		return cleanChild(w, restore)
	})
	t.mu.Unlock()
	if err != nil {
		_ = child.Kill()
		return
	}
	t.follow(child, inherited, cts)
}

// follow traces a forked child with the sites and trampolines it
// inherited (nil for a new image) and resumes it, or kills it when it
// cannot be traced.
func (t *Tracer) follow(child *proc.Process, inherited map[uint64]*liveSite, ts *trampState) {
	if _, err := t.trace(child, inherited, ts); err != nil {
		_ = child.Kill()
		return
	}
	_ = child.Resume()
}

// cleanChild applies, in one batch, every patch of restore whose old
// bytes (our int3 or jump) a forked child still holds.
func cleanChild(w *proc.World, restore []batchpatch.Patch) error {
	var patches []batchpatch.Patch
	steps := -1
	for _, p := range restore {
		if holds(w, p.Inverse()) {
			patches = append(patches, p)
			if mayStep(p) {
				steps = 0
			}
		}
	}
	if len(patches) == 0 {
		return nil
	}
	batchpatch.Sort(patches)
	_, err := batchpatch.ApplyStopped(w, patches, patchOptions(steps))
	return err
}

// holds reports whether memory holds the new bytes of patch p.
func holds(w *proc.World, p batchpatch.Patch) bool {
	cur := make([]byte, len(p.New))
	return w.ReadMemory(p.Addr, cur) == nil && bytes.Equal(cur, p.New)
}

// onNewImage handles a child that shared its parent's memory (vfork) and
// has exec'd a program of its own: followed with FollowForks, else
// detached (it holds no int3 of ours).
func (t *Tracer) onNewImage(child *proc.Process) {
	if err := child.Stop(); err != nil {
		return
	}
	t.mu.Lock()
	follow := t.opts.FollowForks && !t.closed
	t.mu.Unlock()
	if !follow {
		_ = child.Detach()
		return
	}
	t.follow(child, nil, nil)
}

// onExec handles an exec of a target: the old sites went with the old
// image; the probes are resolved again in the new one (see target.sync: the
// event may come after later execs, or after the new image was probed).
func (t *Tracer) onExec(tg *target) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// proc holds the thread that exec'd (HoldExec) until the new image is
	// probed, so that none of its hits is missed.
	defer tg.p.Release(func(ctx *proc.TrapContext) bool { return ctx.Tid == tg.pid })
	if tg.closed {
		return
	}
	_, _ = tg.p.Stopped(func(w *proc.World) error {
		tg.rescanStopped(w)
		return nil
	})
}

// onGone ends a target whose process exited or was detached.
func (t *Tracer) onGone(tg *target) {
	t.mu.Lock()
	tg.closed = true
	for _, s := range tg.sites {
		tg.forget(s)
	}
	for tid, n := range tg.threadDrops() {
		if t.threadDrops == nil {
			t.threadDrops = map[[2]int]uint64{}
		}
		t.threadDrops[[2]int{tg.pid, tid}] += n
	}
	delete(t.targets, tg.pid)
	t.vforkTargets.Delete(tg.pid)
	close(tg.gone)
	if f := tg.mem.Swap(nil); f != nil {
		f.Close()
	}
	last := len(t.targets) == 0
	guard := tg.guard
	var ring *ringReader
	if tg.ts != nil {
		ring = tg.ts.ring
	}
	t.mu.Unlock()
	if ring != nil {
		ring.drainFinal() // the events recorded before the end
	}
	if guard != nil {
		// Exited, or detached (Detach releases it too): nothing to guard.
		_ = guard.Release()
	}
	if tg == t.root {
		st, err := tg.p.Wait()
		if errors.Is(err, proc.ErrDetached) {
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		t.status, t.waitErr = st, err
		close(t.done)
	}
	if last {
		t.files.close()
		// Every sender of events (the trap handler, the ring readers)
		// is done once the service goroutines are.
		go func() {
			t.wg.Wait()
			t.closeEvents.Do(func() { close(t.events) })
		}()
	}
}

// rescanLoop looks at /proc/PID/maps every interval and, when the
// executable mappings changed, probes the new ones.
func (tg *target) rescanLoop(interval time.Duration) {
	defer tg.t.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-tg.gone:
			return
		}
		s := tg.refreshSnap()
		if s == nil {
			continue
		}
		key := mappingsKey(execMappings(s.maps))
		t := tg.t
		t.mu.Lock()
		if !tg.closed && !t.closed && !tg.passing && key != tg.mapsKey {
			_, _ = tg.p.Stopped(func(w *proc.World) error {
				tg.rescanStopped(w)
				return nil
			})
		}
		t.mu.Unlock()
	}
}
