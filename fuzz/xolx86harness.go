package fuzz

// The relocation oracle runs in a child process that holds nothing but the
// areas below (every other mapping is removed). Original instructions sit
// in the first code window, with the data they address 1 MiB above it;
// relocated copies sit in the same window or in the three others: two
// placed so that the data lies right at the +-2 GiB limit of a disp32 from
// them (some operands reach, some do not) and one 48 TiB away.
const (
	// XOLX86OrigAddr is the code window of the original instructions,
	// XOLX86WindowSize bytes, read+execute.
	XOLX86OrigAddr   = 0x3000_0000_0000
	XOLX86WindowSize = 0x10000
	// XOLX86ROAddr is a read-only data page, XOLX86ROSize bytes; the
	// read-write data window (which also holds the stack) follows it.
	// Unmapped pages surround both.
	XOLX86ROAddr = XOLX86OrigAddr + 0x10_0000
	XOLX86ROSize = 0x1000
	XOLX86RWAddr = XOLX86ROAddr + XOLX86ROSize
	XOLX86RWSize = 0x2000
	// XOLX86NearLoAddr is a code window about 2 GiB below the data: a
	// disp32 from its slots reaches the lower part of the data only.
	XOLX86NearLoAddr = XOLX86ROAddr - 0x8000_0000 - 0x1000
	// XOLX86NearHiAddr is a code window about 2 GiB above the data: a
	// disp32 from its slots reaches the upper part of the data only.
	XOLX86NearHiAddr = XOLX86ROAddr + 0x8000_0000 - 0x8000
	// XOLX86FarAddr is a code window beyond the reach of any disp32 or
	// rel32 from the originals and their data.
	XOLX86FarAddr = 0x6000_0000_0000

	// xoCtrlAddr is the control area (control words, harness, templates,
	// runs and results, mapped from the shared file), then the signal
	// stack. No window is within 2 GiB of it, and it is far from sums and
	// small multiples of the windows' addresses.
	xoCtrlAddr  = 0x4b4b_4b4b_0000
	xoAltStack  = xoCtrlAddr + 0x0400_0000
	xoAltSize   = 0x10000
	xoCodeCount = 4
)

// XOLX86Windows are the code windows in the order the image holds them:
// the originals' window, near-low, near-high, far.
var XOLX86Windows = [xoCodeCount]uint64{XOLX86OrigAddr, XOLX86NearLoAddr, XOLX86NearHiAddr, XOLX86FarAddr}

// Offsets in the shared file. The control area maps [0, xoOffCode) at
// xoCtrlAddr+offset (the harness page read+execute, the rest read-write).
const (
	xoOffCtrl     = 0x0
	xoOffHarness  = 0x1000
	xoOffFP       = 0x2000 // the XSAVE image every run starts from
	xoOffTemplate = 0x3000 // the initial content of the read-write window
	xoOffRuns     = 0x10000
	xoOffResults  = xoOffRuns + xoMaxRuns<<xoRunShift
	xoOffCode     = xoOffResults + xoMaxRuns<<xoResultShift
	xoOffRO       = xoOffCode + xoCodeCount*XOLX86WindowSize
	xoOffRW       = xoOffRO + XOLX86ROSize
	xoFileSize    = xoOffRW + XOLX86RWSize

	xoMaxRuns     = 1024
	xoRunShift    = 8  // 256-byte run records
	xoResultShift = 14 // 16 KiB result records
	xoMaxDiffs    = (xoResFP - xoResDiffs) / 16
	xoFPMax       = 1<<xoResultShift - xoResFP
	xoMaxSteps    = 64 // single steps per run at most
)

// Control words (offsets in the control page). seq and done are 32-bit
// futex words: the parent bumps seq to start a batch, the child copies seq
// to done when the batch is over.
const (
	xoCtlSeq     = 0
	xoCtlDone    = 64
	xoCtlN       = 128 // runs in the batch
	xoCtlCur     = 136 // run in progress
	xoCtlRunning = 144 // 1 while runs are in progress
	xoCtlSteps   = 152 // single steps taken by the run in progress
	xoCtlCapture = 160 // 1: the next batch start captures the XSAVE image
	xoCtlFPSize  = 168 // size of the XSAVE image (from the signal frame)
	xoCtlCSGSFS  = 176 // cs, gs, fs, ss of the signal context at capture
	xoCtlScratch = 512 // setup structures (sigaction, stack_t, sigset)
)

