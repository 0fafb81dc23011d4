// Package trampoline generates the x86-64 and arm64 machine code of probes
// that never trap: a probe site is rewritten into a jump (jmp rel32, or
// an arm64 b) to a slot of its own, the slot runs the probe's handler and
// the instructions the jump displaced, and jumps back.
//
// # Sites
//
// AnalyzeX86 decides how a site is rewritten:
//
//   - a NOP site: a NOP of 5 bytes or more (nop5, nop10, the nop5 of gcc
//     -mfentry -mnop-mcount), or a one-byte nop followed by one (the
//     `nop; nop5` and `nop; nop10` USDT sites, where the nop stays and the
//     jump replaces the long NOP). Nothing is displaced.
//   - a detour: whole instructions covering at least 5 bytes (after an
//     endbr64, which stays) are displaced and run relocated in the slot by
//     package xol: RIP-relative displacements recomputed, rel8 branches
//     widened, a call as push and jmp. Each must run from the slot without
//     a trap; a call, or a branch needing stubs, must come last (a thread
//     inside the callee returns after the replaced bytes).
//
// Checks over the whole function — the instruction boundary at the site,
// no direct branch into the replaced bytes, no indirect jump that could
// land there — are the caller's (package plan) and must pass before a
// detour is installed.
//
// # Slots
//
// A slot first moves the stack pointer below the 128-byte red zone (lea
// -128(%rsp),%rsp: never a call at the site, whose return address would
// land in the red zone of a leaf function, the defect of Linux's nop5
// optimization), saves the flags (lahf/seto, or pushfq) and the registers
// its handler uses, runs the handler, restores them, moves the stack
// pointer back, runs the displaced instructions and jumps back. Every
// register and flag the probed code sees is what it would have seen
// without the probe. The hit path is straight-line code: a counter's
// locked increment comes right after the flags are saved, and the slow
// cases (the thread table's probe sequence, dead or chained shadow-stack
// entries, a full shadow stack) are jumped to.
//
// Handlers (Handler):
//
//   - calls of compiled code (Handler.Calls; ReturnHandler.Calls from the
//     return trampoline, with Config.ReturnCalls): the kernel's struct
//     pt_regs built from the live registers below the red zone, the
//     thread's stripe, the calls on a 16-byte aligned stack, and every
//     register and flag restored from the structure (see x86call.go);
//   - a counter: with the per-thread data plane (Data.SetThreads), a plain
//     inc of a word of the calling thread's stripe, found from the thread
//     pointer by one multiplication and one compare (see threaddata.go);
//     otherwise, and for a thread without a stripe, lock inc of a 64-bit
//     word in the shared data area; exact under any concurrency;
//   - an event record: probe id, thread pointer (rdfsbase or the TCB self
//     pointer), time stamp counter, rdi rsi rdx rcx r8 r9, stack pointer
//     and probe address, written into a ring in the shared data area with
//     head, tail and dropped counters; the tracer reads it through View
//     while the tracee runs, and a full ring drops and counts. With the
//     per-thread data plane an entry event is a 64-byte record (probe id,
//     time stamp counter, the six argument registers) in the thread's own
//     ring, reserved by an unlocked compare-and-swap that the thread's
//     signal handlers cannot split, published by one store, and counted
//     dropped per counter when the ring is full;
//   - a return probe: at a function entry, the return address is saved on
//     the thread's shadow stack (the thread table, found by hashing the
//     thread pointer) and replaced by the return trampoline's address
//     (GenerateReturnX86): the slot leaves through a gate whose call
//     enters the displaced instructions and pushes that address, so that
//     the return stack buffer holds it too and the function's ret is
//     predicted (ReturnEntryOffset). When the function returns there, the
//     trampoline drops the entries of frames abandoned by longjmp or an
//     exception (their stack pointer lies below, as Linux judges), runs
//     the return handlers (a counter, an event with rax and rdx) and
//     returns to the original address with a ret, which the entry of the
//     original call predicts. Tail calls chain entries as Linux does. Signal
//     handlers that enter probed functions meanwhile leave the shadow stack
//     consistent (one store or one compare-and-swap per change; the
//     argument is in the Threads comment);
//   - Unhijack and Rehijack, for unwinders: the return trampoline has no
//     unwind information, so a C++ exception or a backtrace cannot cross a
//     frame whose return address points to it. Unhijack at the entry of
//     the unwinders (_Unwind_RaiseException and friends) puts the original
//     return addresses back; Rehijack at __cxa_begin_catch re-arms the
//     frames that survived.
//
// # Memory
//
// The package returns bytes and the addresses to put them at; writing is
// the engine's job. Per traced process the engine maps:
//
//   - the shared data area (Data): a memfd, mapped read-write and shared
//     in the tracee and in the tracer (Data.Init, then NewView); with
//     Data.SetThreads it also holds one stripe (counters, drops, the ring's
//     head and tail) and one event ring per thread slot. The layout, the
//     lookup from the thread pointer, the protocols and why a signal
//     handler that hits a probe while its thread is inside a slot loses
//     and corrupts nothing are documented in threaddata.go; the same
//     lookup can find other per-thread data placed in a stripe (the map
//     stripes of per-thread BPF maps);
//   - the thread table (Threads): private anonymous memory, so that a
//     forked child gets its own copy, as it gets its own stack;
//   - slot areas (Area), read-execute and never writable in the tracee,
//     each within +-2 GiB of every site it serves: Place chooses the
//     address from the process's mappings; code is written through
//     /proc/PID/mem or ptrace.
//
// Area.BuildX86 allocates a slot, generates its code and returns the
// patches that enter and leave it (Trampoline.Install and Remove, the
// shape of batchpatch.Patch), to be applied in one stop with the others.
//
// # Verification
//
// Every instruction the generator emits is decoded again by package decode
// before the code is returned (ErrEncode on a mismatch). The tests execute
// the generated code on the CPU — in the test process, and in a traced C++
// program with threads, setjmp/longjmp and exceptions — and compare with
// the unprobed run; objdump judges the instruction boundaries.
//
// # What it does not do
//
// trampoline does not decide whether a site may be probed (plan), read or
// write a process (proc, batchpatch), or relocate single instructions
// itself (xol). On arm64 it has no return probes, Unhijack or Rehijack
// (ErrConfig).
//
// # arm64
//
// AnalyzeARM64 and Area.BuildARM64 are the arm64 counterparts. A site is
// one instruction word, replaced by a b (+-128 MiB) to the slot: exactly
// one instruction is displaced, so a branch to the site lands on the b,
// and the function-wide checks that remain are the caller's: the site is
// an instruction and not data, and it does not lie inside a load/store
// exclusive sequence (the slot's memory accesses clear the exclusive
// monitor, the store-exclusive would fail forever). A nop (the USDT site)
// displaces nothing; a bti at the site stays and the b follows it.
// Instructions xol.CheckARM64 refuses are refused (*SiteError).
//
// The slot saves x16, x17 (and x13-x15 as the handler needs) with stp
// below the stack pointer (AAPCS64 has no red zone; the frame is a
// multiple of 16 bytes, so sp stays 16-byte aligned), runs the handler
// without any flag-setting instruction (NZCV is never saved because never
// changed), restores the registers, runs the displaced instruction as
// xol.RelocateARM64 rewrote it for the slot's address (conditional
// branches re-targeted or inverted over a b, bl and blr with x30 set to
// the original return address, adr, adrp and literal loads materialized;
// an FP/SIMD literal out of reach is loaded through x16 saved around the
// load) and goes back with a b. Counters are a ldxr/stxr loop, or stadd
// with ARM64Options.LSE; events take the ring's head with ldxr/stxr,
// record x0-x5, sp, the probe address, tpidr_el0 as the thread pointer
// and cntvct_el0 as the time stamp, and publish with stlr. The slot area
// must lie within MaxReachARM64 of every address in SiteARM64.Reach
// (PlaceOptions.Reach); only with ARM64Options.ScratchFree (x16 and x17
// dead, as at a function entry: they are the intra-procedure-call
// scratch registers, which veneers and PLT stubs may overwrite) may a
// slot reach farther, through ldr x16, literal; br x16.
//
// Instruction-cache maintenance. arm64 instruction fetch is not coherent
// with data writes: code written as data must be cleaned from the data
// cache to the point of unification and invalidated from the instruction
// cache before it runs (dc cvau and ic ivau over the range by the line
// sizes of CTR_EL0, each followed by dsb ish, then a context
// synchronization event such as isb or an exception return in every
// thread that runs it). A tracer that writes slots and site patches
// through /proc/PID/mem or PTRACE_POKETEXT need not do it: both go
// through __access_remote_vm (mm/memory.c), which writes with
// copy_to_user_page; on arm64 (arch/arm64/mm/flush.c) copy_to_user_page
// copies and then calls flush_ptrace_access, which for a VM_EXEC mapping
// calls sync_icache_aliases on the range: caches_clean_inval_pou (or
// dcache_clean_pou and icache_inval_all_pou when the instruction cache
// aliases). The kernel sends no IPI for user mappings (its comment: no
// kick_all_cpus_sync after I-cache invalidation for user mappings); the
// stopped threads resume through an exception return, which synchronizes
// context. A page mapped executable later gets the same maintenance when
// its PTE is set (__sync_icache_dcache, as uprobes' arch_uprobe_copy_ixol
// notes). Code written any other way — through a second, writable
// mapping of a memfd shared with the tracee, or by the tracee itself —
// gets no maintenance from the kernel, and the writer must do it.
package trampoline
