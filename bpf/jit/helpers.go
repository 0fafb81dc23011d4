package jit

import (
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/internal/x86enc"
)

// Runtime is the helpers' own memory in an arena: one 64-byte line per
// stripe (the random generator's state), so that no two threads write the
// same cache line.
type Runtime struct {
	addr    uint64
	stripes int
	arena   *maps.Arena
	// Printk is the ring buffer that trace_printk writes its records to
	// (PrintkRecordSize bytes each), for the tracer to format; it is
	// allocated when the first program that calls trace_printk is
	// compiled, nil before.
	Printk *maps.Map
}

// PrintkRecordSize is the size of a trace_printk record: the format's
// address and size, then the three arguments, 64-bit words.
const PrintkRecordSize = 40

// printkRing is the size of the trace_printk ring in bytes.
const printkRing = 1 << 16

// NewRuntime allocates the runtime area for stripes threads (a power of
// two) in arena.
func NewRuntime(arena *maps.Arena, stripes int) (*Runtime, error) {
	if stripes <= 0 || stripes&(stripes-1) != 0 {
		return nil, fmt.Errorf("runtime for %d stripes, not a power of two: %w", stripes, ErrInvalid)
	}
	_, addr, err := arena.Alloc(stripes * 64)
	if err != nil {
		return nil, fmt.Errorf("runtime area: %w", err)
	}
	return &Runtime{addr: addr, stripes: stripes, arena: arena}, nil
}

// Helpers lists the helpers the JIT compiles, by the kernel's numbers.
var Helpers = []asm.BuiltinFunc{
	asm.FnMapLookupElem, asm.FnMapUpdateElem, asm.FnMapDeleteElem,
	asm.FnKtimeGetNs, asm.FnKtimeGetBootNs, asm.FnGetCurrentPidTgid,
	asm.FnGetCurrentUidGid, asm.FnGetCurrentComm, asm.FnGetSmpProcessorId, asm.FnGetPrandomU32,
	asm.FnProbeReadUser, asm.FnProbeRead, asm.FnProbeReadUserStr, asm.FnProbeReadStr,
	asm.FnProbeReadKernel,
	asm.FnRingbufOutput, asm.FnRingbufReserve, asm.FnRingbufSubmit, asm.FnRingbufDiscard,
	asm.FnGetFuncIp, asm.FnGetAttachCookie, asm.FnGetStack, asm.FnTracePrintk,
	asm.FnPerfEventOutput,
}

// The context a probe passes (R1, see the package doc) is the kernel's
// struct pt_regs followed by three words: what get_func_ip and
// get_attach_cookie return, the address of the probe (the function's
// entry for a return probe) and the attachment's cookie; and flags, of
// which CtxAtEntry says that the probed instruction is a push %rbp or an
// endbr64 at a function's entry (where get_stack adds the return address
// at the stack pointer, as the kernel does).
const (
	// PtRegsSize is the size of struct pt_regs on x86-64.
	PtRegsSize = 168
	// CtxFuncIP, CtxCookie and CtxFlags are the offsets of the words.
	CtxFuncIP = PtRegsSize
	CtxCookie = PtRegsSize + 8
	CtxFlags  = PtRegsSize + 16
	// CtxSize is the size of the whole context.
	CtxSize = PtRegsSize + 24
	// CtxAtEntry is the flag of a probe at a function's entry.
	CtxAtEntry = 1

	ptRBP = 32
	ptRIP = 128
	ptRSP = 152
	// maxStack is the kernel's perf_event_max_stack default: the most
	// entries a stack has, skipped ones included.
	maxStack = 127
	// userTop is the end of x86-64 user space with 4-level page tables,
	// less a page (the kernel's TASK_SIZE_MAX): a frame must lie below.
	userTop = 0x7ffffffff000
	// The flags of get_stack.
	stackSkipMask = 0xff
	stackUser     = 1 << 8
	stackBuildID  = 1 << 11
)

// helper returns the label of helper fn's code, emitted after the program.
func (c *compiler) helper(fn asm.BuiltinFunc) (x86enc.Label, error) {
	if l, ok := c.helpers[fn]; ok {
		return l, nil
	}
	known := false
	for _, h := range Helpers {
		known = known || h == fn
	}
	if !known {
		return 0, fmt.Errorf("helper %v (%d): %w", fn, int32(fn), ErrUnsupported)
	}
	if (fn == asm.FnGetPrandomU32 || fn == asm.FnTracePrintk) && c.opts.Runtime == nil {
		return 0, fmt.Errorf("helper %v needs a runtime area (Options.Runtime): %w", fn, ErrInvalid)
	}
	if fn == asm.FnTracePrintk && c.opts.Runtime.Printk == nil {
		pk, err := maps.New(c.opts.Runtime.arena, &ebpf.MapSpec{Name: "trace_printk", Type: ebpf.RingBuf, MaxEntries: printkRing}, nil)
		if err != nil {
			return 0, fmt.Errorf("trace_printk's ring: %w", err)
		}
		c.opts.Runtime.Printk = pk
	}
	if fn == asm.FnTracePrintk {
		// Its records go through ringbuf_output's code.
		if _, err := c.helper(asm.FnRingbufOutput); err != nil {
			return 0, err
		}
	}
	if fn == asm.FnPerfEventOutput {
		// Its records go through the ring's reserve and submit.
		c.perf = true
		for _, h := range []asm.BuiltinFunc{asm.FnRingbufReserve, asm.FnRingbufSubmit} {
			if _, err := c.helper(h); err != nil {
				return 0, err
			}
		}
	}
	l := c.a.NewLabel()
	c.helpers[fn] = l
	return l, nil
}

// Linux x86-64 system call numbers.
const (
	sysGetpid         = 39
	sysGetuid         = 102
	sysPrctl          = 157
	sysGetgid         = 104
	sysGettid         = 186
	sysClockGettime   = 228
	sysProcessVMReadv = 310
)

// Error returns of the helpers, the kernel's negated errno.
const (
	eNOENT = -maps.ENOENT
	e2BIG  = -maps.E2BIG
	eFAULT = -maps.EFAULT
	eEXIST = -maps.EEXIST
	eINVAL = -maps.EINVAL
	eAGAIN = -11
	eRANGE = -34
)

// Registers by their System V names, for the helpers.
const (
	rax = x86enc.RAX
	rcx = x86enc.RCX
	rdx = x86enc.RDX
	rbx = x86enc.RBX
	rsp = x86enc.RSP
	rsi = x86enc.RSI
	rdi = x86enc.RDI
	r8  = x86enc.R8
	r9  = x86enc.R9
	r10 = x86enc.R10
	r11 = x86enc.R11
	s32 = x86enc.S32
	s64 = x86enc.S64
)

// emitHelpers emits the code of every helper the program calls. A helper
// is a System V function of its BPF arguments (rdi, rsi, rdx, rcx, r8) that
// returns in rax, may change rcx, rdx, rsi, rdi, r8-r11 and keeps the
// other registers; r12 holds the stripe number.
func (c *compiler) emitHelpers() error {
	a := c.a
	// The hash routines are shared by lookup, update and delete.
	var hash *hashLabels
	needHash := func() *hashLabels {
		if hash == nil {
			hash = &hashLabels{lock: a.NewLabel(), find: a.NewLabel()}
		}
		return hash
	}
	var reserve x86enc.Label
	haveReserve := false
	if _, ok := c.helpers[asm.FnRingbufOutput]; ok {
		reserve, haveReserve = c.helperLabel(asm.FnRingbufReserve), true
	}
	for _, fn := range Helpers {
		l, ok := c.helpers[fn]
		if !ok {
			continue
		}
		a.Bind(l)
		switch fn {
		case asm.FnMapLookupElem:
			c.mapLookup(needHash())
		case asm.FnMapUpdateElem:
			c.mapUpdate(needHash())
		case asm.FnMapDeleteElem:
			c.mapDelete(needHash())
		case asm.FnKtimeGetNs:
			c.clock(1) // CLOCK_MONOTONIC
		case asm.FnKtimeGetBootNs:
			c.clock(7) // CLOCK_BOOTTIME
		case asm.FnGetCurrentPidTgid:
			c.twoIDs(sysGetpid, sysGettid)
		case asm.FnGetCurrentUidGid:
			c.twoIDs(sysGetgid, sysGetuid)
		case asm.FnGetCurrentComm:
			c.comm()
		case asm.FnGetSmpProcessorId:
			a.Mov(s32, rax, x86enc.R12)
			a.Ret()
		case asm.FnGetPrandomU32:
			c.prandom()
		case asm.FnProbeReadUser, asm.FnProbeRead:
			c.probeRead(false)
		case asm.FnProbeReadKernel:
			c.probeRead(true)
		case asm.FnProbeReadUserStr, asm.FnProbeReadStr:
			c.probeReadStr()
		case asm.FnRingbufReserve:
			c.ringReserve()
		case asm.FnRingbufOutput:
			c.ringOutput(reserve)
		case asm.FnRingbufSubmit:
			c.ringCommit(false)
		case asm.FnRingbufDiscard:
			c.ringCommit(true)
		case asm.FnGetFuncIp:
			a.Load(s64, rax, x86enc.At(rdi, CtxFuncIP))
			a.Ret()
		case asm.FnGetAttachCookie:
			a.Load(s64, rax, x86enc.At(rdi, CtxCookie))
			a.Ret()
		case asm.FnGetStack:
			c.getStack()
		case asm.FnTracePrintk:
			c.tracePrintk()
		case asm.FnPerfEventOutput:
			c.perfEventOutput()
		}
	}
	if haveReserve {
		if _, ok := c.helpers[asm.FnRingbufReserve]; !ok {
			// Bound by helperLabel only for ringbuf_output's use.
			a.Bind(reserve)
			c.ringReserve()
		}
	}
	if hash != nil {
		c.hashLock(hash.lock)
		c.hashFind(hash.find)
	}
	return nil
}

