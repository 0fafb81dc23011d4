//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/vm/wire"
)

// console sends records to the host; writes from the output pipes are
// serialised so that every record is one whole line.
type console struct {
	mu  sync.Mutex
	f   *os.File
	seq int
}

func (c *console) send(s wire.Stream, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for first := true; first || len(p) > 0; first = false {
		n := min(len(p), wire.MaxChunk)
		_, _ = c.f.Write(wire.Encode(c.seq, s, p[:n]))
		c.seq++
		p = p[n:]
	}
}

// drain waits until the console has sent every byte written to it.
func (c *console) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = unix.IoctlSetInt(int(c.f.Fd()), unix.TCSBRK, 1)
}

// pump sends what r yields as records of kind s until EOF.
func (c *console) pump(s wire.Stream, r io.Reader, wg *sync.WaitGroup) {
	defer wg.Done()
	buf := make([]byte, wire.MaxChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.send(s, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func main() {
	con, err := os.OpenFile("/dev/console", os.O_WRONLY, 0)
	if err != nil {
		con = os.Stdout
	}
	c := &console{f: con}
	status, err := run(c)
	if err != nil {
		c.send(wire.Fail, []byte(err.Error()))
	} else {
		c.send(wire.Exit, []byte(fmt.Sprint(status)))
	}
	c.drain()
	unix.Sync()
	for {
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
		select {}
	}
}

// mounts are the file systems the command finds mounted.
var mounts = []struct{ src, dir, fstype string }{
	{"proc", "/proc", "proc"},
	{"sysfs", "/sys", "sysfs"},
	{"devtmpfs", "/dev", "devtmpfs"},
	{"tracefs", "/sys/kernel/tracing", "tracefs"},
	{"debugfs", "/sys/kernel/debug", "debugfs"},
}

// run sets the guest up and runs the job; it returns the command's exit
// status (128 + the signal for a command killed by one).
func run(c *console) (int, error) {
	for _, m := range mounts {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return 0, err
		}
		if err := unix.Mount(m.src, m.dir, m.fstype, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return 0, fmt.Errorf("mount %s on %s: %w", m.fstype, m.dir, err)
		}
	}
	for _, d := range []string{"/tmp", "/root", "/usr/bin", "/usr/sbin", "/sbin"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	if out, err := exec.Command("/bin/busybox", "--install", "-s", "/bin").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("busybox --install: %w: %s", err, out)
	}
	b, err := os.ReadFile(wire.JobPath)
	if err != nil {
		return 0, err
	}
	var job wire.Job
	if err := json.Unmarshal(b, &job); err != nil {
		return 0, fmt.Errorf("job %s: %w", wire.JobPath, err)
	}
	if len(job.Args) == 0 {
		return 0, errors.New("no command")
	}
	path := "/bin:/sbin:/usr/bin:/usr/sbin:" + job.Dir
	env := []string{"PATH=" + path, "HOME=/root", "TMPDIR=/tmp", "USER=root"}
	env = append(env, job.Env...)
	os.Setenv("PATH", path)
	name := job.Args[0]
	if !strings.Contains(name, "/") {
		if p, err := exec.LookPath(name); err == nil {
			name = p
		}
	}
	cmd := exec.Command(name, job.Args[1:]...)
	cmd.Args[0] = job.Args[0]
	cmd.Dir, cmd.Env = job.Dir, env
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, err
	}
	c.send(wire.Ready, nil)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go c.pump(wire.Stdout, stdout, &wg)
	go c.pump(wire.Stderr, stderr, &wg)
	wg.Wait()
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}
