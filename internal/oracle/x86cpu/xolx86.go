package x86cpu

import (
	"fmt"

	"github.com/probeopt/probeopt/xol"
)

// XOLX86Image is the memory a batch of runs of the relocation oracle
// starts from: the four code windows (XOLX86Windows order), the read-only
// page and the read-write window. Every run of the batch starts from this
// content (the read-write window is restored after each run).
type XOLX86Image struct {
	Code [xoCodeCount][XOLX86WindowSize]byte
	RO   [XOLX86ROSize]byte
	RW   [XOLX86RWSize]byte
	// VecSeed seeds the vector registers (xmm, ymm and zmm halves, opmask
	// registers) every run of the batch starts with.
	VecSeed uint64
}

// XOLX86Run is one execution in the oracle's child: from Regs (RFLAGS: the
// status flags and DF are taken; IF is set and TF added) until the first
// signal, except that a single-step trap with the instruction pointer in
// [Lo, Hi) continues the run by one more step (at most 64 steps).
type XOLX86Run struct {
	Regs   xol.X86Regs
	Lo, Hi uint64
}

// XOLX86Word is a quadword the relocation oracle saw change.
type XOLX86Word = MemWord

// XOLX86Result is what the CPU did in one run.
type XOLX86Result struct {
	// Signal ended the run: 5 (SIGTRAP) with Trap 1 for the single-step
	// trap (Code is normally 2, TRAP_TRACE); faults are 11 (SIGSEGV), 7 (SIGBUS), 4 (SIGILL), 8 (SIGFPE),
	// or SIGTRAP with another code (int3, int1).
	Signal, Code int
	Addr         uint64 // si_addr
	Trap         int    // the exception vector the kernel recorded
	ErrCode      uint64 // its error code
	// Regs is the register file when the signal arrived.
	Regs xol.X86Regs
	// Steps is the number of single steps that continued the run.
	Steps int
	// Writes lists the quadwords of the read-write window whose value
	// changed, by ascending address; WritesLost is set when more changed
	// than the harness records.
	Writes     []XOLX86Word
	WritesLost bool
	// FP is the XSAVE image (standard format) of the signal frame: x87,
	// SSE, AVX, AVX-512 state as the run left it.
	FP []byte
}

// xoFPIgnore reports whether byte i of the XSAVE image legitimately
// differs between an instruction and its relocated copy: the last x87
// instruction pointer (FIP, bytes 8-15 of the legacy region).
func xoFPIgnore(i int) bool { return i >= 8 && i < 16 }

// XOLX86TimeoutError is the error of a batch that did not finish in time:
// run Run (an index into the runs given) never ended. It wraps ErrTimeout.
type XOLX86TimeoutError struct {
	Run int
}

func (e *XOLX86TimeoutError) Error() string {
	return fmt.Sprintf("relocation oracle: run %d did not end: %v", e.Run, ErrTimeout)
}

// Unwrap returns ErrTimeout.
func (e *XOLX86TimeoutError) Unwrap() error { return ErrTimeout }

// Signals and si_codes the checker distinguishes.
const (
	xoSigTrap = 5
)
