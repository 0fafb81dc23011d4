//go:build linux && (amd64 || arm64)

package probe

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/guardian"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/xol"
)

// rendezvousSymbol is the function the GNU and musl dynamic linkers call
// after every change to their list of loaded objects (r_debug.r_brk).
const rendezvousSymbol = "_dl_debug_state"

// ref is one probe at one site, with its counters.
type ref struct {
	p *probeState
	c *siteCounter
}

// hijacks reports whether r is a return probe that the site's trampoline
// makes by replacing the return address (a return probe at a function's
// entry), not one at a return instruction (atRet).
func (r ref) hijacks() bool { return r.p.sp.ret && !r.c.atRet }

// siteCounter counts the hits of one probe at one site of one process.
type siteCounter struct {
	pid      int
	module   string
	symbol   string
	vaddr    uint64
	addr     uint64
	decision plan.Decision

	hits, emulated, stepped, boosted atomic.Uint64
	live                             atomic.Bool
	// tramp is set for a site served by a trampoline: its hits are
	// counted in the shared data area. shared marks a site a followed
	// child inherited when it could not get a data area of its own: its
	// hits land in the parent's counter, where they are counted once.
	tramp  *siteTramp
	shared bool
	ret    bool // a return probe: counts the returns
	// atRet marks a return probe served at a return instruction of a
	// Go function (see goReturns): a hit there is a return, counted and
	// recorded as an entry hit is.
	atRet bool
	// lost and lostDetail say why the site was taken out while its
	// module stayed mapped (see loseSite), "" if it was not (under
	// Tracer.mu).
	lost       plan.Reason
	lostDetail string
	// fallback says why a site the plan gave a trampoline takes traps.
	fallback string
}

// Hits returns the hits of the site.
func (c *siteCounter) Hits() uint64 {
	n := c.hits.Load()
	switch {
	case c.tramp == nil || c.shared:
	case c.ret:
		n += c.tramp.view.Counter(c.tramp.retCounter) - c.tramp.excl.get(c.tramp.retCounter)
	default:
		n += c.tramp.view.Counter(c.tramp.counter) - c.tramp.excl.get(c.tramp.counter)
	}
	return n
}

// DepthMissed returns, for a return probe, the calls whose return was
// not observed because the thread already had trampoline.MaxDepth returns
// armed (0 for an entry probe).
func (c *siteCounter) DepthMissed() uint64 {
	if c.tramp == nil || c.shared || !c.ret {
		return 0
	}
	return c.tramp.view.Counter(c.tramp.missCounter)
}

// Dropped returns the events of the site that were dropped (0 for a
// return probe: return events go to the shared ring, whose drops are
// counted in Stats.DroppedEvents only).
func (c *siteCounter) Dropped() uint64 {
	if c.tramp == nil || c.shared || c.ret {
		return 0
	}
	return c.tramp.view.DroppedBy(c.tramp.counter)
}

// module is one file mapped executable in a target, at one load bias.
type module struct {
	fi       *fileInfo
	key      string
	bias     uint64
	main     bool
	resolved map[int]bool // probe IDs already resolved here
	// rendezvous is set once the internal probe of the dynamic linker
	// was looked for in this module; unwind once its unwinder entries
	// were (see addUnwinders).
	rendezvous, unwind bool
}

// liveSite is an installed site of a target (control side, under
// Tracer.mu).
type liveSite struct {
	addr       uint64
	ps         *plannedSite
	mod        *module
	refs       []ref
	rendezvous bool
	// unhijack and rehijack mark the internal sites at the unwinder's
	// entries that keep return probes out of the unwinder's way (see
	// addUnwinders): trampolines only.
	unhijack, rehijack bool
	// sema is the run-time address of the USDT semaphore this site
	// incremented, 0 if none.
	sema uint64
	// boost is the relocated copy of an XOL instruction that runs in a
	// slot without a second trap, nil when it is stepped in place.
	boost *xol.X86Copy
	// tramp is the site's trampoline, nil for a site served by traps;
	// trampErr why a site the plan gave one has none.
	tramp    *siteTramp
	trampErr error
}

// trap returns the site's original bytes that the breakpoint replaces.
func (ps *plannedSite) trap() trapBytes { return trapBytes(ps.code[:len(trapInsn)]) }

