package main

import "golang.org/x/sys/unix"

// isTerminalFd reports whether the file descriptor fd is open on a
// terminal: only a terminal has terminal attributes to get.
func isTerminalFd(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}
