#include "textflag.h"

// func callCodeSaved(fn, ctx, stack uintptr) (ret, changed uint64)
//
// Calls the code at fn like callCode, with rbx, rbp and r12-r15 set to
// sentinels, and returns in changed a bit for each that the code did
// not give back (bit 0 rbx, 1 rbp, 2 r12, 3 r13, 4 r14, 5 r15). The Go
// frame keeps their own values meanwhile; the word above the code's
// stack holds the Go stack pointer.
TEXT ·callCodeSaved(SB), NOSPLIT, $48-40
	MOVQ	BX, 0(SP)
	MOVQ	BP, 8(SP)
	MOVQ	R12, 16(SP)
	MOVQ	R13, 24(SP)
	MOVQ	R14, 32(SP)
	MOVQ	R15, 40(SP)
	MOVQ	fn+0(FP), AX
	MOVQ	ctx+8(FP), DI
	MOVQ	stack+16(FP), CX
	ANDQ	$~15, CX
	MOVQ	SP, -8(CX)
	LEAQ	-16(CX), SP
	MOVQ	$0x1111111111111111, BX
	MOVQ	$0x2222222222222222, BP
	MOVQ	$0x3333333333333333, R12
	MOVQ	$0x4444444444444444, R13
	MOVQ	$0x5555555555555555, R14
	MOVQ	$0x6666666666666666, R15
	XORL	SI, SI
	CALL	AX
	XORL	DX, DX
	MOVQ	$0x1111111111111111, CX
	CMPQ	BX, CX
	JEQ	2(PC)
	ORQ	$1, DX
	MOVQ	$0x2222222222222222, CX
	CMPQ	BP, CX
	JEQ	2(PC)
	ORQ	$2, DX
	MOVQ	$0x3333333333333333, CX
	CMPQ	R12, CX
	JEQ	2(PC)
	ORQ	$4, DX
	MOVQ	$0x4444444444444444, CX
	CMPQ	R13, CX
	JEQ	2(PC)
	ORQ	$8, DX
	MOVQ	$0x5555555555555555, CX
	CMPQ	R14, CX
	JEQ	2(PC)
	ORQ	$16, DX
	MOVQ	$0x6666666666666666, CX
	CMPQ	R15, CX
	JEQ	2(PC)
	ORQ	$32, DX
	MOVQ	8(SP), SP
	MOVQ	0(SP), BX
	MOVQ	8(SP), BP
	MOVQ	16(SP), R12
	MOVQ	24(SP), R13
	MOVQ	32(SP), R14
	MOVQ	40(SP), R15
	MOVQ	AX, ret+24(FP)
	MOVQ	DX, changed+32(FP)
	RET
