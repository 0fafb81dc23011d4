/*
 * Functions with C++ and Rust mangled names, aliases, a local and a weak
 * symbol at one address, and a function without a size, for the symbol
 * and demangling tests.
 */
	.file "mangled_x86.S"
	.macro FUNC name, bind=globl
	.\bind \name
	.type \name, @function
\name:
	.endm

	.text
	.p2align 4
	FUNC _ZN4demo6Widget4drawEv
	push %rbp
	pop %rbp
	ret
	.size _ZN4demo6Widget4drawEv, . - _ZN4demo6Widget4drawEv

	.p2align 4
	FUNC _ZNK4demo6Widget4sizeEv
	FUNC _ZN4demo6Widget9size_implEv, local
	mov $4, %eax
	ret
	.size _ZNK4demo6Widget4sizeEv, . - _ZNK4demo6Widget4sizeEv
	.size _ZN4demo6Widget9size_implEv, . - _ZN4demo6Widget9size_implEv

	.p2align 4
	FUNC _ZN4demo6WidgetC2Ei
	FUNC _ZN4demo6WidgetC1Ei
	mov %esi, (%rdi)
	ret
	.size _ZN4demo6WidgetC2Ei, . - _ZN4demo6WidgetC2Ei
	.size _ZN4demo6WidgetC1Ei, . - _ZN4demo6WidgetC1Ei

	.p2align 4
	FUNC _ZN4demo6WidgetD1Ev
	ret
	.size _ZN4demo6WidgetD1Ev, . - _ZN4demo6WidgetD1Ev

	.p2align 4
	FUNC _ZN4demo3addIiEET_S1_S1_
	lea (%rdi,%rsi), %eax
	ret
	.size _ZN4demo3addIiEET_S1_S1_, . - _ZN4demo3addIiEET_S1_S1_

	.p2align 4
	FUNC _ZN4demo3fooEv.cold, local
	ud2
	.size _ZN4demo3fooEv.cold, . - _ZN4demo3fooEv.cold

	.p2align 4
	FUNC _ZN3std2io5stdio6_print17h1234567890abcdefE
	ret
	.size _ZN3std2io5stdio6_print17h1234567890abcdefE, . - _ZN3std2io5stdio6_print17h1234567890abcdefE

	.p2align 4
	FUNC _RNvNtCs1234_7mycrate3foo3bar
	ret
	.size _RNvNtCs1234_7mycrate3foo3bar, . - _RNvNtCs1234_7mycrate3foo3bar

	.p2align 4
	FUNC plain_c
	FUNC plain_c_weak, weak
	xor %eax, %eax
	ret
	.size plain_c, . - plain_c
	.size plain_c_weak, . - plain_c_weak

	.p2align 4
	FUNC no_size			/* no .size directive: st_size is 0 */
	nop
	ret

	.p2align 4
	.globl main
	.type main, @function
main:
	sub $8, %rsp
	call _ZN4demo6Widget4drawEv
	call plain_c
	add $8, %rsp
	ret
	.size main, . - main

	.section .note.GNU-stack, "", @progbits