// bytes returns a copy of b: a patch's bytes are its own (a batch may
// write into them), never the engine's breakpoint or a plan's code.
func (b trapBytes) bytes() []byte { return append([]byte(nil), b[:]...) }

// installPatch and removePatch are the batch patches that put the site in
// and take it out: a breakpoint (int3, brk), or the jump to the trampoline.
func (s *liveSite) installPatch() batchpatch.Patch {
	if s.tramp != nil {
		return s.tramp.install()
	}
	return batchpatch.Patch{Addr: s.addr, Old: s.ps.trap().bytes(), New: trapInsn.bytes()}
}

func (s *liveSite) removePatch() batchpatch.Patch {
	if s.tramp != nil {
		return s.tramp.remove()
	}
	return batchpatch.Patch{Addr: s.addr, Old: trapInsn.bytes(), New: s.ps.trap().bytes()}
}

// target is one traced address space: a process and its threads.
type target struct {
	t   *Tracer
	p   *proc.Process
	pid int
	xol xolExecutor

	// Read by the hit path.
	tab   atomic.Pointer[table]
	mem   atomic.Pointer[os.File] // /proc/PID/mem of the current image
	snap  atomic.Pointer[mapSnap]
	multi atomic.Bool
	// rdebug is the address of the dynamic linker's r_debug, 0 if unknown
	// (see startup_linux.go).
	rdebug atomic.Uint64

	// Under Tracer.mu.
	modules map[string]*module
	sites   map[uint64]*liveSite
	retired map[uint64]trapBytes
	mapsKey string
	exe     string
	closed  bool
	// execs is the number of execs (proc.World.Execs) of the image the
	// state above describes.
	execs int
	// areas are the slot areas of boosted copies (see slot_linux.go).
	areas []*slotArea
	// ts is the trampoline machinery, nil until the first trampoline
	// (see tramp_linux.go); retiredTramps the removal patches of
	// the trampolines removed, for the children forked before.
	ts            *trampState
	retiredTramps map[uint64]batchpatch.Patch
	// ring is the current image's event reader, and live its trampoline
	// machinery, for the exit handler (which runs on the tracer thread
	// and takes no lock).
	ring atomic.Pointer[ringReader]
	live atomic.Pointer[trampState]
	// vforks are the vforks in progress, by the thread that vforked
	// (under vforkMu: see onVfork).
	vforkMu sync.Mutex
	vforks  map[int]vforkStart

	// bounded asks commit to stage its batch in staged instead of
	// writing it, for runPasses (see passes_linux.go); passing is
	// set while those passes run, the lock released between them.
	bounded bool
	staged  *staged
	passing bool
	// removing holds the sites a bounded batch removes whose pass has
	// not landed yet: a child forked meanwhile does not inherit them.
	removing map[uint64]bool
	// slots holds the code of the new slots a bounded batch staged,
	// written after its staging stop (writeSlot); textPages the pages of
	// text read during a commit (readText), nil outside one.
	slots     []slotWrite
	textPages map[uint64][]byte
	// guard is the guardian of an attached process (guard_linux.go),
	// nil without one; guarded the ranges recorded in its log.
	guard   *guardian.Guard
	guarded map[guardKey]bool
	tguard  trapGuard // the SIGTRAP handler of trap stops left uncollected (guard_linux.go)
	// areasFreed counts the areas unmapped (an earlier tracer's when
	// attached, all at Detach), areasKept says why the last look kept
	// them (areas_linux_amd64.go).
	areasFreed int
	areasKept  string
	// verifyBuf is the buffer of the comparisons of the sites' bytes
	// (verify_linux.go).
	verifyBuf []byte

	hmu  sync.Mutex
	held []held
	wake chan struct{}
	gone chan struct{} // closed when the target ends
}

func newTarget(t *Tracer, p *proc.Process) (*target, error) {
	tg := &target{
		t: t, p: p, pid: p.Pid(), xol: inPlace{}, execs: p.Execs(),
		modules: map[string]*module{}, sites: map[uint64]*liveSite{}, retired: map[uint64]trapBytes{},
		wake: make(chan struct{}, 1), gone: make(chan struct{}),
	}
	tg.xol = inPlace{served: tg.stepServed}
	tg.tab.Store(emptyTable)
	if err := tg.openMem(); err != nil {
		return nil, err
	}
	if tids, err := p.Threads(); err == nil && len(tids) > 1 {
		tg.multi.Store(true)
	}
	tg.refreshSnap()
	return tg, nil
}

