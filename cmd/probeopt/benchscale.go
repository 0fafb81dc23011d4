package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// scaleSource is the workload of "bench scale" (see its Makefile for the
// flags), compiled by the command with gcc.
//
//go:embed benchdata/scale.c
var scaleSource []byte

// scaleCFlags are the compiler flags of the workload (as in
// benchdata/Makefile).
var scaleCFlags = []string{"-O2", "-g", "-pthread", "-Wall", "-Wextra", "-fno-omit-frame-pointer"}

// benchScaleOptions are the flags of "bench scale".
type benchScaleOptions struct {
	calls   int
	threads []int
	rate    int
	seconds float64
	json    bool
}

// benchScaleRow is one line of "bench scale": one way of running the
// workload with some threads.
type benchScaleRow struct {
	Threads int    `json:"threads"`
	Mode    string `json:"mode"` // untraced, counts, events, kernel
	// Calls is the calls of the probed function per thread; ElapsedNs the
	// time of the loop (all threads, the workload's own clock); CPUNs the
	// mean over the threads of the CPU time of their loops (which other
	// work on the machine does not inflate, unlike the elapsed time).
	Calls     int   `json:"calls"`
	ElapsedNs int64 `json:"elapsed_ns"`
	CPUNs     int64 `json:"cpu_ns"`
	// NsPerCall is the CPU time of one iteration of a thread's loop (it
	// calls hot, probed, and hot2, not probed); NsPerHit the part of it
	// the probe adds (the untraced row's subtracted).
	NsPerCall float64 `json:"ns_per_call"`
	NsPerHit  float64 `json:"ns_per_hit"`
	// ThreadRate is the hits per second of CPU time of one thread, Ratio
	// it over the same mode's 1-thread row; TotalRate the hits of all
	// threads per second of elapsed time.
	ThreadRate float64 `json:"thread_hits_per_cpu_s"`
	Ratio      float64 `json:"ratio_to_1_thread"`
	TotalRate  float64 `json:"total_hits_per_s"`
	// Hits is what the mode counted (the kernel's uprobe count, or
	// probeopt's); Events the events delivered and Dropped those dropped.
	Hits    uint64 `json:"hits"`
	Events  uint64 `json:"events,omitempty"`
	Dropped uint64 `json:"dropped,omitempty"`
}

// benchDrainRow is one measurement of the event drain: the workload's
// threads produce events (paced to Rate per second in all, or as fast as
// they can when Rate is 0) and probeopt writes them to a file in Format.
type benchDrainRow struct {
	Format    string  `json:"format"`
	Threads   int     `json:"threads"`
	Rate      int     `json:"rate"` // events per second asked of the workload, 0: unpaced
	ElapsedNs int64   `json:"elapsed_ns"`
	Hits      uint64  `json:"hits"`
	Written   uint64  `json:"written"`
	Dropped   uint64  `json:"dropped"`
	WrittenPS float64 `json:"written_per_s"`
	Bytes     int64   `json:"bytes"`
	// TracerCPUNs is the CPU time probeopt's process spent while the
	// workload ran, from its start to its exit (user and system:
	// draining, converting, writing, and the tracer's other work);
	// PerCPUSecond the events written per second of it, what one tracer
	// thread sustains on a CPU of its own.
	TracerCPUNs  int64   `json:"tracer_cpu_ns"`
	PerCPUSecond float64 `json:"written_per_cpu_s"`
}

// benchScaleReport is what "bench scale --json" prints.
type benchScaleReport struct {
	CPUs     int             `json:"cpus"`
	RingSize int             `json:"ring_size"`
	Rows     []benchScaleRow `json:"rows"`
	Drain    []benchDrainRow `json:"drain"`
}

