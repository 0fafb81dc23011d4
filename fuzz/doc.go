// Package fuzz is the public API of probeopt's differential campaigns: the
// machine (the host CPU for x86-64, qemu-user for arm64) and probeopt run
// the same instruction from the same state, and every disagreement is
// reported as a mismatch.
//
// The campaigns:
//   - EmuCampaign: the x86-64 emulator against the host CPU (EmuOracle,
//     from NewEmuOracle).
//   - XOLX86Campaign: x86-64 instructions run in place against their
//     copies relocated by xol, both on the host CPU (XOLX86Oracle, from
//     NewXOLX86Oracle).
//   - ARM64EmuCampaign and ARM64XOLCampaign: the arm64 emulator, and
//     relocated arm64 runs, against qemu-aarch64 (QEMUOracle, from
//     StartQEMU).
//
// A campaign is a struct of options (cases, seed, class, vendor, a
// mismatch callback) whose Run takes the oracle and returns a report. The
// x86-64 campaigns follow the host CPU's vendor (HostVendor). The types
// are defined in the internal packages that hold the oracles and their
// plumbing (internal/oracle/x86cpu, internal/oracle/qemu); this package
// names what a user of the campaigns needs. The oracles' Go fuzz targets
// and regression vectors live with those packages.
//
// The package does not decode, emulate or relocate instructions itself;
// the campaigns call decode, emulate and xol and compare their answers
// with the machine.
package fuzz