// A run record: 18 quadwords in the order of the kernel's signal context
// (r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags), then the
// range [lo, hi) in which a single-step trap continues the run.
const (
	xoRunWords = 18
	xoRunLo    = 8 * 18
	xoRunHi    = xoRunLo + 8
)

// A result record: the signal, its si_code and si_addr, the 23 general
// registers of the signal context (with err, trapno and cr2), the steps
// taken, the changed quadwords of the read-write window, then the XSAVE
// image of the signal frame.
const (
	xoResSigno = 0
	xoResCode  = 8
	xoResAddr  = 16
	xoResGregs = 24
	xoResSteps = xoResGregs + 23*8
	xoResNDiff = xoResSteps + 8
	xoResDiffs = xoResNDiff + 8 // xoMaxDiffs pairs (address, new value)
	xoResFP    = 12288

	xoUcGregs  = 40  // offset of the registers in ucontext_t
	xoUcFPRegs = 224 // offset of the fpregs pointer in ucontext_t
	xoGregRIP  = 16
	xoGregEFL  = 17
	xoGregSeg  = 18
	xoGregErr  = 19
	xoGregTrap = 20
	xoFPSWSize = 480 // offset of xstate_size in the XSAVE image (fx_sw_bytes)
	xoTrapDB   = 1   // trap number of the debug exception (the single step)
)

// xoGregOf maps an x86 register number (encoding order) to its index in the
// signal context.
var xoGregOf = [16]int{13, 14, 12, 11, 15, 10, 9, 8, 0, 1, 2, 3, 4, 5, 6, 7}

// xoHarnessCode is the harness, placed at xoCtrlAddr+xoOffHarness, with its
// entry points as offsets.
type xoHarnessCode struct {
	code                                   []byte
	handler, restorer, idle, gadget, cpuid int
}

