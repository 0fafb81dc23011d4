/*
 * One function per instruction kind, for the live-kernel check of the
 * linux-uprobes policy (plan/linux_live_test.go).
 *
 * For each kind NAME the file defines:
 *   k_NAME     the function (STT_FUNC); kinds_main.c calls it three times
 *              with %rdi pointing at a 4 KiB scratch buffer;
 *   p_NAME     the probe address (a NOTYPE symbol), usually k_NAME itself;
 *   need_NAME  an absolute symbol: 0 = may run anywhere; 1 = never run it
 *              (only its registration is checked); 2 = needs AVX2;
 *              4 = needs AVX-512F.
 * and an entry {"NAME", k_NAME} in the section "kinds" that the driver
 * walks through __start_kinds/__stop_kinds.
 *
 * Exotic encodings are written as .byte so that the assembler cannot pick
 * another form.
 */
	.file "kinds_x86.S"

	.macro KIND name, need=0, align=4
	.pushsection .rodata.kindnames, "a"
.Lname_\name:
	.asciz "\name"
	.popsection
	.pushsection kinds, "aw"
	.balign 8
	.quad .Lname_\name, k_\name
	.popsection
	.globl need_\name
	.set need_\name, \need
	.text
	.if \align
	.p2align \align
	.endif
	.globl k_\name
	.type k_\name, @function
k_\name:
	.endm

	.macro PROBE name
	.globl p_\name
p_\name:
	.endm

	.macro END name
	.size k_\name, . - k_\name
	.endm

	/* A kind whose probe is its first instruction. */
	.macro SIMPLE name, need=0
	KIND \name, \need
	PROBE \name
	.endm

	.data
	.balign 64
var:	.quad 0x1122334455667788
	.quad 0
	.section .data.rel.ro, "aw"
	.balign 8
fptr:	.quad target_ret

	.text
	.type target_ret, @function
target_ret:
	ret
	.size target_ret, . - target_ret

/* NOPs: the kernel's canonical NOP strings and other forms. */
	SIMPLE nop1
	.byte 0x90
	ret
	END nop1
	SIMPLE nop2
	.byte 0x66, 0x90
	ret
	END nop2
	SIMPLE nop3
	.byte 0x0f, 0x1f, 0x00
	ret
	END nop3
	SIMPLE nop4
	.byte 0x0f, 0x1f, 0x40, 0x00
	ret
	END nop4
	SIMPLE nop5
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	ret
	END nop5
	SIMPLE nop6
	.byte 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00
	ret
	END nop6
	SIMPLE nop7
	.byte 0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00
	ret
	END nop7
	SIMPLE nop8
	.byte 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
	ret
	END nop8
	SIMPLE nop9
	.byte 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
	ret
	END nop9
	SIMPLE nop10
	.byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
	ret
	END nop10
	SIMPLE nop11
	.byte 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
	ret
	END nop11
	SIMPLE nop5_66			/* nopw 0(%rax): a 5-byte NOPL, not the canonical one */
	.byte 0x66, 0x0f, 0x1f, 0x40, 0x00
	ret
	END nop5_66
	SIMPLE nop5_90			/* 90 with four 66 prefixes: 5 bytes */
	.byte 0x66, 0x66, 0x66, 0x66, 0x90
	ret
	END nop5_90
	SIMPLE nop4_66			/* nopw (%rax): not a canonical 4-byte NOP */
	.byte 0x66, 0x0f, 0x1f, 0x00
	ret
	END nop4_66
	SIMPLE nopl_reg			/* nopl %eax */
	.byte 0x0f, 0x1f, 0xc0
	ret
	END nopl_reg
	SIMPLE pause
	.byte 0xf3, 0x90
	ret
	END pause
	SIMPLE xchg_r8_rax		/* 41 90 is xchg %r8,%rax, not a NOP */
	.byte 0x41, 0x90
	ret
	END xchg_r8_rax
	SIMPLE xchg_ecx_eax
	.byte 0x91
	ret
	END xchg_ecx_eax

