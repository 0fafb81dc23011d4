/*
 * Functions the trampoline tests load into their own process and run with
 * trampolines at their probe sites (trampoline/native_linux_amd64_test.go).
 * The tests assemble this file (gcc -c, see Makefile), copy its .text to
 * executable memory and look functions and sites up by symbol. It must not
 * need relocations: no symbol is global, calls stay inside the section.
 *
 * Site symbols (*_site) mark the probe address inside a function. Every
 * function follows the SysV ABI.
 */
	.text

/* ---- NOP sites: the body does nothing else, so every register and flag
 * must come back as it went in. */
	.p2align 4
f_nop5:
f_nop5_site:
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00		/* nopl 0x0(%rax,%rax,1) */
	ret

	.p2align 4
f_nop10:
f_nop10_site:
	.byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00	/* cs nopw */
	ret

	.p2align 4
f_nopnop5:
f_nopnop5_site:
	nop
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	ret

	.p2align 4
f_nopnop10:
f_nopnop10_site:
	nop
	.byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
	ret

/* ---- The red-zone leaf: live data in the 128 bytes below %rsp across a
 * nop5 in its middle. Returns a hash of sixteen red-zone words, which a
 * call at the site (Linux's nop5 optimization) would corrupt. */
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

/* ---- Flags live across a site: rdi < rsi (signed) and the parity of
 * their sum, computed before the nop5 and used after it. */
	.p2align 4
flags_live:
	mov	%rdi, %rax
	add	%rsi, %rax
	cmp	%rsi, %rdi
flags_live_site:
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	setl	%al
	setp	%cl
	seto	%dl
	shl	$1, %cl
	shl	$2, %dl
	or	%cl, %al
	or	%dl, %al
	movzbl	%al, %eax
	ret

/* ---- Detour sites: the probe is the function entry; the displaced
 * instructions vary. */
	.p2align 4
d_push:					/* push %rbp; mov %rsp,%rbp; mov %rdi,%rax */
	push	%rbp
	mov	%rsp, %rbp
	mov	%rdi, %rax
	add	%rsi, %rax
	imul	$3, %rax, %rax
	pop	%rbp
	ret

	.p2align 4
d_sub:					/* sub $0x18,%rsp; mov %rdi,(%rsp) */
	sub	$0x18, %rsp
	mov	%rdi, (%rsp)
	mov	%rsi, 8(%rsp)
	mov	(%rsp), %rax
	sub	8(%rsp), %rax
	add	$0x18, %rsp
	ret

	.p2align 4
d_endbr:				/* endbr64 kept; push %rbx; mov %rdi,%rbx */
	endbr64
	push	%rbx
	mov	%rdi, %rbx
	lea	7(%rbx,%rsi,2), %rax
	pop	%rbx
	ret

	.p2align 4
d_rip:					/* lea d_data(%rip),%rax: recomputed */
	lea	d_data(%rip), %rax
	mov	(%rax), %rax
	add	%rdi, %rax
	ret

	.p2align 4
d_ripload:				/* mov d_data(%rip),%rax: recomputed */
	mov	d_data(%rip), %rax
	xor	%rsi, %rax
	ret

	.p2align 4
d_jcc:					/* test; je rel8 (widened); mov $1 */
	test	%edi, %edi
	je	1f
	mov	$1, %eax
	add	%esi, %eax
	ret
1:	mov	$2, %eax
	sub	%esi, %eax
	ret

	.p2align 4
d_call:					/* push %rbx; mov %rdi,%rbx; call d_helper (last) */
	push	%rbx
	mov	%rdi, %rbx
	call	d_helper
	add	%rbx, %rax
	pop	%rbx
	ret
d_helper:
	lea	7(%rdi,%rdi,2), %rax
	ret

	.p2align 4
d_short:				/* xor; ret; then padding displaced */
	xor	%eax, %eax
	ret
	int3
	int3
	int3
	int3

	.p2align 4
d_jmp:					/* jmp rel8 first: nothing after it runs */
	jmp	1f
	int3
	int3
	int3
1:	lea	(%rdi,%rsi), %rax
	ret

	.p2align 3
d_data:
	.quad	0x1122334455667788

/* ---- Six arguments for event records. */
	.p2align 4
args6:
args6_site:
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	lea	(%rdi,%rsi), %rax
	add	%rdx, %rax
	add	%rcx, %rax
	add	%r8, %rax
	add	%r9, %rax
	ret

