//go:build !linux || !(amd64 || arm64)

package proc

import "fmt"

// Without a backend, Process and World hold the bare contracts of
// backend.go, which nothing implements: no Process can be made here.
type (
	processBackend = processOps
	worldBackend   = worldOps
)

// Regs are the registers of a thread; empty where tracing is not
// supported.
type Regs struct{}

// PC returns 0.
func (r *Regs) PC() uint64 { return 0 }

// SetPC does nothing.
func (r *Regs) SetPC(uint64) {}

// SP returns 0.
func (r *Regs) SP() uint64 { return 0 }

// Spawn fails: tracing is supported on Linux (amd64, arm64) only.
func Spawn(argv []string, opts *SpawnOptions) (*Process, error) {
	return nil, fmt.Errorf("spawn: %w", ErrNotSupported)
}

// Attach fails: tracing is supported on Linux (amd64, arm64) only.
func Attach(pid int, opts *Options) (*Process, error) {
	return nil, fmt.Errorf("attach: %w", ErrNotSupported)
}
