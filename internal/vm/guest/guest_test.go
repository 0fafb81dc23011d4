package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/testenv"
)

// TestRun boots the guest once and checks what a command finds there and
// what comes back: the files with their modes, root, the mounts, a
// dynamically linked arm64 C program (libc6:arm64), standard output and
// error apart, a large output intact, and the exit status.
func TestRun(t *testing.T) {
	Need(t)
	gcc := testenv.MustHaveTool(t, "aarch64-linux-gnu-gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "hello.c")
	prog := filepath.Join(dir, "hello")
	if err := os.WriteFile(src, []byte("#include <stdio.h>\nint main(int c, char **v) { printf(\"hello from %s\\n\", v[1]); return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-O2", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", gcc, err, out)
	}
	data := filepath.Join(dir, "data.txt")
	if err := os.WriteFile(data, []byte("data\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"set -e",
		"ls -l hello data.txt | cut -c1-10",
		"id -u",
		"pwd",
		"./hello arm64",
		"uname -m",
		"test -e /proc/self/maps && echo proc",
		"test -e /sys/kernel/tracing/uprobe_events && echo tracefs",
		"echo to-stderr >&2",
		"seq 1 30000",
		"exit 7",
	}, "\n")
	res, err := Run(context.Background(), []string{"sh", "-c", script}, &Options{Files: []string{prog, data}, Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot %v, total %v", res.Boot, res.Total)
	var want strings.Builder
	want.WriteString("-rw-------\n-rwxr-xr-x\n0\n/root\nhello from arm64\naarch64\nproc\ntracefs\n")
	for i := 1; i <= 30000; i++ {
		fmt.Fprintln(&want, i)
	}
	if got := string(res.Stdout); got != want.String() {
		n := min(len(got), 300)
		t.Errorf("stdout (%d bytes, want %d) begins %q", len(got), want.Len(), got[:n])
	}
	if string(res.Stderr) != "to-stderr\n" {
		t.Errorf("stderr %q", res.Stderr)
	}
	if res.ExitCode != 7 {
		t.Errorf("exit code %d, want 7", res.ExitCode)
	}
}

// TestPanic crashes the guest's kernel: Run reports a guest failure with
// the panic in the console log, not the command's status.
func TestPanic(t *testing.T) {
	Need(t)
	res, err := Run(context.Background(), []string{"sh", "-c", "echo c > /proc/sysrq-trigger; sleep 100"}, &Options{Timeout: 3 * time.Minute})
	var ge *GuestError
	if !errors.As(err, &ge) || !errors.Is(err, ErrNoStatus) || !ge.Panic {
		t.Fatalf("err %v, result %+v; want a GuestError with a panic", err, res)
	}
}

// TestTimeout bounds a guest that does not finish.
func TestTimeout(t *testing.T) {
	Need(t)
	start := time.Now()
	_, err := Run(context.Background(), []string{"sleep", "1000"}, &Options{Timeout: 2 * time.Second})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("a 2 s timeout took %v", d)
	}
}

// TestUnavailable checks that a missing kernel is ErrUnavailable.
func TestUnavailable(t *testing.T) {
	_, err := Run(context.Background(), []string{"true"}, &Options{Kernel: filepath.Join(t.TempDir(), "none")})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
}

func TestVersionLess(t *testing.T) {
	if !versionLess("/boot/vmlinuz-6.1.0-9-arm64", "/boot/vmlinuz-6.1.0-10-arm64") || versionLess("/boot/vmlinuz-6.1.0-10-arm64", "/boot/vmlinuz-6.1.0-9-arm64") {
		t.Error("versionLess orders 9 and 10 wrongly")
	}
}