// helperLabel returns the label of fn for another helper's use: the
// label of its own code when the program calls it too.
func (c *compiler) helperLabel(fn asm.BuiltinFunc) x86enc.Label {
	if l, ok := c.helpers[fn]; ok {
		return l
	}
	return c.a.NewLabel()
}

type hashLabels struct{ lock, find x86enc.Label }

// retImm returns v.
func (c *compiler) retImm(v int64) {
	c.a.MovImm(rax, uint64(v))
	c.a.Ret()
}

// movNeg sets r to the negative error v (as retImm returns it).
func (c *compiler) movNeg(r x86enc.Reg, v int64) { c.a.MovImm(r, uint64(v)) }

// retZero returns 0 (xor eax, eax; ret).
func (c *compiler) retZero() {
	c.a.ALU(x86enc.Xor, s32, rax, rax)
	c.a.Ret()
}

// u64 is v's bits, for a negative constant.
func u64(v int64) uint64 { return uint64(v) }

// mapLookup: map_lookup_elem(map, key) -> value address or NULL.
func (c *compiler) mapLookup(h *hashLabels) {
	a := c.a
	null, array, percpu, hash := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	c.dispatch(array, percpu, hash, null)
	a.Bind(array)
	a.Load(s32, rcx, x86enc.At(rsi, 0))
	a.ALULoad(x86enc.Cmp, s32, rcx, x86enc.At(rdi, maps.DescMaxEntries))
	a.Jcc(x86enc.CondAE, null)
	a.Load(s32, rax, x86enc.At(rdi, maps.DescStride))
	a.Imul(s64, rax, rcx)
	a.ALULoad(x86enc.Add, s64, rax, x86enc.At(rdi, maps.DescData))
	a.Ret()
	a.Bind(percpu)
	c.percpuIndex(null)
	a.Ret()
	a.Bind(hash)
	c.checkStripe(null)
	a.CallLabel(h.lock)
	a.CallLabel(h.find)
	fresh := a.NewLabel()
	a.Test(s64, rax, rax)
	a.Jcc(x86enc.CondE, fresh)
	c.ifLRU(fresh)
	c.stampEntry(rax, r8)
	a.Bind(fresh)
	a.StoreImm(s32, x86enc.At(rdi, maps.DescLock), 0)
	a.Test(s64, rax, rax)
	a.Jcc(x86enc.CondE, null)
	c.hashValue(rax, rax)
	c.ownStripe(rax)
	a.Ret()
	a.Bind(null)
	c.retZero()
}

// dispatch jumps by the map type of the descriptor in rdi.
func (c *compiler) dispatch(array, percpu, hash, other x86enc.Label) {
	a := c.a
	a.Load(s32, rax, x86enc.At(rdi, maps.DescType))
	a.ALUImm8(x86enc.Cmp, s32, rax, int8(ebpf.Array))
	a.Jcc(x86enc.CondE, array)
	a.ALUImm8(x86enc.Cmp, s32, rax, int8(ebpf.PerCPUArray))
	a.Jcc(x86enc.CondE, percpu)
	a.ALUImm8(x86enc.Cmp, s32, rax, int8(ebpf.Hash))
	a.Jcc(x86enc.CondE, hash)
	a.ALUImm8(x86enc.Cmp, s32, rax, int8(ebpf.LRUHash))
	a.Jcc(x86enc.CondE, hash)
	a.ALUImm8(x86enc.Cmp, s32, rax, int8(ebpf.PerCPUHash))
	a.Jcc(x86enc.CondE, hash)
	a.Jmp(other)
}

// percpuIndex leaves in rax the address of the calling stripe's value of
// key [rsi] in the per-CPU array rdi, or jumps to bad (key beyond max
// entries, or a stripe beyond the map's).
func (c *compiler) percpuIndex(bad x86enc.Label) {
	a := c.a
	a.Load(s32, rcx, x86enc.At(rsi, 0))
	a.ALULoad(x86enc.Cmp, s32, rcx, x86enc.At(rdi, maps.DescMaxEntries))
	a.Jcc(x86enc.CondAE, bad)
	a.Load(s32, rax, x86enc.At(rdi, maps.DescStripes))
	a.ALU(x86enc.Cmp, s64, x86enc.R12, rax)
	a.Jcc(x86enc.CondAE, bad)
	a.Load(s32, rax, x86enc.At(rdi, maps.DescStride))
	a.Imul(s64, rcx, rax)
	a.Load(s64, rax, x86enc.At(rdi, maps.DescStripeSize))
	a.Imul(s64, rax, x86enc.R12)
	a.ALU(x86enc.Add, s64, rax, rcx)
	a.ALULoad(x86enc.Add, s64, rax, x86enc.At(rdi, maps.DescData))
}

// hashValue sets dst to the value address of the hash entry at entry
// (the descriptor in rdi; a per-CPU hash's first stripe's value); it
// changes rcx.
func (c *compiler) hashValue(dst, entry x86enc.Reg) {
	a := c.a
	a.Load(s32, rcx, x86enc.At(rdi, maps.DescKeySize))
	a.ALUImm8(x86enc.Add, s32, rcx, 7)
	a.ALUImm8(x86enc.And, s32, rcx, -8)
	a.Lea(dst, x86enc.Indexed(entry, rcx, 1, 8))
}

// valuePad sets r to the value size of the map in rdi padded to 8.
func (c *compiler) valuePad(r x86enc.Reg) {
	a := c.a
	a.Load(s32, r, x86enc.At(rdi, maps.DescValueSize))
	a.ALUImm8(x86enc.Add, s32, r, 7)
	a.ALUImm8(x86enc.And, s32, r, -8)
}

// ownStripe moves dst, a per-CPU hash value's first stripe, to the
// calling thread's stripe (the map in rdi; other maps keep dst); it
// changes rcx.
func (c *compiler) ownStripe(dst x86enc.Reg) {
	a := c.a
	skip := a.NewLabel()
	a.ALUMemImm8(x86enc.Cmp, s32, x86enc.At(rdi, maps.DescType), int8(ebpf.PerCPUHash))
	a.Jcc(x86enc.CondNE, skip)
	c.valuePad(rcx)
	a.Imul(s64, rcx, x86enc.R12)
	a.ALU(x86enc.Add, s64, dst, rcx)
	a.Bind(skip)
}

// checkStripe jumps to bad when the map in rdi is a per-CPU hash with no
// stripe for the calling thread's number; it changes rax.
func (c *compiler) checkStripe(bad x86enc.Label) {
	a := c.a
	ok := a.NewLabel()
	a.ALUMemImm8(x86enc.Cmp, s32, x86enc.At(rdi, maps.DescType), int8(ebpf.PerCPUHash))
	a.Jcc(x86enc.CondNE, ok)
	a.Load(s32, rax, x86enc.At(rdi, maps.DescStripes))
	a.ALU(x86enc.Cmp, s64, x86enc.R12, rax)
	a.Jcc(x86enc.CondAE, bad)
	a.Bind(ok)
}

