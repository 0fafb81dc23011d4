//go:build !(linux && (amd64 || arm64))

package probe

import "fmt"

// No engine here: a Tracer holds the bare contract (tracerOps), which
// nothing implements.
type tracerBackend = tracerOps

// Spawn fails: live probes run on linux/amd64 and linux/arm64 only.
func Spawn(argv []string, opts *SpawnOptions) (*Tracer, error) {
	return nil, fmt.Errorf("probe: spawn: %w", ErrNotSupported)
}

// Attach fails: live probes run on linux/amd64 and linux/arm64 only.
func Attach(pid int, opts *Options) (*Tracer, error) {
	return nil, fmt.Errorf("probe: attach: %w", ErrNotSupported)
}

func leftover(pid int) (*LeftBehind, error) {
	return nil, fmt.Errorf("probe: what is left in process %d: %w", pid, ErrNotSupported)
}