// openMem opens /proc/PID/mem for the hit path's checks, closing the
// former one.
func (tg *target) openMem() error {
	f, err := os.Open("/proc/" + strconv.Itoa(tg.pid) + "/mem")
	if err != nil {
		return fmt.Errorf("open memory of %d: %w", tg.pid, err)
	}
	if old := tg.mem.Swap(f); old != nil {
		old.Close()
	}
	return nil
}

// liveProbes returns the probes in force.
func (t *Tracer) liveProbes() []*probeState {
	var out []*probeState
	for _, p := range t.probes {
		if !p.removed {
			out = append(out, p)
		}
	}
	return out
}

// sync brings the target's state up to the process's current image: after
// an exec (which the event loop may learn of only later) the sites, the
// modules and the memory descriptor of the former image are dropped. The
// world is stopped. It reports whether the image changed.
func (tg *target) sync(w *proc.World) bool {
	if w.Execs() == tg.execs {
		return false
	}
	tg.execs = w.Execs()
	tg.resetGuard()
	for _, s := range tg.sites {
		tg.forget(s)
	}
	tg.sites, tg.retired, tg.modules = map[uint64]*liveSite{}, map[uint64]trapBytes{}, map[string]*module{}
	tg.exe, tg.mapsKey = "", ""
	tg.rdebug.Store(0)
	tg.areas = nil
	if tg.ts != nil && tg.ts.ring != nil {
		tg.ts.ring.drainFinal() // the former image's last events
	}
	tg.ts, tg.retiredTramps = nil, nil
	tg.live.Store(nil)
	tg.takeHeld()
	tg.multi.Store(false)
	_ = tg.openMem()
	tg.publish()
	return true
}

// rescanStopped finds the executable mappings that appeared or vanished,
// resolves the probes in force in the new ones, and installs their sites
// in one batch. The world is stopped.
func (tg *target) rescanStopped(w *proc.World) batchResult {
	var res batchResult
	tg.sync(w)
	tg.armTrapGuard(w)
	tg.verifyStopped(w)
	maps, err := w.Maps()
	if err != nil {
		res.errs = append(res.errs, err)
		return res
	}
	sort.Slice(maps, func(i, j int) bool { return maps[i].Start < maps[j].Start })
	tg.snap.Store(&mapSnap{maps: maps, at: time.Now()})
	ems := execMappings(maps)
	tg.mapsKey = mappingsKey(ems)
	if tg.exe == "" {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(tg.pid) + "/exe"); err == nil {
			tg.exe = strings.TrimSuffix(exe, deletedSuffix)
		}
	}
	next := tg.cloneSites()
	seen := map[string]bool{}
	for _, m := range ems {
		fi, err := tg.t.files.open(tg.pid, m)
		if err != nil {
			continue // not an ELF file we can read: nothing to probe there
		}
		bias, err := loadBias(fi.f, m, pageSize)
		if err != nil {
			continue
		}
		key := fmt.Sprintf("%s:%d:%x", m.dev, m.inode, bias)
		seen[key] = true
		if tg.modules[key] == nil {
			tg.modules[key] = &module{fi: fi, key: key, bias: bias, main: m.path == tg.exe, resolved: map[int]bool{}}
		}
	}
	for key, mod := range tg.modules {
		if seen[key] {
			continue
		}
		// Unmapped: its sites went with its memory.
		for addr, s := range next {
			if s.mod == mod {
				delete(next, addr)
				tg.forget(s)
			}
		}
		delete(tg.modules, key)
	}
	tg.resolveAll(next, tg.t.liveProbes(), &res)
	tg.commit(w, next, &res)
	return res
}

// resolveAll resolves every probe not yet resolved in every module into
// next.
func (tg *target) resolveAll(next map[uint64]*liveSite, probes []*probeState, res *batchResult) {
	keys := make([]string, 0, len(tg.modules))
	for k := range tg.modules {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		mod := tg.modules[k]
		if !mod.rendezvous {
			mod.rendezvous = true
			tg.addRendezvous(next, mod)
		}
		if !mod.unwind && tg.t.hasReturnProbes() && tg.t.wantTrampolines() {
			mod.unwind = true
			tg.addUnwinders(next, mod)
		}
		for _, p := range probes {
			if mod.resolved[p.ID] {
				continue
			}
			mod.resolved[p.ID] = true
			tg.resolve(next, mod, p, res)
		}
	}
}

