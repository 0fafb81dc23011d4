//go:build !linux || !amd64

package main

import (
	"fmt"
	"io"

	"github.com/probeopt/probeopt/probe"
)

// benchCompare needs Linux on x86-64.
func benchCompare(_, _ []string, _ []byte, _ *benchCompareOptions, _ io.Writer) (*compareReport, error) {
	return nil, fmt.Errorf("bench compare: %w", probe.ErrNotSupported)
}
