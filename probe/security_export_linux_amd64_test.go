//go:build linux && amd64

package probe

// SetSpawnLookedUp makes Spawn call f between the lookup of a command and
// its exec, and returns the function that removes the hook. Tests that use
// it must not run in parallel with other spawns.
func SetSpawnLookedUp(f func(path string)) (restore func()) {
	spawnLookedUp = f
	return func() { spawnLookedUp = nil }
}

// SiteHandlers reports which handlers the trampoline at the site of
// symbol sym in the root process has: the entry counter, the return probe.
func SiteHandlers(t *Tracer, sym string) (entry, ret, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.root.sites {
		if s.ps.symbol == sym && s.tramp != nil {
			return s.tramp.entry, s.tramp.ret, true
		}
	}
	return false, false, false
}