// mapUpdate: map_update_elem(map, key, value, flags) -> 0 or -errno.
func (c *compiler) mapUpdate(h *hashLabels) {
	a := c.a
	inval, array, percpu, hash, big, exist := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	a.ALUImm8(x86enc.Cmp, s64, rcx, maps.UpdateExist)
	a.Jcc(x86enc.CondA, inval)
	c.dispatch(array, percpu, hash, inval)

	a.Bind(array)
	a.Load(s32, rax, x86enc.At(rsi, 0))
	a.ALULoad(x86enc.Cmp, s32, rax, x86enc.At(rdi, maps.DescMaxEntries))
	a.Jcc(x86enc.CondAE, big)
	a.ALUImm8(x86enc.Cmp, s64, rcx, maps.UpdateNoExist)
	a.Jcc(x86enc.CondE, exist)
	a.Load(s32, r10, x86enc.At(rdi, maps.DescStride))
	a.Imul(s64, rax, r10)
	a.ALULoad(x86enc.Add, s64, rax, x86enc.At(rdi, maps.DescData))
	c.copyValue()
	c.retZero()

	a.Bind(percpu)
	a.Mov(s64, r11, rcx)
	c.percpuIndex(big)
	a.ALUImm8(x86enc.Cmp, s64, r11, maps.UpdateNoExist)
	a.Jcc(x86enc.CondE, exist)
	c.copyValue()
	c.retZero()

	a.Bind(hash)
	c.hashUpdate(h, big)

	a.Bind(inval)
	c.retImm(eINVAL)
	a.Bind(big)
	c.retImm(e2BIG)
	a.Bind(exist)
	c.retImm(eEXIST)
}

// copyValue copies the value at rdx to rax, the value size of the map in
// rdi; it changes rcx, rsi and rdi.
func (c *compiler) copyValue() {
	a := c.a
	a.Mov(s64, rsi, rdx)
	a.Load(s32, rcx, x86enc.At(rdi, maps.DescValueSize))
	a.Mov(s64, rdi, rax)
	a.RepMovsb()
}

// hashUpdate is map_update_elem of a hash map (rdi; key rsi, value rdx,
// flags rcx) under the map's lock: the value of the entry found is
// replaced, or a new entry takes a free slot (hashInsert), evicting the
// oldest entry of a full LRU map (lruEvict). It jumps to big when a per-CPU
// hash has no stripe for the calling thread; it returns 0 or -errno.
func (c *compiler) hashUpdate(h *hashLabels, big x86enc.Label) {
	a := c.a
	notFound, unlockRet := a.NewLabel(), a.NewLabel()
	c.checkStripe(big)
	a.Push(rdx)
	a.Push(rcx)
	a.CallLabel(h.lock)
	a.CallLabel(h.find)
	a.Pop(rcx)
	a.Pop(rdx)
	a.Test(s64, rax, rax)
	a.Jcc(x86enc.CondE, notFound)
	// Found: BPF_NOEXIST refuses, otherwise the value is replaced.
	a.ALUImm8(x86enc.Cmp, s64, rcx, maps.UpdateNoExist)
	a.MovImm(r11, u64(eEXIST))
	a.Jcc(x86enc.CondE, unlockRet)
	stamped := a.NewLabel()
	c.ifLRU(stamped)
	c.stampEntry(rax, r8)
	a.Bind(stamped)
	a.Push(rdi)
	c.hashValue(rax, rax)
	c.ownStripe(rax)
	c.copyValue()
	a.Pop(rdi)
	a.ALU(x86enc.Xor, s32, r11, r11)
	a.Jmp(unlockRet)

	a.Bind(notFound)
	a.ALUImm8(x86enc.Cmp, s64, rcx, maps.UpdateExist)
	a.MovImm(r11, u64(eNOENT))
	a.Jcc(x86enc.CondE, unlockRet)
	a.MovImm(r11, u64(e2BIG))
	a.Load(s32, rax, x86enc.At(rdi, maps.DescCount))
	a.ALULoad(x86enc.Cmp, s32, rax, x86enc.At(rdi, maps.DescMaxEntries))
	full, room := a.NewLabel(), a.NewLabel()
	a.Jcc(x86enc.CondAE, full)
	a.Bind(room)
	c.hashInsert(unlockRet)
	a.Bind(full)
	c.lruEvict(room, unlockRet)

	a.Bind(unlockRet)
	a.StoreImm(s32, x86enc.At(rdi, maps.DescLock), 0)
	a.Mov(s64, rax, r11)
	a.Ret()
}

// hashInsert writes a new entry of the hash map in rdi into the free slot
// r9 (none: it jumps to unlockRet with -E2BIG in r11): the key (rsi), then
// the value (rdx). It counts the entry and jumps to unlockRet with 0 in
// r11.
func (c *compiler) hashInsert(unlockRet x86enc.Label) {
	a := c.a
	a.Test(s64, r9, r9)
	a.Jcc(x86enc.CondE, unlockRet)
	// The key (rsi) into the free slot r9, then the value (rdx).
	a.Push(rdi)
	a.Load(s32, rcx, x86enc.At(rdi, maps.DescKeySize))
	a.Lea(rdi, x86enc.At(r9, 8))
	a.RepMovsb()
	a.Load(s64, rdi, x86enc.At(rsp, 0))
	c.hashValue(rax, r9)
	// A new entry of a per-CPU hash: every stripe's value zero, then the
	// calling thread's written, as the kernel does.
	zeroed := a.NewLabel()
	a.ALUMemImm8(x86enc.Cmp, s32, x86enc.At(rdi, maps.DescType), int8(ebpf.PerCPUHash))
	a.Jcc(x86enc.CondNE, zeroed)
	a.Push(rax)
	c.valuePad(rcx)
	a.Load(s32, r10, x86enc.At(rdi, maps.DescStripes))
	a.Imul(s64, rcx, r10)
	a.Mov(s64, rdi, rax)
	a.ALU(x86enc.Xor, s32, rax, rax)
	a.RepStosb()
	a.Pop(rax)
	a.Load(s64, rdi, x86enc.At(rsp, 0))
	c.ownStripe(rax)
	a.Bind(zeroed)
	c.copyValue()
	a.Pop(rdi)
	c.stampEntry(r9, rax)
	a.ALUMemImm8(x86enc.Add, s32, x86enc.At(rdi, maps.DescCount), 1)
	a.ALU(x86enc.Xor, s32, r11, r11)
	a.Jmp(unlockRet)
}

// lruEvict is the full hash map in rdi: an LRU map evicts its oldest entry
// (the smallest stamp of a slot in use) and jumps to room with a free slot
// in r9; the others jump to unlockRet, refusing with -E2BIG (in r11).
func (c *compiler) lruEvict(room, unlockRet x86enc.Label) {
	a := c.a
	c.ifLRU(unlockRet)
	scan, next := a.NewLabel(), a.NewLabel()
	a.Push(rdx)
	a.Push(rsi)
	a.MovImm(r8, ^uint64(0))
	a.ALU(x86enc.Xor, s32, r10, r10)
	a.Load(s32, rcx, x86enc.At(rdi, maps.DescMask))
	a.Inc(s64, rcx)
	a.Load(s64, rsi, x86enc.At(rdi, maps.DescData))
	a.Bind(scan)
	a.Load(s64, rax, x86enc.At(rsi, 0))
	a.Mov(s32, rdx, rax)
	a.ALUImm8(x86enc.And, s32, rdx, 3)
	a.ALUImm8(x86enc.Cmp, s32, rdx, maps.HashUsed)
	a.Jcc(x86enc.CondNE, next)
	a.ALU(x86enc.Cmp, s64, rax, r8)
	a.Jcc(x86enc.CondAE, next)
	a.Mov(s64, r8, rax)
	a.Mov(s64, r10, rsi)
	a.Bind(next)
	a.Load(s32, rdx, x86enc.At(rdi, maps.DescStride))
	a.ALU(x86enc.Add, s64, rsi, rdx)
	a.Dec(s64, rcx)
	a.Jcc(x86enc.CondNE, scan)
	a.Pop(rsi)
	a.Pop(rdx)
	a.Test(s64, r10, r10)
	a.Jcc(x86enc.CondE, unlockRet)
	a.StoreImm(s64, x86enc.At(r10, 0), maps.HashDeleted)
	a.ALUMemImm8(x86enc.Sub, s32, x86enc.At(rdi, maps.DescCount), 1)
	a.Test(s64, r9, r9)
	a.Jcc(x86enc.CondNE, room)
	a.Mov(s64, r9, r10)
	a.Jmp(room)
}

// ifLRU jumps to skip unless the map in rdi is an LRU hash.
func (c *compiler) ifLRU(skip x86enc.Label) {
	c.a.ALUMemImm8(x86enc.Cmp, s32, x86enc.At(rdi, maps.DescType), int8(ebpf.LRUHash))
	c.a.Jcc(x86enc.CondNE, skip)
}

