//go:build linux && amd64

#include "textflag.h"

// func rdtsc() uint64: the time stamp counter, read after every earlier
// instruction has executed and before any later one starts (lfence on
// both sides): the ring reader's bound on the records still to come must
// not be read after the rings.
TEXT ·rdtsc(SB), NOSPLIT, $0-8
	LFENCE
	RDTSC
	LFENCE
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET
