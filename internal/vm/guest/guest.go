package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/probeopt/probeopt/internal/vm/wire"
)

// Errors of Run.
var (
	// ErrUnavailable is returned when a part of the guest (QEMU, the arm64
	// kernel, busybox, the Go tool that builds /init) is missing.
	ErrUnavailable = errors.New("arm64 guest unavailable")
	// ErrTimeout is returned (inside a *GuestError) when the guest did not
	// finish within Options.Timeout.
	ErrTimeout = errors.New("guest timed out")
	// ErrNoStatus is returned (inside a *GuestError) when QEMU exited
	// before the guest reported the command's exit status: the kernel
	// panicked, or /init never ran.
	ErrNoStatus = errors.New("guest stopped without an exit status")
)

// A GuestError is a guest that failed, not the command in it: it carries
// the console log for the diagnosis.
type GuestError struct {
	// Err is ErrTimeout, ErrNoStatus, wire.ErrCorrupt, or the reason
	// /init gave.
	Err error
	// Panic is set when the console shows a kernel panic.
	Panic bool
	// Console is the guest's serial console without the records (the
	// kernel's messages, QEMU's errors).
	Console []byte
	// Stdout and Stderr are what the command wrote before the failure.
	Stdout, Stderr []byte
}

func (e *GuestError) Error() string {
	what := e.Err.Error()
	if e.Panic {
		what += " (kernel panic)"
	}
	return fmt.Sprintf("arm64 guest: %s\n--- the command's output so far ---\n%s%s--- console ---\n%s--- end of console ---",
		what, e.Stdout, e.Stderr, e.Console)
}

func (e *GuestError) Unwrap() error { return e.Err }

// Options configure Run; nil means the defaults.
type Options struct {
	// Files are host files put in the guest's working directory under
	// their base names, permission bits kept. Two files with one base
	// name are an error.
	Files []string
	// Env are extra environment variables of the command, "NAME=value".
	Env []string
	// Timeout bounds the whole run, boot included (default 5 minutes).
	Timeout time.Duration
	// Memory is the guest's memory in MiB (default 2048).
	Memory int
	// Kernel is the arm64 kernel image (default: the newest
	// /boot/vmlinuz-*-arm64).
	Kernel string
	// Stdout and Stderr, when set, also receive the command's output as
	// it arrives.
	Stdout, Stderr io.Writer
	// Console, when set, receives every console line that is not a
	// record (the kernel's messages) as it arrives.
	Console io.Writer
}

// WorkDir is the command's working directory in the guest, where the
// files are put.
const WorkDir = "/root"

// DefaultTimeout is the Timeout of nil Options.
const DefaultTimeout = 5 * time.Minute

// A Result is the command's outcome.
type Result struct {
	Stdout, Stderr []byte
	// ExitCode is the command's exit status, 128 + the signal number
	// for a command killed by a signal.
	ExitCode int
	// Boot is the time from QEMU's start to /init's first record, Total
	// to QEMU's exit.
	Boot, Total time.Duration
	// Console is the serial console without the records.
	Console []byte
}

