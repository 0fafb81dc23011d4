# Functions of libcoexist.so, with the first instructions of real
# functions built without -fcf-protection (no endbr64): the kernel-uprobe
# coexistence tests of package probe probe them with probeopt and with a
# kernel uprobe at once.
	.text

# long cx_push(long x): 3x+1. Starts as glibc's malloc does: push %r13.
	.globl	cx_push
	.type	cx_push, @function
cx_push:
	push	%r13
	push	%rbx
	mov	%rdi, %rbx
	sub	$16, %rsp
	lea	1(%rbx,%rbx,2), %rax
	add	$16, %rsp
	pop	%rbx
	pop	%r13
	ret
	.size	cx_push, .-cx_push

# long cx_test(long x): x+7, or 7 for 0. Starts as glibc's free does:
# test %rdi,%rdi, then a je with a 32-bit displacement.
	.globl	cx_test
	.type	cx_test, @function
cx_test:
	test	%rdi, %rdi
	{disp32} je	1f
	lea	7(%rdi), %rax
	ret
1:	mov	$7, %eax
	ret
	.size	cx_test, .-cx_test

# long cx_args(long x): x+5. Its first instruction writes an argument
# register (rdx), so it cannot run before an entry probe's handler.
	.globl	cx_args
	.type	cx_args, @function
cx_args:
	xor	%edx, %edx
	lea	5(%rdi,%rdx), %rax
	ret
	.size	cx_args, .-cx_args

# long cx_rec(long n): n, by n+1 nested calls (cx_rec(n-1)+1): a
# recursion of known depth for the return-probe depth tests.
	.globl	cx_rec
	.type	cx_rec, @function
cx_rec:
.Lrec:
	test	%rdi, %rdi
	je	1f
	push	%rbx
	lea	-1(%rdi), %rdi
	call	.Lrec
	add	$1, %rax
	pop	%rbx
	ret
1:	xor	%eax, %eax
	ret
	.size	cx_rec, .-cx_rec

	.section .note.GNU-stack,"",@progbits
