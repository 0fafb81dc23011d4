// Package bpf loads eBPF objects for probes that never trap: BPF ELF
// files built by clang (-target bpf, libbpf's headers), read with
// cilium/ebpf (ebpf.LoadCollectionSpec: programs, maps, relocations, BTF),
// their sections parsed as libbpf names them, every program verified by
// the running kernel, and then compiled by package bpf/jit with its maps
// in shared memory (package bpf/maps).
//
// It owns the object: which programs it has and where each attaches
// (Section: uprobe/PATH:SYM[+OFF], uretprobe/PATH:SYM,
// usdt/PATH:PROVIDER:NAME, or a bare uprobe, uretprobe or usdt attached by
// hand), the kernel's verdict on each program, and the instructions the
// kernel accepted. It does not attach programs to a process, resolve
// PATH or symbols in a process (package probe does, with elfscan), write
// machine code (bpf/jit) or lay maps out (bpf/maps).
//
// # Verification
//
// The kernel's verifier is the verifier: Verify loads every program as
// the program type its section implies (BPF_PROG_TYPE_KPROBE for uprobe,
// uretprobe and usdt) with the object's maps created in the kernel, and a
// program the kernel rejects is refused with the verifier's log
// (*VerifierError, ErrRejected). Without the privilege to load BPF
// (CAP_BPF with CAP_PERFMON, or root) Verify fails with ErrPermission. The
// kernel's copies are closed at once: the instructions kept for the JIT
// are those the kernel accepted, with their map references by name, which
// Instantiate resolves to the tracer's own maps.
//
// # USDT arguments
//
// Programs written with libbpf's usdt.bpf.h read without change: Open
// reads the header's weak maps, hidden helpers and LINUX_HAS_BPF_COOKIE
// extern as libbpf does (prepare.go), and USDTSpecs, NewUSDTSpec and
// USDTLink.Specs give each note's argument specs and their ID by libbpf's
// rules (usdt.go), for package probe to write to __bpf_usdt_specs and to
// pass as the site's cookie.
package bpf
