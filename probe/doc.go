// Package probe is the live engine a Go tracer calls: it spawns a command or
// attaches to a process, finds the probe sites that specs name in every
// module the process maps (the executable, its shared libraries, libraries
// loaded later with dlopen), plans each site, and installs every accepted
// site in one stop-the-world batch: as a jump to a trampoline where the
// plan allows one (no trap at all: the slot counts the hit and runs the
// displaced instructions), else as an int3 whose trap the engine serves —
// it counts the hit, optionally records an event (probe, thread, time, the
// six argument registers), then executes the displaced instruction by
// emulation where the plan says so, else out of line — and lets the thread
// go on. Detach restores every byte in one batch.
//
// # Bounded pauses
//
// With Options.MaxPause an Add or a Remove plans its sites while the
// process runs, stages them in one stop (trampolines built, the hit
// path's table made ready for every site), writes the new slots once the
// process runs again (no thread can reach a slot before its site is
// written), and writes the sites in passes under the bound
// (batchpatch.Options.MaxPause), the process running between them. Each site is one unit (an entry probe and the return probe that
// shares its slot are one site). A site counts, and shows in Stats, from
// the pass that wrote it; Options.OnPass reports the progress. The
// tracer's lock is released between passes, so a child forked meanwhile is
// served within one pass: it inherits the sites whose bytes it holds,
// every one of them whole. Stats.LongestPause is the longest pass,
// Stats.LongestStage the staging stop, which is not bounded.
//
// # Probe specs
//
// A spec is what elfscan.ParseSpec accepts (SYM, SYM+OFF, 0xADDR,
// usdt:PROVIDER:NAME, globs, and the bpftrace forms with a path), optionally
// preceded by a module and a colon: "libc.so.6:malloc", "*:free",
// "libfoo*:usdt:foo:*". A module is matched against the base name of the
// mapped file (a pattern with a "/" against the whole path), also without
// its suffixes: "libc.so" and "libc" match "libc.so.6". Without a module, a function or address spec
// names the main executable, and a USDT spec every module. Specs stay in
// force for modules mapped later, and are resolved again in the new image
// after an exec.
//
// # Plans
//
// Every site is decided by plan.Decide under the probeopt policy, with the
// live-process options: a trampoline (trampoline-nop, trampoline-detour)
// where the site can take one, else the best trap strategy. A site the plan
// rejects is refused with its reason and detail (see RejectedError) and
// never written. Emulated sites run the
// instruction in emulate.X86 against the thread's registers and the
// process's memory; the other accepted sites (XOL) run it out of line or
// single-step it (see below). A site whose text in memory differs from the
// file is refused too.
//
// # The hit path
//
// Traps are served on the ptrace thread of package proc. The lookup of
// the probe at a trapping address is a lock-free read of an immutable
// table that additions and removals replace atomically, inside the same
// stop-the-world pause that writes the text: a thread that hits a probe
// never waits for a registration, and a registration never sees a
// half-updated table. Hit counters are atomic.
//
// Emulated memory accesses go through process_vm_readv and
// process_vm_writev, which honour page protections as the CPU does.
// An access that could be observed half-done by another thread (the process
// has several threads and the access is neither on the trapping thread's
// stack nor a read of read-only memory), an access to shared memory, one
// that crosses a page, and any fault are not emulated: the thread is
// single-stepped instead, so the CPU executes the instruction (and raises
// the real fault with its real siginfo).
//
// # Out of line
//
// An XOL instruction that cannot raise an exception (no memory operand but
// a RIP-relative one, no implicit memory access, no division, no x87) is
// relocated by xol.RelocateX86 into a slot of an area mapped read-execute
// near its module (trampoline.Place), and "boosted": at a hit the thread is
// sent to the copy, which does what the original does and jumps back, with
// no second trap and no other thread stopped. (A signal raised inside a copy
// would be delivered with the instruction pointer in the slot, which the
// tracer cannot correct before delivery; hence the restriction. Slot areas
// stay mapped until the process execs or exits.)
//
// Every other XOL instruction is single-stepped in place: the thread is held
// at the probe address, and a service goroutine stops the world, puts the
// original byte back, single-steps every held thread, writes the int3 again
// and resumes the world. A signal that arrives during a step stops the
// thread before the instruction runs; the step is made again and the signal
// delivered after it (as the kernel's uprobes defer signals during their
// step). A fault of the instruction itself ends the step and is delivered
// with the thread at the probe address, as the kernel does. A string
// instruction with a repeat prefix is stepped once per iteration. The
// method sits behind a small interface, for a step of a relocated copy once
// proc can make one without stopping the world.
//
// # Processes
//
// Threads are traced as they appear. A forked child inherits the int3
// bytes and jumps: without Options.FollowForks they are removed from the
// child (in one batch) before it is detached and runs on; with it the child is traced
// like its parent, its hits counted under the same probes. A vfork child,
// which shares its parent's memory and text until it execs or exits, has
// its traps served by the parent's handler and its hits counted at the
// parent's sites. After an exec
// the probes are resolved again in the new image; those that match nothing
// there have no sites any more. The new image is held at the exec
// (proc.Options.HoldExec) until it is probed: no hit is missed. New
// executable mappings
// are found at the dynamic linker's rendezvous (an internal probe on
// _dl_debug_state, which ld.so calls before and after every change to its
// list of objects), by watching the loading thread's system calls between
// the two, so that a library's probes are in place from the mmap of its
// code, before its relocation runs its IFUNC resolvers (see
// startup_linux.go), and by a periodic look at /proc/PID/maps.
//
// # Trampolines
//
// A trampoline site is rewritten into a jump to a slot of its own (package
// trampoline) that counts the hit in a data area shared with the tracer (a
// memfd), records the event in its ring with Options.Events, runs the
// instructions the jump displaced and jumps back: no trap, no tracer on the
// hit path, and the program runs on correctly if the tracer is killed. The
// slot areas and the data area are placed within reach of the sites, at the
// far end from the addresses the program's own mappings get, and stay
// mapped after a removal (a thread may still be in a slot); a clean Detach
// unmaps them, and a later Attach those an earlier tracer left, once no
// thread can be in them: no PC there, no return probe armed, no signal
// frame that interrupted a slot (see areas_linux.go for the checks
// and what they do not cover). A site
// whose trampoline cannot be made, or whose displaced bytes hold another
// site, falls back to traps; Options.NoTrampolines asks for traps
// everywhere. The event reader maps a thread pointer to a thread id through
// the C library's thread control block (read before each thread exits) and
// the time stamp counter to a time. A followed child gets a data area of
// its own at the same address, mapped over the one it inherited before it
// runs: its trampolines count its hits, and record its events, apart from
// the parent's.
//
// The data plane is per thread (trampoline.Data.SetThreads): a thread's
// first hit claims a stripe of the data area, found from its thread
// pointer, and from then on its hits increment counters and fill an event
// ring (Options.RingSize events) that no other thread writes, without a
// lock prefix; a thread without a thread pointer or a free stripe (beyond
// 128 threads) counts in the shared counters and ring, exactly. The tracer
// sums the stripes' counters, and reads every ring in batches each
// millisecond, merging the events of every ring by the time of the hit (the
// time stamp counter, read with rdtsc at the hit: cheaper than the vDSO's
// clock_gettime, which reads it too); an event read waits for the next
// drain while a ring may still hold an earlier one (a full batch, or a
// record being written), so the order holds across drains. The events go to the Events channel,
// or in batches to Options.OnEvents. A hit whose ring is full is dropped
// and counted for its site and thread (SiteStats.Dropped,
// Stats.ThreadDrops). When a thread exits (while it is stopped on its way
// out) its ring is drained and its stripe retired: its counts move to the
// shared counters and the stripe is free for another thread. The binary
// event format (NewEventWriter, NewEventReader) is what "probeopt trace
// --events --format bin" writes.
//
// The data area holds three counters a site (entries, returns, returns
// not armed) for 349,525 sites; a site beyond them, or whose trampoline
// cannot be made, takes traps and SiteStats.Fallback says why.
//
// # BPF programs
//
// Tracer.LoadBPF loads a BPF object (package bpf: read with cilium/ebpf,
// verified by the running kernel): its maps go into a memfd mapped shared
// in the process and in the tracer, its programs are compiled (package
// bpf/jit) and written read-execute into the process. BPF.Attach runs a
// program at every site of a spec, from the site's trampoline slot: the
// slot builds the kernel's struct pt_regs from the live registers and
// calls the code with the thread's stripe of the per-CPU maps; a
// uretprobe program runs from the return trampoline with the function's
// return value in rax. A site that cannot take a trampoline is refused
// (ReasonNeedsTrampoline): a program never runs at a trap. The tracer
// reads the maps while the process runs (BPF.Map). See bpf.go for the
// stack the programs need and what forks and execs do to them.
//
// # Other tracers: kernel uprobes
//
// A kernel uprobe (bpftrace, perf, any BPF tool) writes an int3 over the
// first byte of the instruction it probes, unless that byte already is an
// int3, and when it goes writes the file's byte back, unless the byte no
// longer is an int3 (the kernel's verify_opcode, the only check it makes).
// A thread that hits it runs the file's instruction out of line and goes
// on after it. Nothing tells a tracer that this happened: no ptrace stop,
// no signal. Over a jump of probeopt's, the int3 leaves the jump's
// displacement after it, which a thread then runs as code, and the
// removal leaves the file's first byte before it: a torn instruction
// either way. Hence:
//
//   - Where the site can keep it, the first instruction stays in place and
//     the jump follows it (plan.Options.KeepFirst): an endbr64, a
//     one-byte nop before a nop5, or any first instruction that never
//     branches or traps (with Options.Events it must not write the
//     argument registers, under a return probe neither the stack pointer
//     nor memory unless it is a push of a register, which the slot undoes
//     and runs again: trampoline.Site.Redo). A kernel uprobe at the site's
//     address then shares it
//     with probeopt, whatever the order: its int3, its step and its
//     removal all touch the first instruction, never the jump, and both
//     count every hit.
//   - A site whose bytes hold an int3 that the file does not have, where
//     probeopt would write, is refused (ReasonKernelUprobe; the detail
//     gives the process's [uprobes] mapping and the tracefs
//     uprobe_events line when they show one). A uprobe registered for
//     every process (bpftrace's, perf's) puts its int3 in probeopt's own
//     read-only view of the file too, where the plan reads it: such a site
//     is refused with the same reason (the file, read with pread, has
//     another byte), and the plan of that file keeps the int3 until
//     probeopt opens it again.
//   - An int3 site of probeopt's coexists: the kernel writes nothing over
//     an int3 and serves the hits itself while its uprobe is there (they
//     are not counted here), and its removal writes the file's byte back,
//     a whole instruction; probeopt finds its int3 gone and reports the
//     site lost.
//   - The bytes of every installed site are compared with what the engine
//     wrote at each stop it makes (Add, Remove, a new module, an exec,
//     Detach; not the stops of an in-place single step) and every
//     Options.VerifyInterval (10 ms) in between, read without stopping the
//     process. A site whose bytes changed is taken out (the bytes still
//     probeopt's get the file's back; a kernel's int3 stays and goes with
//     its uprobe, which then writes the file's byte over it) and reported:
//     SiteStats.Lost and LostDetail.
//
// What cannot be guaranteed: a kernel uprobe on a byte of a jump (the
// first byte of a site whose jump must start at the address: its first
// instruction branches, or writes an argument register that an event
// records, or writes the stack otherwise than by a push under a return
// probe; or an instruction
// inside the replaced bytes) cannot be kept out, since verify_opcode
// refuses only an int3 and the kernel skips only a writable or shared
// mapping of the text, which probeopt does not make. A thread that hits
// such an int3 before the next comparison dies (SIGILL, SIGSEGV or
// SIGTRAP), and a uprobe put and removed between two comparisons leaves
// the torn bytes that the next one repairs. The window is the
// VerifyInterval.
//
// # Return probes
//
// SYM%return, uretprobe:PATH:SYM and ur:PATH:SYM name return probes: the
// trampoline at the function's entry saves the return address on the
// thread's shadow stack and replaces it by the return trampoline's, which
// counts the return (and records rax with Options.Events) and goes back.
// They need a trampoline: a function whose entry takes traps refuses them
// (ReasonReturnNeedsTrampoline). A thread has Options.ReturnDepth (63 by
// default, up to 1023) returns armed at once; a deeper call's return is
// not counted but counted as missed (SiteStats.DepthMissed: a recursion
// deeper than that, say; the kernel's own limit is 64). Frames left by longjmp or an exception
// never count a return, as with Linux's return probes. While return probes
// are in force, the unwinder's entries (_Unwind_RaiseException and the
// others) get trampolines that put the original return addresses back, and
// __cxa_begin_catch one that arms the surviving frames again, so that
// exceptions and backtraces cross probed frames. Removing a return probe
// while its function keeps an entry probe (or the reverse) moves the jump
// to a slot without that handler; frames armed before return through the
// return trampoline as before.
//
// A Go function (one of the Go function table) gets no return trampoline:
// the Go runtime reads the caller from each return address when it walks
// a goroutine's stack (to collect garbage, grow the stack, recover a
// panic) and dies at one it does not know. Its return probe is a probe at
// each of its return instructions instead, found by decoding the
// function: a hit there is a return, and its event carries rax, the
// first result of Go's register ABI. A return instruction takes a
// trampoline only when the bytes after it can be displaced, which is rare
// in Go code: most take traps (emulated, about 100 µs each). A direct
// jump out of the function (a tail call, as in some wrappers) is reported
// as a RejectedError (ReasonReturnByJump): the returns that follow it are
// not counted.
//
// The events of a Go function carry the kernel thread the goroutine ran
// on and its goroutine id (Event.Goid): in code compiled for Go's
// register ABI r14 holds the goroutine's g at every instruction, and the
// slot (or the tracer, at a trap) reads g.goid and g.m.procid, at offsets
// taken from the program's DWARF or, without it, the known layout of its
// Go release (elfscan.GoLayout; neither: no goroutine id, and threads as
// for C code). Code where r14 may hold something else records no
// goroutine: functions written in assembly (the Go function table's
// flag), NAME.abi0 symbols, wrappers that load g into r14 themselves, and
// the instructions between a call and the reload of g that follows it. In
// a static Go program, which has no C library thread control block, such
// a site takes its trap when events are recorded, so that its events
// carry their thread too.
//
// # A tracer that dies
//
// Attach starts a guardian (package guardian) before it seizes the
// process, seizes it with proc.Options.StopLatch, and records the
// original and new bytes of every site in the guardian's log before the
// batch that writes them. If the tracing program then dies without
// detaching (killed, a panic, os.Exit), the kernel stops the process and
// the guardian puts its text back and lets it run on; a clean Detach
// releases the guardian. Spawn starts one as soon as the process exists
// (before that instant a tracer that dies takes the process, which has run
// no instruction, with it), and a followed fork child gets its own, with
// the sites it inherited in its log, before it runs. Options.NoGuardian
// traces without one.
//
// On x86-64 a guarded process whose SIGTRAP disposition is SIG_DFL also
// gets a trap guard (trapguard_linux_amd64.go): a SIGTRAP handler that
// knows every trap site, for the thread the kernel hands its SIGTRAP as
// the dead tracer is detached (its trap stop was never collected): the
// handler sends it back to the site once the guardian has restored it,
// and passes every other SIGTRAP on to the default action unchanged.
// While the tracer is attached the program sees the handler if it asks
// for SIGTRAP's disposition; a clean Detach puts SIG_DFL back.
// Options.NoTrapGuard traces without one (the guardian still restores
// the text; such a thread then dies of its SIGTRAP).
//
// # What it does not do
//
// probe does not decode (decode), decide (plan), emulate (emulate), patch
// text (batchpatch), generate trampolines (trampoline) or control processes
// (proc): it puts them together. The engine runs on linux/amd64 and
// linux/arm64 (one engine; arch_linux_GOARCH.go holds what differs: the
// breakpoint, the PC after it, the argument registers, the emulator, the
// reach of a jump to a slot). On arm64 a trampoline site is one word
// replaced by a b to its slot, which counts in the thread's stripe (found
// from tpidr_el0) and records entry events in the thread's ring (the time
// from the virtual counter, converted with cntfrq_el0); a trap site is a
// brk, the instruction emulated or stepped in place. Not on arm64 yet:
// return probes (refused: arm64 slots have no return handler), BPF
// programs, boosted copies, Attach without Options.NoGuardian
// (package guardian is linux/amd64 only; a spawned process has no guardian
// there and is killed if the tracer dies), goroutine ids in events, and
// the unmapping of the areas at Detach or at a later attach (they stay
// mapped). Elsewhere
// Spawn and Attach return an error wrapping ErrNotSupported.
package probe