// stampEntry marks the hash entry at entry used now: the map's (rdi) use
// counter incremented, and the entry's state HashUsed | counter<<2. The
// lock is held; it changes tmp.
func (c *compiler) stampEntry(entry, tmp x86enc.Reg) {
	a := c.a
	a.Load(s64, tmp, x86enc.At(rdi, maps.DescStamp))
	a.Inc(s64, tmp)
	a.Store(s64, x86enc.At(rdi, maps.DescStamp), tmp)
	a.Shl(s64, tmp, 2)
	a.ALUImm8(x86enc.Or, s64, tmp, maps.HashUsed)
	a.Store(s64, x86enc.At(entry, 0), tmp)
}

// mapDelete: map_delete_elem(map, key) -> 0 or -errno.
func (c *compiler) mapDelete(h *hashLabels) {
	a := c.a
	inval, hash, absent := a.NewLabel(), a.NewLabel(), a.NewLabel()
	c.dispatch(inval, inval, hash, inval)
	a.Bind(hash)
	a.CallLabel(h.lock)
	a.CallLabel(h.find)
	a.Test(s64, rax, rax)
	a.Jcc(x86enc.CondE, absent)
	a.StoreImm(s64, x86enc.At(rax, 0), maps.HashDeleted)
	a.ALUMemImm8(x86enc.Sub, s32, x86enc.At(rdi, maps.DescCount), 1)
	a.StoreImm(s32, x86enc.At(rdi, maps.DescLock), 0)
	c.retZero()
	a.Bind(absent)
	a.StoreImm(s32, x86enc.At(rdi, maps.DescLock), 0)
	c.retImm(eNOENT)
	a.Bind(inval)
	c.retImm(eINVAL)
}

// hashLock takes the spin lock of the descriptor in rdi; it changes rax
// and rcx.
func (c *compiler) hashLock(l x86enc.Label) {
	a := c.a
	a.Bind(l)
	retry, spin := a.NewLabel(), a.NewLabel()
	a.Bind(retry)
	a.ALU(x86enc.Xor, s32, rax, rax)
	a.MovImm32(rcx, 1)
	a.Cmpxchg(s32, x86enc.At(rdi, maps.DescLock), rcx, true)
	a.Jcc(x86enc.CondNE, spin)
	a.Ret()
	a.Bind(spin)
	a.Pause()
	a.Jmp(retry)
}

// hashFind looks key rsi up in the hash rdi, the lock held: rax = its
// entry or 0, r9 = the first free entry met (or 0). It changes rcx, rdx,
// r8, r10 and r11.
func (c *compiler) hashFind(l x86enc.Label) {
	a := c.a
	a.Bind(l)
	hashLoop, hashed, probe, used, cmpLoop, match, differ, deleted, next, empty, keep := a.NewLabel(),
		a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(),
		a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	// FNV-1a of the key's bytes.
	a.Load(s32, r8, x86enc.At(rdi, maps.DescKeySize))
	a.MovImm32(rax, maps.FNVOffset)
	a.MovImm32(r10, maps.FNVPrime)
	a.ALU(x86enc.Xor, s32, rcx, rcx)
	a.Bind(hashLoop)
	a.ALU(x86enc.Cmp, s32, rcx, r8)
	a.Jcc(x86enc.CondAE, hashed)
	a.LoadZxB(rdx, x86enc.Indexed(rsi, rcx, 1, 0))
	a.ALU(x86enc.Xor, s32, rax, rdx)
	a.Imul(s32, rax, r10)
	a.Inc(s32, rcx)
	a.Jmp(hashLoop)
	a.Bind(hashed)
	a.ALU(x86enc.Xor, s32, r9, r9)
	a.Load(s32, r11, x86enc.At(rdi, maps.DescMask))
	a.Lea(r10, x86enc.At(r11, 1)) // probes left: every slot once
	a.ALU(x86enc.And, s32, rax, r11)
	a.Bind(probe)
	a.Load(s32, rdx, x86enc.At(rdi, maps.DescStride))
	a.Imul(s64, rdx, rax)
	a.ALULoad(x86enc.Add, s64, rdx, x86enc.At(rdi, maps.DescData))
	a.Load(s64, rcx, x86enc.At(rdx, 0))
	a.Test(s64, rcx, rcx)
	a.Jcc(x86enc.CondE, empty)
	a.ALUImm8(x86enc.Cmp, s64, rcx, maps.HashDeleted)
	a.Jcc(x86enc.CondE, deleted)
	a.Bind(used)
	a.Push(rax)
	a.Push(r11)
	a.ALU(x86enc.Xor, s32, rcx, rcx)
	a.Bind(cmpLoop)
	a.ALU(x86enc.Cmp, s32, rcx, r8)
	a.Jcc(x86enc.CondAE, match)
	a.LoadZxB(rax, x86enc.Indexed(rsi, rcx, 1, 0))
	a.LoadZxB(r11, x86enc.Indexed(rdx, rcx, 1, 8))
	a.ALU(x86enc.Cmp, s32, rax, r11)
	a.Jcc(x86enc.CondNE, differ)
	a.Inc(s32, rcx)
	a.Jmp(cmpLoop)
	a.Bind(match)
	a.Pop(r11)
	a.Pop(rax)
	a.Mov(s64, rax, rdx)
	a.Ret()
	a.Bind(differ)
	a.Pop(r11)
	a.Pop(rax)
	a.Jmp(next)
	a.Bind(deleted)
	a.Test(s64, r9, r9)
	a.Jcc(x86enc.CondNE, next)
	a.Mov(s64, r9, rdx)
	a.Bind(next)
	a.Inc(s32, rax)
	a.ALU(x86enc.And, s32, rax, r11)
	a.Dec(s64, r10)
	a.Jcc(x86enc.CondNE, probe)
	c.retZero()
	a.Bind(empty)
	a.Test(s64, r9, r9)
	a.Jcc(x86enc.CondNE, keep)
	a.Mov(s64, r9, rdx)
	a.Bind(keep)
	c.retZero()
}

// clock: clock_gettime(id) in nanoseconds.
func (c *compiler) clock(id uint32) {
	a := c.a
	a.ALUImm8(x86enc.Sub, s64, rsp, 16)
	a.MovImm32(rdi, id)
	a.Mov(s64, rsi, rsp)
	a.MovImm32(rax, sysClockGettime)
	a.Syscall()
	a.Load(s64, rax, x86enc.At(rsp, 0))
	a.MovImm32(rcx, 1_000_000_000)
	a.Imul(s64, rax, rcx)
	a.ALULoad(x86enc.Add, s64, rax, x86enc.At(rsp, 8))
	a.ALUImm8(x86enc.Add, s64, rsp, 16)
	a.Ret()
}

// twoIDs returns hi<<32 | lo, the results of two system calls.
func (c *compiler) twoIDs(hi, lo uint32) {
	a := c.a
	a.MovImm32(rax, hi)
	a.Syscall()
	a.Mov(s64, rdx, rax)
	a.Shl(s64, rdx, 32)
	a.MovImm32(rax, lo)
	a.Syscall()
	a.Mov(s32, rax, rax)
	a.ALU(x86enc.Or, s64, rax, rdx)
	a.Ret()
}

// zeroBytes zeroes the bytes of base from index i up to index end, then
// jumps to done; it changes i.
func (c *compiler) zeroBytes(base, i, end x86enc.Reg, done x86enc.Label) {
	a := c.a
	loop := a.NewLabel()
	a.Bind(loop)
	a.ALU(x86enc.Cmp, s64, i, end)
	a.Jcc(x86enc.CondAE, done)
	a.StoreImmB(x86enc.Indexed(base, i, 1, 0), 0)
	a.Inc(s64, i)
	a.Jmp(loop)
}

// comm: get_current_comm(buf, size) -> 0: the thread's name
// (prctl PR_GET_NAME), cut to size-1 bytes and a NUL, the rest of buf
// zero, as the kernel's strscpy_pad.
func (c *compiler) comm() {
	a := c.a
	const prGetName = 16
	copyLoop, pad, done := a.NewLabel(), a.NewLabel(), a.NewLabel()
	a.ALUImm8(x86enc.Sub, s64, rsp, 32)
	a.Mov(s32, rsi, rsi)
	a.Store(s64, x86enc.At(rsp, 16), rdi)
	a.Store(s64, x86enc.At(rsp, 24), rsi)
	a.MovImm32(rdi, prGetName)
	a.Mov(s64, rsi, rsp)
	a.MovImm32(rax, sysPrctl)
	a.Syscall()
	a.Load(s64, rdi, x86enc.At(rsp, 16))
	a.Load(s64, rsi, x86enc.At(rsp, 24))
	a.ALU(x86enc.Xor, s32, rcx, rcx)
	a.Bind(copyLoop)
	a.Lea(rdx, x86enc.At(rcx, 1))
	a.ALU(x86enc.Cmp, s64, rdx, rsi)
	a.Jcc(x86enc.CondAE, pad)
	a.LoadZxB(rdx, x86enc.Indexed(rsp, rcx, 1, 0))
	a.Test(s32, rdx, rdx)
	a.Jcc(x86enc.CondE, pad)
	a.StoreB(x86enc.Indexed(rdi, rcx, 1, 0), rdx)
	a.Inc(s64, rcx)
	a.Jmp(copyLoop)
	a.Bind(pad)
	c.zeroBytes(rdi, rcx, rsi, done)
	a.Bind(done)
	a.ALUImm8(x86enc.Add, s64, rsp, 32)
	c.retZero()
}

