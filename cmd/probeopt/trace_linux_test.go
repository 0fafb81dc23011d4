//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// TestTraceAttachErrors attaches to a process that does not exist and,
// without the permission, to one of another user: each fails with one
// line that says what to do, exit status 1, and the process is left
// untraced.
func TestTraceAttachErrors(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("trace needs linux/amd64")
	}
	bin := probeoptBinary(t)
	// pid_max itself is never a pid.
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	missing := strings.TrimSpace(string(b))
	stdout, stderr, code := runBinary(t, "trace", "main", "-p", missing)
	if code != exitFailed || stderr != "probeopt: attach "+missing+": no such process\n" || stdout != "" {
		t.Errorf("missing pid: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	checkMessages(t, stderr, code)

	// Without the permission: as uid 65534 on a process of root, or, when
	// not root, on pid 1 if it belongs to another user.
	var cmd *exec.Cmd
	target := 1
	if os.Geteuid() == 0 {
		sleep := exec.Command(testenv.MustHaveTool(t, "sleep"), "60")
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { sleep.Process.Kill(); sleep.Wait() }()
		target = sleep.Process.Pid
		// The binary where uid 65534 may run it.
		dir, err := os.MkdirTemp("", "probeopt-nobody-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		exe, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "probeopt"), exe, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(filepath.Join(dir, "probeopt"), "trace", "main", "-p", fmt.Sprint(target))
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	} else {
		var st syscall.Stat_t
		if err := syscall.Stat("/proc/1", &st); err != nil || int(st.Uid) == os.Geteuid() {
			t.Skip("not root, and pid 1 is not another user's process")
		}
		cmd = exec.Command(bin, "trace", "main", "-p", "1")
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatal(err)
	}
	msg := errb.String()
	for _, want := range []string{"operation not permitted", fmt.Sprintf("not allowed to trace process %d", target), "CAP_SYS_PTRACE", "kernel.yama.ptrace_scope"} {
		if !strings.Contains(msg, want) {
			t.Errorf("no permission: stderr lacks %q", want)
		}
	}
	if code != exitFailed || strings.Count(msg, "\n") != 1 || out.Len() != 0 {
		t.Errorf("no permission: exit %d, stdout %q, stderr %q", code, out.String(), msg)
	}
	checkMessages(t, msg, code)
	if tp := statusField(target, "TracerPid"); tp != "0" {
		t.Errorf("process %d: TracerPid %q", target, tp)
	}
}

// TestTraceKilled kills the traced command with SIGKILL while it is
// traced: probeopt reports it on one line, prints the counts so far and
// exits with status 1, without hanging or panicking.
func TestTraceKilled(t *testing.T) {
	tracee := traceTracee(t)
	bin := probeoptBinary(t)
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(bin, "trace", "--json", "-o", report, "k_*", "c_sum", "--", tracee, "serve")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	in, out := fixture.StartReady(t, cmd, "ready")
	fmt.Fprintln(in, 10)
	if l, err := out.ReadString('\n'); err != nil || !strings.HasPrefix(l, "work 10 ") {
		t.Fatalf("server answered %q, %v", l, err)
	}
	pid := childOf(t, cmd.Process.Pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ended, _ := fixture.WaitWithin(cmd, 30*time.Second); !ended {
		t.Fatal("probeopt did not end when the process was killed")
	}
	code := cmd.ProcessState.ExitCode()
	want := fmt.Sprintf("probeopt: process %d was killed by signal 9 (killed) while traced; the counts are those until then\n", pid)
	if code != 128+9 || errb.String() != want {
		t.Errorf("exit %d, stderr %q; want %d (128+SIGKILL, as a shell says), %q", code, errb.String(), 128+9, want)
	}
	checkMessages(t, errb.String(), code)
	rep := readTraceReport(t, report)
	hits := rep.hitsBySymbol()
	if rep.Exit == nil || rep.Exit.Signal != 9 || hits["k_push"] != 10 || hits["c_sum"] != 10 {
		t.Errorf("report: exit %+v, hits %v", rep.Exit, hits)
	}
}
