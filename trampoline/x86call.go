package trampoline

import (
	"fmt"

	"github.com/probeopt/probeopt/internal/x86enc"
)

// Calls of compiled code at a hit (Handler.Calls, ReturnHandler.Calls):
// the slot builds the kernel's x86-64 struct pt_regs from the live
// registers and calls each function with the System V arguments
//
//	fn(struct pt_regs *regs /* rdi */, uint64 stripe /* rsi */)
//
// struct pt_regs is followed by three words: the probe's address (the
// function's entry at a return) and the call's cookie (Call.Cookie), what
// a BPF program's get_func_ip and get_attach_cookie return, and flags:
// bit 0 set at an entry whose probed instruction is a push %rbp or an
// endbr64 (the kernel's test of a uprobe at a function's entry, where its
// user stacks add the return address at the stack pointer).
//
// the calling convention of package bpf/jit: the function keeps rbx, rbp,
// rsp and r12-r15 and may change the other general-purpose registers and
// the flags. stripe is the thread's stripe of the per-thread data plane
// (Data.SetThreads): the number of the stripe the thread owns, unique
// among the live threads, or ThreadSlots for a thread without one.
//
// struct pt_regs, 168 bytes (arch/x86/include/asm/ptrace.h):
//
//	r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi
//	orig_rax rip cs eflags rsp ss
//
// At an entry: every register as the interrupted code had it, rip the
// probe address, rsp the interrupted stack pointer, orig_rax -1 (as for
// the kernel's int3), cs and ss the user selectors 0x33 and 0x2b. At a
// return (the return trampoline): the registers as the function left them,
// rip the address it returns to and rsp the stack pointer after its ret,
// as the kernel's uretprobe shows them.
//
// The structure lies on the thread's stack below the red zone, the stack
// pointer is aligned to 16 bytes for the calls, and every register and
// flag is restored from it afterwards (a kprobe program cannot write its
// context). The functions run on the thread's stack: package bpf/jit
// bounds what they need below it.
const (
	ptR15    = 0
	ptRBP    = 32
	ptRBX    = 40
	ptR12    = 24
	ptRAX    = 80
	ptOrigAX = 120
	ptRIP    = 128
	ptCS     = 136
	ptFlags  = 144
	ptRSP    = 152
	ptSS     = 160
	// PtRegsSize is the size of the kernel's x86-64 struct pt_regs.
	PtRegsSize = 168
	// CallCtxSize is the size of the context a call gets: struct pt_regs,
	// the probe's address, the cookie and the flags.
	CallCtxSize = PtRegsSize + 24
	ctxFuncIP   = PtRegsSize
	ctxCookie   = PtRegsSize + 8
	ctxFlags    = PtRegsSize + 16
	ctxAtEntry  = 1

	userCS = 0x33
	userSS = 0x2b

	// entFlagCall marks a return-probe entry whose counter word is the
	// address of the slot's return stub (see returnStub).
	entFlagCall = 2
)

// Call is a function called at a hit, and the cookie its context
// carries.
type Call struct {
	Addr   uint64
	Cookie uint64
}

// ptOrder lists the general-purpose registers in the order of struct
// pt_regs from offset 0 (rsp lies elsewhere in it).
var ptOrder = [...]x86enc.Reg{
	x86enc.R15, x86enc.R14, x86enc.R13, x86enc.R12, x86enc.RBP, x86enc.RBX,
	x86enc.R11, x86enc.R10, x86enc.R9, x86enc.R8, x86enc.RAX, x86enc.RCX,
	x86enc.RDX, x86enc.RSI, x86enc.RDI,
}

// ptOff is the offset of register r in struct pt_regs.
func ptOff(r x86enc.Reg) int32 {
	for i, p := range ptOrder {
		if p == r {
			return int32(8 * i)
		}
	}
	return -1
}

// validateCalls checks what calls need: the per-thread data plane for the
// stripe, and a return trampoline made with Config.ReturnCalls for calls
// at returns.
func (c *Config) validateCalls(h *Handler) error {
	if len(h.Calls) == 0 && (h.Return == nil || len(h.Return.Calls) == 0) {
		return nil
	}
	if c.Data == nil || c.Data.ThreadSlots == 0 {
		return fmt.Errorf("calls without the per-thread data plane (Data.SetThreads): %w", ErrConfig)
	}
	if c.ThreadPointer == ThreadNone {
		return fmt.Errorf("calls without a thread pointer: %w", ErrConfig)
	}
	for _, f := range append(append([]Call(nil), h.Calls...), returnCalls(h)...) {
		if f.Addr == 0 {
			return fmt.Errorf("a call of address 0: %w", ErrConfig)
		}
	}
	if len(returnCalls(h)) > 0 && !c.ReturnCalls {
		return fmt.Errorf("calls at returns without Config.ReturnCalls: %w", ErrConfig)
	}
	return nil
}

