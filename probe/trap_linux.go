//go:build linux && amd64

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
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/internal/hostcpu"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/xol"
)

// int3 is the x86-64 breakpoint instruction.
const int3 = 0xCC

// entry is what the hit path knows of one installed site. Entries are
// immutable once published in a table.
type entry struct {
	addr       uint64
	inst       *decode.X86Inst
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
	retired map[uint64]byte
}

var emptyTable = &table{entries: map[uint64]*entry{}, retired: map[uint64]byte{}}

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
	switch b, ok := tg.textByte(ctx.Addr); {
	case !ok:
		// The address space this table describes is gone (an exec the
		// event loop has not seen yet): the trap belongs to the new image.
		return proc.TrapPass
	case b != int3:
		// The int3 was removed after the thread executed it: run the
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
			rg := ctx.Regs
			ev := Event{Probe: r.p.ID, Pid: ctx.Pid, Tid: ctx.Tid, Addr: ctx.Addr, Time: now,
				Args: [6]uint64{rg.Rdi, rg.Rsi, rg.Rdx, rg.Rcx, rg.R8, rg.R9}}
			switch {
			case r.c.atRet:
				ev.Args, ev.Return, ev.Ret = [6]uint64{}, true, rg.Rax
			case e.goABI:
				ev.Args = [6]uint64{rg.Rax, rg.Rbx, rg.Rcx, rg.Rdi, rg.Rsi, rg.R8}
			}
			if e.goG != nil {
				ev.Goid = tg.goid(rg.R14, e.goG)
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
		if b, ok := tg.textByte(ctx.Addr); ok && b != int3 {
			ctx.Regs.SetPC(ctx.Addr)
			return proc.TrapResume
		}
	}
	return proc.TrapPass
}

// textByte reads one byte of the address space the current table
// describes. It fails once that address space is gone: the descriptor of
// /proc/PID/mem keeps the memory it was opened on, which an exec replaces.
func (tg *target) textByte(addr uint64) (byte, bool) {
	f := tg.mem.Load()
	if f == nil {
		return 0, false
	}
	var b [1]byte
	for {
		n, err := unix.Pread(int(f.Fd()), b[:], int64(addr))
		if err == unix.EINTR {
			continue
		}
		return b[0], err == nil && n == 1
	}
}

// hostEmulator returns the emulator of the CPU i describes, which is the
// CPU of every traced process: its vendor's behaviour and its address
// width. ok is false when the emulator cannot follow that CPU exactly (a
// vendor whose differences from Intel and AMD are not characterised, or
// one that cannot be told): the sites the plan emulates are then stepped.
func hostEmulator(i *hostcpu.Info) (x emulate.X86, ok bool) {
	v, err := i.X86Vendor()
	return emulate.X86{Vendor: v, LA57: i.LA57}, err == nil
}

// emulate executes the site's instruction on the thread's registers and
// the process's memory. It reports false, with nothing changed, when the
// emulator refuses or the instruction faults or touches memory the
// emulation must not (see remoteMem): the thread is then stepped.
func (tg *target) emulate(ctx *proc.TrapContext, e *entry) bool {
	r := ctx.Regs
	st := emulate.X86State{
		GPR: [16]uint64{r.Rax, r.Rcx, r.Rdx, r.Rbx, r.Rsp, r.Rbp, r.Rsi, r.Rdi,
			r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15},
		RIP:    ctx.Addr,
		RFLAGS: r.Eflags,
		FSBase: r.Fs_base,
		GSBase: r.Gs_base,
	}
	if st.RFLAGS&emulate.FlagTF != 0 {
		return false // the program single-steps itself: let the CPU trap
	}
	if !tg.t.emuOK {
		return false // this CPU's behaviour is not characterised: step
	}
	m := remoteMem{tg: tg, tid: ctx.Tid, sp: r.Rsp}
	if err := tg.t.emu.Step(e.inst, &st, &m); err != nil {
		return false
	}
	g := &st.GPR
	r.Rax, r.Rcx, r.Rdx, r.Rbx, r.Rsp, r.Rbp, r.Rsi, r.Rdi = g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]
	r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15 = g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]
	r.Rip, r.Eflags = st.RIP, st.RFLAGS
	return true
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
