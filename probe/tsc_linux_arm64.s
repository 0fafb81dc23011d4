//go:build linux && arm64

#include "textflag.h"

// func rdtsc() uint64: the virtual counter (cntvct_el0), arm64's time
// stamp counter.
TEXT ·rdtsc(SB), NOSPLIT, $0-8
	ISB	$15
	MRS	CNTVCT_EL0, R0
	MOVD	R0, ret+0(FP)
	RET
