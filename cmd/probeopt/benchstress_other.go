//go:build !linux || !amd64

package main

import (
	"fmt"
	"io"

	"github.com/probeopt/probeopt/probe"
)

// benchStress needs Linux on x86-64.
func benchStress(_, _ []string, _ []byte, _ *benchStressOptions, _ io.Writer) (*stressReport, error) {
	return nil, fmt.Errorf("bench stress: %w", probe.ErrNotSupported)
}
