package x86cpu

import (
	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/x86enc"
)

// The x86-64 CPU oracles (the emulator's and the relocation's) run their
// cases in a child that holds only the oracle's areas, driven by one
// harness: a signal handler that records how each case ended and starts
// the next one through rt_sigreturn, an idle loop that waits for the next
// batch on a futex, and gadgets for the setup. x86Harness builds the part
// they share; each oracle adds its own steps through its hooks.

// Control words (offsets in the control page) of both harnesses. seq and
// done are 32-bit futex words: the parent bumps seq to start a batch, the
// child copies seq to done when the batch is over. An oracle's own words
// lie from x86hCtlOwn up to x86hCtlScratch.
const (
	x86hCtlSeq     = 0
	x86hCtlDone    = 64
	x86hCtlN       = 128 // cases in the batch
	x86hCtlCur     = 136 // case running
	x86hCtlRunning = 144 // 1 while a case runs
	x86hCtlOwn     = 152
	x86hCtlScratch = 512 // setup structures (sigaction, stack_t, sigset)
)

// A result record starts with the signal, its si_code and si_addr and the
// 23 general registers of the signal context (with err, trapno and cr2);
// what follows (from x86hResOwn) is the oracle's.
const (
	x86hResSigno = 0
	x86hResCode  = 8
	x86hResAddr  = 16
	x86hResGregs = 24
	x86hResOwn   = x86hResGregs + 23*8
)

// The kernel's signal context: ucontext_t and the order of its registers.
// A case record starts with x86hCaseWords quadwords in that order (r8..r15,
// rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags), so that the
// handler copies it into the context with one rep movsq.
const (
	x86hUcGregs   = 40  // offset of the registers in ucontext_t
	x86hUcFPRegs  = 224 // offset of the fpregs pointer in ucontext_t
	x86hGregRSP   = 15
	x86hGregRIP   = 16
	x86hGregFlags = 17
	x86hGregSeg   = 18 // cs, gs, fs, ss
	x86hGregErr   = 19
	x86hGregTrap  = 20
	x86hGregCR2   = 22
	x86hCaseWords = 18
)

// x86hGregOf maps an x86 register number (encoding order) to its index in
// the signal context.
var x86hGregOf = [16]int{13, 14, 12, 11, 15, 10, 9, 8, 0, 1, 2, 3, 4, 5, 6, 7}

// x86Harness is the layout of a harness and the oracle's own steps.
//
// The handler runs with rdi = signal, rsi = siginfo, rdx = ucontext and
// rbx = the control words; after the record step r8 points at the result
// record. A hook may use every other register, except that rdx and rbx
// must be kept, and r8 from record on.
type x86Harness struct {
	code     uint64 // address of the harness code
	ctrl     uint64 // address of the control words
	cases    uint64 // address of the case records, 1<<caseShift bytes each
	results  uint64 // address of the result records, 1<<resultShift bytes each
	rw       uint64 // the read-write window, rwSize bytes, and its template
	template uint64
	rwSize   int32

	caseShift, resultShift uint8
	// resNDiff and resDiffs are the offsets in a result record of the
	// number of changed quadwords of the window and of the first of
	// maxDiffs (address, new value) pairs.
	resNDiff, resDiffs int32
	maxDiffs           int32

	// entry runs first for a case that ended (not at a batch start): it
	// may return (the case goes on) or fall through to record it.
	entry func(a *x86enc.Asm, l *x86hLabels)
	// record adds to the record of the case that ended, before its
	// registers are copied; recorded after the window's diff.
	record, recorded func(a *x86enc.Asm, l *x86hLabels)
	// start runs when a batch starts, before its first case is loaded.
	start func(a *x86enc.Asm, l *x86hLabels)
	// load runs before a case is loaded (or the batch is found over);
	// loaded after the case is in the signal context, before the return.
	load, loaded func(a *x86enc.Asm, l *x86hLabels)
	// gadgets appends the oracle's own gadgets after the system call one.
	gadgets func(a *x86enc.Asm)
}

// x86hLabels are the positions of the handler a hook may branch to.
type x86hLabels struct {
	record x86enc.Label // record the case that ended
	load   x86enc.Label // load the next case
}

// x86hEntries are the entry points of a harness, as offsets in its code.
type x86hEntries struct {
	handler, restorer, idle, gadget int
}

