//go:build !linux || !amd64

package main

import (
	"fmt"
	"io"

	"github.com/probeopt/probeopt/probe"
)

// benchScale needs Linux on x86-64.
func benchScale(_ io.Writer, _ *benchScaleOptions) (*benchScaleReport, error) {
	return nil, fmt.Errorf("bench scale: %w", probe.ErrNotSupported)
}
