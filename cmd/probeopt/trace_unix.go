//go:build unix

package main

import (
	"strconv"
	"syscall"
)

// processUID returns the user id that owns process pid, from the owner of
// /proc/PID.
func processUID(pid int) (uint32, bool) {
	var st syscall.Stat_t
	if syscall.Stat("/proc/"+strconv.Itoa(pid), &st) != nil {
		return 0, false
	}
	return st.Uid, true
}
