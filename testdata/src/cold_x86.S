/*
 * foo, whose cold part foo.cold (a local function in .text.unlikely, as GCC
 * emits it) jumps back to foo+4, inside the bytes a detour of foo's entry
 * replaces, and bar, which nothing jumps into. The jump goes to a local
 * label, as GCC's do, so that the linker keeps it direct in a shared object.
 * Built by the plan and probe tests.
 */
	.text
	.globl	foo
	.type	foo, @function
foo:
	push	%rbp			# foo+0
	mov	%rsp, %rbp		# foo+1
.Lfoo_body:
	mov	%edi, %eax		# foo+4: foo.cold jumps here
	test	%eax, %eax
	js	foo.cold
	add	$1, %eax
	pop	%rbp
	ret
	.size	foo, .-foo

	.globl	bar
	.type	bar, @function
bar:
	push	%rbp
	mov	%rsp, %rbp
	mov	%edi, %eax
	add	$2, %eax
	pop	%rbp
	ret
	.size	bar, .-bar

	.section .text.unlikely,"ax",@progbits
	.type	foo.cold, @function
foo.cold:
	neg	%edi
	jmp	.Lfoo_body
	.size	foo.cold, .-foo.cold

	.section .note.GNU-stack,"",@progbits