// buildXOLHarness assembles the harness.
//
// Every run ends in a signal: a single-step trap (the trap flag is set in
// its initial flags) or a fault. A single-step trap is told by its trap
// number (1, #DB), not by its si_code: on the machine the oracle was
// developed on (a KVM guest), about one step in a million was reported
// with si_code TRAP_BRKPT, the debug status register having lost its
// single-step bit. On a single-step trap with the
// instruction pointer inside the run's [lo, hi), and fewer than
// xoMaxSteps steps taken, the handler just returns (the run goes on, one
// more step). Otherwise it records the signal, the registers, the changed
// quadwords of the read-write window (restoring it from its template) and
// the XSAVE image of the signal frame, then loads the next run into the
// signal context, with the XSAVE template as its vector state, and
// returns: rt_sigreturn starts it. After the last run it returns to the
// idle loop, which reports the batch done and sleeps on a futex until the
// next one, which it starts with int3.
func buildXOLHarness() (xoHarnessCode, error) {
	var a xolAsm
	var h xoHarnessCode
	const (
		ctrl     = xoCtrlAddr + xoOffCtrl
		runs     = xoCtrlAddr + xoOffRuns
		results  = xoCtrlAddr + xoOffResults
		template = xoCtrlAddr + xoOffTemplate
		fp       = xoCtrlAddr + xoOffFP
	)
	// Signal handler: rdi = signal, rsi = siginfo, rdx = ucontext.
	h.handler = len(a.b)
	a.movabs(xaRBX, ctrl)
	a.cmpMemImm(true, xaRBX, xoCtlRunning, 0)
	a.jcc(xaCCE, "start")
	// A single-step trap inside the run's range continues the run.
	a.cmpMemImm(false, xaRSI, 0, 5) // si_signo == SIGTRAP
	a.jcc(xaCCNE, "record")
	a.cmpMemImm(true, xaRDX, xoUcGregs+xoGregTrap*8, 1) // trapno == #DB
	a.jcc(xaCCNE, "record")
	a.load(true, xaRAX, xaRBX, xoCtlCur)
	a.shlImm(xaRAX, xoRunShift)
	a.movabs(xaR8, runs)
	a.addReg(xaR8, xaRAX)
	a.load(true, xaRAX, xaRDX, xoUcGregs+xoGregRIP*8)
	a.cmpLoad(xaRAX, xaR8, xoRunLo)
	a.jcc(xaCCB, "record")
	a.cmpLoad(xaRAX, xaR8, xoRunHi)
	a.jcc(xaCCAE, "record")
	a.cmpMemImm(true, xaRBX, xoCtlSteps, xoMaxSteps)
	a.jcc(xaCCAE, "record")
	a.incMem(xaRBX, xoCtlSteps)
	a.orMemImm(xaRDX, xoUcGregs+xoGregEFL*8, 0x100)
	a.ret()
	// Record the result of the run that just ended.
	a.label("record")
	a.load(true, xaRAX, xaRBX, xoCtlCur)
	a.shlImm(xaRAX, xoResultShift)
	a.movabs(xaR8, results)
	a.addReg(xaR8, xaRAX)
	a.load(false, xaRAX, xaRSI, 0) // si_signo
	a.store(true, xaR8, xoResSigno, xaRAX)
	a.load(false, xaRAX, xaRSI, 8) // si_code
	a.store(true, xaR8, xoResCode, xaRAX)
	a.load(true, xaRAX, xaRSI, 16) // si_addr
	a.store(true, xaR8, xoResAddr, xaRAX)
	a.load(true, xaRAX, xaRBX, xoCtlSteps)
	a.store(true, xaR8, xoResSteps, xaRAX)
	a.lea(xaRSI, xaRDX, xoUcGregs)
	a.lea(xaRDI, xaR8, xoResGregs)
	a.movImm32(xaRCX, 23)
	a.repMovsq()
	// Diff the read-write window against its template, restoring it.
	a.movabs(xaRSI, XOLX86RWAddr)
	a.movabs(xaRDI, template)
	a.movImm32(xaRCX, XOLX86RWSize/8)
	a.lea(xaR10, xaR8, xoResDiffs)
	a.xor32(xaR11, xaR11)
	a.label("diffloop")
	a.load(true, xaRAX, xaRSI, 0)
	a.cmpLoad(xaRAX, xaRDI, 0)
	a.jcc(xaCCNE, "diff")
	a.label("diffnext")
	a.addImm(xaRSI, 8)
	a.addImm(xaRDI, 8)
	a.decReg32(xaRCX)
	a.jcc(xaCCNE, "diffloop")
	a.jmp("diffdone")
	a.label("diff")
	a.cmpRegImm(xaR11, xoMaxDiffs)
	a.jcc(xaCCAE, "diffskip")
	a.store(true, xaR10, 0, xaRSI)
	a.store(true, xaR10, 8, xaRAX)
	a.addImm(xaR10, 16)
	a.label("diffskip")
	a.incReg(xaR11)
	a.load(true, xaR9, xaRDI, 0)
	a.store(true, xaRSI, 0, xaR9)
	a.jmp("diffnext")
	a.label("diffdone")
	a.store(true, xaR8, xoResNDiff, xaR11)
	// The XSAVE image of the frame.
	a.load(true, xaRSI, xaRDX, xoUcFPRegs)
	a.lea(xaRDI, xaR8, xoResFP)
	a.load(true, xaRCX, xaRBX, xoCtlFPSize)
	a.repMovsb()
	a.incMem(xaRBX, xoCtlCur)
	a.jmp("load")
	// A batch starts (the idle loop's int3); the first one after setup
	// captures the XSAVE image of the frame as the template.
	a.label("start")
	a.storeImm(xaRBX, xoCtlCur, 0)
	a.storeImm(xaRBX, xoCtlRunning, 1)
	a.cmpMemImm(true, xaRBX, xoCtlCapture, 0)
	a.jcc(xaCCE, "load")
	a.storeImm(xaRBX, xoCtlCapture, 0)
	a.load(true, xaRAX, xaRDX, xoUcGregs+xoGregSeg*8)
	a.store(true, xaRBX, xoCtlCSGSFS, xaRAX)
	a.load(true, xaRSI, xaRDX, xoUcFPRegs)
	a.load(false, xaRCX, xaRSI, xoFPSWSize)
	a.store(true, xaRBX, xoCtlFPSize, xaRCX)
	a.cmpRegImm(xaRCX, xoFPMax)
	a.jcc(xaCCBE, "capture")
	a.storeImm(xaRBX, xoCtlFPSize, 0) // too large: the parent fails
	a.movImm32(xaRCX, 0)
	a.label("capture")
	a.movabs(xaRDI, fp)
	a.repMovsb()
	// Load the next run into the signal context, or go idle.
	a.label("load")
	a.storeImm(xaRBX, xoCtlSteps, 0)
	a.load(true, xaRAX, xaRBX, xoCtlCur)
	a.cmpLoad(xaRAX, xaRBX, xoCtlN)
	a.jcc(xaCCAE, "finish")
	a.shlImm(xaRAX, xoRunShift)
	a.movabs(xaRSI, runs)
	a.addReg(xaRSI, xaRAX)
	a.lea(xaRDI, xaRDX, xoUcGregs)
	a.movImm32(xaRCX, xoRunWords)
	a.repMovsq()
	a.load(true, xaRAX, xaRBX, xoCtlCSGSFS) // 64-bit code segment again
	a.store(true, xaRDX, xoUcGregs+xoGregSeg*8, xaRAX)
	a.orMemImm(xaRDX, xoUcGregs+xoGregEFL*8, 0x100) // TF: trap after the instruction
	a.load(true, xaRDI, xaRDX, xoUcFPRegs)
	a.movabs(xaRSI, fp)
	a.load(true, xaRCX, xaRBX, xoCtlFPSize)
	a.repMovsb()
	a.ret()
	a.label("finish")
	a.storeImm(xaRBX, xoCtlRunning, 0)
	a.movabs(xaRAX, xoCtrlAddr+xoOffHarness) // patched below: the idle loop
	idleImm := len(a.b) - 8
	a.store(true, xaRDX, xoUcGregs+xoGregRIP*8, xaRAX)
	a.storeImm(xaRDX, xoUcGregs+xoGregEFL*8, 0x202)
	a.ret()
	// Signal restorer.
	h.restorer = len(a.b)
	a.movImm32(xaRAX, 15) // rt_sigreturn
	a.syscall()
	// Idle loop: report the batch done, wait for the next one.
	h.idle = len(a.b)
	a.label("idle")
	a.movabs(xaRBX, ctrl)
	a.load(false, xaRAX, xaRBX, xoCtlSeq)
	a.store(false, xaRBX, xoCtlDone, xaRAX)
	a.lea(xaRDI, xaRBX, xoCtlDone)
	a.movImm32(xaRSI, 1) // FUTEX_WAKE
	a.movImm32(xaRDX, 0x7fffffff)
	a.movImm32(xaRAX, 202) // futex
	a.syscall()
	a.label("wait")
	a.load(false, xaRAX, xaRBX, xoCtlSeq)
	a.cmpLoad32(xaRAX, xaRBX, xoCtlDone)
	a.jcc(xaCCNE, "go")
	a.lea(xaRDI, xaRBX, xoCtlSeq)
	a.xor32(xaRSI, xaRSI) // FUTEX_WAIT
	a.mov32(xaRDX, xaRAX) // the value seen
	a.xor32(xaR10, xaR10) // no timeout
	a.movImm32(xaRAX, 202)
	a.syscall()
	a.jmp("wait")
	a.label("go")
	a.int3()
	a.jmp("idle")
	// Gadgets for the setup: a system call, and cpuid.
	h.gadget = len(a.b)
	a.syscall()
	a.int3()
	h.cpuid = len(a.b)
	a.cpuid()
	a.int3()
	code, err := a.finish()
	if err != nil {
		return h, err
	}
	idle := uint64(xoCtrlAddr+xoOffHarness) + uint64(h.idle)
	for i := 0; i < 8; i++ {
		code[idleImm+i] = byte(idle >> (8 * i))
	}
	h.code = code
	return h, nil
}
