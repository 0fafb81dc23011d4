// Package probe is the live engine a Go tracer calls: it spawns a command or
// attaches to a process, finds the probe sites that specs name in every
// module the process maps (the executable, its shared libraries, libraries
// loaded later with dlopen), plans each site, installs an int3 at every
// accepted site in one stop-the-world batch, and serves the traps: it counts
// the hit, optionally records an event (probe, thread, time, the six
// argument registers), then executes the displaced instruction — by
// emulation where the plan says so, else by a single step — and lets the
// thread go on. Detach restores every byte in one batch.
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
// live-process options. A site the plan rejects is refused with its reason
// and detail (see RejectedError) and never written. Emulated sites run the
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
// bytes: without Options.FollowForks they are removed from the child (in
// one batch) before it is detached and runs on; with it the child is traced
// like its parent, its hits counted under the same probes. After an exec
// the probes are resolved again in the new image; those that match nothing
// there have no sites any more. The new image runs from the exec until the
// engine has served the event (proc reports it without stopping the
// process): its hits in that window are missed. New executable mappings
// are found at the dynamic linker's rendezvous (an internal probe on
// _dl_debug_state, which ld.so calls after every change to its list of
// objects, before their code runs) and by a periodic look at
// /proc/PID/maps.
//
// # What it does not do
//
// probe does not decode (decode), decide (plan), emulate (emulate), patch
// text (batchpatch) or control processes (proc): it puts them together. It
// does not use the no-trap trampolines of package trampoline yet, and has
// no return probes. The engine runs on linux/amd64; elsewhere Spawn and Attach return
// an error wrapping ErrNotSupported.
package probe
