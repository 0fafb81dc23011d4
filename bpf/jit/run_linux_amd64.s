#include "textflag.h"

// func callCode(fn, ctx, stripe, stack uintptr) uint64
//
// Calls the compiled program at fn with the System V arguments ctx (rdi)
// and stripe (rsi), on the stack whose top is stack, and returns its rax.
// The program keeps rbx, rbp and r12-r15 (the package's calling
// convention), so rbx holds the Go stack pointer across the call.
TEXT ·callCode(SB), NOSPLIT, $0-40
	MOVQ	fn+0(FP), AX
	MOVQ	ctx+8(FP), DI
	MOVQ	stripe+16(FP), SI
	MOVQ	stack+24(FP), CX
	MOVQ	SP, BX
	MOVQ	CX, SP
	ANDQ	$~15, SP
	CALL	AX
	MOVQ	BX, SP
	MOVQ	AX, ret+32(FP)
	RET
