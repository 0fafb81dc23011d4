package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// benchTraceOptions are the flags of "bench trace".
type benchTraceOptions struct {
	calls int
	kinds []string
	json  bool
}

// benchTraceKinds are the probed functions, by the instruction they start
// with, in report order.
var benchTraceKinds = []string{"nop", "push", "mov", "rip", "sse"}

// benchTraceRow is one line of "bench trace": one function, every way of
// probing it. Costs are nanoseconds per hit, the cost of an unprobed call
// subtracted; 0 when the way does not apply.
type benchTraceRow struct {
	Kind        string `json:"kind"`
	Function    string `json:"function"`
	Instruction string `json:"instruction"`
	Calls       int    `json:"calls"`
	// BaseNs is the cost of one call without a probe.
	BaseNs float64 `json:"base_ns"`
	// KernelPath is how the kernel's uprobe runs the instruction (emulate
	// or xol, as the linux-uprobes policy predicts it); KernelNs its cost.
	KernelPath string  `json:"kernel_path"`
	KernelNs   float64 `json:"kernel_ns"`
	// ProbeoptPath is how probeopt runs the instruction by default:
	// "emulated", or "boosted" (a relocated copy in a slot, no second
	// trap), or "stepped" (in place); ProbeoptNs its cost. SteppedNs is
	// the cost with every hit single-stepped in place (--step-only).
	ProbeoptPath string  `json:"probeopt_path"`
	ProbeoptNs   float64 `json:"probeopt_ns"`
	SteppedNs    float64 `json:"stepped_ns"`
	// The ratios are probeopt / kernel.
	ProbeoptRatio float64 `json:"probeopt_ratio"`
	SteppedRatio  float64 `json:"stepped_ratio"`
	// TrampolinePath is how the site runs with trampolines allowed:
	// "trampoline-nop", "trampoline-detour", or a trap path when the
	// site cannot take one; TrampolineNs its cost, and TrampolineSpeedup
	// kernel / trampoline.
	TrampolinePath    string  `json:"trampoline_path"`
	TrampolineNs      float64 `json:"trampoline_ns"`
	TrampolineSpeedup float64 `json:"trampoline_speedup"`
	// Return probes (SYM%return), counting the returns: KernelReturnNs
	// is the cost of a kernel uretprobe, ReturnNs of probeopt's (through
	// ReturnPath), ReturnSpeedup kernel / probeopt.
	KernelReturnNs float64 `json:"kernel_return_ns"`
	ReturnPath     string  `json:"return_path"`
	ReturnNs       float64 `json:"return_ns"`
	ReturnSpeedup  float64 `json:"return_speedup"`
}

// benchTraceReport is what "bench trace --json" prints.
type benchTraceReport struct {
	XOLMethod string          `json:"xol_method"`
	Rows      []benchTraceRow `json:"rows"`
}