/* Direct branches. */
	SIMPLE jmp8
	.byte 0xeb, 0x00
	ret
	END jmp8
	SIMPLE jmp8_skip
	.byte 0xeb, 0x01
	int3
	ret
	END jmp8_skip
	SIMPLE jmp32
	.byte 0xe9, 0x00, 0x00, 0x00, 0x00
	ret
	END jmp32
	SIMPLE call
	call 1f
	ret
1:	ret
	END call
	SIMPLE jcc8
	.byte 0x74, 0x00
	ret
	END jcc8
	KIND jcc8_taken
	xor %eax, %eax
	PROBE jcc8_taken
	.byte 0x74, 0x01
	int3
	ret
	END jcc8_taken
	SIMPLE jcc32
	.byte 0x0f, 0x84, 0x00, 0x00, 0x00, 0x00
	ret
	END jcc32
	SIMPLE jmp8_66, 1
	.byte 0x66, 0xeb, 0x00
	ret
	END jmp8_66
	SIMPLE callw, 1
	.byte 0x66, 0xe8, 0x00, 0x00
	ret
	END callw
	SIMPLE jcc8_66, 1
	.byte 0x66, 0x74, 0x00
	ret
	END jcc8_66
	SIMPLE jcc32_66, 1
	.byte 0x66, 0x0f, 0x84, 0x00, 0x00, 0x00, 0x00
	ret
	END jcc32_66

/* push. */
	SIMPLE push_rbp
	push %rbp
	pop %rbp
	ret
	END push_rbp
	SIMPLE push_rax
	push %rax
	pop %rax
	ret
	END push_rax
	SIMPLE push_rsp
	push %rsp
	add $8, %rsp
	ret
	END push_rsp
	SIMPLE push_r8
	.byte 0x41, 0x50
	pop %r8
	ret
	END push_r8
	SIMPLE push_r15
	.byte 0x41, 0x57
	pop %r15
	ret
	END push_r15
	SIMPLE push_rex48		/* push %rax with a REX.W prefix */
	.byte 0x48, 0x50
	pop %rax
	ret
	END push_rex48
	SIMPLE push_rex49		/* push %r8 with REX.W+B */
	.byte 0x49, 0x50
	pop %r8
	ret
	END push_rex49
	SIMPLE push16			/* pushw %ax */
	.byte 0x66, 0x50
	.byte 0x66, 0x58
	ret
	END push16
	SIMPLE push_imm8
	.byte 0x6a, 0x00
	pop %rax
	ret
	END push_imm8
	SIMPLE push_mem
	pushq (%rdi)
	pop %rax
	ret
	END push_mem
	KIND pop
	push %rax
	PROBE pop
	pop %rax
	ret
	END pop

/* Ordinary instructions, single-stepped. */
	SIMPLE mov_rr
	.byte 0x48, 0x89, 0xf8		/* mov %rdi,%rax */
	ret
	END mov_rr
	SIMPLE mov_self
	.byte 0x48, 0x89, 0xc0		/* mov %rax,%rax */
	ret
	END mov_self
	SIMPLE lea_self
	.byte 0x48, 0x8d, 0x40, 0x00	/* lea 0(%rax),%rax */
	ret
	END lea_self
	SIMPLE sub_rsp
	sub $8, %rsp
	add $8, %rsp
	ret
	END sub_rsp
	SIMPLE xor
	xor %eax, %eax
	ret
	END xor
	SIMPLE test
	test %rdi, %rdi
	ret
	END test
	SIMPLE movzx
	movzbl (%rdi), %eax
	ret
	END movzx
	SIMPLE endbr64
	.byte 0xf3, 0x0f, 0x1e, 0xfa
	ret
	END endbr64
	SIMPLE fs_load
	mov %fs:0x28, %rax
	ret
	END fs_load
	SIMPLE gs_load, 1
	mov %gs:0, %rax
	ret
	END gs_load
	SIMPLE addr32_lea
	.byte 0x67, 0x48, 0x8d, 0x04, 0x07	/* lea (%edi,%eax),%rax */
	ret
	END addr32_lea
	SIMPLE pushf
	pushf
	add $8, %rsp
	ret
	END pushf
	KIND popf
	pushf
	PROBE popf
	popf
	ret
	END popf
	KIND cpuid
	push %rbx
	xor %eax, %eax
	xor %ecx, %ecx
	PROBE cpuid
	cpuid
	pop %rbx
	ret
	END cpuid
	KIND syscall
	mov $39, %eax			/* getpid */
	PROBE syscall
	syscall
	ret
	END syscall
	SIMPLE rdtsc
	rdtsc
	ret
	END rdtsc
	SIMPLE lfence
	lfence
	ret
	END lfence
	SIMPLE ud2, 1
	ud2
	ret
	END ud2
	SIMPLE wrmsr, 1
	wrmsr
	ret
	END wrmsr
	SIMPLE sysenter, 1
	sysenter
	ret
	END sysenter
	SIMPLE threednow, 1		/* pfadd %mm1,%mm0 (3DNow!) */
	.byte 0x0f, 0x0f, 0xc1, 0x9e
	ret
	END threednow

