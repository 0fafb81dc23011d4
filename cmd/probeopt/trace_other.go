//go:build !unix

package main

// processUID reports no owner: there is no /proc/PID to ask on this
// system.
func processUID(pid int) (uint32, bool) { return 0, false }

// isKernelThread reports false: there is no /proc/PID/stat to ask.
func isKernelThread(pid int) bool { return false }
