#include "textflag.h"

// func call(fn uintptr, r *Regs, stack uintptr)
//
// On the new stack: top-8 the Go stack pointer, top-16 the frame pointer,
// top-24 r, top-32 fn (called through memory, so that every register can
// be loaded from r).
TEXT ·call(SB), NOSPLIT, $0-24
	MOVQ	fn+0(FP), AX
	MOVQ	r+8(FP), R11
	MOVQ	stack+16(FP), R10
	MOVQ	SP, -8(R10)
	MOVQ	BP, -16(R10)
	MOVQ	R11, -24(R10)
	MOVQ	AX, -32(R10)
	LEAQ	-32(R10), SP
	PUSHQ	128(R11)
	POPFQ
	MOVQ	0(R11), AX
	MOVQ	8(R11), CX
	MOVQ	16(R11), DX
	MOVQ	24(R11), BX
	MOVQ	40(R11), BP
	MOVQ	48(R11), SI
	MOVQ	56(R11), DI
	MOVQ	64(R11), R8
	MOVQ	72(R11), R9
	MOVQ	80(R11), R10
	MOVQ	96(R11), R12
	MOVQ	104(R11), R13
	MOVQ	112(R11), R14
	MOVQ	120(R11), R15
	MOVQ	88(R11), R11
	// call *(%rsp)
	BYTE	$0xFF; BYTE $0x14; BYTE $0x24
	PUSHFQ
	PUSHQ	R11
	MOVQ	24(SP), R11
	MOVQ	AX, 0(R11)
	MOVQ	CX, 8(R11)
	MOVQ	DX, 16(R11)
	MOVQ	BX, 24(R11)
	MOVQ	BP, 40(R11)
	MOVQ	SI, 48(R11)
	MOVQ	DI, 56(R11)
	MOVQ	R8, 64(R11)
	MOVQ	R9, 72(R11)
	MOVQ	R10, 80(R11)
	MOVQ	R12, 96(R11)
	MOVQ	R13, 104(R11)
	MOVQ	R14, 112(R11)
	MOVQ	R15, 120(R11)
	POPQ	AX
	MOVQ	AX, 88(R11)
	POPQ	AX
	MOVQ	AX, 128(R11)
	MOVQ	SP, 32(R11)
	MOVQ	16(SP), BP
	MOVQ	24(SP), SP
	RET

// func loop(fn uintptr, r *Regs, stack uintptr, n uint64)
//
// rbx, r12 and r13 hold r, fn and the count: the SysV callee preserves
// them. On the new stack: top-8 the Go stack pointer, top-16 the frame
// pointer.
TEXT ·loop(SB), NOSPLIT, $0-32
	MOVQ	fn+0(FP), R12
	MOVQ	r+8(FP), BX
	MOVQ	stack+16(FP), R10
	MOVQ	n+24(FP), R13
	MOVQ	SP, -8(R10)
	MOVQ	BP, -16(R10)
	LEAQ	-16(R10), SP
again:
	MOVQ	56(BX), DI
	MOVQ	48(BX), SI
	CALL	R12
	DECQ	R13
	JNE	again
	MOVQ	AX, 0(BX)
	MOVQ	0(SP), BP
	MOVQ	8(SP), SP
	RET
