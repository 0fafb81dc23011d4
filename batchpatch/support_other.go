//go:build !linux || !(amd64 || arm64)

package batchpatch

import "fmt"

// supported reports whether live patching works here. Live passes are
// made and tested on linux/amd64 and linux/arm64 only, so they are
// refused elsewhere; ApplyFile works everywhere.
func supported() error {
	return fmt.Errorf("live patching: %w", ErrNotSupported)
}

// stopFreeSupported reports whether StopFree works here: no.
func stopFreeSupported() error { return supported() }
