//go:build !linux || !amd64

package x86cpu

import (
	"fmt"
	"runtime"
)

// The oracles that run code on the host CPU need Linux on amd64; in this
// build they are constructors that fail with an error wrapping
// ErrNotSupported, and methods for a caller that keeps the type.

// noOracle is what the oracles share in this build: nothing runs.
type noOracle struct{}

// Restarts returns 0.
func (noOracle) Restarts() int { return 0 }

// Close does nothing.
func (noOracle) Close() error { return nil }

// EntersNoncanonicalRSP returns false: nothing runs in this build.
func (noOracle) EntersNoncanonicalRSP() bool { return false }

// errNoOracle returns the error of every method of the oracle named.
func errNoOracle(name string) error {
	return fmt.Errorf("%s on %s/%s: %w", name, runtime.GOOS, runtime.GOARCH, ErrNotSupported)
}

// EmuOracle runs x86-64 instructions on the host CPU for comparison with
// the emulator; in this build every method fails.
type EmuOracle struct{ noOracle }

// NewEmuOracle fails with an error wrapping ErrNotSupported.
func NewEmuOracle() (*EmuOracle, error) { return nil, errNoOracle("emulator oracle") }

// Run fails with an error wrapping ErrNotSupported.
func (o *EmuOracle) Run(img *EmuImage, cases []EmuCase, out []EmuCPUResult) error {
	return errNoOracle("emulator oracle")
}

// XOLX86Oracle runs x86-64 code on the host CPU for the relocation
// campaign; in this build every method fails.
type XOLX86Oracle struct{ noOracle }

// NewXOLX86Oracle fails with an error wrapping ErrNotSupported.
func NewXOLX86Oracle() (*XOLX86Oracle, error) { return nil, errNoOracle("relocation oracle") }

// Run fails with an error wrapping ErrNotSupported.
func (o *XOLX86Oracle) Run(img *XOLX86Image, runs []XOLX86Run, out []XOLX86Result) error {
	return errNoOracle("relocation oracle")
}
