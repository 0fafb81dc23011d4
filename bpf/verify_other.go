//go:build !linux

package bpf

import "fmt"

// Verify needs Linux's verifier.
func (o *Object) Verify() error {
	return fmt.Errorf("verify in the kernel: %w", ErrNotSupported)
}
