package trampoline

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/x86enc"
	"github.com/probeopt/probeopt/xol"
)

// ThreadPointer selects how generated code reads the thread pointer, the
// per-thread value that identifies a thread in events and keys its slot in
// the thread table.
type ThreadPointer uint8

const (
	// ThreadFSBase reads the %fs base with rdfsbase. It needs the
	// FSGSBASE instructions enabled for user mode (Linux 5.9 and later on
	// CPUs that have them: HWCAP2_FSGSBASE, see HostFeatures); elsewhere
	// rdfsbase raises #UD. A thread without a thread pointer reads 0.
	ThreadFSBase ThreadPointer = iota
	// ThreadTCB reads the first word of the thread control block
	// (mov %fs:0), which the x86-64 TLS ABI makes a pointer to itself
	// (glibc, musl). It faults in a thread whose %fs base is 0, such as
	// the dynamic linker before it sets up TLS.
	ThreadTCB
	// ThreadNone records no thread pointer (events carry 0); return
	// probes are unavailable.
	ThreadNone
)

// FlagsSave selects how a slot preserves the arithmetic flags around its
// handler.
type FlagsSave uint8

const (
	// FlagsLAHF: lahf and seto %al, restored by add $0x7f,%al and sahf (a
	// few cycles). It needs LAHF/SAHF in 64-bit mode (CPUID lahf_lm, every
	// x86-64 CPU since 2006). DF and the system flags are not touched by
	// any handler, so they need no saving.
	FlagsLAHF FlagsSave = iota
	// FlagsPushf: pushfq and popfq (popfq is microcoded: slower).
	FlagsPushf
)

// Config holds what the trampolines of one process share.
type Config struct {
	// Data is the shared data area (counters and the event ring); needed
	// by counters and events.
	Data *Data
	// Threads is the thread table; needed by return probes.
	Threads *Threads
	// ReturnAddr is the entry of the return trampoline, ReturnEntryOffset
	// bytes after the start of its code (Area.ReturnX86 sets it), needed
	// by return probes, Unhijack and Rehijack. One serves the whole
	// process.
	ReturnAddr uint64
	// ThreadPointer is how the code reads the thread pointer (see
	// Features.ThreadPointer); it must be the same for every slot and the
	// return trampoline of a process.
	ThreadPointer ThreadPointer
	// Flags is how slots save the flags (see Features.Flags).
	Flags FlagsSave
	// ReturnCalls makes the return trampoline able to run calls at
	// returns (ReturnHandler.Calls, see x86call.go); it adds a test of
	// each entry's flags to the return path. Set it before the return
	// trampoline is generated.
	ReturnCalls bool
}

// Handler says what a slot does at a hit, in this order: count, record an
// event, arm the return probe, restore hijacked return addresses, arm them
// again.
type Handler struct {
	// ID is the probe id recorded in events and in return-probe entries.
	ID uint32
	// Calls are the addresses of functions to call at the hit, first, in
	// order, with the kernel's struct pt_regs of the hit and the thread's
	// stripe (see x86call.go: package bpf/jit's calling convention). They
	// need the per-thread data plane.
	Calls []Call
	// Count increments counter Counter of the data area (lock inc: exact
	// under any concurrency).
	Count   bool
	Counter int
	// Event records an entry event in the ring: the probe id, the thread
	// pointer, the time stamp counter, the six registers ArgRegs names,
	// the stack pointer and the probe address. A full ring drops the
	// event and counts it.
	Event bool
	// ArgRegs are the registers an event records as its arguments.
	ArgRegs ArgRegs
	// Go, when not nil, makes an entry event also record the goroutine
	// and the kernel thread that ran it, read from the Go runtime's g in
	// r14 (see GoG): for a site in Go code compiled for ABIInternal, in
	// which r14 holds g at every instruction. Such an event goes to the
	// shared ring (a per-thread record has no room for them).
	Go *GoG
	// Return arms a return probe: the return address at the stack
	// pointer is saved on the thread's shadow stack and replaced by the
	// return trampoline's address. The site must be a function entry (the
	// stack pointer points at the return address): the first instruction,
	// the one after an endbr64, or a NOP site there.
	Return *ReturnHandler
	// Unhijack restores every return address the thread's armed return
	// probes replaced, in the frames above the site; the return
	// trampoline's address has no unwind information, so an unwinder
	// cannot cross it. Install it at the entry of the unwinders
	// (_Unwind_RaiseException, _Unwind_Resume, _Unwind_Resume_or_Rethrow,
	// _Unwind_ForcedUnwind, _Unwind_Backtrace) so that C++ exceptions,
	// thread cancellation and backtraces cross probed frames.
	Unhijack bool
	// Rehijack arms again the return probes that Unhijack disarmed in the
	// frames above the site that are still live. Install it at the entry
	// of __cxa_begin_catch, which every catch block calls once unwinding
	// is over: the frames the exception left are dead (their probes do not
	// fire, as after a longjmp), and those above the catching frame get
	// their return probes back. Without it they return unobserved.
	Rehijack bool
}

// ReturnHandler says what the return trampoline does when the function
// returns.
type ReturnHandler struct {
	Count   bool // increment counter Counter
	Counter int
	Event   bool // record a return event (rax, rdx)
	// Missed counts in counter MissCounter the calls whose return could
	// not be armed because the thread already had Threads.MaxDepth armed (their
	// returns are not observed; the thread's slot counts them too).
	Missed      bool
	MissCounter int
	// Calls are the addresses of functions the return trampoline calls
	// when the function returns, in order, with struct pt_regs as the
	// function left the registers (see x86call.go); they need
	// Config.ReturnCalls.
	Calls []Call
}

// Range is the address range [Start, End).
type Range struct{ Start, End uint64 }

// Patch is a text rewrite: Old replaced by New at Addr. Guard lists ranges
// in which no thread may be when the patch is written (batchpatch.Patch
// has the same meaning).
type Patch struct {
	Addr     uint64
	Old, New []byte
	Guard    []Range
}

// Trampoline is a generated slot and the rewrites that enter it.
type Trampoline struct {
	Site    *Site
	Handler Handler
	// Slot is the address the code must be written to, Code the bytes.
	Slot uint64
	Code []byte
	// Install writes the jump at the site; Remove restores the site, with
	// the slot as a guard range (so that the slot may be reused after it).
	Install, Remove Patch
}

