package fuzz

// The emulator oracle runs its cases in a child process that holds nothing
// but the areas below (every other mapping is removed). The code windows,
// the read-only page and the read-write data window are what the cases may
// touch; the control area belongs to the harness.
const (
	// EmuCodeLow and EmuCodeHigh are the two code windows, read+execute,
	// EmuCodeSize bytes each. The high one sits just below the top of the
	// user address space, so that relative branches and RIP-relative
	// operands from it can reach non-canonical addresses.
	EmuCodeLow  = 0x1000_0000_0000
	EmuCodeHigh = 0x7fff_fff0_0000
	EmuCodeSize = 0x10000
	// EmuROAddr is a read-only data page, EmuROSize bytes.
	EmuROAddr = 0x1000_0010_0000
	EmuROSize = 0x1000
	// EmuRWAddr is the read-write data window, EmuRWSize bytes, right
	// after the read-only page and followed by an unmapped page.
	EmuRWAddr = EmuROAddr + EmuROSize
	EmuRWSize = 0x2000
	// EmuFSBase and EmuGSBase are the FS and GS bases of every case.
	EmuFSBase = EmuRWAddr + 0x800
	EmuGSBase = EmuROAddr + 0x100

	// emuCtrlAddr is the control area: control words, harness code, the
	// cases and their results (emuFileSize bytes from the shared file),
	// then the signal stack. The generator does not emit cases whose
	// memory accesses touch it. It is far from every small multiple and
	// sum of the windows' addresses (base+index*scale with pointers into
	// the windows), which a case easily forms.
	emuCtrlAddr  = 0x5a5a_5a5a_0000
	emuAltStack  = emuCtrlAddr + 0x200000
	emuAltSize   = 0x10000
	emuCtrlLimit = emuAltStack + emuAltSize
)

// Offsets in the shared file (a memfd mapped in both processes). The
// control area maps [0, emuOffCodeLow) at emuCtrlAddr+offset.
const (
	emuOffCtrl     = 0x0
	emuOffHarness  = 0x1000 // mapped read+execute
	emuOffTemplate = 0x2000 // the initial content of the read-write window
	emuOffCases    = 0x10000
	emuOffResults  = 0x90000
	emuOffCodeLow  = 0x190000
	emuOffCodeHigh = emuOffCodeLow + EmuCodeSize
	emuOffRO       = emuOffCodeHigh + EmuCodeSize
	emuOffRW       = emuOffRO + EmuROSize
	emuFileSize    = emuOffRW + EmuRWSize

	emuMaxBatch    = 2048
	emuCaseShift   = 8 // 256-byte case records
	emuResultShift = 9 // 512-byte result records
	emuMaxDiffs    = 8 // changed quadwords recorded per case
)

// Control words (offsets in the control page). seq and done are 32-bit
// futex words: the parent bumps seq to start a batch, the child copies seq
// to done when the batch is over.
const (
	emuCtlSeq     = 0
	emuCtlDone    = 64
	emuCtlN       = 128 // cases in the batch
	emuCtlCur     = 136 // case running
	emuCtlRunning = 144 // 1 while a case runs
	emuCtlScratch = 512 // setup structures (sigaction, stack_t, sigset)
)

// A case record holds 18 quadwords in the order of the kernel's signal
// context (r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags),
// so that the harness copies it into the context with one rep movsq.
const emuCaseWords = 18

// A result record: the signal, its si_code and si_addr, the 23 general
// registers of the signal context (with err, trapno and cr2), then the
// changed quadwords of the read-write window.
const (
	emuResSigno  = 0
	emuResCode   = 8
	emuResAddr   = 16
	emuResGregs  = 24
	emuResNDiff  = emuResGregs + 23*8
	emuResDiffs  = emuResNDiff + 8 // emuMaxDiffs pairs (address, new value)
	emuUcGregs   = 40              // offset of the registers in ucontext_t
	emuGregRSP   = 15
	emuGregRIP   = 16
	emuGregFlags = 17
	emuGregErr   = 19
	emuGregTrap  = 20
	emuGregCR2   = 22
)