// isDynamicLinker reports whether a module is the program interpreter.
func (tg *target) isDynamicLinker(mod *module) bool {
	for _, m := range tg.modules {
		if m.main && m.fi.f.Interp != "" {
			return elfscan.SamePath(m.fi.f.Interp, mod.fi.path) || filepath.Base(m.fi.f.Interp) == filepath.Base(mod.fi.path)
		}
	}
	base := filepath.Base(mod.fi.path)
	return strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld-musl")
}

// addRendezvous adds the internal probe on the dynamic linker's
// rendezvous function, when mod is the dynamic linker and the plan accepts
// the site.
func (tg *target) addRendezvous(next map[uint64]*liveSite, mod *module) {
	if !tg.isDynamicLinker(mod) {
		return
	}
	ps := internalPlan(mod, rendezvousSymbol, func(s *elfscan.Site) (*plannedSite, error) { return mod.fi.plan(s, tg.t.vendor) })
	if ps == nil || ps.decision.Strategy == plan.Reject {
		return
	}
	siteFor(next, ps, mod).rendezvous = true
	if a, ok := mod.fi.f.ObjectAddr(rdebugSymbol); ok {
		tg.rdebug.Store(a + mod.bias)
	}
}

// internalPlan resolves function name in mod, for an internal probe, and
// plans its entry with planFn; nil when name is not one function of mod or
// the plan fails.
func internalPlan(mod *module, name string, planFn func(*elfscan.Site) (*plannedSite, error)) *plannedSite {
	sp := spec{text: name, es: elfscan.Spec{Text: name, Kind: elfscan.SpecFunc, Symbol: name}}
	sites, err := mod.fi.resolve(&sp)
	if err != nil || len(sites) != 1 {
		return nil
	}
	ps, err := planFn(&sites[0])
	if err != nil {
		return nil
	}
	return ps
}

// siteFor returns the site of next at ps's address in mod, adding it when
// it is not there.
func siteFor(next map[uint64]*liveSite, ps *plannedSite, mod *module) *liveSite {
	addr := ps.vaddr + mod.bias
	s := next[addr]
	if s == nil {
		s = &liveSite{addr: addr, ps: ps, mod: mod}
		next[addr] = s
	}
	return s
}

// Unwinder entries. A return probe replaces the return address of the
// probed frame by the return trampoline's, which has no unwind
// information: an unwinder walking the stack (a C++ exception, thread
// cancellation, a backtrace) could not cross it. While return probes are in
// force, the entries of the unwinder functions get trampolines that put the
// original return addresses back (Unhijack), and the entry of
// __cxa_begin_catch, which every catch block calls once unwinding is over,
// one that arms again the return probes of the frames still live
// (Rehijack).
var (
	unhijackSymbols = []string{"_Unwind_RaiseException", "_Unwind_Resume", "_Unwind_Resume_or_Rethrow", "_Unwind_ForcedUnwind", "_Unwind_Backtrace"}
	rehijackSymbols = []string{"__cxa_begin_catch"}
)

// hasReturnProbes reports whether a return probe is in force (under
// Tracer.mu).
func (t *Tracer) hasReturnProbes() bool {
	for _, p := range t.probes {
		if p.sp.ret && !p.removed {
			return true
		}
	}
	return false
}

// addUnwinders adds the internal unwinder sites mod defines to next.
func (tg *target) addUnwinders(next map[uint64]*liveSite, mod *module) {
	for _, names := range [][]string{unhijackSymbols, rehijackSymbols} {
		for _, name := range names {
			ps := internalPlan(mod, name, func(s *elfscan.Site) (*plannedSite, error) { return mod.fi.planUnwinder(s, tg.t.vendor) })
			if ps == nil || ps.tramp == nil {
				continue
			}
			s := siteFor(next, ps, mod)
			if names[0] == unhijackSymbols[0] {
				s.unhijack = true
			} else {
				s.rehijack = true
			}
		}
	}
}

