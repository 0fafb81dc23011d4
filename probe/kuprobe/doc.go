// Package kuprobe counts the hits of Linux kernel uprobes through
// perf_event_open(2) and the kernel's uprobe PMU, in counting mode (no
// samples, no ring buffer): the baseline that the live probes of package
// probe are compared against, in its tests and in "probeopt bench trace".
//
// A Counter is one uprobe at a file offset, for one process (and, with
// Options.Inherit, the threads and children it creates afterwards). The
// kernel refuses a probe on an instruction its uprobes cannot handle: Open
// then fails while a process maps the file.
//
// The package does not trace or patch anything itself. It works on Linux
// only; elsewhere Open returns an error wrapping ErrNotSupported.
package kuprobe
