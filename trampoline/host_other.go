//go:build !linux

package trampoline

// HostFeatures reports no optional feature outside Linux.
func HostFeatures() Features { return Features{} }