// resolve adds the sites probe p names in mod to next, and records the
// refusals.
func (tg *target) resolve(next map[uint64]*liveSite, mod *module, p *probeState, res *batchResult) {
	if p.internal || !p.sp.matchesModule(mod.fi.path, mod.main) {
		return
	}
	sites, err := mod.fi.resolve(&p.sp)
	if err != nil {
		var nse *elfscan.NoSymbolError
		switch {
		case errors.As(err, &nse):
			if mod.main && len(nse.Suggestions) > 0 {
				p.suggest = nse.Suggestions
			}
			// A module named by the spec (or the executable) that holds
			// nothing it names. A USDT spec without a module applies to
			// every module, and a glob of modules to those mapped later
			// too: they stay pending.
			if (p.sp.module != "" && !strings.ContainsAny(p.sp.module, "*?[")) || (mod.main && p.sp.module == "" && p.sp.es.Kind != elfscan.SpecUSDT) {
				if p.notFound == nil {
					p.notFound = map[string]*elfscan.NoSymbolError{}
				}
				p.notFound[mod.fi.path] = nse
			}
		default:
			res.specErr(p, fmt.Errorf("%s: %w", mod.fi.path, err))
		}
		return
	}
	for i := range sites {
		s := &sites[i]
		res.matched(p)
		if !p.sp.ret {
			tg.addSite(next, res, p, mod, s, false)
			continue
		}
		rets, jumps, ok := mod.fi.goReturns(s, tg.t.vendor)
		if !ok {
			tg.addSite(next, res, p, mod, s, false)
			continue
		}
		for k := range rets {
			tg.addSite(next, res, p, mod, &rets[k], true)
		}
		for _, j := range jumps {
			at := elfscan.Site{Kind: elfscan.SiteInst, Addr: j.Addr, Func: s.Func}
			res.refuse(p, RejectedError{Spec: p.Spec, Module: mod.fi.path, Symbol: siteSymbol(&at), Addr: j.Addr, Reason: ReasonReturnByJump,
				Detail: fmt.Sprintf("%s leaves here by a jump to %#x: a return probe on a Go function counts its return instructions, and the returns after this jump are not counted", s.Func.Name, j.Target)})
		}
	}
}

// addSite adds probe p at site s of mod to next, or records why it
// cannot be (res). atRet marks a return instruction of a Go function
// standing for its return probe (goReturns).
func (tg *target) addSite(next map[uint64]*liveSite, res *batchResult, p *probeState, mod *module, s *elfscan.Site, atRet bool) {
	rej := RejectedError{Spec: p.Spec, Module: mod.fi.path, Symbol: siteSymbol(s), Addr: s.Addr}
	if s.OffsetErr != nil {
		rej.Reason, rej.Detail = plan.ReasonNoFunction, s.OffsetErr.Error()
		res.refuse(p, rej)
		return
	}
	ps, err := mod.fi.plan(s, tg.t.vendor)
	if err != nil {
		rej.Reason, rej.Detail = plan.ReasonUndecodable, err.Error()
		res.refuse(p, rej)
		return
	}
	if ps.decision.Strategy == plan.Reject && (ps.tramp == nil || !tg.t.wantTrampolines()) {
		rej.Reason, rej.Detail = ps.decision.Reason, ps.decision.Detail
		if why, ok := kernelInt3InView(mod, ps); ok {
			rej.Reason, rej.Detail = ReasonKernelUprobe, why
		}
		res.refuse(p, rej)
		return
	}
	ls := siteFor(next, ps, mod)
	if ls.hasProbe(p) {
		return
	}
	c := &siteCounter{pid: tg.pid, module: mod.fi.path, symbol: ps.symbol, vaddr: ps.vaddr, addr: ls.addr, decision: ps.decision, atRet: atRet}
	ls.refs = append(ls.refs, ref{p: p, c: c})
}

func (s *liveSite) hasProbe(p *probeState) bool {
	for _, r := range s.refs {
		if r.p == p {
			return true
		}
	}
	return false
}

// cloneSites copies the installed sites so that a batch can be staged.
func (tg *target) cloneSites() map[uint64]*liveSite {
	next := make(map[uint64]*liveSite, len(tg.sites))
	for a, s := range tg.sites {
		c := *s
		c.refs = append([]ref(nil), s.refs...)
		next[a] = &c
	}
	return next
}

// batchResult collects what a batch did, per probe.
type batchResult struct {
	matches  map[*probeState]int
	refused  map[*probeState][]RejectedError
	specErrs map[*probeState][]error
	errs     []error
}