func (c *Config) validate(h *Handler) error {
	if c == nil {
		return fmt.Errorf("no config: %w", ErrConfig)
	}
	if h.Go != nil {
		if err := h.Go.validate(); err != nil {
			return err
		}
	}
	counter := func(what string, i int) error {
		if c.Data == nil {
			return fmt.Errorf("%s without a data area: %w", what, ErrConfig)
		}
		if err := c.Data.validate(); err != nil {
			return err
		}
		if i < 0 || i >= c.Data.NumCounters {
			return fmt.Errorf("%s %d outside the %d counters: %w", what, i, c.Data.NumCounters, ErrConfig)
		}
		return nil
	}
	event := func(what string) error {
		if c.Data == nil || c.Data.RingRecords == 0 {
			return fmt.Errorf("%s without an event ring: %w", what, ErrConfig)
		}
		return c.Data.validate()
	}
	if err := c.validateCalls(h); err != nil {
		return err
	}
	if h.Count {
		if err := counter("counter", h.Counter); err != nil {
			return err
		}
	}
	if h.Event {
		if err := event("event"); err != nil {
			return err
		}
	}
	if h.Return != nil || h.Unhijack || h.Rehijack {
		if err := c.returnReady(); err != nil {
			return err
		}
	}
	if r := h.Return; r != nil {
		if r.Count {
			if err := counter("return counter", r.Counter); err != nil {
				return err
			}
		}
		if r.Event {
			if err := event("return event"); err != nil {
				return err
			}
		}
		if r.Missed {
			if err := counter("missed-return counter", r.MissCounter); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Config) returnReady() error {
	if c.ThreadPointer == ThreadNone {
		return fmt.Errorf("return probes without a thread pointer: %w", ErrConfig)
	}
	if err := c.Threads.validate(); err != nil {
		return err
	}
	if c.ReturnAddr == 0 {
		return fmt.Errorf("return probes without a return trampoline: %w", ErrConfig)
	}
	return nil
}

// The registers the slots use, by their names in the comments (the
// encoding numbers of package x86enc and package decode).
const (
	rax = x86enc.RAX
	rbx = x86enc.RBX
	rcx = x86enc.RCX
	rdx = x86enc.RDX
	rsp = x86enc.RSP
	rsi = x86enc.RSI
	rdi = x86enc.RDI
	r8  = x86enc.R8
	r9  = x86enc.R9
	r10 = x86enc.R10
	r11 = x86enc.R11
)

// x86 returns the registers in the order an event records them.
func (r ArgRegs) x86() [6]x86enc.Reg {
	if r == GoArgs {
		return [6]x86enc.Reg{rax, rbx, rcx, rdi, rsi, r8}
	}
	return [6]x86enc.Reg{rdi, rsi, rdx, rcx, r8, r9}
}

// x86Gen generates slot code: a frame below the red zone, saved
// registers, handlers.
type x86Gen struct {
	a     *x86enc.Asm
	cfg   *Config
	saved []x86enc.Reg // registers pushed after rax and the flags, in order
	frame int          // bytes pushed (flags, rax, saved)
	// head is the size of the first part of the frame: 16 (rax and the
	// flags), or 8 when the flags stay in rax (see flagsInRAX).
	head int
	// flagsInRAX: with FlagsLAHF, the flags captured in ah and al stay in
	// rax for the whole handler instead of being pushed (a counter-only
	// slot, whose handler does not use rax).
	flagsInRAX bool
	// skip is what lies between the frame and the original stack pointer:
	// 128 (the red zone) in a slot, 8 (the return-address slot) in the
	// return trampoline.
	skip int
	// stub is the label of the return stub the slot carries after its
	// code (ReturnHandler.Calls), nil without one.
	stub *x86enc.Label
	// cold holds the slow paths (the probe sequence of the thread table,
	// dead or chained entries, a full shadow stack), emitted out of the
	// straight line of the hot path, in order.
	cold []func()
}

// saveOrder is the order in which scratch registers are pushed.
var saveOrder = [...]x86enc.Reg{rcx, rdx, rsi, r10, r11}

// offset of a saved register from the stack pointer inside the frame.
func (g *x86Gen) savedOff(r x86enc.Reg) int {
	if r == rax {
		if g.cfg.Flags == FlagsPushf {
			return g.frame - 16
		}
		return g.frame - 8
	}
	for i, s := range g.saved {
		if s == r {
			return g.frame - g.head - 8*(i+1)
		}
	}
	return -1
}

// spOff is the offset from the stack pointer inside the frame to the
// stack pointer the interrupted code had.
func (g *x86Gen) spOff() int { return g.frame + g.skip }

// prologue saves the flags, rax and the registers in need. early, when
// not nil, runs as soon as the flags are saved and before the other
// registers are pushed (it may use no register): a locked increment there
// waits for one store instead of a frame of them to drain.
func (g *x86Gen) prologue(need map[x86enc.Reg]bool, early func()) {
	a := g.a
	g.head = 16
	if g.cfg.Flags == FlagsPushf {
		a.Pushfq()
		if early != nil {
			early()
		}
		a.Push(rax)
	} else {
		a.Push(rax)
		a.Lahf()
		a.Setcc(x86enc.CondO, rax)
		if early != nil {
			early()
		}
		if g.flagsInRAX {
			g.head = 8
		} else {
			a.Push(rax)
		}
	}
	g.frame = g.head
	g.saved = g.saved[:0]
	for _, r := range saveOrder {
		if need[r] {
			a.Push(r)
			g.saved = append(g.saved, r)
			g.frame += 8
		}
	}
}

func (g *x86Gen) epilogue() {
	a := g.a
	for i := len(g.saved) - 1; i >= 0; i-- {
		a.Pop(g.saved[i])
	}
	if g.cfg.Flags == FlagsPushf {
		a.Pop(rax)
		a.Popfq()
	} else {
		if !g.flagsInRAX {
			a.Pop(rax)
		}
		a.ALUAL(x86enc.Add, 0x7f)
		a.Sahf()
		a.Pop(rax)
	}
}

// emitCold emits the slow paths.
func (g *x86Gen) emitCold() {
	for len(g.cold) > 0 {
		f := g.cold[0]
		g.cold = g.cold[1:]
		f()
	}
}

// threadPointer loads the thread pointer into r.
func (g *x86Gen) threadPointer(r x86enc.Reg) {
	switch g.cfg.ThreadPointer {
	case ThreadFSBase:
		g.a.Rdfsbase(r)
	case ThreadTCB:
		g.a.Load(x86enc.S64, r, x86enc.Abs(0).FS())
	default:
		g.a.ALU(x86enc.Xor, x86enc.S32, r, r)
	}
}

// counter increments the 64-bit word at ctr (r11 is saved when ctr is
// beyond a RIP-relative operand's reach).
func (g *x86Gen) counter(ctr uint64) {
	a := g.a
	if x86enc.Reaches(a.PC()+9, ctr) {
		a.LockIncMem(x86enc.S64, x86enc.RIP(ctr))
		return
	}
	a.MovImm(r11, ctr)
	a.LockIncMem(x86enc.S64, x86enc.At(r11, 0))
}

// timestamp reads the time stamp counter into edx:eax, once every earlier
// instruction has executed: rdtsc alone may run ahead of the loads before
// it, and a hit that another thread's write made happen (a lock, a turn)
// would then get a count below that write's. Measured on a 2-vCPU AMD
// EPYC VM: threads handing a turn to each other saw rdtsc go back 19 to
// 31 times in 2,000,000 hand-offs (by up to 147 ticks), and lfence; rdtsc
// never.
func (g *x86Gen) timestamp() {
	g.a.Lfence()
	g.a.Rdtsc()
}

// addr loads the address v into r: lea v(%rip) when it reaches, else a
// constant.
func (g *x86Gen) addr(r x86enc.Reg, v uint64) {
	if x86enc.Reaches(g.a.PC()+7, v) {
		g.a.Lea(r, x86enc.RIP(v))
		return
	}
	g.a.MovImm(r, v)
}

// counterFar reports whether a counter (or any address) at a may be
// beyond reach of code in [at, at+64 KiB).
func counterFar(at, a uint64) bool {
	return !x86enc.Reaches(at, a) || !x86enc.Reaches(at+1<<16, a)
}

// eventSpec says where the fields of an event come from.
type eventSpec struct {
	kind  EventKind
	id    uint32
	idMem *x86enc.Mem // load the id from memory instead (not rax, rdx, r10, r11 based)
	args  bool        // store the registers of regs (else zeros)
	regs  ArgRegs
	ret   bool   // Ret and Ret2 from the saved rax and rdx
	ip    uint64 // the IP field, or (ipFromSP) the word at the original stack pointer
	ipSP  bool
	// dropCtr, when not negative, is the counter whose drops word in the
	// shared stripe also counts a drop (threaddata.go).
	dropCtr int
	// goG, when not nil, records the goroutine and its thread (gog.go).
	goG *GoG
}

// event records one event in the ring. It clobbers rax, rdx, r10 and r11,
// which must be saved, and the flags.
func (g *x86Gen) event(sp eventSpec) {
	a := g.a
	d := g.cfg.Data
	ring := d.RingAddr()
	full, done := a.NewLabel(), a.NewLabel()
	g.addr(r11, ring)
	g.reserve(x86enc.At(r11, ringHead), x86enc.At(r11, ringTail), d.RingRecords, true, full)
	// rax = sequence number, r10 = commit value.
	a.ALUImm32(x86enc.And, x86enc.S64, rax, int32(d.RingRecords-1))
	a.Shl(x86enc.S64, rax, recordLog)
	a.Lea(rax, x86enc.Indexed(r11, rax, 1, ringRecords))
	// rax, r10 and r11 hold the reservation: their values at the hit are
	// read back from the frame, through rdx once the others are stored.
	changed := func(r x86enc.Reg) bool { return r == rax || r == r10 || r == r11 }
	for i, r := range sp.regs.x86() {
		switch {
		case !sp.args:
			a.StoreImm(x86enc.S64, x86enc.At(rax, int32(recArgs+8*i)), 0)
		case !changed(r):
			a.Store(x86enc.S64, x86enc.At(rax, int32(recArgs+8*i)), r)
		}
	}
	for i, r := range sp.regs.x86() {
		if sp.args && changed(r) {
			a.Load(x86enc.S64, rdx, x86enc.At(rsp, int32(g.savedOff(r))))
			a.Store(x86enc.S64, x86enc.At(rax, int32(recArgs+8*i)), rdx)
		}
	}
	// rdx is free from here on (its value is stored or saved).
	if sp.idMem != nil {
		a.Load(x86enc.S32, rdx, *sp.idMem)
		a.Store(x86enc.S32, x86enc.At(rax, recProbe), rdx)
		a.StoreImm(x86enc.S32, x86enc.At(rax, recKind), int32(sp.kind))
	} else {
		kind := sp.kind
		if sp.goG != nil {
			kind |= kindGoFlag
		}
		a.MovImm(rdx, uint64(kind)<<32|uint64(sp.id))
		a.Store(x86enc.S64, x86enc.At(rax, recProbe), rdx)
	}
	if sp.goG != nil {
		g.goFields(*sp.goG)
	}
	if sp.ret {
		a.Load(x86enc.S64, rdx, x86enc.At(rsp, int32(g.savedOff(rax))))
		a.Store(x86enc.S64, x86enc.At(rax, recRet), rdx)
		a.Load(x86enc.S64, rdx, x86enc.At(rsp, int32(g.savedOff(rdx))))
		a.Store(x86enc.S64, x86enc.At(rax, recRet2), rdx)
	} else {
		a.StoreImm(x86enc.S64, x86enc.At(rax, recRet), 0)
		a.StoreImm(x86enc.S64, x86enc.At(rax, recRet2), 0)
	}
	a.Lea(rdx, x86enc.At(rsp, int32(g.spOff())))
	a.Store(x86enc.S64, x86enc.At(rax, recSP), rdx)
	if sp.ipSP {
		a.Load(x86enc.S64, rdx, x86enc.At(rsp, int32(g.spOff())))
	} else {
		a.MovImm(rdx, sp.ip)
	}
	a.Store(x86enc.S64, x86enc.At(rax, recIP), rdx)
	g.threadPointer(rdx)
	a.Store(x86enc.S64, x86enc.At(rax, recThread), rdx)
	a.Mov(x86enc.S64, r11, rax)
	g.timestamp()
	a.Shl(x86enc.S64, rdx, 32)
	a.ALU(x86enc.Or, x86enc.S64, rax, rdx)
	a.Store(x86enc.S64, x86enc.At(r11, recTime), rax)
	// Publish: x86 stores are not reordered with earlier stores.
	a.Store(x86enc.S64, x86enc.At(r11, recCommit), r10)
	a.Jmp(done)
	a.Bind(full)
	a.LockIncMem(x86enc.S64, x86enc.At(r11, ringDropped))
	if sp.dropCtr >= 0 && d.perThread(sp.dropCtr) {
		g.addr(r11, d.Addr+d.stripesOff()+stripeData+8*uint64(d.ThreadCounters+sp.dropCtr))
		a.LockIncMem(x86enc.S64, x86enc.At(r11, 0))
	}
	a.Bind(done)
}

// reserve takes the next record of a ring whose head and tail words are
// at head and tail and that holds records records: it loads the head into
// rax, jumps to full when records records are in use, and otherwise
// compare-and-swaps the head to rax+1 (with a lock prefix when locked),
// again from the load until that succeeds. It leaves the record's
// sequence number in rax and the commit value (rax+1) in r10, clobbers the
// flags, and returns the label of the load (a slow path that makes room
// jumps back there).
func (g *x86Gen) reserve(head, tail x86enc.Mem, records int, locked bool, full x86enc.Label) (retry x86enc.Label) {
	a := g.a
	retry = a.NewLabel()
	a.Bind(retry)
	a.Load(x86enc.S64, rax, head)
	a.Mov(x86enc.S64, r10, rax)
	a.ALULoad(x86enc.Sub, x86enc.S64, r10, tail)
	a.ALUImm32(x86enc.Cmp, x86enc.S64, r10, int32(records))
	a.Jcc(x86enc.CondAE, full)
	a.Lea(r10, x86enc.At(rax, 1))
	a.Cmpxchg(x86enc.S64, head, r10, locked)
	a.Jcc(x86enc.CondNE, retry)
	return retry
}

// threadHashOffset sets dst to the byte offset of the entry where the
// lookup of the thread pointer in rdx starts, in a table of slots entries
// of size bytes (both powers of two): the entry index is the top bits of
// the pointer's Fibonacci hash (Threads.ThreadSlot, Data.ThreadSlot), 0
// in a table of one entry. It changes only dst and the flags.
func (g *x86Gen) threadHashOffset(dst x86enc.Reg, slots int, size uint64) {
	a := g.a
	if slots == 1 {
		a.ALU(x86enc.Xor, x86enc.S32, dst, dst)
		return
	}
	slotBits, sizeLog := bits.TrailingZeros(uint(slots)), bits.TrailingZeros64(size)
	a.MovImm(dst, threadHashMul)
	a.Imul(x86enc.S64, dst, rdx)
	a.Shr(x86enc.S64, dst, uint8(64-slotBits-sizeLog))
	a.ALUImm32(x86enc.And, x86enc.S64, dst, int32(-int64(size)))
}

// threadLookup finds the calling thread's slot in the thread table and
// leaves its address in rsi; it jumps to notFound when the thread has no
// thread pointer, or no slot (with claim: the table is full). It clobbers
// rax, rcx, rdx, r10, r11 and the flags.
//
// The hot path is the hash and one compare: a thread finds its own key
// in the first slot it probes unless another thread took it first. The
// probe sequence (and the claim of a free slot) is cold code.
func (g *x86Gen) threadLookup(claim bool, notFound x86enc.Label) {
	a := g.a
	t := g.cfg.Threads
	loop, next, found, slow, free := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	g.threadPointer(rdx)
	a.Test(x86enc.S64, rdx, rdx)
	a.Jcc(x86enc.CondE, notFound)
	// rax = the byte offset of the first slot probed (Threads.ThreadSlot).
	g.threadHashOffset(rax, t.Slots, t.SlotSize())
	g.addr(r11, t.Addr)
	a.Lea(rsi, x86enc.Indexed(r11, rax, 1, 0))
	a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.At(rsi, threadKey), rdx)
	a.Jcc(x86enc.CondNE, slow)
	a.Bind(found)
	g.cold = append(g.cold, func() {
		// rsi = r11 + rax, whose key is not this thread's.
		a.Bind(slow)
		a.MovImm(rcx, uint64(t.Slots))
		a.Jmp(free)
		a.Bind(loop)
		a.Lea(rsi, x86enc.Indexed(r11, rax, 1, 0))
		a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.At(rsi, threadKey), rdx)
		a.Jcc(x86enc.CondE, found)
		a.Bind(free)
		a.ALUMemImm8(x86enc.Cmp, x86enc.S64, x86enc.At(rsi, threadKey), 0)
		a.Jcc(x86enc.CondNE, next)
		if !claim {
			a.Jmp(notFound)
		} else {
			a.Mov(x86enc.S64, r10, rax)
			a.ALU(x86enc.Xor, x86enc.S32, rax, rax)
			a.Cmpxchg(x86enc.S64, x86enc.At(rsi, threadKey), rdx, true)
			a.Jcc(x86enc.CondE, found)
			a.Mov(x86enc.S64, rax, r10)
		}
		a.Bind(next)
		a.ALUImm32(x86enc.Add, x86enc.S64, rax, int32(t.SlotSize()))
		a.ALUImm32(x86enc.And, x86enc.S64, rax, int32(uint64(t.Slots)*t.SlotSize()-1))
		a.Dec(x86enc.S32, rcx)
		a.Jcc(x86enc.CondNE, loop)
		a.Jmp(notFound)
	})
}

