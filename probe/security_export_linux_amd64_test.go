//go:build linux && amd64

package probe

// SetSpawnLookedUp makes Spawn call f between the lookup of a command and
// its exec, and returns the function that removes the hook. Tests that use
// it must not run in parallel with other spawns.
func SetSpawnLookedUp(f func(path string)) (restore func()) {
	spawnLookedUp = f
	return func() { spawnLookedUp = nil }
}
