//go:build !linux || !amd64

package main

import (
	"fmt"
	"io"

	"github.com/probeopt/probeopt/probe"
)

// benchTrace needs Linux on x86-64.
func benchTrace(_ io.Writer, _ *benchTraceOptions) (*benchTraceReport, error) {
	return nil, fmt.Errorf("bench trace: %w", probe.ErrNotSupported)
}

// runBenchTraceTarget needs Linux on x86-64.
func runBenchTraceTarget(_ io.Reader, _ io.Writer, _, _ string) error {
	return fmt.Errorf("bench trace target: %w", probe.ErrNotSupported)
}