// arm pushes a return-probe entry for the frame whose return address lies
// at the original stack pointer, for the return through the gate: the
// return address is replaced by the address of label enter, which the
// gate calls (see GenerateReturnX86). The hot path falls through to the
// gate exit; a frame that is not armed (a full shadow stack), or whose
// return address already is the return trampoline's (a tail call from an
// armed function, whose gate call is on the return stack buffer already),
// goes on at label plain. rsi holds the thread's slot. Clobbers rax, rcx,
// rdx, r10, r11 and the flags.
//
// The hot path is a frame that is not a tail call's and finds no dead
// entry on top; chained frames, dead entries and a full stack are cold.
//
// With farGate, the gate lies beyond the reach of a jmp rel32 from the
// slot: its address goes to the word below the return address (the red
// zone is free at a function's entry, and safe from signal frames while
// the stack pointer is above it) for the exit's jmp *-16(%rsp).
func (g *x86Gen) arm(h *Handler, enter, plain x86enc.Label, farGate bool) {
	a := g.a
	retry, chained, dropMore, chk, push := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	a.Lea(r10, x86enc.At(rsp, int32(g.spOff())))
	g.addr(r11, g.cfg.ReturnAddr)
	a.Bind(retry)
	a.Load(x86enc.S64, rdx, x86enc.At(r10, 0))
	a.Load(x86enc.S64, rax, x86enc.At(rsi, threadState))
	a.Mov(x86enc.S32, rcx, rax)
	a.ALU(x86enc.Cmp, x86enc.S64, rdx, r11)
	a.Jcc(x86enc.CondE, chained)
	// Not chained: entries whose frame is at or below this one are dead
	// (a longjmp or an exception left them).
	a.Test(x86enc.S32, rcx, rcx)
	a.Jcc(x86enc.CondE, push)
	a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.Indexed(rsi, rcx, 1, entSP), r10)
	a.Jcc(x86enc.CondBE, dropMore)
	a.Bind(push)
	g.push(h, retry, plain)
	a.LeaLabel(rdx, enter)
	a.Store(x86enc.S64, x86enc.At(r10, 0), rdx)
	if farGate {
		a.Lea(rdx, x86enc.At(r11, -gateLen))
		a.Store(x86enc.S64, x86enc.At(r10, -8), rdx)
	}
	g.cold = append(g.cold, func() {
		a.Bind(dropMore)
		a.ALUImm8(x86enc.Sub, x86enc.S32, rcx, threadEntrySize)
		a.Test(x86enc.S32, rcx, rcx)
		a.Jcc(x86enc.CondE, push)
		a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.Indexed(rsi, rcx, 1, entSP), r10)
		a.Jcc(x86enc.CondBE, dropMore)
		a.Jmp(push)
		// Chained (a tail call from a function whose return is armed):
		// the return address is already the trampoline's; entries
		// strictly below are dead, and the top one must be this frame's.
		a.Bind(chained)
		a.Test(x86enc.S32, rcx, rcx)
		a.Jcc(x86enc.CondE, plain)
		a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.Indexed(rsi, rcx, 1, entSP), r10)
		a.Jcc(x86enc.CondAE, chk)
		a.ALUImm8(x86enc.Sub, x86enc.S32, rcx, threadEntrySize)
		a.Jmp(chained)
		a.Bind(chk)
		a.Jcc(x86enc.CondNE, plain)
		a.Load(x86enc.S64, rdx, x86enc.Indexed(rsi, rcx, 1, entRet))
		g.push(h, retry, plain)
		a.Jmp(plain)
	})
}

