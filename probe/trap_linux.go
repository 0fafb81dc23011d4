//go:build linux && (amd64 || arm64)

package probe

import (
	"errors"
	"os"
	"sort"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/xol"
)

// entry is what the hit path knows of one installed site. Entries are
// immutable once published in a table.
type entry struct {
	addr       uint64
	inst       *decode.X86Inst
	arm        *decode.ARM64Inst
	emulate    bool
	boost      *xol.X86Copy
	refs       []ref
	rendezvous bool
	goABI      bool            // events carry Go's argument registers (plannedSite.goABI)
	goG        *trampoline.GoG // events carry the goroutine id (plannedSite.goG)
}

// table is the lookup of the hit path, replaced as a whole (never changed)
// when sites come and go.
type table struct {
	entries map[uint64]*entry
	// retired holds the first original byte of every site removed from
	// this address space: a thread that executed the int3 just before the
	// removal is sent back to run the original instruction.
	retired map[uint64]trapBytes
}

var emptyTable = &table{entries: map[uint64]*entry{}, retired: map[uint64]trapBytes{}}

// trap is the TrapHandler of a target. It runs on the ptrace thread and
// must not call Process methods (see proc.TrapHandler).
func (tg *target) trap(ctx *proc.TrapContext) proc.TrapAction {
	if ctx.Syscall != nil {
		return tg.watchedSyscall(ctx)
	}
	t := tg.t
	tab := tg.tab.Load()
	e := tab.entries[ctx.Addr]
	if e == nil {
		return tg.stray(ctx, tab)
	}
	if e.rendezvous {
		ctx.WatchSyscalls = tg.addingObjects()
	}
	switch b, ok := tg.textTrap(ctx.Addr); {
	case !ok:
		// The address space this table describes is gone (an exec the
		// event loop has not seen yet): the trap belongs to the new image.
		return proc.TrapPass
	case b != trapInsn:
		// The breakpoint was removed after the thread executed it: run the
		// original instruction.
		ctx.Regs.SetPC(ctx.Addr)
		return proc.TrapResume
	}
	if ctx.Tid != tg.pid {
		tg.multi.Store(true)
	}
	if len(e.refs) == 0 {
		t.internalTraps.Add(1) // the engine's own site only
	} else {
		t.traps.Add(1)
	}
	var now time.Time
	if t.opts.Events {
		now = time.Now()
	}
	// A vfork child runs in its parent's memory and its traps come here:
	// its hits are not the parent's (see Stats.VforkHits).
	child := ctx.Pid != tg.pid
	if child && len(e.refs) > 0 {
		t.vforkHits.Add(1)
	}
	for _, r := range e.refs {
		if !child {
			r.c.hits.Add(1)
		}
		if t.opts.Events && !r.p.internal {
			ev := Event{Probe: r.p.ID, Pid: ctx.Pid, Tid: ctx.Tid, Addr: ctx.Addr, Time: now, Args: eventArgs(ctx.Regs)}
			switch {
			case r.c.atRet:
				ev.Args, ev.Return, ev.Ret = [6]uint64{}, true, retValue(ctx.Regs)
			case e.goABI:
				ev.Args = goArgs(ctx.Regs)
			}
			if e.goG != nil {
				ev.Goid = tg.goid(goReg(ctx.Regs), e.goG)
			}
			select {
			case t.events <- ev:
			default:
				t.dropped.Add(1)
			}
		}
	}
	if e.emulate && !t.opts.StepOnly {
		if tg.emulate(ctx, e) {
			tg.served(ctx)
			if len(e.refs) > 0 { // not the engine's own site
				t.emulated.Add(1)
			}
			for _, r := range e.refs {
				r.c.emulated.Add(1)
			}
			if e.rendezvous {
				// The instruction ran; the thread waits while the new
				// modules are probed.
				tg.hold(held{tid: ctx.Tid, addr: ctx.Addr, rendezvous: true})
				return proc.TrapHold
			}
			return proc.TrapResume
		}
		t.fallbacks.Add(1)
	}
	if e.boost != nil && !t.opts.StepOnly && !e.rendezvous && enterBoost(e.boost, ctx.Regs, ctx.Addr) {
		if len(e.refs) > 0 {
			t.boosted.Add(1)
		}
		for _, r := range e.refs {
			r.c.boosted.Add(1)
		}
		return proc.TrapResume
	}
	ctx.Regs.SetPC(ctx.Addr)
	tg.hold(held{tid: ctx.Tid, addr: ctx.Addr, step: true, rendezvous: e.rendezvous, refs: e.refs})
	return proc.TrapHold
}

// stray handles a trap at an address without a site: one that was removed
// after the thread executed its int3 is re-run; any other belongs to the
// program.
func (tg *target) stray(ctx *proc.TrapContext, tab *table) proc.TrapAction {
	if _, ok := tab.retired[ctx.Addr]; ok {
		if b, ok := tg.textTrap(ctx.Addr); ok && b != trapInsn {
			ctx.Regs.SetPC(ctx.Addr)
			return proc.TrapResume
		}
	}
	return proc.TrapPass
}

