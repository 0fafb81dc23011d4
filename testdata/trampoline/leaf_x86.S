/*
 * Hand-written sites of the traced fixture (fixture.cc): the exact bytes
 * matter, so they are not left to the compiler.
 */
	.text

/* rz_leaf(a, b): a leaf keeping sixteen live words in its red zone across
 * the nop5 at rz_leaf_site; returns their hash (see rz_expect in
 * fixture.cc). */
	.globl	rz_leaf
	.globl	rz_leaf_site
	.type	rz_leaf, @function
	.p2align 4
rz_leaf:
	mov	%rdi, -8(%rsp)
	mov	%rsi, -16(%rsp)
	lea	1(%rdi), %rax
	mov	%rax, -24(%rsp)
	lea	2(%rsi), %rax
	mov	%rax, -32(%rsp)
	lea	3(%rdi,%rsi), %rax
	mov	%rax, -40(%rsp)
	mov	%rax, -48(%rsp)
	mov	%rdi, -56(%rsp)
	mov	%rsi, -64(%rsp)
	mov	%rdi, -72(%rsp)
	mov	%rsi, -80(%rsp)
	mov	%rdi, -88(%rsp)
	mov	%rsi, -96(%rsp)
	mov	%rdi, -104(%rsp)
	mov	%rsi, -112(%rsp)
	mov	%rdi, -120(%rsp)
	mov	%rsi, -128(%rsp)
rz_leaf_site:
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	xor	%eax, %eax
	mov	$-8, %rcx
1:	imul	$31, %rax, %rax
	add	(%rsp,%rcx), %rax
	sub	$8, %rcx
	cmp	$-128, %rcx
	jge	1b
	ret
	.size	rz_leaf, .-rz_leaf

/* usdt_like(a): a USDT site of the newer <sys/sdt.h> shape, nop then
 * nop5, at usdt_like_site; returns a+1. */
	.globl	usdt_like
	.globl	usdt_like_site
	.type	usdt_like, @function
	.p2align 4
usdt_like:
	lea	1(%rdi), %rax
usdt_like_site:
	nop
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	ret
	.size	usdt_like, .-usdt_like

	.section .note.GNU-stack,"",@progbits
