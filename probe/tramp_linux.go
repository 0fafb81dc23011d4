//go:build linux && (amd64 || arm64)

package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/hostcpu"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// Trampolines: a site the plan lets take one is rewritten into a jump to
// a slot of its own (package trampoline) that counts the hit in a shared
// data area, runs the instructions the jump displaced and jumps back. No
// trap, no tracer on the hit path: the count is a lock inc in memory the
// tracer reads.
//
// Per target the engine maps, on the first trampoline:
//
//   - the data area: a memfd of the counters (and, with Options.Events, the
//     event ring, see ring_linux.go), mapped shared in the tracee and in the tracer. The
//     tracee's descriptor is closed again at once: the mapping keeps the
//     file alive, and the program sees no new descriptor. A memfd can be
//     opened through /proc/PID/fd only by a process allowed to trace the
//     tracee.
//   - slot areas, read-execute and never writable in the tracee, each
//     within reach of a rel32 from the sites it serves; code is written
//     through /proc/PID/mem.
//
// Slot areas and the data area stay mapped after a site is removed: a
// thread preempted inside a slot returns there. A clean Detach unmaps them
// when no thread can be in them any more, and a later attach those an
// earlier tracer left (areas_linux_amd64.go). A site
// whose trampoline cannot be made (no room within reach, a conflict with
// another site) falls back to its trap strategy.

const (
	// trampCounters is the capacity of a target's counters: three per
	// site (entries, returns, returns not armed), for 349,525 sites, far
	// more than the functions of the largest programs (libjvm.so has
	// 43,676, node 78,000). The words take 8 MiB of address space in the
	// tracee and the tracer, and memory only as sites use them (the memfd
	// is zero-filled on demand). A site beyond them takes traps, and
	// SiteStats.Fallback says so.
	trampCounters = 1 << 20
	// trampSiteCounters is the number of counters each site owns.
	trampSiteCounters = 3
	// trampRing is the number of event records of a target's ring.
	trampRing = 1 << 14
	// trampAreaSize is the size of one slot area.
	trampAreaSize = 1 << 20
	// trampThreads is the number of thread slots of the return probes'
	// thread table.
	trampThreads = 4096
	// trampStripes is the number of per-thread stripes of the data area
	// (trampoline.Data.SetThreads): threads beyond count in the shared
	// words, exactly, with a locked increment.
	trampStripes = 128
	// trampStripeCounters is the number of counters each stripe holds:
	// the first trampStripeCounters/2 sites count per thread.
	trampStripeCounters = 1024
	// trampThreadRings bounds the memory of the per-thread rings of a
	// target, in bytes: with large rings there are fewer stripes.
	trampThreadRings = 1 << 30
)

// trampState is the trampoline machinery of one target.
type trampState struct {
	data  *trampoline.Data
	mem   []byte // the tracer's mapping of the data area
	view  *trampoline.View
	cfg   *trampoline.Config
	areas []*trampoline.Area
	next  int // the next unused counter
	// ring reads the event records (Options.Events), nil without events.
	ring *ringReader
	// tidOff is the offset of the thread id from the thread pointer in
	// the C library's thread control block, -1 if unknown (see
	// learnTidOffset); it tells which stripe an exiting thread holds.
	tidOff int
	// drops holds, per thread id, the events the threads whose stripes
	// were retired dropped (under dropsMu).
	dropsMu sync.Mutex
	drops   map[int]uint64
	// excl are the counts of vfork children (see onVfork).
	excl excluded
}

// siteTramp is the trampoline of one installed site.
type siteTramp struct {
	tr   *trampoline.Trampoline
	view *trampoline.View
	excl *excluded // the view's counts that are vfork children's
	// counter counts the entries, retCounter the returns (once ret is set:
	// the return probe is armed), missCounter the calls whose return
	// could not be armed (the thread had trampoline.MaxDepth armed).
	counter, retCounter, missCounter int
	// entry and ret say which handlers the slot has: the entry counter
	// (and event), the return probe.
	entry, ret bool
	// retarget marks a trampoline that replaces another at the same site:
	// its install patch moves the jump.
	retarget bool
	// calls and retCalls are the code addresses of the BPF programs the
	// slot runs at the entry and at the return.
	calls, retCalls []trampoline.Call
}

