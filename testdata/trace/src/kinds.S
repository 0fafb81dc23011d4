# Functions whose first instruction is one chosen kind, for the live-probe
# tests: each kind goes through one path of the engine (emulation, a
# fallback to a step, an out-of-line step, a refusal).
	.text

# push: emulated (a write to the stack).
	.globl	k_push
	.type	k_push, @function
k_push:
	push	%rbx
	lea	(%rdi,%rsi), %rbx
	mov	%rbx, %rax
	pop	%rbx
	ret
	.size	k_push, .-k_push

# nop: emulated.
	.globl	k_nop
	.type	k_nop, @function
k_nop:
	nop
	lea	1(%rdi,%rsi), %rax
	ret
	.size	k_nop, .-k_nop

# mov register to register: emulated (the kernel single-steps it).
	.globl	k_mov
	.type	k_mov, @function
k_mov:
	mov	%rdi, %rax
	add	%rsi, %rax
	ret
	.size	k_mov, .-k_mov

# a vector instruction: not emulated, single-stepped.
	.globl	k_sse
	.type	k_sse, @function
k_sse:
	pxor	%xmm1, %xmm1
	lea	2(%rdi,%rsi), %rax
	ret
	.size	k_sse, .-k_sse

# a RIP-relative vector load: single-stepped (its operand is read by the CPU
# at the original address).
	.globl	k_riprel
	.type	k_riprel, @function
k_riprel:
	movsd	k_three(%rip), %xmm0
	cvttsd2si %xmm0, %rax
	add	%rdi, %rax
	add	%rsi, %rax
	ret
	.size	k_riprel, .-k_riprel

# a read-modify-write of a global through RIP: emulated while the process
# has one thread, stepped when another thread could see it half done.
	.globl	k_global
	.type	k_global, @function
k_global:
	addq	%rdi, k_counter(%rip)
	mov	k_counter(%rip), %rax
	add	%rsi, %rax
	ret
	.size	k_global, .-k_global

# a locked add: the kernel refuses the lock prefix; probeopt steps it.
	.globl	k_lock
	.type	k_lock, @function
k_lock:
	lock addq %rdi, k_counter(%rip)
	lea	3(%rdi,%rsi), %rax
	ret
	.size	k_lock, .-k_lock

# writes and reads the red zone: emulated stack accesses below rsp.
	.globl	k_redzone
	.type	k_redzone, @function
k_redzone:
	mov	%rdi, -8(%rsp)
	mov	%rsi, -16(%rsp)
	mov	-8(%rsp), %rax
	add	-16(%rsp), %rax
	ret
	.size	k_redzone, .-k_redzone

# a direct jump: emulated.
	.globl	k_jmp
	.type	k_jmp, @function
k_jmp:
	jmp	k_mov
	.size	k_jmp, .-k_jmp

# a return at once: emulated (a read of the stack).
	.globl	k_ret
	.type	k_ret, @function
k_ret:
	ret
	.size	k_ret, .-k_ret

# a string store with a repeat prefix: single-stepped, one step per
# iteration. k_rep(buf, n) fills n bytes with 0x5a.
	.globl	k_rep
	.type	k_rep, @function
k_rep:
	mov	%rsi, %rcx
	mov	$0x5a, %eax
	call	k_rep_stos
	ret
	.size	k_rep, .-k_rep

	.globl	k_rep_stos
	.type	k_rep_stos, @function
k_rep_stos:
	rep stosb
	ret
	.size	k_rep_stos, .-k_rep_stos

# k_syscall returns getpid(); k_syscall+7 is the syscall instruction,
# which the plan refuses, and k_syscall+1 is inside the first instruction.
	.globl	k_syscall
	.type	k_syscall, @function
k_syscall:
	mov	$39, %rax
	syscall
	ret
	.size	k_syscall, .-k_syscall

# k_sigslot returns the word at rdi. In a live process its first
# instruction stays in place and the load is displaced into the slot of a
# detour: a fault of the load is a signal taken inside the slot.
	.globl	k_sigslot
	.type	k_sigslot, @function
k_sigslot:
	xor	%eax, %eax
	mov	(%rdi), %rax
	nop
	nop
	ret
	.size	k_sigslot, .-k_sigslot

	.section .rodata
	.p2align 3
k_three:
	.double	3.0

	.data
	.p2align 3
	.globl	k_counter
k_counter:
	.quad	0

	.section .note.GNU-stack,"",@progbits
