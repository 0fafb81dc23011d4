/*
 * Patch sites for the live-patching tests (x86-64, GNU as).
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
 */
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

	.section .note.GNU-stack,"",@progbits
