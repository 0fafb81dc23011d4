//go:build !linux || !amd64

package x86cpu

import (
	"fmt"
	"runtime"
)

// EmuOracle runs x86-64 instructions on the host CPU for comparison with
// the emulator. It needs Linux on amd64; in this build every method fails
// with an error wrapping ErrNotSupported.
type EmuOracle struct{}

// errEmuOracle is the error of every EmuOracle method in this build.
var errEmuOracle = fmt.Errorf("emulator oracle on %s/%s: %w", runtime.GOOS, runtime.GOARCH, ErrNotSupported)

// NewEmuOracle fails with an error wrapping ErrNotSupported.
func NewEmuOracle() (*EmuOracle, error) { return nil, errEmuOracle }

// Run fails with an error wrapping ErrNotSupported.
func (o *EmuOracle) Run(img *EmuImage, cases []EmuCase, out []EmuCPUResult) error {
	return errEmuOracle
}

// Restarts returns 0.
func (o *EmuOracle) Restarts() int { return 0 }

// Close does nothing.
func (o *EmuOracle) Close() error { return nil }

// EntersNoncanonicalRSP returns false: no case is started in this build.
func (o *EmuOracle) EntersNoncanonicalRSP() bool { return false }
