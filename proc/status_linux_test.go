//go:build linux && (amd64 || arm64)

package proc

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStatusFields reads fields of this process's /proc status files and
// compares them with what the kernel's system calls say.
func TestStatusFields(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := os.Getpid(), unix.Gettid()
	for _, task := range []int{pid, tid} {
		if got, err := readTgid(task); err != nil || got != pid {
			t.Errorf("readTgid(%d) = %d, %v; want %d", task, got, err, pid)
		}
	}
	if _, err := statusInt(pid, "NoSuchField"); err == nil {
		t.Errorf("statusInt of a missing field: no error")
	}
	s, err := readProcStatus(pid, tid)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := statusValue(s, "Pid"); !ok || v != itoa(tid) {
		t.Errorf("Pid of task %d: %q, %v", tid, v, ok)
	}
	if _, ok := statusValue(s, "Pi"); ok {
		t.Errorf("a prefix of a field name matched")
	}
}
