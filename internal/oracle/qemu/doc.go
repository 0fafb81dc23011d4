// Package qemu holds qemu-user as the differential oracle of the arm64
// code, for package fuzz and the tests of other packages: a static aarch64
// harness (built with aarch64-linux-gnu-gcc, cached) runs under
// qemu-aarch64 and executes many cases per process (QEMUOracle), against
// the arm64 emulator (ARM64EmuCampaign) and against relocated copies from
// xol (ARM64XOLCampaign); the generators of arm64 cases and site cases, the
// regression vectors of testdata/arm64, and the checkers that compare the
// results.
//
// The oracle needs qemu-aarch64 and aarch64-linux-gnu-gcc on PATH; without
// them StartQEMU returns an error wrapping ErrNoToolchain.
//
// The package does not emulate or relocate instructions itself; it calls
// emulate and xol and compares their answers with qemu. It is internal:
// package fuzz is the public campaign API.
package qemu