func returnCalls(h *Handler) []Call {
	if h.Return == nil {
		return nil
	}
	return h.Return.Calls
}

// stripeNumber leaves in r12 the number of the calling thread's stripe, or
// ThreadSlots for a thread without one. It clobbers rdx, r10, r11 and the
// flags (see stripeLookup).
func (g *x86Gen) stripeNumber() {
	a := g.a
	none, have := a.NewLabel(), a.NewLabel()
	g.stripeLookup(none)
	a.Mov(x86enc.S64, x86enc.R12, r10)
	a.Shr(x86enc.S64, x86enc.R12, uint8(g.cfg.Data.stripeLog()))
	a.Bind(have)
	g.cold = append(g.cold, func() {
		a.Bind(none)
		a.MovImm32(x86enc.R12, uint32(g.cfg.Data.ThreadSlots))
		a.Jmp(have)
	})
}

// callAll calls each function of fns with the context at rsp (its
// struct pt_regs filled, the probe's address in funcIP) and the stripe,
// on a stack aligned to 16 bytes, and comes back with rsp at the context.
// It clobbers rbx, r12 (restored from the structure by the caller), rdx,
// r10, r11, the flags, and what the functions may.
func (g *x86Gen) callAll(fns []Call, funcIP uint64, flags int32) {
	a := g.a
	g.addr(rax, funcIP)
	a.Store(x86enc.S64, x86enc.At(rsp, ctxFuncIP), rax)
	a.StoreImm(x86enc.S64, x86enc.At(rsp, ctxFlags), flags)
	g.stripeNumber()
	a.Mov(x86enc.S64, x86enc.RBX, rsp)
	a.ALUImm8(x86enc.And, x86enc.S64, rsp, -16)
	for _, f := range fns {
		if f.Cookie == uint64(int64(int32(f.Cookie))) {
			a.StoreImm(x86enc.S64, x86enc.At(x86enc.RBX, ctxCookie), int32(f.Cookie))
		} else {
			a.MovImm(rax, f.Cookie)
			a.Store(x86enc.S64, x86enc.At(x86enc.RBX, ctxCookie), rax)
		}
		a.Mov(x86enc.S64, rdi, x86enc.RBX)
		a.Mov(x86enc.S64, rsi, x86enc.R12)
		if x86enc.Reaches(a.PC()+5, f.Addr) && x86enc.Reaches(a.PC(), f.Addr) {
			a.CallTo(f.Addr)
		} else {
			a.MovImm(rax, f.Addr)
			a.CallReg(rax)
		}
	}
	a.Mov(x86enc.S64, rsp, x86enc.RBX)
}

// entryCalls generates the calls of an entry (Handler.Calls): from moving
// the stack below the red zone and building struct pt_regs to restoring
// every register and moving it back.
func (g *x86Gen) entryCalls(s *Site, fns []Call) {
	a := g.a
	frame := int32(128 + CallCtxSize)
	a.Lea(rsp, x86enc.At(rsp, -frame))
	a.Store(x86enc.S64, x86enc.At(rsp, ptRAX), rax)
	a.Pushfq()
	a.Pop(rax)
	a.Store(x86enc.S64, x86enc.At(rsp, ptFlags), rax)
	for _, r := range ptOrder {
		if r != rax {
			a.Store(x86enc.S64, x86enc.At(rsp, ptOff(r)), r)
		}
	}
	a.Lea(rax, x86enc.At(rsp, frame))
	a.Store(x86enc.S64, x86enc.At(rsp, ptRSP), rax)
	g.addr(rax, s.Addr)
	a.Store(x86enc.S64, x86enc.At(rsp, ptRIP), rax)
	a.StoreImm(x86enc.S64, x86enc.At(rsp, ptOrigAX), -1)
	a.StoreImm(x86enc.S64, x86enc.At(rsp, ptCS), userCS)
	a.StoreImm(x86enc.S64, x86enc.At(rsp, ptSS), userSS)
	var flags int32
	if s.atFuncEntry() {
		flags = ctxAtEntry
	}
	g.callAll(fns, s.Addr, flags)
	// The flags first (popfq through the stack below the structure),
	// then every register; lea changes no flag.
	a.Load(x86enc.S64, rax, x86enc.At(rsp, ptFlags))
	a.Push(rax)
	a.Popfq()
	for i := len(ptOrder) - 1; i >= 0; i-- {
		a.Load(x86enc.S64, ptOrder[i], x86enc.At(rsp, ptOff(ptOrder[i])))
	}
	a.Lea(rsp, x86enc.At(rsp, frame))
	done := a.NewLabel()
	if len(g.cold) > 0 {
		a.Jmp(done)
		g.emitCold()
	}
	a.Bind(done)
}

