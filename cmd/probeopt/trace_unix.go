//go:build unix

package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
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

// isKernelThread reports whether pid is a kernel thread: the PF_KTHREAD
// flag in the flags field (the 9th) of /proc/PID/stat.
func isKernelThread(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The command name (2nd field) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfKthread != 0
}

// pfKthread is the kernel's PF_KTHREAD task flag.
const pfKthread = 0x00200000
