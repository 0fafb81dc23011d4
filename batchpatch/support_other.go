//go:build !linux || !amd64

package batchpatch

import "fmt"

// supported reports whether live patching works here. Live passes are
// made and tested on linux/amd64 only (StopFree's protocol writes the
// x86-64 int3), so they are refused elsewhere; ApplyFile works everywhere.
func supported() error {
	return fmt.Errorf("live patching: %w", ErrNotSupported)
}
