//go:build !linux || !amd64

package main

import (
	"fmt"
	"io"

	"github.com/probeopt/probeopt/probe"
)

// benchBPF needs Linux on x86-64.
func benchBPF(_ io.Writer, _ *benchBPFOptions) (*benchBPFReport, error) {
	return nil, fmt.Errorf("bench bpf: %w", probe.ErrNotSupported)
}
