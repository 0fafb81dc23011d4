//go:build !linux

package kuprobe

import (
	"fmt"
	"os/exec"
)

// PMUType fails: kernel uprobes are a Linux feature.
func PMUType() (uint32, error) { return 0, fmt.Errorf("uprobe PMU: %w", ErrNotSupported) }

// Counter is a counting kernel uprobe.
type Counter struct {
	Path   string
	Offset uint64
}

// Open fails: kernel uprobes are a Linux feature.
func Open(path string, offset uint64, pid int, opts *Options) (*Counter, error) {
	return nil, fmt.Errorf("uprobe %s:%#x: %w", path, offset, ErrNotSupported)
}

// Count fails.
func (c *Counter) Count() (uint64, error) { return 0, fmt.Errorf("uprobe: %w", ErrNotSupported) }

// Close does nothing.
func (c *Counter) Close() error { return nil }

// Multi counts the hits of many uprobes of one file.
type Multi struct {
	Path    string
	Offsets []uint64
}

// OpenMulti fails: kernel uprobes are a Linux feature.
func OpenMulti(path string, offsets []uint64, pid int) (*Multi, error) {
	return nil, fmt.Errorf("uprobes in %s: %w", path, ErrNotSupported)
}

// Counts fails.
func (m *Multi) Counts() ([]uint64, error) { return nil, fmt.Errorf("uprobes: %w", ErrNotSupported) }

// Close does nothing.
func (m *Multi) Close() error { return nil }

// Run fails: kernel uprobes are a Linux feature.
func Run(cmd *exec.Cmd, sites []Site) ([]uint64, error) {
	return nil, fmt.Errorf("uprobes: %w", ErrNotSupported)
}
