// Package x86cpu holds the host x86-64 CPU as a differential oracle, and
// the plumbing its oracles share, for package fuzz and its tests:
//
//   - LengthOracle: the CPU as an instruction-length oracle. Candidate
//     bytes are placed so that they end at the boundary between an
//     executable page and a non-executable one and are single-stepped in a
//     traced child process; an instruction-fetch fault at the boundary
//     means the CPU wanted more bytes (the sandsifter technique).
//   - X86Gen: deterministic generators of candidate x86-64 byte strings,
//     random and structured (legacy prefixes, REX, REX2, VEX, EVEX, XOP,
//     3DNow!).
//   - HostVendor: which vendor rules the host CPU follows (internal/hostcpu
//     reads the CPU), refusing the vendors the oracles cannot judge.
//   - EmuOracle and EmuCampaign: the CPU against the x86-64 emulator. A
//     child process runs batches of cases (initial registers, flags and
//     memory; one instruction) under the trap flag and records the final
//     state; the campaign compares it with emulate, masking only the flags
//     the manuals leave undefined.
//   - XOLX86Oracle and XOLX86Campaign: an instruction run in place against
//     its copy relocated by xol, both on the CPU.
//   - The register-set checks (regsets.go): the exclusions of the test that
//     compares the decoder's registers read and written with the CPU.
//
// The plumbing: one harness (x86harness.go: the code page of the children
// of EmuOracle and XOLX86Oracle, written with internal/x86enc), one
// traced-child driver built on package proc (child_linux_amd64.go: spawn,
// remote system calls, registers; the child then runs untraced), and the
// batch handshake on futex words of a shared memory file
// (oraclehost_linux_amd64.go).
//
// The oracles need Linux on x86-64 and ptrace; elsewhere their
// constructors return an error wrapping ErrNotSupported.
//
// The package does not decode, emulate or relocate instructions itself; it
// calls decode, emulate and xol and compares their answers with the CPU.
// It is internal: package fuzz is the public campaign API.
package x86cpu

import "errors"

// ErrNotSupported is returned (wrapped) when an oracle or a query needs a
// platform or a CPU feature that this machine or build does not have, for
// example the CPU length oracle outside Linux/amd64.
var ErrNotSupported = errors.New("not supported")