// push pushes the entry of return handler h.Return at depth rcx (state in
// rax, original return address in rdx, frame in r10) and falls through;
// it goes to retry when a signal handler changed the shadow stack
// meanwhile, and to full when it is full.
func (g *x86Gen) push(h *Handler, retry, full x86enc.Label) {
	a := g.a
	r := h.Return
	overflow := a.NewLabel()
	a.ALUImm32(x86enc.Cmp, x86enc.S32, rcx, int32(g.cfg.Threads.MaxDepth()*threadEntrySize))
	a.Jcc(x86enc.CondAE, overflow)
	// The new entry lies at rsi + rcx + 32 (entries start at +32).
	a.Store(x86enc.S64, x86enc.Indexed(rsi, rcx, 1, threadEntries+entRet), rdx)
	a.Store(x86enc.S64, x86enc.Indexed(rsi, rcx, 1, threadEntries+entSP), r10)
	var flags uint64
	if r.Event {
		flags |= entFlagEvent
	}
	var ctr uint64
	if r.Count {
		ctr = g.cfg.Data.CounterAddr(r.Counter)
	}
	if len(r.Calls) > 0 {
		// The return trampoline calls the stub, which counts.
		flags |= entFlagCall
	}
	g.storeConst(x86enc.Indexed(rsi, rcx, 1, threadEntries+entProbe), flags<<32|uint64(h.ID))
	if len(r.Calls) > 0 {
		if g.stub == nil {
			l := a.NewLabel()
			g.stub = &l
		}
		a.LeaLabel(rdx, *g.stub)
		a.Store(x86enc.S64, x86enc.Indexed(rsi, rcx, 1, threadEntries+entCounter), rdx)
	} else {
		g.storeConst(x86enc.Indexed(rsi, rcx, 1, threadEntries+entCounter), ctr)
	}
	// New state: generation + 1, depth + 32; compare-and-swap (no lock:
	// only this thread writes, and an instruction is atomic with respect
	// to signal handlers).
	a.Mov(x86enc.S64, rdx, rax)
	a.Shr(x86enc.S64, rdx, 32)
	a.Inc(x86enc.S64, rdx)
	a.Shl(x86enc.S64, rdx, 32)
	a.Lea(rdx, x86enc.Indexed(rdx, rcx, 1, threadEntrySize))
	a.Cmpxchg(x86enc.S64, x86enc.At(rsi, threadState), rdx, false)
	a.Jcc(x86enc.CondNE, retry)
	g.cold = append(g.cold, func() {
		a.Bind(overflow)
		a.IncMem(x86enc.S64, x86enc.At(rsi, threadMissed))
		if r.Missed {
			g.counter(g.cfg.Data.CounterAddr(r.MissCounter))
		}
		a.Jmp(full)
	})
}

