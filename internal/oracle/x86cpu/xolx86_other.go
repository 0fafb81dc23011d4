//go:build !linux || !amd64

package x86cpu

import (
	"fmt"
	"runtime"
)

// XOLX86Oracle runs x86-64 code on the host CPU for the relocation
// campaign. It needs Linux on amd64; in this build every method fails with
// an error wrapping ErrNotSupported.
type XOLX86Oracle struct{}

var errXOLOracle = fmt.Errorf("relocation oracle on %s/%s: %w", runtime.GOOS, runtime.GOARCH, ErrNotSupported)

// NewXOLX86Oracle fails with an error wrapping ErrNotSupported.
func NewXOLX86Oracle() (*XOLX86Oracle, error) { return nil, errXOLOracle }

// Run fails with an error wrapping ErrNotSupported.
func (o *XOLX86Oracle) Run(img *XOLX86Image, runs []XOLX86Run, out []XOLX86Result) error {
	return errXOLOracle
}

// Restarts returns 0.
func (o *XOLX86Oracle) Restarts() int { return 0 }

// Close does nothing.
func (o *XOLX86Oracle) Close() error { return nil }

// EntersNoncanonicalRSP returns false: nothing runs in this build.
func (o *XOLX86Oracle) EntersNoncanonicalRSP() bool { return false }
