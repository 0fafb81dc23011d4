//go:build !(linux && amd64)

package jit

import (
	"fmt"
	"unsafe"
)

// Func is compiled code placed in this process; only Linux on x86-64 runs
// it.
type Func struct{}

// Load reports ErrNotSupported off Linux x86-64.
func Load(code []byte) (*Func, error) {
	return nil, fmt.Errorf("run x86-64 code here: %w", ErrNotSupported)
}

// Addr is 0.
func (f *Func) Addr() uint64 { return 0 }

// Run returns 0.
func (f *Func) Run(ctx unsafe.Pointer, stripe int) uint64 { return 0 }

// RunStackCtx returns 0.
func (f *Func) RunStackCtx(ctx []byte, stripe int) uint64 { return 0 }

// Close does nothing.
func (f *Func) Close() error { return nil }