// textTrap reads the breakpoint-sized bytes at addr of the address space
// the current table describes. It fails once that address space is gone: the descriptor of
// /proc/PID/mem keeps the memory it was opened on, which an exec replaces.
func (tg *target) textTrap(addr uint64) (trapBytes, bool) {
	var b trapBytes
	f := tg.mem.Load()
	if f == nil {
		return b, false
	}
	for {
		n, err := unix.Pread(int(f.Fd()), b[:], int64(addr))
		if err == unix.EINTR {
			continue
		}
		return b, err == nil && n == len(b)
	}
}

// The stack window around a thread's stack pointer in which its emulated
// accesses are its own: other threads do not watch it.
const (
	stackBelow = 4096
	stackAbove = 64 << 10
	pageSize   = 4096
)

// errNotHere refuses an access the emulation must leave to the CPU.
var errNotHere = errors.New("access left to the CPU")

// remoteMem is the emulator's view of a traced process's memory, through
// process_vm_readv and process_vm_writev (which, unlike /proc/PID/mem,
// honour page protections as the CPU does). It refuses what the emulation
// cannot do exactly, so that the thread is stepped instead:
//
//   - an access that crosses a page (it could be half done);
//   - an access to a shared mapping (another process may watch it);
//   - in a process with several threads, an access another thread could
//     see half done: anything but the thread's own stack and reads of
//     memory no one can write;
//   - an address in no known mapping.
type remoteMem struct {
	tg  *target
	tid int
	sp  uint64
}

func (m *remoteMem) check(addr uint64, size int, write bool) error {
	if addr/pageSize != (addr+uint64(size)-1)/pageSize {
		return errNotHere
	}
	mp := m.tg.mapping(addr)
	switch {
	case mp == nil, mp.Shared:
		return errNotHere
	case write && !mp.Write, !write && !mp.Read:
		return errNotHere // the CPU raises the fault, with its own siginfo
	case !m.tg.multi.Load():
		return nil
	case addr >= m.sp-stackBelow && addr+uint64(size) <= m.sp+stackAbove:
		return nil
	case !write && !mp.Write:
		return nil
	}
	return errNotHere
}

// Read implements emulate.Memory.
func (m *remoteMem) Read(addr uint64, size int) (uint64, error) {
	if err := m.check(addr, size, false); err != nil {
		return 0, err
	}
	var buf [8]byte
	local := [1]unix.Iovec{{Base: &buf[0], Len: uint64(size)}}
	remote := [1]unix.RemoteIovec{{Base: uintptr(addr), Len: size}}
	n, err := unix.ProcessVMReadv(m.tid, local[:], remote[:], 0)
	if err != nil || n != size {
		return 0, errNotHere
	}
	return *(*uint64)(unsafe.Pointer(&buf[0])), nil
}

// Write implements emulate.Memory.
func (m *remoteMem) Write(addr uint64, size int, val uint64) error {
	if err := m.check(addr, size, true); err != nil {
		return err
	}
	var buf [8]byte
	*(*uint64)(unsafe.Pointer(&buf[0])) = val
	local := [1]unix.Iovec{{Base: &buf[0], Len: uint64(size)}}
	remote := [1]unix.RemoteIovec{{Base: uintptr(addr), Len: size}}
	n, err := unix.ProcessVMWritev(m.tid, local[:], remote[:], 0)
	if err != nil || n != size {
		return errNotHere
	}
	return nil
}

// mapSnap is a sorted copy of /proc/PID/maps.
type mapSnap struct {
	maps []proc.Mapping
	at   time.Time
}

func (s *mapSnap) find(addr uint64) *proc.Mapping {
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].End > addr })
	if i < len(s.maps) && s.maps[i].Start <= addr {
		return &s.maps[i]
	}
	return nil
}

// snapMinAge is how old the snapshot must be before a miss reads the maps
// again.
const snapMinAge = 10 * time.Millisecond

// mapping returns the mapping that holds addr, reading /proc/PID/maps again
// (at most every snapMinAge) when the snapshot does not know it.
func (tg *target) mapping(addr uint64) *proc.Mapping {
	s := tg.snap.Load()
	if s != nil {
		if mp := s.find(addr); mp != nil {
			return mp
		}
		if time.Since(s.at) < snapMinAge {
			return nil
		}
	}
	s = tg.refreshSnap()
	if s == nil {
		return nil
	}
	return s.find(addr)
}

// refreshSnap reads /proc/PID/maps into a new snapshot.
func (tg *target) refreshSnap() *mapSnap {
	f, err := os.Open("/proc/" + strconv.Itoa(tg.pid) + "/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	maps, err := proc.ParseMaps(f)
	if err != nil {
		return nil
	}
	sort.Slice(maps, func(i, j int) bool { return maps[i].Start < maps[j].Start })
	s := &mapSnap{maps: maps, at: time.Now()}
	tg.snap.Store(s)
	return s
}
