package kuprobe

import (
	"errors"

	"github.com/probeopt/probeopt/proc"
)

var (
	// ErrNotSupported means kernel uprobes are not available on this
	// platform; it is proc.ErrNotSupported.
	ErrNotSupported = proc.ErrNotSupported
	// ErrNoPMU means the kernel publishes no uprobe PMU
	// (/sys/bus/event_source/devices/uprobe is missing).
	ErrNoPMU = errors.New("no uprobe PMU")
)

// Options tune Open. A nil *Options means the defaults.
type Options struct {
	// Inherit also counts the hits of the threads and child processes the
	// process creates after the counter is opened (perf's inherit bit).
	Inherit bool
	// Return counts the returns of the function at the offset instead of
	// its entries (a uretprobe; the offset must be a function entry).
	Return bool
	// AllProcesses registers the uprobe in every process that maps the
	// file, as bpftrace's and perf's system-wide probes are (pid must be
	// -1); it counts the hits on CPU 0 only.
	AllProcesses bool
}