// storeConst stores the 64-bit constant v at m (through rdx when it does
// not fit a sign-extended 32-bit immediate).
func (g *x86Gen) storeConst(m x86enc.Mem, v uint64) {
	if v == uint64(int64(int32(v))) {
		g.a.StoreImm(x86enc.S64, m, int32(v))
		return
	}
	g.addr(rdx, v)
	g.a.Store(x86enc.S64, m, rdx)
}

// unhijack restores the original return address of every armed entry of
// the thread (slot in rsi) whose frame lies above the original stack
// pointer and still holds the trampoline's address; with rearm it does
// the reverse: it puts the trampoline's address back where the original
// one is. Clobbers rax, rcx, rdx, r10, r11 and the flags.
func (g *x86Gen) unhijack(rearm bool) {
	a := g.a
	loop, next, done := a.NewLabel(), a.NewLabel(), a.NewLabel()
	a.Lea(r10, x86enc.At(rsp, int32(g.spOff())))
	g.addr(r11, g.cfg.ReturnAddr)
	a.Load(x86enc.S32, rcx, x86enc.At(rsi, threadState))
	a.Bind(loop)
	a.Test(x86enc.S32, rcx, rcx)
	a.Jcc(x86enc.CondE, done)
	a.Load(x86enc.S64, rdx, x86enc.Indexed(rsi, rcx, 1, entSP))
	a.ALU(x86enc.Cmp, x86enc.S64, rdx, r10)
	a.Jcc(x86enc.CondBE, next)
	a.Load(x86enc.S64, rax, x86enc.Indexed(rsi, rcx, 1, entRet))
	if rearm {
		a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.At(rdx, 0), rax)
		a.Jcc(x86enc.CondNE, next)
		a.Store(x86enc.S64, x86enc.At(rdx, 0), r11)
	} else {
		a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.At(rdx, 0), r11)
		a.Jcc(x86enc.CondNE, next)
		a.Store(x86enc.S64, x86enc.At(rdx, 0), rax)
	}
	a.Bind(next)
	a.ALUImm8(x86enc.Sub, x86enc.S32, rcx, threadEntrySize)
	a.Jmp(loop)
	a.Bind(done)
}

// GenerateX86 generates the code of the slot at address slot for site s
// and handler h. Most callers use Area.BuildX86, which also allocates the
// slot and makes the patches.
func GenerateX86(slot uint64, s *Site, h *Handler, cfg *Config) ([]byte, error) {
	a := x86enc.New(slot)
	if err := generateInto(a, s, h, cfg); err != nil {
		return nil, err
	}
	return a.Bytes(), nil
}

// generateInto generates a slot with a (at its base address) and checks
// it (finishX86).
func generateInto(a *x86enc.Asm, s *Site, h *Handler, cfg *Config) error {
	if s == nil || h == nil {
		return fmt.Errorf("no site or handler: %w", ErrConfig)
	}
	if err := cfg.validate(h); err != nil {
		return err
	}
	g := &x86Gen{a: a, cfg: cfg, skip: 128}
	if s.Redo != nil {
		// The kept push ran: the stack pointer goes back above its word
		// (the return address at the stack pointer again), and the push
		// runs again before the displaced instructions.
		a.Lea(rsp, x86enc.At(rsp, 8))
	}
	if len(h.Calls) > 0 {
		g.entryCalls(s, h.Calls)
	}
	enter := a.NewLabel()
	if h.Count || h.Event || h.Return != nil || h.Unhijack || h.Rehijack {
		g.handler(s, h, enter)
	}
	a.Bind(enter)
	if err := g.displaced(s); err != nil {
		return err
	}
	if g.stub != nil {
		a.Bind(*g.stub)
		g.returnStub(s, h.Return)
	}
	return finishX86(a)
}

// handlerPlan is how a slot's handler counts and records: per thread
// (threaddata.go) when its counter has a word in each stripe, and with a
// RIP-relative counter unless the counter is out of reach.
type handlerPlan struct {
	threadCount, threadEvent bool // count, record in the thread's stripe
	far                      bool // the shared counter is beyond the reach of a RIP-relative operand
}

// perThread reports whether the handler looks up the thread's stripe.
func (p handlerPlan) perThread() bool { return p.threadCount || p.threadEvent }

// planHandler plans the handler of the slot at slot.
func planHandler(slot uint64, h *Handler, cfg *Config) handlerPlan {
	d := cfg.Data
	return handlerPlan{
		threadCount: h.Count && d != nil && d.perThread(h.Counter),
		threadEvent: h.Event && h.Go == nil && d != nil && d.perThread(h.Counter) && d.ThreadRing > 0,
		far:         h.Count && counterFar(slot, d.CounterAddr(h.Counter)),
	}
}

// saved returns the registers the handler clobbers, which the prologue
// saves.
func (p handlerPlan) saved(h *Handler) map[x86enc.Reg]bool {
	need := map[x86enc.Reg]bool{}
	if p.far {
		need[r11] = true
	}
	if p.perThread() {
		need[rdx], need[r10], need[r11] = true, true, true
	}
	if p.threadEvent {
		need[rcx] = true
	}
	if h.Event {
		need[rdx], need[r10], need[r11] = true, true, true
	}
	if h.Return != nil || h.Unhijack || h.Rehijack {
		need[rcx], need[rdx], need[rsi], need[r10], need[r11] = true, true, true, true, true
	}
	return need
}