// Return stubs. With Config.ReturnCalls the return trampoline runs, for
// an entry marked entFlagCall, call *counter-word instead of the locked
// increment: the word is the address of the stub the slot of the entry's
// probe carries after its code. The stub counts the return (when the
// return handler counts), builds struct pt_regs from the return
// trampoline's frame, calls the functions and returns with every register
// as it found them.
//
// The return trampoline's frame (x86Gen.prologue with rcx, rdx, rsi, r10
// and r11 saved) lies 8 bytes above the stub's entry stack pointer: the
// saved registers, then rax and the flags (their order depends on
// Config.Flags), then the original return address at retFrame.
const retFrame = 56

// returnFrameOff is the offset of register r (rax, rcx, rdx, rsi, r10,
// r11) in the return trampoline's frame, and of its flags as flagsReg.
func (c *Config) returnFrameOff(r x86enc.Reg) int32 {
	g := &x86Gen{cfg: c, head: 16, frame: retFrame,
		saved: []x86enc.Reg{rcx, rdx, rsi, r10, r11}}
	if r == flagsReg {
		if c.Flags == FlagsPushf {
			return retFrame - 8
		}
		return int32(g.savedOff(rax)) - 8
	}
	return int32(g.savedOff(r))
}

// flagsReg names the flags' word in returnFrameOff.
const flagsReg x86enc.Reg = 0xFF

// returnStub generates the stub of the return handler of site s with
// calls at the current position.
func (g *x86Gen) returnStub(s *Site, r *ReturnHandler) {
	a, cfg := g.a, g.cfg
	caller := []x86enc.Reg{rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11}
	for _, reg := range caller {
		a.Push(reg)
	}
	a.Lea(rsp, x86enc.At(rsp, -CallCtxSize))
	// The frame of the return trampoline: past the context, the pushed
	// registers and the stub's return address.
	f := int32(CallCtxSize + 8*len(caller) + 8)
	if r.Count {
		g.counter(cfg.Data.CounterAddr(r.Counter))
	}
	for _, reg := range ptOrder {
		switch reg {
		case rax, rcx, rdx, rsi, r10, r11:
			a.Load(x86enc.S64, rax, x86enc.At(rsp, f+cfg.returnFrameOff(reg)))
			a.Store(x86enc.S64, x86enc.At(rsp, ptOff(reg)), rax)
		default:
			a.Store(x86enc.S64, x86enc.At(rsp, ptOff(reg)), reg)
		}
	}
	a.Load(x86enc.S64, rax, x86enc.At(rsp, f+cfg.returnFrameOff(flagsReg)))
	if cfg.Flags != FlagsPushf {
		// lahf in ah (SF ZF AF PF CF at their eflags positions), seto
		// in al: OF is eflags bit 11.
		a.Mov(x86enc.S64, rcx, rax)
		a.Shr(x86enc.S64, rax, 8)
		a.ALUImm32(x86enc.And, x86enc.S64, rax, 0xD5)
		a.ALUImm32(x86enc.And, x86enc.S64, rcx, 1)
		a.Shl(x86enc.S64, rcx, 11)
		a.ALU(x86enc.Or, x86enc.S64, rax, rcx)
		a.ALUImm32(x86enc.Or, x86enc.S64, rax, 0x202)
	}
	a.Store(x86enc.S64, x86enc.At(rsp, ptFlags), rax)
	a.Load(x86enc.S64, rax, x86enc.At(rsp, f+retFrame))
	a.Store(x86enc.S64, x86enc.At(rsp, ptRIP), rax)
	a.Lea(rax, x86enc.At(rsp, f+retFrame+8))
	a.Store(x86enc.S64, x86enc.At(rsp, ptRSP), rax)
	a.StoreImm(x86enc.S64, x86enc.At(rsp, ptOrigAX), -1)
	a.StoreImm(x86enc.S64, x86enc.At(rsp, ptCS), userCS)
	a.StoreImm(x86enc.S64, x86enc.At(rsp, ptSS), userSS)
	g.callAll(r.Calls, s.Addr, 0)
	a.Load(x86enc.S64, x86enc.RBX, x86enc.At(rsp, ptRBX))
	a.Load(x86enc.S64, x86enc.R12, x86enc.At(rsp, ptR12))
	a.Lea(rsp, x86enc.At(rsp, CallCtxSize))
	for i := len(caller) - 1; i >= 0; i-- {
		a.Pop(caller[i])
	}
	a.Ret()
	g.emitCold()
}

// atFuncEntry reports whether the instruction at the site's address is a
// push %rbp or an endbr64.
func (s *Site) atFuncEntry() bool {
	endbr := []byte{0xF3, 0x0F, 0x1E, 0xFA}
	switch {
	case s.PatchAddr == s.Addr+4 && s.Kept == 0:
		return true // the endbr64 kept before the jump
	case s.PatchAddr != s.Addr || len(s.Old) == 0:
		return false
	case s.Old[0] == 0x55:
		return true
	}
	return len(s.Old) >= 4 && string(s.Old[:4]) == string(endbr)
}