// emuGregOf maps an x86 register number (encoding order) to its index in the
// signal context.
var emuGregOf = [16]int{13, 14, 12, 11, 15, 10, 9, 8, 0, 1, 2, 3, 4, 5, 6, 7}

// emuHarnessCode is the harness: entry points are offsets in the returned
// code, which is placed at emuCtrlAddr+emuOffHarness.
type emuHarnessCode struct {
	code                            []byte
	handler, restorer, idle, gadget int
}

// buildEmuHarness assembles the harness.
//
// Every case ends in a signal: the single-step trap after the instruction
// (the trap flag is set in its initial flags), or the fault it raised. The
// handler records the registers of the signal context and the signal, diffs
// the read-write window against the template (restoring it), then loads the
// next case into the signal context and returns: rt_sigreturn starts that
// case with every register, the flags and rip taken from its record. After
// the last case it returns to the idle loop, which reports the batch done
// and sleeps on a futex until the next one, which it starts with int3.
func buildEmuHarness() (emuHarnessCode, error) {
	var a emuAsm
	var h emuHarnessCode
	const (
		ctrl     = emuCtrlAddr + emuOffCtrl
		cases    = emuCtrlAddr + emuOffCases
		results  = emuCtrlAddr + emuOffResults
		template = emuCtrlAddr + emuOffTemplate
	)
	// Signal handler: rdi = signal, rsi = siginfo, rdx = ucontext.
	h.handler = len(a.b)
	a.movabs(emuRegRBX, ctrl)
	a.cmpMemImm8(emuRegRBX, emuCtlRunning, 0)
	a.jcc(emuCCE, "start")
	// Record the result of the case that just ended.
	a.load(true, emuRegRAX, emuRegRBX, emuCtlCur)
	a.shlImm(emuRegRAX, emuResultShift)
	a.movabs(emuRegR8, results)
	a.addReg(emuRegR8, emuRegRAX)
	a.load(false, emuRegRAX, emuRegRSI, 0) // si_signo
	a.store(true, emuRegR8, emuResSigno, emuRegRAX)
	a.load(false, emuRegRAX, emuRegRSI, 8) // si_code
	a.store(true, emuRegR8, emuResCode, emuRegRAX)
	a.load(true, emuRegRAX, emuRegRSI, 16) // si_addr
	a.store(true, emuRegR8, emuResAddr, emuRegRAX)
	a.lea(emuRegRSI, emuRegRDX, emuUcGregs)
	a.lea(emuRegRDI, emuRegR8, emuResGregs)
	a.movImm32(emuRegRCX, 23)
	a.repMovsq()
	// Diff the read-write window against the template and restore it.
	a.movabs(emuRegRSI, EmuRWAddr)
	a.movabs(emuRegRDI, template)
	a.movImm32(emuRegRCX, EmuRWSize/8)
	a.lea(emuRegR10, emuRegR8, emuResDiffs)
	a.xor32(emuRegR11, emuRegR11)
	a.label("diffloop")
	a.load(true, emuRegRAX, emuRegRSI, 0)
	a.cmpLoad(true, emuRegRAX, emuRegRDI, 0)
	a.jcc(emuCCNE, "diff")
	a.label("diffnext")
	a.addImm8(emuRegRSI, 8)
	a.addImm8(emuRegRDI, 8)
	a.dec32(emuRegRCX)
	a.jcc(emuCCNE, "diffloop")
	a.jmp("diffdone")
	a.label("diff")
	a.cmpRegImm8(emuRegR11, emuMaxDiffs)
	a.jcc(emuCCAE, "diffskip")
	a.store(true, emuRegR10, 0, emuRegRSI)
	a.store(true, emuRegR10, 8, emuRegRAX)
	a.addImm8(emuRegR10, 16)
	a.label("diffskip")
	a.inc(emuRegR11)
	a.load(true, emuRegR9, emuRegRDI, 0)
	a.store(true, emuRegRSI, 0, emuRegR9)
	a.jmp("diffnext")
	a.label("diffdone")
	a.store(true, emuRegR8, emuResNDiff, emuRegR11)
	a.incMem(emuRegRBX, emuCtlCur)
	a.jmp("load")
	// A batch starts (the idle loop's int3).
	a.label("start")
	a.storeImm(emuRegRBX, emuCtlCur, 0)
	a.storeImm(emuRegRBX, emuCtlRunning, 1)
	// Load the next case into the signal context, or go idle.
	a.label("load")
	a.load(true, emuRegRAX, emuRegRBX, emuCtlCur)
	a.cmpLoad(true, emuRegRAX, emuRegRBX, emuCtlN)
	a.jcc(emuCCAE, "finish")
	a.shlImm(emuRegRAX, emuCaseShift)
	a.movabs(emuRegRSI, cases)
	a.addReg(emuRegRSI, emuRegRAX)
	a.lea(emuRegRDI, emuRegRDX, emuUcGregs)
	a.movImm32(emuRegRCX, emuCaseWords)
	a.repMovsq()
	a.orImm(emuRegRDX, emuUcGregs+emuGregFlags*8, 0x100) // TF: trap after the instruction
	a.ret()
	a.label("finish")
	a.storeImm(emuRegRBX, emuCtlRunning, 0)
	a.movabs(emuRegRAX, emuCtrlAddr+emuOffHarness) // patched below: the idle loop
	idleImm := len(a.b) - 8
	a.store(true, emuRegRDX, emuUcGregs+emuGregRIP*8, emuRegRAX)
	a.storeImm(emuRegRDX, emuUcGregs+emuGregFlags*8, 0x202)
	a.ret()
	// Signal restorer.
	h.restorer = len(a.b)
	a.movImm32(emuRegRAX, 15) // rt_sigreturn
	a.syscall()
	// Idle loop: report the batch done, wait for the next one.
	h.idle = len(a.b)
	a.label("idle")
	a.movabs(emuRegRBX, ctrl)
	a.load(false, emuRegRAX, emuRegRBX, emuCtlSeq)
	a.store(false, emuRegRBX, emuCtlDone, emuRegRAX)
	a.lea(emuRegRDI, emuRegRBX, emuCtlDone)
	a.movImm32(emuRegRSI, 1) // FUTEX_WAKE
	a.movImm32(emuRegRDX, 0x7fffffff)
	a.movImm32(emuRegRAX, 202) // futex
	a.syscall()
	a.label("wait")
	a.load(false, emuRegRAX, emuRegRBX, emuCtlSeq)
	a.cmpLoad(false, emuRegRAX, emuRegRBX, emuCtlDone)
	a.jcc(emuCCNE, "go")
	a.lea(emuRegRDI, emuRegRBX, emuCtlSeq)
	a.xor32(emuRegRSI, emuRegRSI) // FUTEX_WAIT
	a.mov32(emuRegRDX, emuRegRAX) // the value seen
	a.xor32(emuRegR10, emuRegR10) // no timeout
	a.movImm32(emuRegRAX, 202)
	a.syscall()
	a.jmp("wait")
	a.label("go")
	a.int3()
	a.jmp("idle")
	// Gadget for the system calls made during setup.
	h.gadget = len(a.b)
	a.syscall()
	a.int3()
	code, err := a.finish()
	if err != nil {
		return h, err
	}
	idle := uint64(emuCtrlAddr+emuOffHarness) + uint64(h.idle)
	for i := 0; i < 8; i++ {
		code[idleImm+i] = byte(idle >> (8 * i))
	}
	h.code = code
	return h, nil
}
