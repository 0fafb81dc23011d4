//go:build linux && arm64

package probe

import "github.com/probeopt/probeopt/proc"

// areasKeptARM64 is why a process's areas stay mapped on arm64.
const areasKeptARM64 = "areas are not unmapped on arm64: the checks for branches, return probes and signal frames that lead into them are x86-64's"

// reclaimLeft keeps the areas on arm64, where nothing checks yet that no
// thread can be in them (areas_linux.go); it records why.
func (tg *target) reclaimLeft(*proc.World) {
	tg.areasKept = areasKeptARM64
}