/* RIP-relative operands. */
	SIMPLE mov_riprel
	mov var(%rip), %rax
	ret
	END mov_riprel
	SIMPLE mov_riprel_store
	mov %rax, var+8(%rip)
	ret
	END mov_riprel_store
	SIMPLE lea_riprel
	lea var(%rip), %rax
	ret
	END lea_riprel
	SIMPLE movl_riprel_imm
	movl $1, var+8(%rip)
	ret
	END movl_riprel_imm
	SIMPLE cmp_riprel
	cmpl $0, var(%rip)
	ret
	END cmp_riprel

/* Returns and indirect branches. */
	SIMPLE ret
	ret
	END ret
	SIMPLE ret_imm
	ret $0
	END ret_imm
	SIMPLE repz_ret
	.byte 0xf3, 0xc3
	END repz_ret
	KIND call_reg
	lea target_ret(%rip), %rax
	PROBE call_reg
	call *%rax
	ret
	END call_reg
	SIMPLE call_riprel
	call *fptr(%rip)
	ret
	END call_riprel
	KIND jmp_reg
	lea 1f(%rip), %rax
	PROBE jmp_reg
	jmp *%rax
	int3
1:	ret
	END jmp_reg
	KIND jmp_riprel
	PROBE jmp_riprel
	jmp *fptr(%rip)
	END jmp_riprel
	KIND notrack_jmp
	lea 1f(%rip), %rax
	PROBE notrack_jmp
	.byte 0x3e, 0xff, 0xe0		/* notrack jmp *%rax */
	int3
1:	ret
	END notrack_jmp
	KIND loop
	mov $1, %ecx
	PROBE loop
	.byte 0xe2, 0x00
	ret
	END loop
	KIND jrcxz
	xor %ecx, %ecx
	PROBE jrcxz
	.byte 0xe3, 0x00
	ret
	END jrcxz
	SIMPLE ljmp_mem, 1
	ljmp *(%rdi)
	END ljmp_mem
	SIMPLE lcall_mem, 1
	lcall *(%rdi)
	ret
	END lcall_mem
	SIMPLE lret, 1
	lretq
	END lret
	SIMPLE xbegin, 1
	.byte 0xc7, 0xf8, 0x00, 0x00, 0x00, 0x00
	ret
	END xbegin

/* Legacy prefixes the kernel refuses. */
	SIMPLE lock_add
	lock add %rax, (%rdi)
	ret
	END lock_add
	SIMPLE cs_nop
	.byte 0x2e, 0x90
	ret
	END cs_nop
	SIMPLE ds_mov
	.byte 0x3e, 0x48, 0x8b, 0x07
	ret
	END ds_mov
	SIMPLE es_mov
	.byte 0x26, 0x48, 0x8b, 0x07
	ret
	END es_mov
	SIMPLE ss_mov
	.byte 0x36, 0x48, 0x8b, 0x07
	ret
	END ss_mov

/* Opcodes the kernel refuses (never run). */
	SIMPLE mov_ss, 1
	.byte 0x8e, 0xd0
	ret
	END mov_ss
	SIMPLE mov_ds, 1
	.byte 0x8e, 0xd8
	ret
	END mov_ds
	SIMPLE pop_ds, 1
	.byte 0x1f
	ret
	END pop_ds
	SIMPLE int3, 1
	int3
	ret
	END int3
	SIMPLE int80, 1
	int $0x80
	ret
	END int80
	SIMPLE hlt, 1
	hlt
	ret
	END hlt
	SIMPLE in_dx, 1
	in %dx, %al
	ret
	END in_dx
	SIMPLE cli, 1
	cli
	ret
	END cli
	SIMPLE iretq, 1
	iretq
	END iretq

