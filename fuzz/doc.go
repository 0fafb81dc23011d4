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
//   - HostVendor: which vendor rules the host CPU follows.
//
// The package does not decode, emulate or relocate instructions itself; it
// calls decode, emulate and xol and compares their answers with the machine.
package fuzz

import "errors"

// ErrNotSupported is returned (wrapped) when an oracle or a query needs a
// platform or a CPU feature that this machine or build does not have, for
// example the CPU length oracle outside Linux/amd64.
var ErrNotSupported = errors.New("not supported")
