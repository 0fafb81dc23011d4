//go:build !linux || !amd64

package batchpatch

import "fmt"

// supported reports whether live patching works here. The thread-PC
// safety check decodes x86-64 only, so live passes are refused elsewhere;
// ApplyFile works everywhere.
func supported() error {
	return fmt.Errorf("live patching: %w", ErrNotSupported)
}
