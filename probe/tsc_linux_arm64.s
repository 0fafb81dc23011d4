//go:build linux && arm64

#include "textflag.h"

// func rdtsc() uint64: the virtual counter (cntvct_el0), arm64's time
// stamp counter, read after every earlier instruction and before any later
// one (an isb on both sides: the Arm ARM lets counter reads occur
// speculatively and out of order otherwise), so that the ring reader's
// bound on the records still to come is not read after the rings.
TEXT ·rdtsc(SB), NOSPLIT, $0-8
	ISB	$15
	MRS	CNTVCT_EL0, R0
	ISB	$15
	MOVD	R0, ret+0(FP)
	RET

// func cntfrq() uint64: the frequency of the system counter in Hz
// (cntfrq_el0, readable at EL0 under Linux).
TEXT ·cntfrq(SB), NOSPLIT, $0-8
	MRS	CNTFRQ_EL0, R0
	MOVD	R0, ret+0(FP)
	RET
