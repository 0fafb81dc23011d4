// Package kuprobe counts the hits of Linux kernel uprobes through
// perf_event_open(2) and the kernel's uprobe PMU, in counting mode (no
// samples, no ring buffer): the baseline that the live probes of package
// probe are compared against, in its tests and in "probeopt bench trace".
//
// A Counter is one uprobe at a file offset, for one thread (and, with
// Options.Inherit, the threads and children it creates afterwards): a perf
// event counts the task it is opened for. A Multi is many uprobes of one
// file for every thread of one process, registered and removed as one batch
// through a BPF uprobe-multi link whose small program counts each probe's
// hits in an array: removing a perf uprobe costs the kernel a grace period
// (about 0.1 s each on a small VM), a Multi pays it once. The kernel refuses
// a probe on an instruction its uprobes cannot handle: registration then
// fails while a process maps the file.
//
// The package does not trace or patch anything itself. It works on Linux
// only; elsewhere Open returns an error wrapping ErrNotSupported.
package kuprobe