// handler generates the handler of a slot, from moving the stack pointer
// below the red zone to moving it back; enter is the label of the
// displaced instructions (a return probe's gate enters them).
func (g *x86Gen) handler(s *Site, h *Handler, enter x86enc.Label) {
	a, cfg := g.a, g.cfg
	slot := a.Base()
	p := planHandler(slot, h, cfg)
	plain := a.NewLabel()
	a.Lea(rsp, x86enc.At(rsp, -128))
	// A counter-only slot keeps the flags in rax; a counter in reach of a
	// RIP-relative operand is incremented as soon as the flags are saved.
	g.flagsInRAX = cfg.Flags == FlagsLAHF && !h.Event && h.Return == nil && !h.Unhijack && !h.Rehijack
	var early func()
	if h.Count && !p.far && !p.perThread() {
		early = func() { g.counter(cfg.Data.CounterAddr(h.Counter)) }
	}
	g.prologue(p.saved(h), early)
	g.countAndRecord(s, h, p, early != nil)
	// Unhijack and Rehijack change only the frames above this one, the
	// return probe only this one: arming comes last, so that its hot path
	// may leave through the gate.
	for _, rearm := range []bool{false, true} {
		if rearm && !h.Rehijack || !rearm && !h.Unhijack {
			continue
		}
		skip := a.NewLabel()
		g.threadLookup(false, skip)
		g.unhijack(rearm)
		a.Bind(skip)
	}
	if h.Return != nil {
		g.armAndExit(h, enter, plain)
	}
	// The slow paths sit before the epilogue, jumped over (or after the
	// gate exit), so that the slot still ends with the displaced
	// instructions and the jump back.
	if len(g.cold) > 0 {
		if h.Return == nil {
			a.Jmp(plain)
		}
		g.emitCold()
	}
	a.Bind(plain)
	g.epilogue()
	a.Lea(rsp, x86enc.At(rsp, 128))
}

// countAndRecord generates the count and the entry event of handler h as
// p plans them (counted says the prologue counted already): in the
// thread's stripe, with the shared counter and ring as the cold path of a
// thread without one, or in the shared counter and ring alone.
func (g *x86Gen) countAndRecord(s *Site, h *Handler, p handlerPlan, counted bool) {
	a, d := g.a, g.cfg.Data
	entry := eventSpec{kind: EventEntry, id: h.ID, args: true, regs: h.ArgRegs, ip: s.Addr, dropCtr: -1, goG: h.Go}
	if d != nil && d.perThread(h.Counter) {
		entry.dropCtr = h.Counter
	}
	if !p.perThread() {
		if h.Count && !counted {
			g.counter(d.CounterAddr(h.Counter))
		}
		if h.Event {
			g.event(entry)
		}
		return
	}
	shared, after := a.NewLabel(), a.NewLabel()
	g.stripeLookup(shared)
	if p.threadCount {
		g.threadCount(h.Counter)
	}
	if p.threadEvent {
		g.threadEvent(h.ID, h.Counter, h.ArgRegs)
	} else if h.Event {
		g.event(entry)
	}
	a.Bind(after)
	// A thread without a stripe: the shared counter and ring.
	g.cold = append(g.cold, func() {
		a.Bind(shared)
		if h.Count {
			g.counter(d.CounterAddr(h.Counter))
		}
		if h.Event {
			g.event(entry)
		}
		a.Jmp(after)
	})
}

// armAndExit arms the return probe of h (plain: the thread has no slot in
// the thread table) and leaves through the gate: with the stack pointer
// back above the return address (which now holds the address of the
// displaced instructions, enter), the gate's call enters them and pushes
// the return trampoline's address in its place.
func (g *x86Gen) armAndExit(h *Handler, enter, plain x86enc.Label) {
	a := g.a
	gate := g.cfg.ReturnAddr - gateLen
	farGate := counterFar(a.Base(), gate)
	g.threadLookup(true, plain)
	g.arm(h, enter, plain, farGate)
	g.epilogue()
	a.Lea(rsp, x86enc.At(rsp, 128+8))
	if farGate {
		a.JmpMem(x86enc.At(rsp, -16))
	} else {
		a.JmpTo(gate)
	}
}

// displaced appends the relocated instructions of a detour and the jump
// back (or just the jump back for a NOP site).
func (g *x86Gen) displaced(s *Site) error {
	a := g.a
	if s.Redo != nil {
		c, err := relocate(s.Redo, a.PC())
		if err != nil {
			return err
		}
		if c.Form != xol.X86FormCopy {
			return fmt.Errorf("the kept %s at %#x runs again from the slot as a %s: %w", s.Redo.Mnemonic, s.Redo.Addr, c.Form, ErrEncode)
		}
		a.Raw(c.Code[:c.StepLen])
	}
	if s.Kind != SiteDetour || s.Run == 0 {
		a.JmpTo(s.Resume())
		return nil
	}
	for i := 0; i < s.Run; i++ {
		in := &s.Insts[i]
		last := i == s.Run-1 || !fallsThrough(in.Branch)
		pos := a.PC()
		c, err := relocate(in, pos)
		if err != nil {
			return err
		}
		if !last {
			ok := c.Form == xol.X86FormCopy || c.Form == xol.X86FormDisp ||
				c.Form == xol.X86FormRetarget && in.Branch == decode.BranchJcc
			if !ok {
				return fmt.Errorf("the %s at %#x needs a %s form in the middle of the detour at %#x: %w", in.Mnemonic, in.Addr, c.Form, pos, ErrOutOfReach)
			}
			a.Raw(c.Code[:c.StepLen])
			continue
		}
		// The last instruction run: its boost code does what the original
		// does and goes on to the resume address or the branch target. Its
		// entry must land at pos.
		// The form of the copy may depend on its address (a target at
		// the edge of a rel32's reach from the slot): look for an address
		// whose copy keeps its entry where the first one had it.
		for try, at := 0, pos; at+uint64(c.BoostOff) != pos; try++ {
			if try == 3 {
				return fmt.Errorf("the copy of the %s at %#x changes form with its address near %#x (a target at the edge of reach): %w", in.Mnemonic, in.Addr, pos, ErrOutOfReach)
			}
			at = pos - uint64(c.BoostOff)
			if c, err = relocate(in, at); err != nil {
				return err
			}
		}
		a.Raw(c.Code[c.BoostOff:])
		return nil
	}
	return nil
}