// prandom: splitmix64 on the calling stripe's state.
func (c *compiler) prandom() {
	a := c.a
	rt := c.opts.Runtime
	a.Mov(s64, rcx, x86enc.R12)
	a.ALUImm32(x86enc.And, s64, rcx, int32(rt.stripes-1))
	a.Shl(s64, rcx, 6)
	a.MovAbs(rdx, rt.addr)
	a.ALU(x86enc.Add, s64, rdx, rcx)
	a.MovAbs(rax, 0x9e3779b97f4a7c15)
	a.ALULoad(x86enc.Add, s64, rax, x86enc.At(rdx, 0))
	a.Store(s64, x86enc.At(rdx, 0), rax)
	for _, step := range []struct {
		shift uint8
		mul   uint64
	}{{30, 0xbf58476d1ce4e5b9}, {27, 0x94d049bb133111eb}, {31, 0}} {
		a.Mov(s64, rcx, rax)
		a.Shr(s64, rcx, step.shift)
		a.ALU(x86enc.Xor, s64, rax, rcx)
		if step.mul != 0 {
			a.MovAbs(rcx, step.mul)
			a.Imul(s64, rax, rcx)
		}
	}
	a.Mov(s32, rax, rax)
	a.Ret()
}

// readSelf emits process_vm_readv(getpid(), [iov at rsp], 1, [iov at
// rsp+16], 1, 0), the local and remote iovecs on the stack; rax = bytes
// read or -errno.
func (c *compiler) readSelf() {
	a := c.a
	a.MovImm32(rax, sysGetpid)
	a.Syscall()
	a.Mov(s64, rdi, rax)
	a.Lea(rsi, x86enc.At(rsp, 0))
	a.MovImm32(rdx, 1)
	a.Lea(r10, x86enc.At(rsp, 16))
	a.MovImm32(r8, 1)
	a.ALU(x86enc.Xor, s32, r9, r9)
	a.MovImm32(rax, sysProcessVMReadv)
	a.Syscall()
}

// probeRead: probe_read_user(dst, size, src) -> 0, or -EFAULT with dst
// zeroed. The copy is the kernel's own (process_vm_readv on this
// process), so a bad pointer faults in the kernel, never here.
//
// With kernel, probe_read_kernel: the memory a program reads as the
// kernel's (its context, struct pt_regs, its stack and its maps) lies in
// the process here. A read of it is the same copy, or a plain copy when
// it lies between the stack pointer and the end of a context on the same
// stack (a probe slot's), without a system call. Any other address below
// the canonical upper half of a 48-bit address space is the process's
// own, which the kernel refuses before it reads: -ERANGE with dst zeroed
// (kernelMemory). A failed copy returns -EFAULT in the upper half, as the
// kernel's does, and -ERANGE below it.
func (c *compiler) probeRead(kernel bool) {
	a := c.a
	ok, fail := a.NewLabel(), a.NewLabel()
	if kernel {
		// The fast path: a read of the stack between here and the end
		// of the run's context (a probe slot's, kept by the entry in
		// the frame's context slot) is a copy, since all of it is the
		// thread's stack in use: struct pt_regs, the saved registers,
		// the BPF stacks, this frame.
		slow := a.NewLabel()
		a.Load(s64, rax, x86enc.At(x86enc.RBP, -ctxSlot))
		a.Test(s64, rax, rax)
		a.Jcc(x86enc.CondE, slow)
		a.ALU(x86enc.Cmp, s64, rdx, rsp)
		a.Jcc(x86enc.CondB, slow)
		a.Mov(s32, rcx, rsi)
		a.Mov(s64, r9, rdx)
		a.ALU(x86enc.Add, s64, r9, rcx)
		a.Jcc(x86enc.CondB, slow) // carry: the end wraps
		a.ALUImm32(x86enc.Add, s64, rax, CtxFlags+8)
		a.ALU(x86enc.Cmp, s64, r9, rax)
		a.Jcc(x86enc.CondA, slow)
		a.Mov(s64, rsi, rdx)
		a.RepMovsb()
		c.retZero()
		a.Bind(slow)
		c.kernelMemory()
	}
	a.ALUImm8(x86enc.Sub, s64, rsp, 32)
	a.Mov(s32, rsi, rsi)
	a.Store(s64, x86enc.At(rsp, 0), rdi)
	a.Store(s64, x86enc.At(rsp, 8), rsi)
	a.Store(s64, x86enc.At(rsp, 16), rdx)
	a.Store(s64, x86enc.At(rsp, 24), rsi)
	a.Test(s64, rsi, rsi)
	a.Jcc(x86enc.CondE, ok)
	c.readSelf()
	a.ALULoad(x86enc.Cmp, s64, rax, x86enc.At(rsp, 8))
	a.Jcc(x86enc.CondNE, fail)
	a.Bind(ok)
	a.ALUImm8(x86enc.Add, s64, rsp, 32)
	c.retZero()
	a.Bind(fail)
	a.Load(s64, rdi, x86enc.At(rsp, 0))
	a.Load(s64, rcx, x86enc.At(rsp, 8))
	a.ALU(x86enc.Xor, s32, rax, rax)
	a.RepStosb()
	if !kernel {
		a.ALUImm8(x86enc.Add, s64, rsp, 32)
		c.retImm(eFAULT)
		return
	}
	done := a.NewLabel()
	a.MovImm(rcx, 0xffff_8000_0000_0000)
	a.ALULoad(x86enc.Cmp, s64, rcx, x86enc.At(rsp, 16))
	c.movNeg(rax, eRANGE)
	a.Jcc(x86enc.CondA, done)
	c.movNeg(rax, eFAULT)
	a.Bind(done)
	a.ALUImm8(x86enc.Add, s64, rsp, 32)
	a.Ret()
}

// kernelMemory returns from probe_read_kernel(dst, size, src) with
// -ERANGE and dst zeroed, as the kernel does for a user address, unless
// [src, src+size) lies in what the program reads as the kernel's memory:
// its stack (from the stack pointer to the end of the entry's frame), its
// context (struct pt_regs and the words after it), the arenas of its maps;
// or src lies in the upper half (the copy then fails with -EFAULT, as the
// kernel's does there), or size is 0. It changes rax, rcx and r9.
func (c *compiler) kernelMemory() {
	a := c.a
	read := a.NewLabel()
	a.Test(s32, rsi, rsi)
	a.Jcc(x86enc.CondE, read)
	a.MovImm(rax, 0xffff_8000_0000_0000)
	a.ALU(x86enc.Cmp, s64, rdx, rax)
	a.Jcc(x86enc.CondAE, read)
	a.Mov(s32, rcx, rsi)
	a.Mov(s64, r9, rdx)
	a.ALU(x86enc.Add, s64, r9, rcx) // the end, below 2^48 + 2^32
	// within checks [rdx, r9) against [lo, hi): lo in rax, then hi in
	// rax; a range that holds it goes to read.
	within := func(lo, hi func()) {
		next := a.NewLabel()
		lo()
		a.ALU(x86enc.Cmp, s64, rdx, rax)
		a.Jcc(x86enc.CondB, next)
		hi()
		a.ALU(x86enc.Cmp, s64, r9, rax)
		a.Jcc(x86enc.CondBE, read)
		a.Bind(next)
	}
	within(func() { a.Mov(s64, rax, rsp) }, func() { a.Load(s64, rax, x86enc.At(x86enc.RBP, -topSlot)) })
	within(func() { a.Load(s64, rax, x86enc.At(x86enc.RBP, -rawCtxSlot)) }, func() {
		a.Load(s64, rax, x86enc.At(x86enc.RBP, -rawCtxSlot))
		a.ALUImm32(x86enc.Add, s64, rax, CtxFlags+8)
	})
	for _, ar := range c.arenas() {
		base, end := ar.Base(), ar.Base()+uint64(ar.Len())
		within(func() { a.MovImm(rax, base) }, func() { a.MovImm(rax, end) })
	}
	a.Mov(s32, rcx, rsi)
	a.ALU(x86enc.Xor, s32, rax, rax)
	a.RepStosb()
	c.retImm(eRANGE)
	a.Bind(read)
}