// install and remove are the batch patches of a trampoline.
func (st *siteTramp) install() batchpatch.Patch {
	p := st.tr.Install
	return batchpatch.Patch{Addr: p.Addr, Old: p.Old, New: p.New}
}

func (st *siteTramp) remove() batchpatch.Patch {
	p := st.tr.Remove
	bp := batchpatch.Patch{Addr: p.Addr, Old: p.Old, New: p.New}
	for _, g := range p.Guard {
		bp.Guard = append(bp.Guard, batchpatch.Range{Start: g.Start, End: g.End})
	}
	return bp
}

// span returns the replaced bytes [start, end).
func (st *siteTramp) span() (uint64, uint64) {
	return st.tr.Install.Addr, st.tr.Install.Addr + uint64(len(st.tr.Install.New))
}

// wantTrampolines reports whether sites may take trampolines.
func (t *Tracer) wantTrampolines() bool {
	return archTrampolines && (archTrampEvents || !t.opts.Events) && !t.opts.NoTrampolines && !t.opts.StepOnly
}

// trampolines returns the target's trampoline state, mapping the data
// area on first use (near reach, the addresses of the first site). The
// world is stopped.
func (tg *target) trampolines(w *proc.World, reach []uint64) (*trampState, error) {
	if tg.ts != nil {
		return tg.ts, nil
	}
	feats := trampoline.HostFeatures()
	ring := 0
	if tg.t.opts.Events {
		ring = trampRing
	}
	data, err := trampoline.NewData(0, trampCounters, ring)
	if err != nil {
		return nil, err
	}
	threadRing := 0
	if tg.t.opts.Events {
		threadRing = tg.t.opts.RingSize
	}
	// The data area must lie within reach of the sites: large rings
	// leave fewer stripes (the other threads count in the shared words).
	stripes := tg.t.threadStripes()
	if err := data.SetThreads(stripes, trampStripeCounters, threadRing); err != nil {
		return nil, fmt.Errorf("ring size: %w", err)
	}
	fd, mem, err := dataMemfd(w, tg.pid, data.Size())
	if err != nil {
		return nil, err
	}
	// The area goes where Place puts slot areas, not where mmap would
	// (the top of the mmap region): the program's own later mappings
	// then get the addresses they would get untraced, and a program
	// whose behaviour depends on addresses behaves the same.
	addr, err := tg.placeMappingWithin(w, reach, archDataReach, data.Size(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED, fd)
	_, _ = w.Syscall(unix.SYS_CLOSE, uint64(fd))
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, err
	}
	data.Addr = addr
	if err := data.Init(mem); err != nil {
		_ = unix.Munmap(mem)
		_ = w.Munmap(addr, data.Size())
		return nil, err
	}
	view, err := trampoline.NewView(mem)
	if err != nil {
		_ = unix.Munmap(mem)
		_ = w.Munmap(addr, data.Size())
		return nil, err
	}
	tg.ts = &trampState{data: data, mem: mem, view: view,
		cfg:    &trampoline.Config{Data: data, ThreadPointer: threadPointer(feats, tg.mainModule()), Flags: feats.Flags(), ReturnCalls: tg.t.bpfLoaded},
		tidOff: learnTidOffset(w), drops: map[int]uint64{}}
	if tg.t.opts.Events {
		tg.ts.ring = tg.newRingReader(w, view)
		tg.ring.Store(tg.ts.ring)
	}
	tg.live.Store(tg.ts)
	return tg.ts, nil
}

