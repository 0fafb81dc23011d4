//go:build linux

package kuprobe

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pmuTypeFile is where the kernel publishes the perf event type of its
// uprobe PMU.
const pmuTypeFile = "/sys/bus/event_source/devices/uprobe/type"

// PMUType returns the perf event type of the kernel's uprobe PMU.
func PMUType() (uint32, error) {
	b, err := os.ReadFile(pmuTypeFile)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoPMU, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", pmuTypeFile, err)
	}
	return uint32(v), nil
}

// Counter is a counting kernel uprobe.
type Counter struct {
	fd     int
	Path   string // the probed file
	Offset uint64 // the file offset of the probed instruction
}

// Open registers a counting uprobe on the instruction at file offset
// offset of path, for process pid. Closing the counter removes the probe.
func Open(path string, offset uint64, pid int, opts *Options) (*Counter, error) {
	pmu, err := PMUType()
	if err != nil {
		return nil, err
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return nil, fmt.Errorf("uprobe %s:%#x: %w", path, offset, err)
	}
	attr := unix.PerfEventAttr{
		Type: pmu,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Ext1: uint64(uintptr(unsafe.Pointer(p))), // config1: the path
		Ext2: offset,                             // config2: the offset
	}
	if opts != nil && opts.Inherit {
		attr.Bits |= unix.PerfBitInherit
	}
	if opts != nil && opts.Return {
		bit, err := retprobeBit()
		if err != nil {
			return nil, fmt.Errorf("uretprobe %s:%#x: %w", path, offset, err)
		}
		attr.Config |= 1 << bit
	}
	cpu := -1
	if opts != nil && opts.AllProcesses {
		if pid != -1 {
			return nil, fmt.Errorf("uprobe %s:%#x in every process: pid %d, want -1", path, offset, pid)
		}
		cpu = 0
	}
	fd, err := unix.PerfEventOpen(&attr, pid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	runtime.KeepAlive(p)
	if err != nil {
		return nil, fmt.Errorf("uprobe %s:%#x for %d: %w", path, offset, pid, err)
	}
	return &Counter{fd: fd, Path: path, Offset: offset}, nil
}

// Count returns the hits so far (with Options.Inherit, including those of
// the threads and children that have exited).
func (c *Counter) Count() (uint64, error) {
	var buf [8]byte
	n, err := unix.Read(c.fd, buf[:])
	if err != nil {
		return 0, fmt.Errorf("read uprobe counter: %w", err)
	}
	if n != 8 {
		return 0, fmt.Errorf("read uprobe counter: %d bytes", n)
	}
	return *(*uint64)(unsafe.Pointer(&buf[0])), nil
}

// Close removes the uprobe.
func (c *Counter) Close() error {
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

// retprobeBit reads which bit of the uprobe PMU's config asks for a return
// probe (the PMU's format file says "config:N").
func retprobeBit() (uint, error) {
	b, err := os.ReadFile("/sys/bus/event_source/devices/uprobe/format/retprobe")
	if err != nil {
		return 0, fmt.Errorf("uprobe PMU without return probes: %w", err)
	}
	var bit uint
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "config:%d", &bit); err != nil || bit > 63 {
		return 0, fmt.Errorf("uprobe PMU retprobe format %q", strings.TrimSpace(string(b)))
	}
	return bit, nil
}
