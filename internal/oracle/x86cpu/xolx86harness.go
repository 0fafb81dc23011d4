package x86cpu

import "github.com/probeopt/probeopt/internal/x86enc"

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

// Control words of the relocation oracle's own (offsets in the control
// page, after the common ones, x86hCtl*).
const (
	xoCtlSteps   = x86hCtlOwn      // single steps taken by the run in progress
	xoCtlCapture = x86hCtlOwn + 8  // 1: the next batch start captures the XSAVE image
	xoCtlFPSize  = x86hCtlOwn + 16 // size of the XSAVE image (from the signal frame)
	xoCtlCSGSFS  = x86hCtlOwn + 24 // cs, gs, fs, ss of the signal context at capture
)

// A run record: the x86hCaseWords quadwords of the signal context, then
// the range [lo, hi) in which a single-step trap continues the run.
const (
	xoRunLo = 8 * x86hCaseWords
	xoRunHi = xoRunLo + 8
)

// A result record: the common head (x86hRes*), the steps taken, the
// changed quadwords of the read-write window, then the XSAVE image of the
// signal frame.
const (
	xoResSteps = x86hResOwn
	xoResNDiff = xoResSteps + 8
	xoResDiffs = xoResNDiff + 8 // xoMaxDiffs pairs (address, new value)
	xoResFP    = 12288

	xoFPSWSize = 480 // offset of xstate_size in the XSAVE image (fx_sw_bytes)
	xoTrapDB   = 1   // trap number of the debug exception (the single step)
)

// xoHarnessCode is the harness, placed at xoCtrlAddr+xoOffHarness, with its
// entry points as offsets.
type xoHarnessCode struct {
	code []byte
	x86hEntries
	cpuid int
}

// buildXOLHarness assembles the harness (see x86Harness.build), with
// the relocation oracle's own steps.
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
	const q, d = x86enc.S64, x86enc.S32
	at := x86enc.At
	var hc xoHarnessCode
	h := x86Harness{
		code:        xoCtrlAddr + xoOffHarness,
		ctrl:        xoCtrlAddr + xoOffCtrl,
		cases:       xoCtrlAddr + xoOffRuns,
		results:     xoCtrlAddr + xoOffResults,
		rw:          XOLX86RWAddr,
		template:    xoCtrlAddr + xoOffTemplate,
		rwSize:      XOLX86RWSize,
		caseShift:   xoRunShift,
		resultShift: xoResultShift,
		resNDiff:    xoResNDiff,
		resDiffs:    xoResDiffs,
		maxDiffs:    xoMaxDiffs,
	}
	const fp = xoCtrlAddr + xoOffFP
	// A single-step trap inside the run's range continues the run.
	h.entry = func(a *x86enc.Asm, l *x86hLabels) {
		a.ALUMemImm8(x86enc.Cmp, d, at(x86enc.RSI, 0), 5) // si_signo == SIGTRAP
		a.Jcc(x86enc.CondNE, l.record)
		a.ALUMemImm8(x86enc.Cmp, q, at(x86enc.RDX, x86hUcGregs+x86hGregTrap*8), xoTrapDB)
		a.Jcc(x86enc.CondNE, l.record)
		a.Load(q, x86enc.RAX, at(x86enc.RBX, x86hCtlCur))
		a.Shl(q, x86enc.RAX, xoRunShift)
		a.MovAbs(x86enc.R8, h.cases)
		a.ALU(x86enc.Add, q, x86enc.R8, x86enc.RAX)
		a.Load(q, x86enc.RAX, at(x86enc.RDX, x86hUcGregs+x86hGregRIP*8))
		a.ALULoad(x86enc.Cmp, q, x86enc.RAX, at(x86enc.R8, xoRunLo))
		a.Jcc(x86enc.CondB, l.record)
		a.ALULoad(x86enc.Cmp, q, x86enc.RAX, at(x86enc.R8, xoRunHi))
		a.Jcc(x86enc.CondAE, l.record)
		a.ALUMemImm8(x86enc.Cmp, q, at(x86enc.RBX, xoCtlSteps), xoMaxSteps)
		a.Jcc(x86enc.CondAE, l.record)
		a.IncMem(q, at(x86enc.RBX, xoCtlSteps))
		a.ALUMemImm32(x86enc.Or, q, at(x86enc.RDX, x86hUcGregs+x86hGregFlags*8), 0x100)
		a.Ret()
	}
	h.record = func(a *x86enc.Asm, _ *x86hLabels) {
		a.Load(q, x86enc.RAX, at(x86enc.RBX, xoCtlSteps))
		a.Store(q, at(x86enc.R8, xoResSteps), x86enc.RAX)
	}
	// The XSAVE image of the frame.
	h.recorded = func(a *x86enc.Asm, _ *x86hLabels) {
		a.Load(q, x86enc.RSI, at(x86enc.RDX, x86hUcFPRegs))
		a.Lea(x86enc.RDI, at(x86enc.R8, xoResFP))
		a.Load(q, x86enc.RCX, at(x86enc.RBX, xoCtlFPSize))
		a.RepMovsb()
	}
	// The first batch start after setup captures the XSAVE image of the
	// frame as the template.
	h.start = func(a *x86enc.Asm, l *x86hLabels) {
		capture := a.NewLabel()
		a.ALUMemImm8(x86enc.Cmp, q, at(x86enc.RBX, xoCtlCapture), 0)
		a.Jcc(x86enc.CondE, l.load)
		a.StoreImm(q, at(x86enc.RBX, xoCtlCapture), 0)
		a.Load(q, x86enc.RAX, at(x86enc.RDX, x86hUcGregs+x86hGregSeg*8))
		a.Store(q, at(x86enc.RBX, xoCtlCSGSFS), x86enc.RAX)
		a.Load(q, x86enc.RSI, at(x86enc.RDX, x86hUcFPRegs))
		a.Load(d, x86enc.RCX, at(x86enc.RSI, xoFPSWSize))
		a.Store(q, at(x86enc.RBX, xoCtlFPSize), x86enc.RCX)
		a.ALUImm32(x86enc.Cmp, q, x86enc.RCX, xoFPMax)
		a.Jcc(x86enc.CondBE, capture)
		a.StoreImm(q, at(x86enc.RBX, xoCtlFPSize), 0) // too large: the parent fails
		a.MovImm32(x86enc.RCX, 0)
		a.Bind(capture)
		a.MovAbs(x86enc.RDI, fp)
		a.RepMovsb()
	}
	h.load = func(a *x86enc.Asm, _ *x86hLabels) {
		a.StoreImm(q, at(x86enc.RBX, xoCtlSteps), 0)
	}
	// The run starts in the 64-bit code segment again, with the XSAVE
	// template as its vector state.
	h.loaded = func(a *x86enc.Asm, _ *x86hLabels) {
		a.Load(q, x86enc.RAX, at(x86enc.RBX, xoCtlCSGSFS))
		a.Store(q, at(x86enc.RDX, x86hUcGregs+x86hGregSeg*8), x86enc.RAX)
		a.Load(q, x86enc.RDI, at(x86enc.RDX, x86hUcFPRegs))
		a.MovAbs(x86enc.RSI, fp)
		a.Load(q, x86enc.RCX, at(x86enc.RBX, xoCtlFPSize))
		a.RepMovsb()
	}
	// A gadget for cpuid.
	h.gadgets = func(a *x86enc.Asm) {
		hc.cpuid = a.Len()
		a.Cpuid()
		a.Int3()
	}
	code, e, err := h.build()
	hc.code, hc.x86hEntries = code, e
	return hc, err
}
