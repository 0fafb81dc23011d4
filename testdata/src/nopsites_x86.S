/*
 * USDT sites written by hand: the classic one-byte nop, a nop5, a nop10,
 * and the two-instruction forms "nop; nop5" and "nop; nop10" that newer
 * <sys/sdt.h> versions emit so that a tracer can put a 5-byte jump or call
 * there. Each note records the address of the site's first byte, as
 * <sys/sdt.h> does; one probe also has a semaphore.
 */
	.file "nopsites_x86.S"

	.macro SITE provider, name, args, sema=0
	.pushsection .note.stapsdt, "?", "note"
	.balign 4
	.4byte 992f-991f, 994f-993f, 3
991:	.asciz "stapsdt"
992:	.balign 4
993:	.8byte 990f
	.8byte _.stapsdt.base
	.8byte \sema
	.asciz "\provider"
	.asciz "\name"
	.asciz "\args"
994:	.balign 4
	.popsection
	.endm

	.pushsection .stapsdt.base, "aG", "progbits", .stapsdt.base, comdat
	.weak _.stapsdt.base
	.hidden _.stapsdt.base
_.stapsdt.base:
	.space 1
	.popsection

	.section .probes, "aw", @progbits
	.balign 2
	.globl nopsites_nop5_semaphore
nopsites_nop5_semaphore:
	.2byte 0

	.text
	.globl sites
	.type sites, @function
sites:
	push %rbp
	SITE nopsites, nop, "-4@%edi"
990:	nop
	mov %edi, %eax
	SITE nopsites, nop5, "-4@%edi 8@%rsi", nopsites_nop5_semaphore
990:	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	SITE nopsites, nop10, "8@%rsi"
990:	.byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
	SITE nopsites, nop_nop5, "-4@%edi"
990:	nop
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	SITE nopsites, nop_nop10, "-4@%edi 8@%rsi"
990:	nop
	.byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
	SITE nopsites, mov, "8@%rsi"
990:	mov %rsi, %rax
	pop %rbp
	ret
	.size sites, . - sites

	.globl main
	.type main, @function
main:
	sub $8, %rsp
	mov %rsp, %rsi
	call sites
	xor %eax, %eax
	add $8, %rsp
	ret
	.size main, . - main

	.section .note.GNU-stack, "", @progbits
