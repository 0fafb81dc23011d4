//go:build !linux

package hostcpu

import (
	"fmt"
	"runtime"
)

// readHost describes an unknown CPU: only Linux's description is read.
func readHost() Info {
	return Info{Arch: runtime.GOARCH, cpuinfoErr: fmt.Errorf("read the cpu description on %s: %w", runtime.GOOS, ErrNotSupported)}
}
