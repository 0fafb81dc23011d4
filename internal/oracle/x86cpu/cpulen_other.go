//go:build !linux || !amd64

package x86cpu

import (
	"fmt"
	"runtime"
)

// LengthOracle asks the host CPU how long an x86-64 instruction is. It
// needs ptrace on Linux/amd64; in this build every method fails with an
// error wrapping ErrNotSupported.
type LengthOracle struct{}

// errOracle is the error of every LengthOracle method in this build.
var errOracle = fmt.Errorf("cpu length oracle on %s/%s: %w", runtime.GOOS, runtime.GOARCH, ErrNotSupported)

// NewLengthOracle fails with an error wrapping ErrNotSupported.
func NewLengthOracle() (*LengthOracle, error) { return nil, errOracle }

// Length fails with an error wrapping ErrNotSupported.
func (o *LengthOracle) Length(b []byte) (n int, res CPUResult, err error) {
	return 0, CPUNone, errOracle
}

// LengthBatch fails with an error wrapping ErrNotSupported.
func (o *LengthOracle) LengthBatch(in [][]byte, out []CPULength) error { return errOracle }

// Restarts returns 0.
func (o *LengthOracle) Restarts() int { return 0 }

// Steps returns 0.
func (o *LengthOracle) Steps() uint64 { return 0 }

// Close does nothing.
func (o *LengthOracle) Close() error { return nil }
