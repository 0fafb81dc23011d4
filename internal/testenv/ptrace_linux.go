package testenv

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

// ptraceErr is why this process cannot trace a child, found once.
var ptraceErr = sync.OnceValue(func() error {
	path, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("no program to trace: %w", err)
	}
	cmd := exec.Command(path)
	// The child stops with SIGTRAP at its exec, traced by this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil
})

// NeedPtrace skips the test (fails it under CI) when this process may not
// trace a child with ptrace: the kernel's Yama policy, a seccomp filter or
// a container without CAP_SYS_PTRACE.
func NeedPtrace(t testing.TB) {
	t.Helper()
	if err := ptraceErr(); err != nil {
		Unavailable(t, "ptrace: %v", err)
	}
}
