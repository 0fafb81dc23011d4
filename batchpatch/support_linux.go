//go:build linux && amd64

package batchpatch

// supported reports whether live patching works here: nil on linux/amd64.
func supported() error { return nil }
