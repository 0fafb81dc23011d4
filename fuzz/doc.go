// Package fuzz owns the differential oracles and campaigns that keep the
// decoder, the emulator and the relocator honest: the real CPU (x86-64) and
// qemu-user (arm64) judge the same bytes and the same machine state that
// decode, emulate and xol are given, and the disagreements are reported.
//
// It holds:
//   - LengthOracle: the host x86-64 CPU as an instruction-length oracle
//     (Linux/amd64 only). Candidate bytes are placed so that they end at the
//     boundary between an executable page and a non-executable one and are
//     single-stepped in a traced child process; an instruction-fetch fault at
//     the boundary means the CPU wanted more bytes (the sandsifter technique).
//   - X86Gen: deterministic generators of candidate x86-64 byte strings,
//     random and structured (legacy prefixes, REX, REX2, VEX, EVEX, XOP,
//     3DNow!).
//   - HostVendor: which vendor rules the host CPU follows (internal/hostcpu
//     reads the CPU), refusing the vendors the oracles cannot judge.
//   - EmuOracle and EmuCampaign: the host CPU against the x86-64 emulator.
//     A child process runs batches of cases (initial registers, flags and
//     memory; one instruction) under the trap flag and records the final
//     state; the campaign compares it with emulate, masking only the flags
//     the manuals leave undefined.
//   - The qemu-user oracle for arm64: a static aarch64 harness under
//     qemu-aarch64 runs many cases per process, against emulate and against
//     relocated copies from xol (the arm64 campaigns).
//
// The package does not decode, emulate or relocate instructions itself; it
// calls decode, emulate and xol and compares their answers with the machine.
package fuzz

import "errors"

// ErrNotSupported is returned (wrapped) when an oracle or a query needs a
// platform or a CPU feature that this machine or build does not have, for
// example the CPU length oracle outside Linux/amd64.
var ErrNotSupported = errors.New("not supported")
