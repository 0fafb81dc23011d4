// Functions probed by the arm64 trampoline tests. Every site_* label is a
// probe site; each is executed exactly once per call of probed, whatever
// its input, so that every counter equals the number of calls. x16, x17
// and NZCV are live across several sites, so that a slot that changed
// them would change the result.

	.text
	.globl	probed
	.type	probed, %function
	.p2align 4
probed:
	.globl	site_entry
site_entry:
	stp	x29, x30, [sp, #-48]!
	.globl	site_mov
site_mov:
	mov	x29, sp
	stp	x19, x20, [sp, #16]
	mov	x19, x0
	mov	x16, x0
	add	x17, x0, #123
	cmp	x0, #500
	.globl	site_bcond
site_bcond:
	b.lo	1f
	add	x19, x19, #1000
1:	sub	x20, x19, #3
	.globl	site_cbz
site_cbz:
	cbz	x20, 2f
	add	x19, x19, #7
2:
	.globl	site_adrp
site_adrp:
	adrp	x1, table
	add	x1, x1, :lo12:table
	and	x2, x19, #7
	ldr	x3, [x1, x2, lsl #3]
	.globl	site_ldrlit
site_ldrlit:
	ldr	x4, lit1
	eor	x19, x19, x3
	add	x19, x19, x4
	.globl	site_adr
site_adr:
	adr	x5, lit1
	ldr	x5, [x5, #8]
	add	x19, x19, x5
	.globl	site_ldrd
site_ldrd:
	ldr	d0, lit2
	fmov	x6, d0
	add	x19, x19, x6
	.globl	site_ldrq
site_ldrq:
	ldr	q1, lit3
	mov	x6, v1.d[1]
	add	x19, x19, x6
	.globl	site_ldrzr
site_ldrzr:
	ldr	wzr, lit1
	bl	bti_leaf
	add	x19, x19, x0
	.globl	site_tbz
site_tbz:
	tbz	x19, #3, 3f
	add	x19, x19, #3
3:	cmp	x19, x17
	.globl	site_flags
site_flags:
	add	x19, x19, x16
	csel	x19, x19, x17, hi
	mov	x0, x19
	.globl	site_bl
site_bl:
	bl	leaf
	add	x19, x0, x16
	adr	x7, leaf
	mov	x0, x19
	.globl	site_blr
site_blr:
	blr	x7
	mov	x19, x0
	.globl	site_nop
site_nop:
	nop
	.globl	site_b
site_b:
	b	4f
	add	x19, x19, #1
4:	cmp	x19, #0
	.globl	site_cbnz
site_cbnz:
	cbnz	x19, 5f
	add	x19, x19, #1
5:	eor	x0, x19, x17
	ldp	x19, x20, [sp, #16]
	ldp	x29, x30, [sp], #48
	.globl	site_ret
site_ret:
	ret
	.size	probed, .-probed

	.p2align 3
lit1:	.quad	0x1122334455667788, 0x99
lit2:	.quad	0x0123456789abcdef
	.p2align 4
lit3:	.quad	0x1111, 0x2222

	.globl	leaf
	.type	leaf, %function
	.p2align 2
leaf:
	.globl	site_leaf
site_leaf:
	add	x0, x0, #1
	eor	x0, x0, x0, lsr #7
	ret
	.size	leaf, .-leaf

// A function that starts with a landing pad, as with
// -mbranch-protection=bti: a probe at its address keeps the bti.
	.globl	bti_leaf
	.type	bti_leaf, %function
	.p2align 2
bti_leaf:
	.globl	site_bti
site_bti:
	bti	c
	eor	x0, x19, #0xff
	ret
	.size	bti_leaf, .-bti_leaf

// The slot areas: zeros in the file, where the test writes generated
// slots. slot_near follows the functions; slot_far lies 2 MiB beyond,
// out of reach of b.cond, cbz, tbz, adr and literal loads.
	.p2align 12
	.globl	slot_near
slot_near:
	.skip	16384

	.section .text.zfar, "ax", %progbits
	.p2align 12
	.skip	0x200000
	.globl	slot_far
slot_far:
	.skip	16384

	.section .rodata
	.p2align 3
table:	.quad	1, 22, 333, 4444, 55555, 666666, 7777777, 88888888
