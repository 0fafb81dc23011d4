/*
 * A tiny static program without libc: two functions and one USDT note,
 * linked without page alignment (-Wl,-N) so that the whole file is about
 * a kilobyte. It seeds the fuzz targets of elfscan.
 */
	.file "tiny.S"
#if defined(__x86_64__)
#define NOP nop
#define RET ret
#else
#define NOP nop
#define RET ret
#endif
	.pushsection .stapsdt.base, "aG", "progbits", .stapsdt.base, comdat
	.weak _.stapsdt.base
	.hidden _.stapsdt.base
_.stapsdt.base:
	.space 1
	.popsection

	.text
	.globl _start
	.type _start, @function
_start:
990:	NOP
	.pushsection .note.stapsdt, "?", "note"
	.balign 4
	.4byte 992f-991f, 994f-993f, 3
991:	.asciz "stapsdt"
992:	.balign 4
993:	.8byte 990b
	.8byte _.stapsdt.base
	.8byte 0
	.asciz "tiny"
	.asciz "start"
#if defined(__x86_64__)
	.asciz "-4@%edi 8@-8(%rsp)"
#else
	.asciz "-4@w0 8@[sp, 8]"
#endif
994:	.balign 4
	.popsection
	RET
	.size _start, . - _start

	.globl helper
	.type helper, @function
helper:
	NOP
	RET
	.size helper, . - helper

	.section .note.GNU-stack, "", @progbits
