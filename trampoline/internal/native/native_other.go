//go:build !(linux && amd64)

package native

// Supported reports whether Call and Loop run code on this platform.
const Supported = false

// Call does nothing on this platform.
func Call(fn uintptr, r *Regs, stack uintptr) {}

// Loop does nothing on this platform.
func Loop(fn uintptr, r *Regs, stack uintptr, n uint64) {}