// relocate relocates one displaced instruction to pos and requires a copy
// that runs without a trap.
func relocate(in *decode.X86Inst, pos uint64) (*xol.X86Copy, error) {
	c, err := xol.RelocateX86(in, pos, nil)
	if err != nil {
		var re *xol.RefusalError
		if errors.As(err, &re) && re.Code == xol.RefuseRIPRelNoScratch {
			return nil, fmt.Errorf("the operand of the %s at %#x from the slot at %#x: %w", in.Mnemonic, in.Addr, pos, ErrOutOfReach)
		}
		return nil, siteErr(in.Addr, RefuseNotRelocatable, err, "relocating the %s at %#x to %#x failed", in.Mnemonic, in.Addr, pos)
	}
	if c.Scratch >= 0 {
		return nil, fmt.Errorf("the RIP-relative operand of the %s at %#x from the slot at %#x: %w", in.Mnemonic, in.Addr, pos, ErrOutOfReach)
	}
	if !c.Boost {
		return nil, siteErr(in.Addr, RefuseNotBoostable, nil, "the %s at %#x cannot run from the slot without a trap", in.Mnemonic, in.Addr)
	}
	return c, nil
}

// ReturnEntryOffset is the offset, in the code of the return trampoline,
// of the address armed functions return to (Config.ReturnAddr). The gate
// lies just before it: call *-8(%rsp). A slot that arms a return probe
// stores the address of its displaced instructions over the return
// address, restores the registers, moves the stack pointer above that
// word and jumps to the gate, whose call enters the displaced
// instructions and pushes the return trampoline's address where the
// return address was. The function's ret then goes where the return stack
// buffer predicts, and so does the return trampoline's own ret to the
// original address: a return probe costs no mispredicted return, and the
// return stack buffer stays in step for the returns above.
const ReturnEntryOffset = 16

// gateLen is the length of the gate's call.
const gateLen = 4

// GenerateReturnX86 generates the return trampoline at address addr: the
// gate, and at addr+ReturnEntryOffset the code a function whose return
// probe is armed returns to. It finds the thread's innermost entry for
// the frame (dropping entries that a longjmp or an exception abandoned),
// runs the return handlers of that entry (and of entries chained by tail
// calls), and returns to the original return address with every register
// and flag as the function left them. A return without an entry (the
// stack was switched behind the tracer's back) executes ud2: the thread
// gets SIGILL, as Linux does then.
//
// The code does not depend on any probe: one return trampoline serves a
// whole process, and it must stay mapped for as long as a thread may
// return through it (in practice, for the life of the process).
func GenerateReturnX86(addr uint64, cfg *Config) ([]byte, error) {
	a := x86enc.New(addr)
	if err := generateReturnInto(a, cfg); err != nil {
		return nil, err
	}
	return a.Bytes(), nil
}

// returnCount counts a return at the counter word in rdx (the entry's).
// A per-thread counter (Data.SetThreads) is incremented in the thread's
// stripe, without a lock prefix, like an entry's; a shared one, or any
// counter of a thread without a stripe, in the shared word with one. It
// clobbers rdx, r10, r11 and the flags, and reloads r10 with the address
// of S (the return address's slot).
func (g *x86Gen) returnCount() {
	a := g.a
	d := g.cfg.Data
	if d == nil || d.ThreadSlots == 0 || d.ThreadCounters == 0 {
		a.LockIncMem(x86enc.S64, x86enc.At(rdx, 0))
		return
	}
	shared, noStripe, done := a.NewLabel(), a.NewLabel(), a.NewLabel()
	// rdx - the first counter's address: the counter's offset, per-thread
	// below 8*ThreadCounters (unsigned: a counter elsewhere is above).
	a.Mov(x86enc.S64, r11, rdx)
	g.addr(r10, d.CounterAddr(0))
	a.ALU(x86enc.Sub, x86enc.S64, r11, r10)
	a.ALUImm32(x86enc.Cmp, x86enc.S64, r11, int32(8*d.ThreadCounters))
	a.Jcc(x86enc.CondAE, shared)
	a.Push(r11)
	g.stripeLookup(noStripe)
	a.Pop(rdx)
	a.IncMem(x86enc.S64, x86enc.Indexed(r11, rdx, 1, stripeData))
	a.Jmp(done)
	a.Bind(noStripe)
	a.Pop(rdx)
	g.addr(r10, d.CounterAddr(0))
	a.ALU(x86enc.Add, x86enc.S64, rdx, r10)
	a.Bind(shared)
	a.LockIncMem(x86enc.S64, x86enc.At(rdx, 0))
	a.Bind(done)
	a.Lea(r10, x86enc.At(rsp, int32(g.spOff()-8)))
}

// generateReturnInto generates the return trampoline with a and checks it
// (finishX86).
func generateReturnInto(a *x86enc.Asm, cfg *Config) error {
	if cfg == nil {
		return fmt.Errorf("no config: %w", ErrConfig)
	}
	if cfg.ThreadPointer == ThreadNone {
		return fmt.Errorf("return probes without a thread pointer: %w", ErrConfig)
	}
	if err := cfg.Threads.validate(); err != nil {
		return err
	}
	ring := cfg.Data != nil && cfg.Data.RingRecords > 0
	if cfg.Data != nil {
		if err := cfg.Data.validate(); err != nil {
			return err
		}
	}
	g := &x86Gen{a: a, cfg: cfg, skip: 8}
	fatal, dropMore, got, each, nocount, noevent, done := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	// The gate, and the return trampoline 16-byte aligned after it.
	for range ReturnEntryOffset - gateLen {
		a.Int3()
	}
	a.CallMem(x86enc.At(rsp, -8))
	if a.Len() != ReturnEntryOffset {
		return fmt.Errorf("the gate ends at +%d, not at +%d: %w", a.Len(), ReturnEntryOffset, ErrEncode)
	}
	// The return popped the return address: the slot at rsp-8 (S) is
	// free and receives the original return address for the final jump.
	a.Lea(rsp, x86enc.At(rsp, -8))
	g.prologue(map[x86enc.Reg]bool{rcx: true, rdx: true, rsi: true, r10: true, r11: true}, nil)
	g.threadLookup(false, fatal)
	a.Lea(r10, x86enc.At(rsp, int32(g.spOff()-8)))
	a.Load(x86enc.S32, rcx, x86enc.At(rsi, threadState))
	// Drop the entries below S (abandoned frames, cold); the top one must
	// then be S's.
	a.Test(x86enc.S32, rcx, rcx)
	a.Jcc(x86enc.CondE, fatal)
	a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.Indexed(rsi, rcx, 1, entSP), r10)
	a.Jcc(x86enc.CondB, dropMore)
	a.Jcc(x86enc.CondNE, fatal)
	a.Bind(got)
	a.Load(x86enc.S64, rdx, x86enc.Indexed(rsi, rcx, 1, entRet))
	a.Store(x86enc.S64, x86enc.At(r10, 0), rdx)
	a.Bind(each)
	a.Load(x86enc.S64, rdx, x86enc.Indexed(rsi, rcx, 1, entCounter))
	if cfg.ReturnCalls {
		// An entry with calls: its counter word is its slot's return
		// stub, which counts and calls (x86call.go).
		count := a.NewLabel()
		a.TestMemImm32(x86enc.S32, x86enc.Indexed(rsi, rcx, 1, entFlags), entFlagCall)
		a.Jcc(x86enc.CondE, count)
		a.CallReg(rdx)
		a.Jmp(nocount)
		a.Bind(count)
	}
	a.Test(x86enc.S64, rdx, rdx)
	a.Jcc(x86enc.CondE, nocount)
	g.returnCount()
	a.Bind(nocount)
	if ring {
		a.TestMemImm32(x86enc.S32, x86enc.Indexed(rsi, rcx, 1, entFlags), entFlagEvent)
		a.Jcc(x86enc.CondE, noevent)
		idm := x86enc.Indexed(rsi, rcx, 1, entProbe)
		// The event's SP is S and its IP the original return address.
		g.skip = 0
		g.event(eventSpec{kind: EventReturn, idMem: &idm, ret: true, ipSP: true, dropCtr: -1})
		g.skip = 8
		a.Lea(r10, x86enc.At(rsp, int32(g.spOff()-8)))
	}
	a.Bind(noevent)
	// Entries chained by tail calls share S: run their handlers too.
	a.ALUImm8(x86enc.Sub, x86enc.S32, rcx, threadEntrySize)
	a.Jcc(x86enc.CondE, done)
	a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.Indexed(rsi, rcx, 1, entSP), r10)
	a.Jcc(x86enc.CondE, each)
	a.Bind(done)
	// Pop: one 64-bit store of the generation (as read) and the new
	// depth. A 32-bit store of the depth alone would keep the generation
	// without reading it, but the next push's 64-bit load of the state
	// could not be forwarded from it and would wait for it to reach the
	// cache; see the Threads comment for why the 64-bit store is safe.
	a.Load(x86enc.S32, rdx, x86enc.At(rsi, threadState+4))
	a.Shl(x86enc.S64, rdx, 32)
	a.ALU(x86enc.Or, x86enc.S64, rdx, rcx)
	a.Store(x86enc.S64, x86enc.At(rsi, threadState), rdx)
	g.epilogue()
	// The function's ret consumed the return-stack-buffer entry of the
	// gate's call; this ret consumes the one of the original call.
	a.Ret()
	a.Bind(fatal)
	a.Ud2()
	a.Bind(dropMore)
	a.ALUImm8(x86enc.Sub, x86enc.S32, rcx, threadEntrySize)
	a.Jcc(x86enc.CondE, fatal)
	a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.Indexed(rsi, rcx, 1, entSP), r10)
	a.Jcc(x86enc.CondB, dropMore)
	a.Jcc(x86enc.CondNE, fatal)
	a.Jmp(got)
	g.emitCold()
	return finishX86(a)
}

