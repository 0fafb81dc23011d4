/*
 * Patch sites for the live-patching tests (GNU as; x86-64 and aarch64).
 *
 * x86-64:
 *
 * fx_a_base: NSITES functions, 16 bytes apart. Each one returns x + K with
 * K = i & 63 through a 5-byte range made of TWO instructions
 *     89 f8        mov  %edi,%eax
 *     83 c0 KK     add  $K,%eax
 *     c3           ret
 * The tests replace the 5 bytes by lea M(%rdi),%eax (8d 47 MM) and a
 * 2-byte nop (66 90), M = 64 + (i & 63). A thread stopped between the two
 * instructions (at +2, or at +3 in the new code) is strictly inside the
 * range: writing then would make it run half of the other sequence.
 *
 * fx_b_base: NSITES functions whose 5-byte range is ONE instruction
 *     b8 KK 00 00 00   mov $K,%eax
 *     01 f8            add %edi,%eax
 *     c3               ret
 * for the stop-free (int3 first) protocol, which replaces whole
 * instructions only.
 *
 * fx_park_call makes the pause system call from fx_park_site, so a thread
 * blocked in it has its PC at fx_park_site + 2, inside the 5-byte range
 * [fx_park_site, fx_park_site + 5).
 *
 * aarch64 (the same functions, 16 bytes apart):
 *
 * fx_a_base: an 8-byte range of TWO instructions
 *     mov  w8, w0
 *     add  w0, w8, #K
 *     ret
 * replaced by add w0, w0, #M and a nop; a thread stopped at +4 is strictly
 * inside the range.
 *
 * fx_b_base: a 4-byte range of ONE instruction
 *     mov  w1, #K
 *     add  w0, w0, w1
 *     ret
 *
 * fx_park_call makes ppoll(NULL, 0, NULL, NULL) (arm64 has no pause) from
 * fx_park_site. The kernel rewinds the PC of a thread interrupted in it to
 * the svc before the tracer sees it, so the thread's PC is fx_park_site,
 * strictly inside the 8-byte range [fx_park_site - 4, fx_park_site + 4).
 */
#if defined(__x86_64__)
	.set NSITES, 4096

	.text
	.globl fx_a_base
	.p2align 12
fx_a_base:
	.set i, 0
	.rept NSITES
	.p2align 4
	movl %edi, %eax
	.byte 0x83, 0xc0, (i & 63)
	ret
	.set i, i + 1
	.endr

	.globl fx_b_base
	.p2align 12
fx_b_base:
	.set i, 0
	.rept NSITES
	.p2align 4
	.byte 0xb8, (i & 63), 0, 0, 0
	addl %edi, %eax
	ret
	.set i, i + 1
	.endr

	.globl fx_park_call
	.globl fx_park_site
	.p2align 4
fx_park_call:
	movl $34, %eax		/* pause */
fx_park_site:
	syscall
	nop
	nop
	nop
	ret

#elif defined(__aarch64__)
	.set NSITES, 4096

	.text
	.globl fx_a_base
	.p2align 12
fx_a_base:
	.set i, 0
	.rept NSITES
	.p2align 4
	mov w8, w0
	add w0, w8, #(i & 63)
	ret
	.set i, i + 1
	.endr

	.globl fx_b_base
	.p2align 12
fx_b_base:
	.set i, 0
	.rept NSITES
	.p2align 4
	mov w1, #(i & 63)
	add w0, w0, w1
	ret
	.set i, i + 1
	.endr

	.globl fx_park_call
	.globl fx_park_site
	.p2align 4
fx_park_call:
	mov x0, xzr
	mov x1, xzr
	mov x2, xzr
	mov x3, xzr
	mov x8, #73		/* ppoll */
fx_park_site:
	svc #0
	nop
	nop
	ret
#else
#error "patch sites for x86-64 and aarch64 only"
#endif

	.section .note.GNU-stack,"",@progbits