// arenas returns the arenas of the program's maps, each once, in the
// order of the maps' names.
func (c *compiler) arenas() []*maps.Arena {
	names := make([]string, 0, len(c.opts.Maps))
	for n := range c.opts.Maps {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*maps.Arena
	for _, n := range names {
		ar := c.opts.Maps[n].Arena()
		known := false
		for _, o := range out {
			known = known || o == ar
		}
		if ar != nil && !known {
			out = append(out, ar)
		}
	}
	return out
}

// probeReadStr: probe_read_user_str(dst, size, src) -> the length copied
// with its NUL, or -EFAULT with dst zeroed. It reads through a 64-byte
// buffer, never past the end of src's page (a string may end just before
// an unmapped page), and writes dst as the kernel's word-at-a-time copy
// does: the bytes up to the NUL, zeros after it to the end of that 8-byte
// word of dst when the word lies within size, nothing beyond; a string of
// size bytes or more is cut to size-1 and a NUL.
func (c *compiler) probeReadStr() {
	a := c.a
	const (
		fDst, fSize, fDone, fBuf, frame = 32, 40, 48, 64, 128
	)
	zero, loop, copyLoop, found, noTail, fail, full := a.NewLabel(), a.NewLabel(), a.NewLabel(),
		a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	a.ALUImm32(x86enc.Sub, s64, rsp, frame)
	a.Mov(s32, rsi, rsi)
	a.Test(s64, rsi, rsi)
	a.Jcc(x86enc.CondE, zero)
	a.Store(s64, x86enc.At(rsp, fDst), rdi)
	a.Store(s64, x86enc.At(rsp, fSize), rsi)
	a.Store(s64, x86enc.At(rsp, 16), rdx)
	a.StoreImm(s64, x86enc.At(rsp, fDone), 0)
	a.Bind(loop)
	// The chunk: what is left of size, at most to the end of src's page
	// and at most the buffer.
	a.Load(s64, rcx, x86enc.At(rsp, fSize))
	a.ALULoad(x86enc.Sub, s64, rcx, x86enc.At(rsp, fDone))
	a.Jcc(x86enc.CondE, full)
	a.Load(s64, rdx, x86enc.At(rsp, 16))
	a.ALUImm32(x86enc.And, s32, rdx, 4095)
	a.Neg(s64, rdx)
	a.ALUImm32(x86enc.Add, s64, rdx, 4096)
	for _, limit := range []x86enc.Reg{rdx, r8} {
		if limit == r8 {
			a.MovImm32(r8, fBuf)
		}
		ok := a.NewLabel()
		a.ALU(x86enc.Cmp, s64, rcx, limit)
		a.Jcc(x86enc.CondBE, ok)
		a.Mov(s64, rcx, limit)
		a.Bind(ok)
	}
	a.Store(s64, x86enc.At(rsp, 8), rcx)
	a.Store(s64, x86enc.At(rsp, 24), rcx)
	a.Lea(rax, x86enc.At(rsp, fBuf))
	a.Store(s64, x86enc.At(rsp, 0), rax)
	c.readSelf()
	a.ALULoad(x86enc.Cmp, s64, rax, x86enc.At(rsp, 8))
	a.Jcc(x86enc.CondNE, fail)
	// Copy to dst+done up to the NUL.
	a.Load(s64, rdi, x86enc.At(rsp, fDst))
	a.ALULoad(x86enc.Add, s64, rdi, x86enc.At(rsp, fDone))
	a.ALU(x86enc.Xor, s32, rcx, rcx)
	a.Bind(copyLoop)
	a.LoadZxB(rdx, x86enc.Indexed(rsp, rcx, 1, fBuf))
	a.StoreB(x86enc.Indexed(rdi, rcx, 1, 0), rdx)
	a.Test(s32, rdx, rdx)
	a.Jcc(x86enc.CondE, found)
	a.Inc(s64, rcx)
	a.ALULoad(x86enc.Cmp, s64, rcx, x86enc.At(rsp, 8))
	a.Jcc(x86enc.CondB, copyLoop)
	a.ALUStore(x86enc.Add, s64, x86enc.At(rsp, fDone), rcx)
	a.ALUStore(x86enc.Add, s64, x86enc.At(rsp, 16), rcx)
	a.Jmp(loop)
	a.Bind(found)
	// rax = the NUL's index in dst; zeros to the end of its word.
	a.Load(s64, rax, x86enc.At(rsp, fDone))
	a.ALU(x86enc.Add, s64, rax, rcx)
	a.Mov(s64, rdx, rax)
	a.ALUImm8(x86enc.And, s64, rdx, -8)
	a.ALUImm8(x86enc.Add, s64, rdx, 8)
	a.ALULoad(x86enc.Cmp, s64, rdx, x86enc.At(rsp, fSize))
	a.Jcc(x86enc.CondA, noTail)
	a.Load(s64, rdi, x86enc.At(rsp, fDst))
	a.Lea(rcx, x86enc.At(rax, 1))
	c.zeroBytes(rdi, rcx, rdx, noTail)
	a.Bind(noTail)
	a.Inc(s64, rax)
	a.ALUImm32(x86enc.Add, s64, rsp, frame)
	a.Ret()
	a.Bind(full)
	// size bytes without a NUL: the last becomes one.
	a.Load(s64, rdi, x86enc.At(rsp, fDst))
	a.Load(s64, rax, x86enc.At(rsp, fSize))
	a.StoreImmB(x86enc.Indexed(rdi, rax, 1, -1), 0)
	a.ALUImm32(x86enc.Add, s64, rsp, frame)
	a.Ret()
	a.Bind(fail)
	a.Load(s64, rdi, x86enc.At(rsp, fDst))
	a.Load(s64, rcx, x86enc.At(rsp, fSize))
	a.ALU(x86enc.Xor, s32, rax, rax)
	a.RepStosb()
	a.ALUImm32(x86enc.Add, s64, rsp, frame)
	c.retImm(eFAULT)
	a.Bind(zero)
	a.ALUImm32(x86enc.Add, s64, rsp, frame)
	c.retImm(0)
}

// ringReserve: ringbuf_reserve(ring, size, flags) -> record data or NULL.
func (c *compiler) ringReserve() {
	a := c.a
	null, noPad, fits, spin, retry := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	a.Test(s64, rdx, rdx)
	a.Jcc(x86enc.CondNE, null)
	a.Load(s32, rax, x86enc.At(rdi, maps.DescType))
	a.ALUImm8(x86enc.Cmp, s32, rax, int8(ebpf.RingBuf))
	if c.perf {
		// perf_event_output's records go through this code too.
		ring := a.NewLabel()
		a.Jcc(x86enc.CondE, ring)
		a.ALUImm8(x86enc.Cmp, s32, rax, int8(ebpf.PerfEventArray))
		a.Bind(ring)
	}
	a.Jcc(x86enc.CondNE, null)
	a.ALUImm32(x86enc.Cmp, s64, rsi, maps.RingDiscard-maps.RingHdrSize-8)
	a.Jcc(x86enc.CondA, null)
	a.Load(s64, r10, x86enc.At(rdi, maps.DescData))
	// r11 = the record's bytes: header and data padded to 8.
	a.Lea(r11, x86enc.At(rsi, maps.RingHdrSize+7))
	a.ALUImm8(x86enc.And, s64, r11, -8)
	// The producers' lock.
	a.Bind(retry)
	a.ALU(x86enc.Xor, s32, rax, rax)
	a.MovImm32(rcx, 1)
	a.Cmpxchg(s32, x86enc.At(r10, maps.RingLock), rcx, true)
	a.Jcc(x86enc.CondNE, spin)
	// rdx = producer, r8 = its offset in the area, r9 = padding.
	a.Load(s64, rdx, x86enc.At(r10, maps.RingProducer))
	a.Load(s32, rcx, x86enc.At(rdi, maps.DescMask))
	a.Mov(s64, r8, rdx)
	a.ALU(x86enc.And, s64, r8, rcx)
	a.Lea(r9, x86enc.At(rcx, 1))
	a.ALU(x86enc.Sub, s64, r9, r8) // bytes to the end of the area
	a.ALU(x86enc.Cmp, s64, r9, r11)
	a.Jcc(x86enc.CondB, noPad)
	a.ALU(x86enc.Xor, s32, r9, r9)
	a.Bind(noPad)
	// Room: producer + pad + record - consumer <= size.
	a.Lea(rax, x86enc.Indexed(rdx, r9, 1, 0))
	a.ALU(x86enc.Add, s64, rax, r11)
	a.ALULoad(x86enc.Sub, s64, rax, x86enc.At(r10, maps.RingConsumer))
	a.Lea(rcx, x86enc.At(rcx, 1))
	a.ALU(x86enc.Cmp, s64, rax, rcx)
	a.Jcc(x86enc.CondBE, fits)
	a.StoreImm(s32, x86enc.At(r10, maps.RingLock), 0)
	a.Jmp(null)
	a.Bind(fits)
	padDone := a.NewLabel()
	a.Test(s64, r9, r9)
	a.Jcc(x86enc.CondE, padDone)
	// A discarded filler to the end of the area.
	a.Lea(rax, x86enc.At(r9, -maps.RingHdrSize))
	a.ALUImm32(x86enc.Or, s32, rax, maps.RingDiscard)
	a.Store(s32, x86enc.Indexed(r10, r8, 1, maps.RingData), rax)
	a.ALU(x86enc.Add, s64, rdx, r9)
	a.ALU(x86enc.Xor, s32, r8, r8)
	a.Bind(padDone)
	a.Mov(s32, rax, rsi)
	a.ALUImm32(x86enc.Or, s32, rax, -0x80000000) // RingBusy
	a.Store(s32, x86enc.Indexed(r10, r8, 1, maps.RingData), rax)
	a.ALU(x86enc.Add, s64, rdx, r11)
	a.Store(s64, x86enc.At(r10, maps.RingProducer), rdx)
	a.StoreImm(s32, x86enc.At(r10, maps.RingLock), 0)
	a.Lea(rax, x86enc.Indexed(r10, r8, 1, maps.RingData+maps.RingHdrSize))
	a.Ret()
	a.Bind(spin)
	a.Pause()
	a.Jmp(retry)
	a.Bind(null)
	c.retZero()
}

// ringCommit: ringbuf_submit or ringbuf_discard(data, flags): the record's
// busy bit cleared (and its discard bit set) in one locked operation.
func (c *compiler) ringCommit(discard bool) {
	a := c.a
	if discard {
		a.MovImm32(rcx, maps.RingBusy|maps.RingDiscard)
		a.LockALUStore(x86enc.Xor, s32, x86enc.At(rdi, -maps.RingHdrSize), rcx)
	} else {
		a.MovImm32(rcx, ^uint32(maps.RingBusy))
		a.LockALUStore(x86enc.And, s32, x86enc.At(rdi, -maps.RingHdrSize), rcx)
	}
	a.ALU(x86enc.Xor, s32, rax, rax) // ringbuf_output's 0; the others return nothing
	a.Ret()
}

// ringOutput: ringbuf_output(ring, data, size, flags) -> 0 or -EAGAIN.
func (c *compiler) ringOutput(reserve x86enc.Label) {
	a := c.a
	full := a.NewLabel()
	a.Push(rsi)
	a.Push(rdx)
	a.Mov(s64, rsi, rdx)
	a.ALU(x86enc.Xor, s32, rdx, rdx)
	a.CallLabel(reserve)
	a.Pop(rcx)
	a.Pop(rsi)
	a.Test(s64, rax, rax)
	a.Jcc(x86enc.CondE, full)
	a.Mov(s64, rdi, rax)
	a.Push(rax)
	a.RepMovsb()
	a.Pop(rdi)
	c.ringCommit(false) // returns
	a.Bind(full)
	c.retImm(eAGAIN)
}

// getStack: get_stack(ctx, buf, size, flags) as the kernel's
// __bpf_get_stack for a uprobe's user registers. With BPF_F_USER_STACK:
// the probe's address, the return address at the stack pointer when the
// probe is at a function's entry (CtxAtEntry), then the return addresses
// of the frame-pointer chain from rbp, each frame (next frame, return
// address) read with process_vm_readv (a bad frame ends the walk, never
// faults), the first skip entries dropped, at most size/8 kept and
// maxStack walked; it returns the bytes written, the rest of buf zeroed.
// Without it the kernel's stack of a user context is empty: 0, or
// -EFAULT when entries are to be skipped. Unknown flags, a size not a
// multiple of 8 and BPF_F_USER_BUILD_ID give -EINVAL. On an error buf is
// zeroed.
func (c *compiler) getStack() {
	w := &stackWalk{c: c, a: c.a}
	a := c.a
	w.einval, w.efault, w.clear, w.nouser, w.walk, w.done, w.out = a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	a.ALUImm32(x86enc.Sub, s64, rsp, gsFrameSize)
	w.checkArgs()
	w.walkUserStack()
	w.finish()
	w.fail()
	a.Bind(w.out)
	a.Load(s64, rax, x86enc.At(rsp, gsN))
	a.ALUImm32(x86enc.Add, s64, rsp, gsFrameSize)
	a.Ret()
}

// The stack frame of get_stack's code: the iovecs readSelf takes at
// offsets 0 and 16, then the walk's state.
const (
	gsLocal     = 0  // iovec: local base, length
	gsRemote    = 16 // iovec: remote base (the frame), length
	gsFrame     = 32 // the frame read: next frame, return address
	gsBuf       = 48
	gsNum       = 56 // entries buf holds
	gsSkip      = 64
	gsMax       = 72 // entries to walk
	gsN         = 80 // entries walked; at the end, the result
	gsSize      = 88
	gsCtx       = 96
	gsFrameSize = 112
)

// stackWalk emits the phases of get_stack's code; its labels are the
// places the phases jump to.
type stackWalk struct {
	c *compiler
	a *x86enc.Asm
	// einval and efault set the error and clear buf; clear clears buf
	// with the error in rax; nouser ends a walk of no user stack; walk
	// starts the frame-pointer chain; done ends the walk; out returns.
	einval, efault, clear, nouser, walk, done, out x86enc.Label
}

// checkArgs saves the arguments in the frame, refuses unknown flags and a
// size not a multiple of 8 (-EINVAL), and sets the skip count, the
// entries buf holds and the entries to walk (skip included, at most
// maxStack); without BPF_F_USER_STACK it goes to nouser.
func (w *stackWalk) checkArgs() {
	a := w.a
	a.Mov(s32, rdx, rdx)
	a.Store(s64, x86enc.At(rsp, gsBuf), rsi)
	a.Store(s64, x86enc.At(rsp, gsSize), rdx)
	a.Store(s64, x86enc.At(rsp, gsCtx), rdi)
	a.Mov(s64, rax, rcx)
	a.ALUImm32(x86enc.And, s64, rax, ^int32(stackSkipMask|stackUser))
	a.Jcc(x86enc.CondNE, w.einval)
	a.TestMemImm32(s32, x86enc.At(rsp, gsSize), 7)
	a.Jcc(x86enc.CondNE, w.einval)
	a.Mov(s64, r8, rcx)
	a.ALUImm32(x86enc.And, s64, r8, stackSkipMask)
	a.Store(s64, x86enc.At(rsp, gsSkip), r8)
	a.Mov(s64, r9, rdx)
	a.Shr(s64, r9, 3)
	a.Store(s64, x86enc.At(rsp, gsNum), r9)
	a.Lea(rax, x86enc.Indexed(r9, r8, 1, 0))
	a.ALUImm32(x86enc.Cmp, s64, rax, maxStack)
	more := a.NewLabel()
	a.Jcc(x86enc.CondBE, more)
	a.MovImm32(rax, maxStack)
	a.Bind(more)
	a.Store(s64, x86enc.At(rsp, gsMax), rax)
	a.StoreImm(s64, x86enc.At(rsp, gsN), 0)
	a.Mov(s64, rax, rcx)
	a.ALUImm32(x86enc.And, s64, rax, stackUser)
	a.Jcc(x86enc.CondE, w.nouser)
}

// walkUserStack produces the probe's address, the return address at the
// stack pointer when the probe is at a function's entry, then the return
// address of each frame of the chain from rbp while the frame lies in
// user space and above the one before, until done.
func (w *stackWalk) walkUserStack() {
	a := w.a
	a.Load(s64, rax, x86enc.At(rdi, ptRIP))
	w.produce()
	a.Load(s64, rdi, x86enc.At(rsp, gsCtx))
	a.TestMemImm32(s32, x86enc.At(rdi, CtxFlags), CtxAtEntry)
	a.Jcc(x86enc.CondE, w.walk)
	a.Load(s64, rax, x86enc.At(rdi, ptRSP))
	a.Store(s64, x86enc.At(rsp, gsRemote), rax)
	w.read(8, w.walk)
	a.Load(s64, rax, x86enc.At(rsp, gsFrame))
	w.produce()
	a.Bind(w.walk)
	a.Load(s64, rdi, x86enc.At(rsp, gsCtx))
	a.Load(s64, rax, x86enc.At(rdi, ptRBP))
	a.Store(s64, x86enc.At(rsp, gsRemote), rax)
	loop := a.NewLabel()
	a.Bind(loop)
	a.Load(s64, r9, x86enc.At(rsp, gsN))
	a.ALULoad(x86enc.Cmp, s64, r9, x86enc.At(rsp, gsMax))
	a.Jcc(x86enc.CondAE, w.done)
	a.Load(s64, rax, x86enc.At(rsp, gsRemote))
	a.Lea(rdx, x86enc.At(rax, 16))
	a.ALU(x86enc.Cmp, s64, rdx, rax)
	a.Jcc(x86enc.CondB, w.done)
	a.MovImm(r10, userTop)
	a.ALU(x86enc.Cmp, s64, rdx, r10)
	a.Jcc(x86enc.CondA, w.done)
	w.read(16, w.done)
	a.Load(s64, rax, x86enc.At(rsp, gsFrame+8))
	w.produce()
	a.Load(s64, rax, x86enc.At(rsp, gsFrame))
	a.Store(s64, x86enc.At(rsp, gsRemote), rax)
	a.Jmp(loop)
}

// produce stores rax as the next entry (unless it is one to skip), or
// ends the walk at done when maxStack entries were walked.
func (w *stackWalk) produce() {
	a := w.a
	skipped := a.NewLabel()
	a.Load(s64, r9, x86enc.At(rsp, gsN))
	a.ALULoad(x86enc.Cmp, s64, r9, x86enc.At(rsp, gsMax))
	a.Jcc(x86enc.CondAE, w.done)
	a.IncMem(s64, x86enc.At(rsp, gsN))
	a.ALULoad(x86enc.Sub, s64, r9, x86enc.At(rsp, gsSkip))
	a.Jcc(x86enc.CondB, skipped)
	a.Load(s64, r10, x86enc.At(rsp, gsBuf))
	a.Store(s64, x86enc.Indexed(r10, r9, 8, 0), rax)
	a.Bind(skipped)
}

// read reads n bytes at the remote base into the frame buffer; it goes
// to fail unless all were read.
func (w *stackWalk) read(n int32, fail x86enc.Label) {
	a := w.a
	a.Lea(rax, x86enc.At(rsp, gsFrame))
	a.Store(s64, x86enc.At(rsp, gsLocal), rax)
	a.StoreImm(s64, x86enc.At(rsp, gsLocal+8), n)
	a.StoreImm(s64, x86enc.At(rsp, gsRemote+8), n)
	w.c.readSelf()
	a.ALUImm32(x86enc.Cmp, s64, rax, n)
	a.Jcc(x86enc.CondNE, fail)
}

// finish binds done: fewer entries walked than skip is -EFAULT; else the
// result is the bytes written, and the rest of buf is zeroed. nouser
// (nothing walked) ends the same way.
func (w *stackWalk) finish() {
	a := w.a
	a.Bind(w.done)
	a.Load(s64, rax, x86enc.At(rsp, gsN))
	a.ALULoad(x86enc.Sub, s64, rax, x86enc.At(rsp, gsSkip))
	a.Jcc(x86enc.CondB, w.efault)
	a.Shl(s64, rax, 3)
	a.Load(s64, rdi, x86enc.At(rsp, gsBuf))
	a.Mov(s64, rdx, rax)
	a.Load(s64, rsi, x86enc.At(rsp, gsSize))
	a.Store(s64, x86enc.At(rsp, gsN), rax)
	w.c.zeroBytes(rdi, rdx, rsi, w.out)
	a.Bind(w.nouser)
	a.StoreImm(s64, x86enc.At(rsp, gsN), 0)
	a.Jmp(w.done)
}

// fail binds einval and efault: the error is the result and the whole
// of buf is zeroed.
func (w *stackWalk) fail() {
	a := w.a
	a.Bind(w.einval)
	a.MovImm(rax, u64(eINVAL))
	a.Jmp(w.clear)
	a.Bind(w.efault)
	a.MovImm(rax, u64(eFAULT))
	a.Bind(w.clear)
	a.Store(s64, x86enc.At(rsp, gsN), rax)
	a.Load(s64, rdi, x86enc.At(rsp, gsBuf))
	a.ALU(x86enc.Xor, s32, rdx, rdx)
	a.Load(s64, rsi, x86enc.At(rsp, gsSize))
	w.c.zeroBytes(rdi, rdx, rsi, w.out)
}

// tracePrintk: trace_printk(fmt, fmt_size, a1, a2, a3) writes a record
// (PrintkRecord: the format's address and size, the arguments) to the
// runtime's trace_printk ring through ringbuf_output's code; the tracer
// formats it (package bpf). It returns 0, or -EAGAIN when the ring is
// full (the kernel returns the length of the line it formatted).
func (c *compiler) tracePrintk() {
	a := c.a
	a.ALUImm8(x86enc.Sub, s64, rsp, 48)
	a.Store(s64, x86enc.At(rsp, 0), rdi)
	a.Mov(s32, rsi, rsi)
	a.Store(s64, x86enc.At(rsp, 8), rsi)
	a.Store(s64, x86enc.At(rsp, 16), rdx)
	a.Store(s64, x86enc.At(rsp, 24), rcx)
	a.Store(s64, x86enc.At(rsp, 32), r8)
	a.MovAbs(rdi, c.opts.Runtime.Printk.Desc())
	a.Lea(rsi, x86enc.At(rsp, 0))
	a.MovImm32(rdx, PrintkRecordSize)
	a.ALU(x86enc.Xor, s32, rcx, rcx)
	a.CallLabel(c.helperLabel(asm.FnRingbufOutput))
	a.ALUImm8(x86enc.Add, s64, rsp, 48)
	a.Ret()
}

// perfEventOutput: perf_event_output(ctx, map, flags, data, size) appends
// a raw sample to the perf event array's ring: size bytes of data, zero
// padded as the kernel pads a raw sample (its u32 size and the data to 8
// bytes); 0, or -ENOSPC when the ring is full. flags must select the
// current CPU (BPF_F_CURRENT_CPU) or a CPU index below max entries, which
// is taken as the current one; other bits give -EINVAL, an index at or
// beyond max entries -E2BIG, as the kernel's.
func (c *compiler) perfEventOutput() {
	a := c.a
	einval, e2big, nospace, current, zero := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	a.Mov(s64, rax, rdx)
	a.Shr(s64, rax, 32)
	a.Jcc(x86enc.CondNE, einval)
	a.ALUImm32(x86enc.Cmp, s32, rdx, -1)
	a.Jcc(x86enc.CondE, current)
	a.ALULoad(x86enc.Cmp, s32, rdx, x86enc.At(rsi, maps.DescMaxEntries))
	a.Jcc(x86enc.CondAE, e2big)
	a.Bind(current)
	// Frame: data, size, padded size, the record.
	a.ALUImm8(x86enc.Sub, s64, rsp, 32)
	a.Store(s64, x86enc.At(rsp, 0), rcx)
	a.Mov(s32, r8, r8)
	a.Store(s64, x86enc.At(rsp, 8), r8)
	a.Lea(rax, x86enc.At(r8, 4+7))
	a.ALUImm8(x86enc.And, s64, rax, -8)
	a.ALUImm8(x86enc.Sub, s64, rax, 4)
	a.Store(s64, x86enc.At(rsp, 16), rax)
	a.Mov(s64, rdi, rsi)
	a.Mov(s64, rsi, rax)
	a.ALU(x86enc.Xor, s32, rdx, rdx)
	a.CallLabel(c.helperLabel(asm.FnRingbufReserve))
	a.Test(s64, rax, rax)
	a.Jcc(x86enc.CondE, nospace)
	a.Store(s64, x86enc.At(rsp, 24), rax)
	a.Mov(s64, rdi, rax)
	a.Load(s64, rsi, x86enc.At(rsp, 0))
	a.Load(s64, rcx, x86enc.At(rsp, 8))
	a.RepMovsb()
	// The padding: rdi is past the data.
	a.Load(s64, rdx, x86enc.At(rsp, 8))
	a.Load(s64, rsi, x86enc.At(rsp, 16))
	a.Load(s64, rdi, x86enc.At(rsp, 24))
	c.zeroBytes(rdi, rdx, rsi, zero)
	a.Bind(zero)
	a.Load(s64, rdi, x86enc.At(rsp, 24))
	a.ALU(x86enc.Xor, s32, rsi, rsi)
	a.CallLabel(c.helperLabel(asm.FnRingbufSubmit))
	a.ALUImm8(x86enc.Add, s64, rsp, 32)
	c.retZero()
	a.Bind(nospace)
	a.ALUImm8(x86enc.Add, s64, rsp, 32)
	c.retImm(-28)
	a.Bind(einval)
	c.retImm(eINVAL)
	a.Bind(e2big)
	c.retImm(e2BIG)
}