// build assembles the harness.
//
// Every case ends in a signal: the single-step trap after its instruction
// (the trap flag is set in its initial flags), or the fault it raised. The
// handler records the signal and the registers of the signal context,
// diffs the read-write window against the template (restoring it), then
// loads the next case into the signal context and returns: rt_sigreturn
// starts that case with every register, the flags and rip taken from its
// record. After the last case it returns to the idle loop, which reports
// the batch done and sleeps on a futex until the next one, which it starts
// with int3. The code is decoded again before it is returned.
func (h *x86Harness) build() ([]byte, x86hEntries, error) {
	a := x86enc.New(h.code)
	var e x86hEntries
	l := &x86hLabels{record: a.NewLabel(), load: a.NewLabel()}
	hook := func(f func(*x86enc.Asm, *x86hLabels)) {
		if f != nil {
			f(a, l)
		}
	}
	start, finish, idle := a.NewLabel(), a.NewLabel(), a.NewLabel()
	const q, d = x86enc.S64, x86enc.S32
	at := x86enc.At
	// Signal handler.
	e.handler = a.Len()
	a.MovAbs(x86enc.RBX, h.ctrl)
	a.ALUMemImm8(x86enc.Cmp, q, at(x86enc.RBX, x86hCtlRunning), 0)
	a.Jcc(x86enc.CondE, start)
	hook(h.entry)
	// Record the result of the case that just ended.
	a.Bind(l.record)
	a.Load(q, x86enc.RAX, at(x86enc.RBX, x86hCtlCur))
	a.Shl(q, x86enc.RAX, h.resultShift)
	a.MovAbs(x86enc.R8, h.results)
	a.ALU(x86enc.Add, q, x86enc.R8, x86enc.RAX)
	a.Load(d, x86enc.RAX, at(x86enc.RSI, 0)) // si_signo
	a.Store(q, at(x86enc.R8, x86hResSigno), x86enc.RAX)
	a.Load(d, x86enc.RAX, at(x86enc.RSI, 8)) // si_code
	a.Store(q, at(x86enc.R8, x86hResCode), x86enc.RAX)
	a.Load(q, x86enc.RAX, at(x86enc.RSI, 16)) // si_addr
	a.Store(q, at(x86enc.R8, x86hResAddr), x86enc.RAX)
	hook(h.record)
	a.Lea(x86enc.RSI, at(x86enc.RDX, x86hUcGregs))
	a.Lea(x86enc.RDI, at(x86enc.R8, x86hResGregs))
	a.MovImm32(x86enc.RCX, 23)
	a.RepMovsq()
	h.diff(a)
	hook(h.recorded)
	a.IncMem(q, at(x86enc.RBX, x86hCtlCur))
	a.Jmp(l.load)
	// A batch starts (the idle loop's int3).
	a.Bind(start)
	a.StoreImm(q, at(x86enc.RBX, x86hCtlCur), 0)
	a.StoreImm(q, at(x86enc.RBX, x86hCtlRunning), 1)
	hook(h.start)
	// Load the next case into the signal context, or go idle.
	a.Bind(l.load)
	hook(h.load)
	a.Load(q, x86enc.RAX, at(x86enc.RBX, x86hCtlCur))
	a.ALULoad(x86enc.Cmp, q, x86enc.RAX, at(x86enc.RBX, x86hCtlN))
	a.Jcc(x86enc.CondAE, finish)
	a.Shl(q, x86enc.RAX, h.caseShift)
	a.MovAbs(x86enc.RSI, h.cases)
	a.ALU(x86enc.Add, q, x86enc.RSI, x86enc.RAX)
	a.Lea(x86enc.RDI, at(x86enc.RDX, x86hUcGregs))
	a.MovImm32(x86enc.RCX, x86hCaseWords)
	a.RepMovsq()
	a.ALUMemImm32(x86enc.Or, q, at(x86enc.RDX, x86hUcGregs+x86hGregFlags*8), 0x100) // TF: trap after the instruction
	hook(h.loaded)
	a.Ret()
	a.Bind(finish)
	a.StoreImm(q, at(x86enc.RBX, x86hCtlRunning), 0)
	a.LeaLabel(x86enc.RAX, idle)
	a.Store(q, at(x86enc.RDX, x86hUcGregs+x86hGregRIP*8), x86enc.RAX)
	a.StoreImm(q, at(x86enc.RDX, x86hUcGregs+x86hGregFlags*8), 0x202)
	a.Ret()
	// Signal restorer.
	e.restorer = a.Len()
	a.MovImm32(x86enc.RAX, 15) // rt_sigreturn
	a.Syscall()
	// Idle loop: report the batch done, wait for the next one.
	e.idle = a.Len()
	a.Bind(idle)
	h.idleLoop(a, idle)
	// Gadget for the system calls made during setup.
	e.gadget = a.Len()
	a.Syscall()
	a.Int3()
	if h.gadgets != nil {
		h.gadgets(a)
	}
	code, err := a.Finish()
	if err == nil {
		err = a.Verify(decode.X86Len)
	}
	return code, e, err
}

