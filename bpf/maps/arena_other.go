//go:build !linux

package maps

import "fmt"

// NewArena needs Linux's memfd.
func NewArena(size int) (*Arena, error) {
	return nil, fmt.Errorf("arena: %w", ErrNotSupported)
}

// FD is -1.
func (a *Arena) FD() int { return -1 }

// Close does nothing.
func (a *Arena) Close() error { return nil }
