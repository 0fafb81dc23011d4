// Package trampoline generates the x86-64 machine code of probes that never
// trap: a probe site is rewritten into a jmp rel32 to a slot of its own,
// the slot runs the probe's handler and the instructions the jump
// displaced, and jumps back.
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
// without the probe.
//
// Handlers (Handler):
//
//   - a counter: lock inc of a 64-bit word in the shared data area, exact
//     under any concurrency;
//   - an event record: probe id, thread pointer (rdfsbase or the TCB self
//     pointer), time stamp counter, rdi rsi rdx rcx r8 r9, stack pointer
//     and probe address, written into a ring in the shared data area with
//     head, tail and dropped counters; the tracer reads it through View
//     while the tracee runs, and a full ring drops and counts;
//   - a return probe: at a function entry, the return address is saved on
//     the thread's shadow stack (the thread table, found by hashing the
//     thread pointer) and replaced by the return trampoline's address
//     (GenerateReturnX86). When the function returns there, the trampoline
//     drops the entries of frames abandoned by longjmp or an exception
//     (their stack pointer lies below, as Linux judges), runs the return
//     handlers (a counter, an event with rax and rdx) and returns to the
//     original address. Tail calls chain entries as Linux does. Signal
//     handlers that enter probed functions meanwhile leave the shadow stack
//     consistent (one store or one compare-and-swap per change);
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
//     in the tracee and in the tracer (Data.Init, then NewView);
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
// itself (xol). It generates x86-64 code only; arm64 is not done yet.
package trampoline