// Run boots the guest and runs args there as root (args[0] is looked up
// on busybox's PATH and in WorkDir). It returns the command's outcome
// whatever its exit status; an error means the guest or the host failed:
// a *GuestError (with the console log) for a guest that hung, panicked or
// garbled its records, ErrUnavailable for a missing part.
func Run(ctx context.Context, args []string, opts *Options) (*Result, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if len(args) == 0 {
		return nil, errors.New("run in guest: no command")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Memory <= 0 {
		o.Memory = 2048
	}
	h, err := findHost(o.Kernel)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "probeopt-vm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	initrd := filepath.Join(tmp, "initramfs.cpio")
	job := wire.Job{Args: args, Env: o.Env, Dir: WorkDir}
	if err := writeInitramfs(initrd, h, &job, o.Files); err != nil {
		return nil, fmt.Errorf("initramfs: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.qemu, qemuArgs(h.kernel, initrd, o.Memory)...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var qemuErr bytes.Buffer
	cmd.Stderr = &qemuErr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", h.qemu, err)
	}
	res := &Result{}
	rd := reader{o: &o, res: res, start: start}
	rerr := rd.read(out)
	// The guest powers off after its last record; give it a moment.
	if rerr == nil && rd.done {
		stop := time.AfterFunc(10*time.Second, cancel)
		defer stop.Stop()
	}
	werr := cmd.Wait()
	res.Total = time.Since(start)
	res.Console = rd.console.Bytes()
	if qemuErr.Len() > 0 {
		res.Console = append(res.Console, "--- qemu stderr ---\n"...)
		res.Console = append(res.Console, qemuErr.Bytes()...)
	}
	gerr := func(err error) error {
		return &GuestError{Err: err, Panic: bytes.Contains(res.Console, []byte("Kernel panic")), Console: res.Console,
			Stdout: res.Stdout, Stderr: res.Stderr}
	}
	switch {
	case rerr != nil:
		return res, gerr(rerr)
	case rd.fail != "":
		return res, gerr(fmt.Errorf("/init: %s", rd.fail))
	case !rd.done && ctx.Err() != nil:
		return res, gerr(fmt.Errorf("%w after %v", ErrTimeout, o.Timeout))
	case !rd.done:
		if werr != nil {
			return res, gerr(fmt.Errorf("%w: qemu: %w", ErrNoStatus, werr))
		}
		return res, gerr(ErrNoStatus)
	}
	return res, nil
}

// qemuArgs is the machine: one CPU (two make ptrace round trips several
// times slower under TCG), pointer authentication with QEMU's cheap
// implementation-defined algorithm (plain "max" computes QARMA5 and
// spends seconds of boot on it), no network (which would look for a ROM
// that is not installed), no reboot (panic=-1 then ends QEMU).
func qemuArgs(kernel, initrd string, memMiB int) []string {
	return []string{
		"-M", "virt", "-cpu", "max,pauth-impdef=on", "-smp", "1", "-m", strconv.Itoa(memMiB) + "M",
		"-nographic", "-no-reboot", "-nic", "none",
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyAMA0 rdinit=/init quiet loglevel=1 panic=-1",
	}
}

// reader sorts the console into records and the kernel's lines.
type reader struct {
	o       *Options
	res     *Result
	start   time.Time
	console bytes.Buffer
	dec     wire.Decoder
	done    bool
	fail    string
	mu      sync.Mutex
}

func (r *reader) read(out io.Reader) error {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var bad error
	for sc.Scan() {
		line := sc.Text()
		rec, ok, err := r.dec.Line(line)
		if !ok || err != nil {
			r.console.WriteString(strings.TrimRight(line, "\r"))
			r.console.WriteByte('\n')
		}
		if !ok {
			if r.o.Console != nil {
				fmt.Fprintln(r.o.Console, strings.TrimRight(line, "\r"))
			}
			continue
		}
		if err != nil {
			if bad == nil {
				bad = err
			}
			continue
		}
		switch rec.Stream {
		case wire.Ready:
			r.res.Boot = time.Since(r.start)
		case wire.Stdout:
			r.res.Stdout = append(r.res.Stdout, rec.Payload...)
			if r.o.Stdout != nil {
				_, _ = r.o.Stdout.Write(rec.Payload)
			}
		case wire.Stderr:
			r.res.Stderr = append(r.res.Stderr, rec.Payload...)
			if r.o.Stderr != nil {
				_, _ = r.o.Stderr.Write(rec.Payload)
			}
		case wire.Exit:
			code, err := strconv.Atoi(string(rec.Payload))
			if err != nil {
				return fmt.Errorf("%w: exit status %q", wire.ErrCorrupt, rec.Payload)
			}
			r.res.ExitCode, r.done = code, true
		case wire.Fail:
			r.fail = string(rec.Payload)
		}
	}
	if bad != nil {
		return bad
	}
	return sc.Err()
}

// writeInitramfs writes the guest's root file system.
func writeInitramfs(dst string, h *host, job *wire.Job, files []string) error {
	initBin, err := buildInit()
	if err != nil {
		return err
	}
	jb, err := json.Marshal(job)
	if err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	c := newCPIO(f)
	c.charDev("/dev/console", 0o600, 5, 1)
	c.file("/init", initBin)
	c.file("/bin/busybox", h.busybox)
	c.bytes(wire.JobPath, 0o644, jb)
	c.symlink("/lib", "usr/lib")
	c.symlink("/lib64", "usr/lib")
	for _, l := range h.libs {
		c.file("/usr/lib/aarch64-linux-gnu/"+filepath.Base(l), l)
	}
	if len(h.libs) > 0 {
		c.symlink("/usr/lib/ld-linux-aarch64.so.1", "aarch64-linux-gnu/ld-linux-aarch64.so.1")
	}
	seen := map[string]string{}
	c.mkdirAll(job.Dir)
	for _, p := range files {
		base := filepath.Base(p)
		if prev, ok := seen[base]; ok {
			return fmt.Errorf("files %s and %s have one base name", prev, p)
		}
		seen[base] = p
		c.file(job.Dir+"/"+base, p)
	}
	if err := c.close(); err != nil {
		return err
	}
	return f.Close()
}