func newBenchScaleCmd() *cobra.Command {
	var o benchScaleOptions
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Time probe hits from 1, 2, all CPUs and more threads: probeopt counts and events against kernel uprobes",
		Long: `Compile a small C workload (gcc) whose threads each call two functions in a
loop, hot (probed) and hot2, and time it, in one run, with 1 thread, 2, as
many as the machine has CPUs, and twice that (or the --threads given):

  untraced   without a probe
  counts     probeopt counting the hits of hot (per-thread counters)
  events     probeopt recording an event per hit of hot (per-thread rings,
             drained in batches; the events are counted and discarded)
  kernel     a kernel uprobe (the uprobe PMU, perf_event_open, counting) on
             hot in each thread, the entry instruction emulated by the kernel

Each row gives the CPU time of one iteration of a thread's loop (the mean
over the threads of their own CPU clocks: other work on the machine does not
inflate it), the part the probe adds (ns/hit, the untraced row subtracted),
the hits per CPU-second of one thread and the ratio of that rate to the same
mode's 1-thread row (1.00: a hit costs no more when other threads hit at the
same time), and the hits of all threads per second of elapsed time.

Then the drain: the threads record events paced to --rate per second in all
for --seconds, which probeopt writes to a file in the binary event format,
and again as fast as they can, in binary and as JSON lines: the events
written per second, the events dropped, and the events written per second of
the tracer's CPU time (what one tracer thread sustains on a CPU of its own).

Needs Linux on x86-64, gcc, ptrace and kernel uprobes (root). Other work on
the machine changes the figures: run it on a quiet machine.`,
		Example: `  probeopt bench scale
  probeopt bench scale --threads 1,2,4 --calls 20000000 --json`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if o.calls <= 0 {
				return usagef("bench scale: --calls must be positive")
			}
			if o.rate <= 0 || o.seconds <= 0 {
				return usagef("bench scale: --rate and --seconds must be positive")
			}
			for _, n := range o.threads {
				if n <= 0 || n > 1024 {
					return usagef("bench scale: --threads %d (want 1 to 1024)", n)
				}
			}
			if len(o.threads) == 0 {
				o.threads = scaleThreadCounts(runtime.NumCPU())
			}
			rep, err := benchScale(cmd.ErrOrStderr(), &o)
			if err != nil {
				return err
			}
			if o.json {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
			}
			return printBenchScale(cmd.OutOrStdout(), rep)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.calls, "calls", 10_000_000, "calls of the probed function per thread in each run")
	f.IntSliceVar(&o.threads, "threads", nil, "thread counts to run (default 1, 2, the CPUs, twice the CPUs)")
	f.IntVar(&o.rate, "rate", 5_000_000, "events per second, all threads together, of the paced drain run")
	f.Float64Var(&o.seconds, "seconds", 2, "length in seconds of the paced drain run")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	return cmd
}

// scaleThreadCounts is 1, 2, cpus and 2*cpus, without repeats.
func scaleThreadCounts(cpus int) []int {
	var out []int
	for _, n := range []int{1, 2, cpus, 2 * cpus} {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// scaleRatios fills NsPerHit and Ratio from the untraced rows and the
// 1-thread rows of the same mode.
func scaleRatios(rows []benchScaleRow) {
	base := map[int]float64{}
	one := map[string]float64{}
	for _, r := range rows {
		if r.Mode == "untraced" {
			base[r.Threads] = r.NsPerCall
		}
		if r.Threads == 1 {
			one[r.Mode] = r.ThreadRate
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.Mode != "untraced" {
			r.NsPerHit = r.NsPerCall - base[r.Threads]
		}
		if o := one[r.Mode]; o > 0 {
			r.Ratio = r.ThreadRate / o
		}
	}
}

// printBenchScale prints the tables of a report.
func printBenchScale(w io.Writer, rep *benchScaleReport) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "THREADS\tMODE\tCPU NS/CALL\tNS/HIT\tPER-THREAD M/CPU-s\tVS 1 THREAD\tTOTAL M/s\tELAPSED s\tHITS\tDROPPED\t")
	for _, r := range rep.Rows {
		hit := fmt.Sprintf("%.1f", r.NsPerHit)
		if r.Mode == "untraced" {
			hit = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%.2f\t%s\t%.1f\t%.2f\t%.1f\t%.3f\t%d\t%d\t\n", r.Threads, r.Mode, r.NsPerCall, hit,
			r.ThreadRate/1e6, r.Ratio, r.TotalRate/1e6, float64(r.ElapsedNs)/1e9, r.Hits, r.Dropped)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d CPUs; rings of %d events per thread\n\n", rep.CPUs, rep.RingSize)
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "DRAIN\tTHREADS\tASKED/s\tSECONDS\tHITS\tWRITTEN\tDROPPED\tWRITTEN M/s\tTRACER CPU s\tM/CPU-s\tMB\t")
	for _, d := range rep.Drain {
		asked := "unpaced"
		if d.Rate > 0 {
			asked = fmt.Sprintf("%.1fM", float64(d.Rate)/1e6)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.2f\t%d\t%d\t%d\t%.2f\t%.3f\t%.2f\t%.0f\t\n", d.Format, d.Threads, asked, float64(d.ElapsedNs)/1e9,
			d.Hits, d.Written, d.Dropped, d.WrittenPS/1e6, float64(d.TracerCPUNs)/1e9, d.PerCPUSecond/1e6, float64(d.Bytes)/1e6)
	}
	return tw.Flush()
}
