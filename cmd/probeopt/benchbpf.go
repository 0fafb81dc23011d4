package main

import (
	_ "embed"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// bpfBenchSource and bpfBenchProgram are the workload and the BPF
// program of "bench bpf" (see benchdata/Makefile for the flags), compiled
// by the command with gcc and clang.
//
//go:embed benchdata/bpfbench.c
var bpfBenchSource []byte

//go:embed benchdata/bpfbench.bpf.c
var bpfBenchProgram []byte

// benchBPFOptions are the flags of "bench bpf".
type benchBPFOptions struct {
	calls, kernelCalls, runs int
	json                     bool
}

// benchBPFRow is one line of "bench bpf": one entry, one number of
// threads, one way of running the program.
type benchBPFRow struct {
	Entry   string `json:"entry"` // emulated or stepped: what Linux's uprobes do at it
	Threads int    `json:"threads"`
	Mode    string `json:"mode"` // untraced, probeopt, kernel
	Calls   int    `json:"calls"`
	// CPUNs is the mean over the threads of the CPU time of their loops
	// (the median of the runs); NsPerCall the CPU time of one call,
	// NsPerHit the part the probe and its program add (the untraced
	// row's subtracted).
	CPUNs     float64 `json:"cpu_ns"`
	NsPerCall float64 `json:"ns_per_call"`
	NsPerHit  float64 `json:"ns_per_hit"`
	// Hits is the program's own count (its per-CPU counter summed):
	// threads times calls when every hit ran it.
	Hits uint64 `json:"hits"`
	// Strategy is how probeopt installed the site.
	Strategy string `json:"strategy,omitempty"`
}

// benchBPFReport is the result of "bench bpf".
type benchBPFReport struct {
	CPU  string        `json:"cpu"`
	Runs int           `json:"runs"`
	Rows []benchBPFRow `json:"rows"`
}

func newBenchBPFCmd() *cobra.Command {
	var o benchBPFOptions
	cmd := &cobra.Command{
		Use:   "bpf [flags]",
		Short: "Time an eBPF program at probeopt's probes against the same object on kernel uprobes",
		Long: `Build a workload (gcc) and a BPF object (clang: per hit, a per-CPU counter
and a per-CPU log2 histogram of the first argument), and run the workload's loop
untraced, with the program attached by probeopt (in a trampoline slot) and
with the same object on a kernel uprobe (cilium/ebpf, filtered on the
workload's pid), at two function entries: push %rbp, which Linux emulates
at its int3, and mov %rdi,%rax, which it single-steps out of line; with 1
and 2 threads. Each thread's CPU time in its loop is measured (other work
on the machine does not inflate it); the cost of a hit is the traced time
per call less the untraced one. In every traced run the program's counter
must equal threads x calls and its histogram the log2 slots of the
arguments the workload passed. The rows are medians of --runs runs.

The table: per entry and threads, the untraced cost of a call, the cost
of a hit with probeopt and with the kernel, their ratio, and probeopt's
per-thread rate with 2 threads over its rate with 1.

Needs Linux on x86-64, root (BPF and uprobes), gcc and clang with libbpf's
headers.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if o.calls <= 0 || o.runs <= 0 || o.kernelCalls < 0 {
				return usagef("bench bpf: --calls and --runs must be positive")
			}
			if o.kernelCalls == 0 {
				o.kernelCalls = max(o.calls/10, 1)
			}
			rep, err := benchBPF(cmd.ErrOrStderr(), &o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			return writeReport(out, o.json, rep, func() error { return printBenchBPF(out, rep) })
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.calls, "calls", 1_000_000, "calls of the probed function per thread, untraced and with probeopt")
	f.IntVar(&o.kernelCalls, "kernel-calls", 0, "calls per thread with the kernel's uprobe (0 means --calls/10)")
	f.IntVar(&o.runs, "runs", 3, "runs of each measurement (the rows are medians)")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	return cmd
}

// printBenchBPF prints the table of "bench bpf".
func printBenchBPF(w io.Writer, rep *benchBPFReport) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "# %s, medians of %d runs, CPU time per thread\n", rep.CPU, rep.Runs)
	fmt.Fprintln(tw, "entry\tthreads\tuntraced ns/call\tprobeopt ns/hit\tkernel ns/hit\tkernel/probeopt\tprobeopt thread rate vs 1 thread\thits (probeopt, kernel)")
	row := func(e string, n int, m string) *benchBPFRow {
		for i := range rep.Rows {
			r := &rep.Rows[i]
			if r.Entry == e && r.Threads == n && r.Mode == m {
				return r
			}
		}
		return &benchBPFRow{}
	}
	for _, e := range []string{"emulated", "stepped"} {
		for _, n := range []int{1, 2} {
			u, p, k := row(e, n, "untraced"), row(e, n, "probeopt"), row(e, n, "kernel")
			p1 := row(e, 1, "probeopt")
			ratio, scale := 0.0, 0.0
			if p.NsPerHit > 0 {
				ratio = k.NsPerHit / p.NsPerHit
			}
			if p.NsPerCall > 0 {
				scale = p1.NsPerCall / p.NsPerCall
			}
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.0f\t%.0fx\t%.0f%%\t%d, %d\n", e, n, u.NsPerCall, p.NsPerHit, k.NsPerHit, ratio, 100*scale, p.Hits, k.Hits)
		}
	}
	return tw.Flush()
}
