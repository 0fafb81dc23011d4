#include "textflag.h"

// The functions "bench trace" probes: each starts with the instruction its
// name says, and is a leaf without a frame, so that the first instruction
// is exactly that.

// func benchTraceNop()
TEXT ·benchTraceNop(SB), NOSPLIT|NOFRAME, $0-0
	BYTE	$0x90 // nop
	RET

// func benchTracePush()
TEXT ·benchTracePush(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ	BP
	POPQ	BP
	RET

// func benchTraceMov()
TEXT ·benchTraceMov(SB), NOSPLIT|NOFRAME, $0-0
	MOVQ	DI, AX
	RET

// func benchTraceRIP()
TEXT ·benchTraceRIP(SB), NOSPLIT|NOFRAME, $0-0
	MOVQ	·benchTraceConst(SB), AX
	RET

// func benchTraceSSE()
TEXT ·benchTraceSSE(SB), NOSPLIT|NOFRAME, $0-0
	PXOR	X0, X0
	RET

DATA ·benchTraceConst+0(SB)/8, $42
GLOBL ·benchTraceConst(SB), RODATA|NOPTR, $8