/* ---- Return probes. fib is recursive; its entry displaces
 * push %rbx; push %rbp; mov %rdi,%rbx. nopfib is fib with a nop5 at its
 * entry (as gcc -mfentry -mnop-mcount emits). */
.macro FIB name, nop5
	.p2align 4
\name:
	.if \nop5
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	.endif
	push	%rbx
	push	%rbp
	mov	%rdi, %rbx
	cmp	$1, %rdi
	jbe	1f
	lea	-1(%rbx), %rdi
	call	\name
	mov	%rax, %rbp
	lea	-2(%rbx), %rdi
	call	\name
	add	%rbp, %rax
	pop	%rbp
	pop	%rbx
	ret
1:	mov	%rbx, %rax
	pop	%rbp
	pop	%rbx
	ret
.endm
	FIB fib, 0
	FIB nopfib, 1

/* Tail call: tc_a jumps to tc_b with its own return address in place. */
	.p2align 4
tc_a:
	mov	%rdi, %rax
	add	$1, %rdi
	jmp	tc_b
	.p2align 4
tc_b:
	lea	(%rdi,%rdi,1), %rax
	add	$3, %rax
	ret

/* A minimal setjmp/longjmp: the buffer holds rbx rbp r12-r15, the stack
 * pointer after the return and the return address. */
	.p2align 4
my_setjmp:
	mov	%rbx, 0(%rdi)
	mov	%rbp, 8(%rdi)
	mov	%r12, 16(%rdi)
	mov	%r13, 24(%rdi)
	mov	%r14, 32(%rdi)
	mov	%r15, 40(%rdi)
	lea	8(%rsp), %rax
	mov	%rax, 48(%rdi)
	mov	(%rsp), %rax
	mov	%rax, 56(%rdi)
	xor	%eax, %eax
	ret
my_longjmp:
	mov	%rsi, %rax
	mov	0(%rdi), %rbx
	mov	8(%rdi), %rbp
	mov	16(%rdi), %r12
	mov	24(%rdi), %r13
	mov	32(%rdi), %r14
	mov	40(%rdi), %r15
	mov	48(%rdi), %rsp
	jmp	*56(%rdi)

/* lj_top(n): calls lj_deep n levels deep, which longjmps back; returns
 * 100+n. */
	.p2align 4
lj_top:
	push	%rbx
	push	%rbp
	sub	$72, %rsp
	mov	%rdi, %rbx
	mov	%rsp, %rdi
	call	my_setjmp
	test	%rax, %rax
	jnz	1f
	mov	%rbx, %rdi
	mov	%rsp, %rsi
	call	lj_deep
	ud2
1:	lea	100(%rbx), %rax
	add	$72, %rsp
	pop	%rbp
	pop	%rbx
	ret

/* lj_deep(n, buf): n == 0 longjmps to buf with 1. */
	.p2align 4
lj_deep:
	push	%rbx
	push	%rbp
	mov	%rdi, %rbx
	test	%rdi, %rdi
	jnz	1f
	mov	%rsi, %rdi
	mov	$1, %esi
	call	my_longjmp
1:	lea	-1(%rbx), %rdi
	call	lj_deep
	pop	%rbp
	pop	%rbx
	ret

/* A stand-in for an unwinder entry: unw_probe(buf) must find every
 * return address above it original. It walks the frame-pointer-free
 * stack by the layout it knows: uw_top -> uw_mid -> unw_probe. */
	.p2align 4
uw_top:
	push	%rbx
	mov	%rdi, %rbx
	call	uw_mid
	add	%rbx, %rax
	pop	%rbx
	ret
	.p2align 4
uw_mid:
	push	%rbx
	mov	%rdi, %rbx
	lea	8(%rsp), %rdi		/* where uw_mid's return address lies */
	call	unw_probe
	mov	%rax, %rbx
	call	rh_point
	mov	%rbx, %rax
	pop	%rbx
	ret
/* rh_point: a stand-in for __cxa_begin_catch (Rehijack at its nop5). */
	.p2align 4
rh_point:
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	ret
/* unw_probe(p): returns the word at p (uw_mid's return address, which
 * the Unhijack handler at its entry must have restored). */
	.p2align 4
unw_probe:
	mov	%rdi, %rax
	mov	(%rax), %rax
	ret
	int3
	int3

	.p2align 4
bench_target:
bench_target_site:
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	lea	1(%rdi), %rax
	ret

	.p2align 4
bench_plain:
	lea	1(%rdi), %rax
	ret
