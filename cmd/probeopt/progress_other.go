//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package main

// isTerminalFd reports false: on other systems no progress is drawn.
func isTerminalFd(fd uintptr) bool { return false }
