// Package jit compiles eBPF programs, as the running kernel verified them,
// into x86-64 machine code written through package internal/x86enc, and
// places code in this process for the tests, the kernel oracle and the
// benchmarks (Load, Func.Run).
//
// It owns the instruction selection, the calling convention below and the
// helpers' machine code. It does not verify programs (the kernel does,
// before; package bpf loads them), does not lay maps out (package
// bpf/maps does; the code reaches them by address) and does not place
// code in a traced process (the slot generator does, with the bytes of
// Code).
//
// # What it compiles
//
// ALU64 and ALU32 (add, sub, mul, div and mod unsigned and signed with
// BPF's results for a zero divisor and for MIN/-1, and, or, xor, shifts by
// an immediate or a register (masked), neg, mov, movsx, the byte swaps
// le/be/bswap of 16, 32 and 64 bits); JMP and JMP32 with every condition,
// ja and gotol; LDX (zero- and sign-extending), ST and STX of every size;
// the atomics add, and, or, xor with and without fetch, xchg and cmpxchg
// of 32 and 64 bits; ld_imm64 of a constant, a map (its descriptor's
// address) and an array map value (its address); bpf-to-bpf calls; calls
// of the helpers listed in Helpers. Anything else (tail calls, kfuncs,
// ld_abs/ld_ind, arena casts, load-acquire/store-release, other helpers)
// is refused by Compile with ErrUnsupported and its name.
//
// # Calling convention
//
// The code is one System V x86-64 function, entered at its first byte:
//
//	uint64 prog(struct pt_regs *ctx /* rdi */, uint64 stripe /* rsi */)
//
// ctx is BPF's R1: for a uprobe program, the kernel's x86-64 struct
// pt_regs (168 bytes: r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax,
// rcx, rdx, rsi, rdi, orig_rax, rip, cs, eflags, rsp, ss) that the caller
// builds from the live registers, so PT_REGS_PARM1..6 and PT_REGS_RC read
// it unchanged, followed by two words (CtxFuncIP, CtxCookie): what
// get_func_ip and get_attach_cookie return, the probe's address (a return
// probe's function) and the attachment's cookie; a caller whose programs
// call neither may pass struct pt_regs alone. stripe is the calling thread's number in [0, stripes) of
// the per-CPU maps (see package bpf/maps), unique among the threads
// running programs at the same time; get_smp_processor_id returns it. A
// stripe beyond a per-CPU map's copies makes its lookups return NULL and
// its updates -E2BIG. The result is R0 in rax.
//
// The code keeps rbx, rbp, rsp and r12-r15 (it pushes and pops what it
// uses) and may change every other general-purpose register and the
// flags; it uses no vector register. It needs, below the stack pointer
// it is called with, 512 bytes of BPF stack per frame (one per level of
// bpf-to-bpf call, at most eight) plus 96 bytes of saved registers and
// probe_read_kernel's words per frame and 192 bytes for the helpers: 6 KiB
// is always enough. The
// stack pointer need not be aligned. The caller must not rely on a red
// zone below its stack pointer: a probe slot moves the stack below the
// interrupted code's red zone first.
//
// BPF's R0-R5 live in rax, rdi, rsi, rdx, rcx and r8, so a helper is an
// ordinary System V function of its arguments; R6-R9 in rbx, r13, r14 and
// r15; R10, the frame pointer, in rbp. r9, r10 and r11 are scratch; r12
// holds the stripe for the whole run.
//
// # Helpers
//
// The helpers are machine code emitted after the program (only those it
// calls), using no library of the traced process: map lookup, update and
// delete on array, per-CPU array, hash, LRU hash and per-CPU hash maps
// with the kernel's flags and errors (an array or per-CPU array lookup
// whose map is known at the call is inlined); ktime_get_ns and
// ktime_get_boot_ns (clock_gettime); get_current_pid_tgid and
// get_current_uid_gid (system calls); get_current_comm (prctl PR_GET_NAME,
// padded as the kernel pads it); get_smp_processor_id (the stripe); get_func_ip and get_attach_cookie
// (words after struct pt_regs in the context); get_stack with
// BPF_F_USER_STACK (the frame-pointer walk of the kernel's
// perf_callchain_user, each frame read with process_vm_readv, the return
// address at the stack pointer added at a function's entry);
// trace_printk (a record of the format's address and the arguments in the
// runtime's ring, Runtime.Printk, formatted by the tracer: package bpf's
// PrintkReader; it returns 0, not the kernel's length of the line);
// perf_event_output with BPF_F_CURRENT_CPU (a raw sample, padded as the
// kernel pads it, in the perf event array's ring of package bpf/maps);
// get_prandom_u32 (splitmix64 on a per-stripe state in the Runtime area);
// probe_read_user and probe_read_user_str, and the old probe_read and
// probe_read_str, which copy through process_vm_readv on the process
// itself, so that a bad pointer fails in the kernel with -EFAULT (dst
// zeroed) and never faults the process; probe_read_kernel, the same copy
// of what a program reads as the kernel's (its context, its stack and its
// maps' arenas, which lie in the process here), and -ERANGE with dst
// zeroed for any other address below the kernel's half, as the kernel
// refuses a user address before it reads (a failed read in the upper
// half returns -EFAULT), with a plain copy for a read of the stack
// between the stack pointer and the end of a context that lies on the
// same stack (a probe slot's struct pt_regs; each frame keeps the
// context's address and the end of its stack below its BPF stack); ringbuf_output, reserve, submit
// and discard on the ring layout of package bpf/maps.
//
// # Memory
//
// Load maps the code writable, copies it, then makes it read-execute:
// never writable and executable at once.
package jit