// finishX86 resolves the labels of a and checks every instruction it
// wrote by decoding it again with package decode: same start, same
// length. An error of the encoder becomes ErrOutOfReach or ErrEncode.
func finishX86(a *x86enc.Asm) error {
	_, err := a.Finish()
	if err == nil {
		err = a.Verify(decode.X86Len)
	}
	if err != nil {
		return x86Err(err)
	}
	return nil
}

// x86Err gives an error of the encoder this package's sentinel.
func x86Err(err error) error {
	var ee *x86enc.Error
	if !errors.As(err, &ee) {
		return err
	}
	if errors.Is(ee.Err, x86enc.ErrOutOfReach) {
		return fmt.Errorf("%s: %w", ee.Msg, ErrOutOfReach)
	}
	return fmt.Errorf("%s: %w", ee.Msg, ErrEncode)
}

// x86Jump returns the bytes written at a site: jmp rel32 from at to slot,
// then int3 up to n bytes.
func x86Jump(at, slot uint64, n int) ([]byte, error) {
	d := int64(slot - (at + jmpLen))
	if d != int64(int32(d)) {
		return nil, fmt.Errorf("jump from %#x to the slot at %#x: %w", at, slot, ErrOutOfReach)
	}
	b := []byte{0xE9, byte(d), byte(d >> 8), byte(d >> 16), byte(d >> 24)}
	for len(b) < n {
		b = append(b, 0xCC)
	}
	return b, nil
}

// Area is a range of executable memory in the tracee, mapped read-execute
// by the engine, from which slots are allocated in order. It is not safe
// for concurrent use.
type Area struct {
	Addr, Size uint64
	used       uint64
}

// NewArea returns an empty area of size bytes at addr.
func NewArea(addr, size uint64) (*Area, error) {
	if size == 0 || addr+size < addr {
		return nil, fmt.Errorf("area of %d bytes at %#x: %w", size, addr, ErrConfig)
	}
	return &Area{Addr: addr, Size: size}, nil
}

// Used returns the bytes allocated so far.
func (a *Area) Used() uint64 { return a.used }

// slotAlign aligns slots (and the return trampoline) to 16 bytes.
const slotAlign = 16

func (a *Area) place(gen func(at uint64) ([]byte, error)) (uint64, []byte, error) {
	at := (a.Addr + a.used + slotAlign - 1) &^ (slotAlign - 1)
	code, err := gen(at)
	if err != nil {
		return 0, nil, err
	}
	if at+uint64(len(code)) > a.Addr+a.Size {
		return 0, nil, fmt.Errorf("%d bytes at %#x: %w", len(code), at, ErrAreaFull)
	}
	a.used = at + uint64(len(code)) - a.Addr
	return at, code, nil
}

// ReturnX86 allocates and generates the return trampoline (see
// GenerateReturnX86), returns where its code goes and sets cfg.ReturnAddr
// to its entry. Write the code before installing return probes.
func (a *Area) ReturnX86(cfg *Config) (uint64, []byte, error) {
	at, code, err := a.place(func(at uint64) ([]byte, error) { return GenerateReturnX86(at, cfg) })
	if err != nil {
		return 0, nil, err
	}
	cfg.ReturnAddr = at + ReturnEntryOffset
	return at, code, nil
}

// BuildX86 allocates a slot for site s, generates its code for handler h,
// and makes the patches that enter it and restore the site. The engine
// writes Code at Slot (the area is mapped read-execute; write through
// /proc/PID/mem or ptrace), then applies Install with the other patches of
// the batch. The slot must stay mapped while a thread may be in it; after
// Remove is applied (Remove's guard keeps threads out of the slot) the
// space may be reused.
func (a *Area) BuildX86(s *Site, h *Handler, cfg *Config) (*Trampoline, error) {
	if s == nil || h == nil {
		return nil, fmt.Errorf("no site or handler: %w", ErrConfig)
	}
	slot, code, err := a.place(func(at uint64) ([]byte, error) { return GenerateX86(at, s, h, cfg) })
	if err != nil {
		return nil, err
	}
	jmp, err := x86Jump(s.PatchAddr, slot, s.Len)
	if err != nil {
		return nil, err
	}
	t := &Trampoline{Site: s, Handler: *h, Slot: slot, Code: code}
	t.Install = Patch{Addr: s.PatchAddr, Old: append([]byte(nil), s.Old...), New: jmp}
	t.Remove = Patch{Addr: s.PatchAddr, Old: append([]byte(nil), jmp...), New: append([]byte(nil), s.Old...),
		Guard: []Range{{slot, slot + uint64(len(code))}}}
	if h.Return != nil {
		hr := *h.Return
		t.Handler.Return = &hr
		// A thread at the gate is about to call into the slot.
		gate := cfg.ReturnAddr - gateLen
		t.Remove.Guard = append(t.Remove.Guard, Range{gate, gate + gateLen})
	}
	return t, nil
}