// dataMemfd creates the memfd of a data area of size bytes in process
// pid (the world w) and maps it in the tracer. It returns the descriptor
// in the tracee, for the caller to map and close.
func dataMemfd(w *proc.World, pid int, size uint64) (int, []byte, error) {
	fd, err := w.MemfdCreate("probeopt-data", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, nil, err
	}
	closeFd := func() { _, _ = w.Syscall(unix.SYS_CLOSE, uint64(fd)) }
	// A memfd is created with mode 0777; nobody but the owner needs it
	// (reaching it takes the right to trace the process anyway).
	if _, err := w.Syscall(unix.SYS_FCHMOD, uint64(fd), 0o600); err != nil {
		closeFd()
		return 0, nil, err
	}
	if _, err := w.Syscall(unix.SYS_FTRUNCATE, uint64(fd), size); err != nil {
		closeFd()
		return 0, nil, err
	}
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/fd/"+strconv.Itoa(fd), os.O_RDWR, 0)
	if err != nil {
		closeFd()
		return 0, nil, fmt.Errorf("open the data area: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		closeFd()
		return 0, nil, fmt.Errorf("map the data area: %w", err)
	}
	return fd, mem, nil
}

// forkTrampolines gives a followed child forked from a parent with
// trampolines (the world w, process pid, stopped before it ran) a data
// area of its own: a new memfd mapped over the one it inherited, at the
// same address, so that the slots it inherited count its hits and record
// its events there, apart from the parent's. Its slot areas and thread
// table are private copies already; the counters start at zero.
func forkTrampolines(w *proc.World, pid int, parent *trampState) (*trampState, error) {
	data := *parent.data
	fd, mem, err := dataMemfd(w, pid, data.Size())
	if err != nil {
		return nil, err
	}
	got, err := w.Mmap(data.Addr, data.Size(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED, fd, 0)
	_, _ = w.Syscall(unix.SYS_CLOSE, uint64(fd))
	if err == nil && got != data.Addr {
		err = fmt.Errorf("the data area mapped at %#x, not at %#x", got, data.Addr)
	}
	if err == nil {
		err = data.Init(mem)
	}
	var view *trampoline.View
	if err == nil {
		view, err = trampoline.NewView(mem)
	}
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, err
	}
	cfg := *parent.cfg
	cfg.Data = &data
	ts := &trampState{data: &data, mem: mem, view: view, cfg: &cfg, next: parent.next, tidOff: parent.tidOff, drops: map[int]uint64{}}
	for _, a := range parent.areas {
		c := *a
		ts.areas = append(ts.areas, &c)
	}
	return ts, nil
}

// trampArea returns a slot area every address of reach can reach with
// room for a slot, mapping a new one when none has.
func (tg *target) trampArea(w *proc.World, ts *trampState, reach []uint64) (*trampoline.Area, error) {
	for _, a := range ts.areas {
		if a.Used()+4096 <= a.Size && areaReaches(a.Addr, a.Addr+a.Size, reach) {
			return a, nil
		}
	}
	at, err := tg.placeMapping(w, reach, trampAreaSize, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1)
	if err != nil {
		return nil, err
	}
	// A header page first (areas_linux_amd64.go), then the slots.
	if err := writeAreaHeader(w, at, trampAreaSize, areaSlots, os.Getpid(), nil); err != nil {
		_ = w.Munmap(at, trampAreaSize)
		return nil, err
	}
	a, err := trampoline.NewArea(at+areaHeaderSize, trampAreaSize-areaHeaderSize)
	if err != nil {
		return nil, err
	}
	ts.areas = append(ts.areas, a)
	return a, nil
}

// placeMapping maps size bytes in the tracee at an address that every
// address of reach can reach with a jump to a slot (archReach), and
// returns it.
func (tg *target) placeMapping(w *proc.World, reach []uint64, size uint64, prot, flags, fd int) (uint64, error) {
	return tg.placeMappingWithin(w, reach, archReach, size, prot, flags, fd)
}

// placeMappingWithin is placeMapping no farther than far bytes from every
// address of reach (archDataReach for the data area).
func (tg *target) placeMappingWithin(w *proc.World, reach []uint64, far, size uint64, prot, flags, fd int) (uint64, error) {
	maps, err := w.Maps()
	if err != nil {
		return 0, err
	}
	tm := make([]trampoline.Mapping, 0, len(maps))
	for _, m := range maps {
		tm = append(tm, trampoline.Mapping{Start: m.Start, End: m.End, Path: m.Path})
	}
	// Prefer the far end of the reach, below the sites: the kernel gives
	// the program's own mappings the highest free addresses below the
	// mmap base, so an area placed far below them leaves every later
	// mapping of the program where it would be untraced (a program whose
	// behaviour depends on addresses, as a hash table keyed by them,
	// behaves the same).
	lo := uint64(1 << 16)
	if m := slices.Max(reach); m > far+lo {
		lo = m - far
	}
	at, err := trampoline.Place(tm, reach, size, &trampoline.PlaceOptions{Low: lo, High: lo + 1<<30, Reach: far})
	if err != nil {
		if at, err = trampoline.Place(tm, reach, size, &trampoline.PlaceOptions{Reach: far}); err != nil {
			return 0, err
		}
	}
	got, err := w.Mmap(at, size, prot, flags|unix.MAP_FIXED_NOREPLACE, fd, 0)
	if err != nil {
		return 0, err
	}
	if got != at {
		_ = w.Munmap(got, size)
		return 0, fmt.Errorf("mapped at %#x, not at %#x", got, at)
	}
	return at, nil
}

// areaReaches reports whether every byte of [lo, hi) lies within the
// reach of a jump to a slot (archReach) from every address of addrs.
func areaReaches(lo, hi uint64, addrs []uint64) bool {
	for _, x := range addrs {
		if x > lo && x-lo > archReach || hi > x && hi-x > archReach {
			return false
		}
	}
	return true
}

// buildTrampoline makes the trampoline of a site: it analyzes the site at
// its run-time address, generates the slot, writes it and sets s.tramp.
// The handler counts the hits (and records events with Options.Events),
// and arms the return probe when a return probe names the site. A site
// that had a trampoline keeps its counters. The world is stopped; nothing
// is patched yet.
func (tg *target) buildTrampoline(w *proc.World, s *liveSite) error {
	site, err := tg.analyzeTramp(s)
	if err != nil {
		return err
	}
	ts, err := tg.trampolines(w, site.reach())
	if err != nil {
		return err
	}
	if ts.next+trampSiteCounters > trampCounters {
		return fmt.Errorf("no counter left in the data area (%d counters, %d a site)", trampCounters, trampSiteCounters)
	}
	if s.hasPrograms() {
		if err := tg.checkPrograms(w, s); err != nil {
			return err
		}
	}
	// The bytes the jump replaces must be the file's.
	patchAddr, want := site.replaced()
	cur := make([]byte, len(want))
	if err := tg.readText(w, patchAddr, cur); err != nil {
		return err
	}
	old := s.tramp
	if old == nil && string(cur) != string(want) {
		if why, ok := tg.heldByKernel(w, s, patchAddr, cur, want); ok {
			return errors.New(why)
		}
		return fmt.Errorf("memory holds %x at %#x, the file %x", cur, patchAddr, want)
	}
	a, err := tg.trampArea(w, ts, site.reach())
	if err != nil {
		return err
	}
	// Each site owns three counters from its first trampoline on
	// (entries, returns, returns not armed); a trampoline that replaces
	// it keeps them.
	st := &siteTramp{view: ts.view, excl: &ts.excl, counter: ts.next, retCounter: ts.next + 1, missCounter: ts.next + 2}
	if old != nil {
		st.counter, st.retCounter, st.missCounter = old.counter, old.retCounter, old.missCounter
	}
	// The entry is counted (and recorded) only for entry probes: a site
	// with return probes alone saves the locked increment on every call.
	events, entry := tg.t.opts.Events, s.wantsEntry()
	h := trampoline.Handler{ID: uint32(st.counter), Count: entry, Counter: st.counter, Event: events && entry, ArgRegs: s.argRegs()}
	if h.Event {
		h.Go = s.ps.goG // the goroutine and its thread (gothread.go)
	}
	if s.unhijack || s.rehijack || s.wantsReturn() {
		if err := tg.returnSetup(w, ts, a); err != nil {
			return fmt.Errorf("return trampoline: %w", err)
		}
	}
	h.Unhijack, h.Rehijack = s.unhijack, s.rehijack
	h.Calls = s.calls(false)
	if s.wantsReturn() {
		h.Return = &trampoline.ReturnHandler{Count: true, Counter: st.retCounter, Event: events, Missed: true, MissCounter: st.missCounter,
			Calls: s.calls(true)}
	}
	tr, err := site.build(a, &h, ts.cfg)
	if err != nil {
		return err
	}
	if err := tg.writeSlot(w, tr.Slot, tr.Code); err != nil {
		return err
	}
	st.tr, st.ret, st.entry = tr, h.Return != nil, entry
	st.calls = h.Calls
	if h.Return != nil {
		st.retCalls = h.Return.Calls
	}
	if old != nil {
		// The jump moves from the old slot to the new one (threads in
		// the old slot finish there: it stays mapped).
		st.tr.Install.Old = old.tr.Install.New
		st.retarget = true
	}
	s.tramp = st
	if old == nil {
		ts.next += trampSiteCounters
	}
	return nil
}

// trampSite is a site analyzed for its trampoline: x86 for an x86-64
// site, arm for an arm64 one.
type trampSite struct {
	x86 *trampoline.Site
	arm *trampoline.SiteARM64
}

// analyzeTramp analyzes site s at its run-time address for its
// trampoline, on the engine's instruction set. An arm64 site is one word
// replaced by a b (trampoline.AnalyzeARM64): a bti at the address stays.
func (tg *target) analyzeTramp(s *liveSite) (trampSite, error) {
	if engineArch == decode.ARM64 {
		o := trampoline.SiteOptions{NopOnly: s.ps.tramp.Strategy == plan.TrampolineNop}
		site, err := trampoline.AnalyzeARM64(s.addr, s.ps.body, &o)
		return trampSite{arm: site}, err
	}
	site, err := tg.trampolineSite(s)
	return trampSite{x86: site}, err
}

// reach lists the addresses the site's slot and data area must reach.
func (ts trampSite) reach() []uint64 {
	if ts.arm != nil {
		return ts.arm.Reach()
	}
	return ts.x86.Reach()
}

// replaced returns where the jump goes and the file's bytes it replaces.
func (ts trampSite) replaced() (uint64, []byte) {
	if ts.arm != nil {
		return ts.arm.PatchAddr, binary.LittleEndian.AppendUint32(nil, ts.arm.Old)
	}
	return ts.x86.PatchAddr, ts.x86.Old
}

// build allocates the site's slot in area a and generates its code for
// handler h. On arm64 the counters are the data area's shared words,
// incremented with stadd where the CPU has the Large System Extension
// (the "atomics" feature), else with a ldxr/stxr loop; the slot treats the
// text as BTI-guarded (it never returns by br, and refuses a displaced
// blr), which is right whether or not it is.
func (ts trampSite) build(a *trampoline.Area, h *trampoline.Handler, cfg *trampoline.Config) (*trampoline.Trampoline, error) {
	if ts.arm != nil {
		return a.BuildARM64(ts.arm, h, cfg, &trampoline.ARM64Options{LSE: hostcpu.Host().HasFlag("atomics"), BTIGuarded: true})
	}
	return a.BuildX86(ts.x86, h, cfg)
}

// trampolineSite analyzes the x86-64 site s at its run-time address for its
// trampoline: the jump after the first instruction where the plan kept it
// (plan.Decision.Kept) and the slot needs no return address at the stack
// pointer, else at the address. A site that has a trampoline keeps the
// jump where it is: a new handler that cannot have it there is an error.
func (tg *target) trampolineSite(s *liveSite) (*trampoline.Site, error) {
	o := trampoline.SiteOptions{Vendor: tg.t.vendor, NopOnly: s.ps.tramp.Strategy == plan.TrampolineNop,
		KeepFirst: s.ps.tramp.Kept > 0, Args: tg.t.opts.Events && s.wantsEntry(), ArgRegs: s.argRegs(), Returns: s.wantsReturn() || s.unhijack || s.rehijack}
	if len(s.calls(false)) > 0 {
		// A program sees every register at the probe address: no
		// instruction runs before it.
		o.KeepFirst = false
	}
	site, err := trampoline.AnalyzeX86(s.addr, s.ps.body, &o)
	if err != nil || s.tramp == nil {
		return site, err
	}
	at := s.tramp.tr.Install.Addr
	if site.PatchAddr != at && o.KeepFirst {
		// Where the jump went without keeping the first instruction.
		o.KeepFirst = false
		if other, err := trampoline.AnalyzeX86(s.addr, s.ps.body, &o); err == nil && other.PatchAddr == at {
			site = other
		}
	}
	if site.PatchAddr != at {
		return nil, fmt.Errorf("the installed jump is at %#x and a slot with these handlers needs it at %#x "+
			"(the first instruction it leaves in place moves the stack pointer or writes memory); add the return probe with the entry probe", at, site.PatchAddr)
	}
	return site, nil
}

// returnSetup maps the thread table of the return probes (private to the
// process: a forked child gets its own copy, as it gets its own stacks)
// and writes the return trampoline into area a, once per target. The world
// is stopped.
func (tg *target) returnSetup(w *proc.World, ts *trampState, a *trampoline.Area) error {
	if ts.cfg.ReturnAddr != 0 {
		return nil
	}
	th, err := trampoline.NewThreads(0, trampThreads)
	if err != nil {
		return err
	}
	th.Depth = tg.t.opts.ReturnDepth
	addr, err := tg.placeMapping(w, []uint64{a.Addr}, areaHeaderSize+th.Size(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1)
	if err != nil {
		return err
	}
	th.Addr = addr + areaHeaderSize // after a header page (areas_linux_amd64.go)
	if err := writeAreaHeader(w, addr, areaHeaderSize+th.Size(), areaThreads, os.Getpid(), th); err != nil {
		_ = w.Munmap(addr, areaHeaderSize+th.Size())
		return err
	}
	ts.cfg.Threads = th
	at, code, err := a.ReturnX86(ts.cfg)
	if err != nil {
		ts.cfg.Threads = nil
		return err
	}
	if err := w.WriteMemory(at, code); err != nil {
		ts.cfg.Threads, ts.cfg.ReturnAddr = nil, 0
		return err
	}
	return nil
}

// argRegs are the registers the site's events record as arguments: Go's
// in a function of the Go function table.
func (s *liveSite) argRegs() trampoline.ArgRegs {
	if s.ps.goABI {
		return trampoline.GoArgs
	}
	return trampoline.SysVArgs
}

// threadPointer returns how the slots of a process whose executable is
// main read the thread pointer: as the features allow, except that a Go
// program without a dynamic linker has no thread control block for
// ThreadTCB to read (its %fs base is 0 until the runtime sets it, then
// points into the runtime's per-thread data, whose first word is 0): its
// slots read none, count in the shared words and record no thread.
func threadPointer(feats trampoline.Features, main *module) trampoline.ThreadPointer {
	tp := feats.ThreadPointer()
	if tp == trampoline.ThreadTCB && main != nil && main.fi.f.Interp == "" && main.fi.f.IsGo() {
		return trampoline.ThreadNone
	}
	return tp
}

// wantsEntry reports whether an entry probe names the site (or a return
// probe served at a return instruction, whose hits count as an entry's).
func (s *liveSite) wantsEntry() bool {
	for _, r := range s.refs {
		if !r.hijacks() && !r.p.removed {
			return true
		}
	}
	return false
}

// needsRebuild reports whether the installed trampoline lacks a handler
// the site's probes now need, or has one that no probe needs any more (a
// return probe removed while an entry probe stays would otherwise keep
// hijacking every return, uncounted).
func (s *liveSite) needsRebuild() bool {
	return s.tramp != nil && (s.wantsReturn() != s.tramp.ret || s.wantsEntry() != s.tramp.entry || !s.sameCalls())
}

// wantsReturn reports whether a return probe names the site.
func (s *liveSite) wantsReturn() bool {
	for _, r := range s.refs {
		if r.hijacks() && !r.p.removed {
			return true
		}
	}
	return false
}