func (r *batchResult) matched(p *probeState) {
	if r.matches == nil {
		r.matches = map[*probeState]int{}
	}
	r.matches[p]++
}

func (r *batchResult) refuse(p *probeState, e RejectedError) {
	if r.refused == nil {
		r.refused = map[*probeState][]RejectedError{}
	}
	r.refused[p] = append(r.refused[p], e)
}

func (r *batchResult) specErr(p *probeState, err error) {
	if r.specErrs == nil {
		r.specErrs = map[*probeState][]error{}
	}
	r.specErrs[p] = append(r.specErrs[p], err)
}

// forget marks the counters of a site that is gone.
func (tg *target) forget(s *liveSite) {
	for _, r := range s.refs {
		r.c.live.Store(false)
	}
}

// retire records a removed site: its original bytes under the breakpoint for trap sites (the hit
// path recognizes a trap that was already on its way), its removal patch
// for trampolines (children forked before still hold the jump).
func (tg *target) retire(s *liveSite) {
	if s.tramp != nil {
		if tg.retiredTramps == nil {
			tg.retiredTramps = map[uint64]batchpatch.Patch{}
		}
		tg.retiredTramps[s.addr] = s.removePatch()
		return
	}
	tg.retired[s.addr] = s.ps.trap()
}

// span is the replaced bytes [lo, hi) of the trampoline of site s.
type span struct {
	lo, hi uint64
	s      *liveSite
}

// spans are the spans of the trampolines of a set of sites, sorted (they
// never overlap).
type spans []span

func trampolineSpans(sites map[uint64]*liveSite) spans {
	var sp spans
	for _, s := range sites {
		if s.tramp != nil {
			lo, hi := s.tramp.span()
			sp = append(sp, span{lo, hi, s})
		}
	}
	slices.SortFunc(sp, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	return sp
}

// site returns the site of another address whose trampoline replaced the
// bytes at addr, nil if none.
func (sp spans) site(addr uint64) *liveSite {
	i := sort.Search(len(sp), func(i int) bool { return sp[i].lo > addr }) - 1
	if i >= 0 && addr < sp[i].hi && sp[i].s.addr != addr {
		return sp[i].s
	}
	return nil
}

// lost drops a site whose int3 could not be written back after a step.
func (tg *target) lost(addr uint64) {
	if s := tg.sites[addr]; s != nil {
		delete(tg.sites, addr)
		tg.retired[addr] = s.ps.trap()
		tg.forget(s)
		tg.publish()
	}
}

// publish replaces the hit path's table with one built from the installed
// sites.
func (tg *target) publish() {
	tab := &table{entries: make(map[uint64]*entry, len(tg.sites)), retired: make(map[uint64]trapBytes, len(tg.retired))}
	for a, b := range tg.retired {
		tab.retired[a] = b
	}
	for addr, s := range tg.sites {
		if s.tramp != nil {
			continue // no trap there
		}
		tab.entries[addr] = &entry{
			addr:       addr,
			inst:       &s.ps.inst,
			arm:        &s.ps.arm,
			emulate:    s.ps.decision.Strategy == plan.Emulate,
			boost:      s.boost,
			refs:       append([]ref(nil), s.refs...),
			rendezvous: s.rendezvous,
			goABI:      s.ps.goABI,
			goG:        s.ps.goG,
		}
		delete(tab.retired, addr)
	}
	tg.tab.Store(tab)
	if tg.ts != nil && tg.ts.ring != nil {
		tg.ts.ring.setSites(tg.sites)
	}
}

// semaphore adds delta to the USDT semaphore of a site (the 16-bit counter
// that <sys/sdt.h> code tests before it evaluates a probe's arguments), as
// the kernel does for its own USDT probes.
func (tg *target) semaphore(w *proc.World, s *liveSite, delta int) {
	switch {
	case s.ps.semaphore == 0:
		return
	case delta > 0:
		s.sema = s.ps.semaphore + s.mod.bias
	case s.sema == 0:
		return
	}
	var b [2]byte
	if err := w.ReadMemory(s.sema, b[:]); err != nil {
		return
	}
	v := uint16(b[0]) | uint16(b[1])<<8
	if delta < 0 && v == 0 {
		return
	}
	v = uint16(int(v) + delta)
	_ = w.WriteMemory(s.sema, []byte{byte(v), byte(v >> 8)})
}