/* VEX and EVEX: the kernel looks their opcode byte up in its one-byte tables. */
	SIMPLE vmovdqu_load, 2
	vmovdqu (%rdi), %ymm0
	vzeroupper
	ret
	END vmovdqu_load
	SIMPLE vmovdqu_store, 2
	vmovdqu %ymm0, (%rdi)
	vzeroupper
	ret
	END vmovdqu_store
	SIMPLE vpaddd, 2
	vpaddd %ymm1, %ymm0, %ymm0
	vzeroupper
	ret
	END vpaddd
	SIMPLE vpxor, 2
	vpxor %xmm0, %xmm0, %xmm0
	ret
	END vpxor
	SIMPLE vzeroupper, 2
	vzeroupper
	ret
	END vzeroupper
	SIMPLE vpcmpeqb, 2
	vpcmpeqb %xmm1, %xmm0, %xmm0
	ret
	END vpcmpeqb
	SIMPLE vpor, 2
	vpor %xmm1, %xmm0, %xmm0
	ret
	END vpor
	SIMPLE vpsubsb, 2		/* opcode byte E8, like call rel32 */
	vpsubsb %xmm1, %xmm0, %xmm0
	ret
	END vpsubsb
	KIND vpshufd, 2			/* opcode byte 70 (jo) with an imm8 */
	xor %eax, %eax			/* OF = 0 */
	PROBE vpshufd
	vpshufd $0x1b, %xmm0, %xmm0
	ret
	END vpshufd
	SIMPLE vcmpps, 2		/* opcode byte C2, like ret $imm16 */
	vcmpps $0, %xmm1, %xmm0, %xmm0
	ret
	END vcmpps
	SIMPLE vmovmskps, 2		/* opcode byte 50, like push %rax */
	vmovmskps %xmm0, %eax
	ret
	END vmovmskps
	SIMPLE vpmaskmovd_store, 2	/* opcode byte 8E with ModRM.reg 2, like mov to %ss */
	vpmaskmovd %xmm2, %xmm0, (%rdi)
	ret
	END vpmaskmovd_store
	SIMPLE kmovw, 4			/* opcode byte 90, like nop */
	kmovw %k1, %k1
	ret
	END kmovw
	SIMPLE evex_vpaddd, 4
	vpaddd %zmm1, %zmm0, %zmm0
	vzeroupper
	ret
	END evex_vpaddd
	SIMPLE evex_load, 4
	vmovdqu64 (%rdi), %zmm0
	vzeroupper
	ret
	END evex_load
	SIMPLE evex_vpcmpq, 4		/* opcode byte 1F */
	vpcmpq $0, %zmm1, %zmm0, %k1
	vzeroupper
	ret
	END evex_vpcmpq

/* Other encodings (never run: this CPU may lack them). */
	SIMPLE xop_vphaddbw, 1
	.byte 0x8f, 0xe9, 0x78, 0xc1, 0xc0
	ret
	END xop_vphaddbw
	SIMPLE rex2_mov, 1		/* APX REX2: mov %eax,%eax */
	.byte 0xd5, 0x00, 0x89, 0xc0
	ret
	END rex2_mov

/* Probes that are not on an instruction boundary (never hit). */
	KIND mid_movabs, 1
	.byte 0x48, 0xb8
	PROBE mid_movabs
	.byte 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90
	ret
	END mid_movabs
	KIND mid_lock, 1
	.byte 0xf0
	PROBE mid_lock
	.byte 0x48, 0x01, 0x07
	ret
	END mid_lock

/* A canonical nop5 that crosses a page boundary: 3 bytes before it, 2 after. */
	.text
	.balign 4096
	.skip 4093, 0xcc
	KIND nop5_pagecross, 0, 0
	PROBE nop5_pagecross
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00
	ret
	END nop5_pagecross

	.section .note.GNU-stack, "", @progbits
