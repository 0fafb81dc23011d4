//go:build !unix

package main

// processUID reports no owner: there is no /proc/PID to ask on this
// system.
func processUID(pid int) (uint32, bool) { return 0, false }