// diff compares the read-write window with its template quadword by
// quadword, records the first maxDiffs changed ones (address, new value)
// at r8+resDiffs and their number at r8+resNDiff, and restores the window.
func (h *x86Harness) diff(a *x86enc.Asm) {
	const q, d = x86enc.S64, x86enc.S32
	at := x86enc.At
	loop, next, done, diff, skip := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
	a.MovAbs(x86enc.RSI, h.rw)
	a.MovAbs(x86enc.RDI, h.template)
	a.MovImm32(x86enc.RCX, uint32(h.rwSize/8))
	a.Lea(x86enc.R10, at(x86enc.R8, h.resDiffs))
	a.ALU(x86enc.Xor, d, x86enc.R11, x86enc.R11)
	a.Bind(loop)
	a.Load(q, x86enc.RAX, at(x86enc.RSI, 0))
	a.ALULoad(x86enc.Cmp, q, x86enc.RAX, at(x86enc.RDI, 0))
	a.Jcc(x86enc.CondNE, diff)
	a.Bind(next)
	a.ALUImm8(x86enc.Add, q, x86enc.RSI, 8)
	a.ALUImm8(x86enc.Add, q, x86enc.RDI, 8)
	a.Dec(d, x86enc.RCX)
	a.Jcc(x86enc.CondNE, loop)
	a.Jmp(done)
	a.Bind(diff)
	a.ALUImm32(x86enc.Cmp, q, x86enc.R11, h.maxDiffs)
	a.Jcc(x86enc.CondAE, skip)
	a.Store(q, at(x86enc.R10, 0), x86enc.RSI)
	a.Store(q, at(x86enc.R10, 8), x86enc.RAX)
	a.ALUImm8(x86enc.Add, q, x86enc.R10, 16)
	a.Bind(skip)
	a.Inc(q, x86enc.R11)
	a.Load(q, x86enc.R9, at(x86enc.RDI, 0))
	a.Store(q, at(x86enc.RSI, 0), x86enc.R9)
	a.Jmp(next)
	a.Bind(done)
	a.Store(q, at(x86enc.R8, h.resNDiff), x86enc.R11)
}

// idleLoop reports the batch done (done = seq, futex wake), sleeps on seq
// while it equals done, then starts the batch with int3.
func (h *x86Harness) idleLoop(a *x86enc.Asm, idle x86enc.Label) {
	const d = x86enc.S32
	at := x86enc.At
	wait, next := a.NewLabel(), a.NewLabel()
	a.MovAbs(x86enc.RBX, h.ctrl)
	a.Load(d, x86enc.RAX, at(x86enc.RBX, x86hCtlSeq))
	a.Store(d, at(x86enc.RBX, x86hCtlDone), x86enc.RAX)
	a.Lea(x86enc.RDI, at(x86enc.RBX, x86hCtlDone))
	a.MovImm32(x86enc.RSI, 1) // FUTEX_WAKE
	a.MovImm32(x86enc.RDX, 0x7fffffff)
	a.MovImm32(x86enc.RAX, 202) // futex
	a.Syscall()
	a.Bind(wait)
	a.Load(d, x86enc.RAX, at(x86enc.RBX, x86hCtlSeq))
	a.ALULoad(x86enc.Cmp, d, x86enc.RAX, at(x86enc.RBX, x86hCtlDone))
	a.Jcc(x86enc.CondNE, next)
	a.Lea(x86enc.RDI, at(x86enc.RBX, x86hCtlSeq))
	a.ALU(x86enc.Xor, d, x86enc.RSI, x86enc.RSI) // FUTEX_WAIT
	a.Mov(d, x86enc.RDX, x86enc.RAX)             // the value seen
	a.ALU(x86enc.Xor, d, x86enc.R10, x86enc.R10) // no timeout
	a.MovImm32(x86enc.RAX, 202)
	a.Syscall()
	a.Jmp(wait)
	a.Bind(next)
	a.Int3()
	a.Jmp(idle)
}