func newBenchTraceCmd() *cobra.Command {
	var o benchTraceOptions
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Time a probe hit: probeopt's trampolines, emulated and single-stepped hits against the kernel's uprobe",
		Long: `Start a target process (probeopt itself, in a hidden mode) that calls one small
function in a loop, and time a call of it, in one run:

  base       without a probe
  kernel     with a kernel uprobe (perf_event_open, the uprobe PMU, counting)
  probeopt   with a probeopt probe, the way it runs the instruction by
             default: emulated, or boosted (a relocated copy in a slot that
             jumps back, no second trap)
  stepped    with a probeopt probe whose instruction is single-stepped in
             place (every other thread stopped meanwhile)
  trampoline with a probeopt probe that never traps: the site rewritten into
             a jump to a trampoline that counts the hit and runs the
             displaced instructions (the default wherever the plan allows)

and, in a second table, return probes (SYM%return) that count the returns:
a kernel uretprobe against probeopt's, which arms the return at the entry
trampoline and counts it in the return trampoline, without a trap

for functions that start with a nop, a push, a mov between registers, a
RIP-relative load and a vector instruction (which probeopt cannot emulate).
Each figure is nanoseconds per hit (the median of five rounds of the calls),
the cost of an unprobed call subtracted;
the ratios are probeopt / kernel, and the speedups kernel / trampoline. A
trapping probeopt hit is served by a tracer process through ptrace, so it
costs more than a kernel uprobe, which is served in the kernel; a
trampoline hit never leaves the process.

Every probe is checked to have been hit exactly once per call.

Needs Linux on x86-64, root (kernel uprobes) and permission to trace a child.`,
		Example: `  probeopt bench trace
  probeopt bench trace --calls 20000 --kinds push,sse --json`,
		Args: argsRange(0, 0, ""),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if o.calls < 1 {
				return usagef("--calls must be at least 1, got %d", o.calls)
			}
			for _, k := range o.kinds {
				if _, ok := benchTraceFuncsOf(k); !ok {
					return usagef("--kinds: unknown kind %q (want %v)", k, benchTraceKinds)
				}
			}
			rep, err := benchTrace(cmd.ErrOrStderr(), &o)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			return writeReport(w, o.json, rep, func() error { return printBenchTrace(w, rep) })
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.calls, "calls", 5000, "calls of each function per measurement")
	f.StringSliceVar(&o.kinds, "kinds", benchTraceKinds, "functions to time, by first instruction: nop, push, mov, rip, sse")
	f.BoolVar(&o.json, "json", false, "print the report as one JSON object")
	cmd.AddCommand(newBenchTraceTargetCmd())
	return cmd
}

// newBenchTraceTargetCmd is the hidden target process of "bench trace".
func newBenchTraceTargetCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "target KIND CALLS",
		Short:  "The target process of bench trace",
		Hidden: true,
		Args:   argsRange(2, 2, "KIND and CALLS"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return runBenchTraceTarget(cmd.InOrStdin(), cmd.OutOrStdout(), args[0], args[1])
		}),
	}
}

// benchTraceFuncsOf reports whether kind is a known kind.
func benchTraceFuncsOf(kind string) (string, bool) {
	for _, k := range benchTraceKinds {
		if k == kind {
			return k, true
		}
	}
	return "", false
}

// printBenchTrace prints the report as a table.
func printBenchTrace(w io.Writer, rep *benchTraceReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "first instruction\tbase\tkernel path\tkernel\ttrampoline path\ttrampoline\tspeedup\ttrap path\ttrap\tratio\tstepped\tratio\n")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Instruction, btNs(r.BaseNs), r.KernelPath, btNs(r.KernelNs),
			r.TrampolinePath, btNs(r.TrampolineNs), btRatio(r.TrampolineSpeedup),
			r.ProbeoptPath, btNs(r.ProbeoptNs), btRatio(r.ProbeoptRatio), btNs(r.SteppedNs), btRatio(r.SteppedRatio))
	}
	fmt.Fprintf(tw, "\nreturn probe (SYM%%return)\tbase\tkernel uretprobe\tprobeopt path\tprobeopt\tspeedup\n")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Instruction, btNs(r.BaseNs), btNs(r.KernelReturnNs), r.ReturnPath, btNs(r.ReturnNs), btRatio(r.ReturnSpeedup))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	calls := 0
	if len(rep.Rows) > 0 {
		calls = rep.Rows[0].Calls
	}
	_, err := fmt.Fprintf(w, "\nns per hit (an unprobed call subtracted), %d calls each (the median of five rounds), one run; speedups: kernel / trampoline; ratios: probeopt trap / kernel.\n"+
		"trampoline: no trap; emulated, boosted: one trap served by a ptrace tracer; stepped: in place, two traps and a stop of every thread.\n", calls)
	return err
}

// btNs prints nanoseconds with three significant digits.
func btNs(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.3gms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3gµs", ns/1e3)
	}
	return fmt.Sprintf("%.3gns", ns)
}

// btRatio prints a ratio.
func btRatio(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0fx", r)
	}
	return fmt.Sprintf("%.1fx", r)
}
