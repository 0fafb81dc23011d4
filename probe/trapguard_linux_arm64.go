//go:build linux && arm64

package probe

import "github.com/probeopt/probeopt/proc"

// No trap guard on arm64 (there is no guardian either): see
// trapguard_linux_amd64.go.

func (tg *target) armTrapGuard(*proc.World) {}

func (tg *target) noteTrapSite(uint64) {}
