//go:build !linux || !amd64

package main

import (
	"fmt"
	"io"

	"github.com/probeopt/probeopt/proc"
)

// benchPatch needs Linux on x86-64.
func benchPatch(_ io.Writer, _ *benchPatchOptions) (*benchPatchReport, error) {
	return nil, fmt.Errorf("bench patch: %w", proc.ErrNotSupported)
}

// runPatchTarget needs Linux on x86-64.
func runPatchTarget(_ io.Writer, _ patchTargetOptions) error {
	return fmt.Errorf("bench patch target: %w", proc.ErrNotSupported)
}

// benchPause needs Linux on x86-64.
func benchPause(_ io.Writer, _ *benchPatchOptions) (*benchPauseReport, error) {
	return nil, fmt.Errorf("bench patch: %w", proc.ErrNotSupported)
}
