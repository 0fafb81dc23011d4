//go:build linux && (amd64 || arm64)

package batchpatch

import (
	"fmt"
	"runtime"
)

// supported reports whether live patching works here: nil on linux/amd64
// and linux/arm64.
func supported() error { return nil }

// stopFreeSupported reports whether StopFree works here: its protocol
// writes the x86-64 int3 first, so linux/amd64 only.
func stopFreeSupported() error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("stop-free patching on %s: %w", runtime.GOARCH, ErrNotSupported)
	}
	return nil
}
