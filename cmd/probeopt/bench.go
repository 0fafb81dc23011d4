package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure probeopt against the alternatives, with ratios from one run",
		Long: `Measure probeopt on this machine. Each subcommand prints its figures side
by side with the alternative it replaces, all from one run, with the ratios:
absolute times drift between machines and runs, ratios within one run much
less.`,
	}
	groupCmd(cmd)
	cmd.AddCommand(newBenchPatchCmd(), newBenchPatchTargetCmd(), newBenchTraceCmd(), newBenchScaleCmd(), newBenchCompareCmd(), newBenchStressCmd())
	return cmd
}

// benchPatchOptions are the flags of "bench patch".
type benchPatchOptions struct {
	sizes   []int
	threads int
	repeat  int
	json    bool
	// The bounded-pause benchmark (--patches).
	patches  []int
	maxPause time.Duration
}

// benchPatchRow is one line of the "bench patch" table. Durations are in
// nanoseconds in JSON.
type benchPatchRow struct {
	Patches int `json:"patches"`
	// One batch: the median over the repeats of one pass (apply or revert).
	BatchPause time.Duration `json:"batch_pause_ns"` // every thread stopped -> every thread resumed
	BatchTotal time.Duration `json:"batch_total_ns"` // the whole Apply call: validate, stop, check, write, verify, resume
	// One stop per patch: the sum over the patches of one pass, median over the repeats.
	PerPatchPause time.Duration `json:"per_patch_pause_ns"`
	PerPatchTotal time.Duration `json:"per_patch_total_ns"`
	Stops         int           `json:"per_patch_stops"`
	// PauseRatio and TotalRatio are per-patch / batch.
	PauseRatio float64 `json:"pause_ratio"`
	TotalRatio float64 `json:"total_ratio"`
	// Steps counts threads single-stepped out of a patched range, over all
	// passes of this size.
	Steps int `json:"steps"`
	// Repeats is how many passes each median is taken over.
	Repeats int `json:"repeats"`
}

// benchPatchReport is what "bench patch --json" prints.
type benchPatchReport struct {
	Threads int             `json:"threads"`
	Rows    []benchPatchRow `json:"rows"`
	// Bad counts results the target's threads found neither old nor new:
	// it must be 0.
	Bad int64 `json:"bad"`
}

func newBenchPatchCmd() *cobra.Command {
	var o benchPatchOptions
	cmd := &cobra.Command{
		Use:   "patch",
		Short: "Time live text patching: one stop-the-world pass per batch against one per patch",
		Long: `Start a target process (probeopt itself, in a hidden mode) whose threads
call 4,096 small generated functions in a loop, trace it, and time applying
and reverting text patches to those functions while they run:

  batch      all the patches in one stop-the-world pass (batchpatch.Apply)
  per patch  one pass per patch

Each patch replaces two instructions (add $K,%rax; nop) by two others
(lea M(%rax),%rax; nop), so a thread stopped between them must be stepped
out of the range before the pass writes. For each batch size the table
gives the pause (from every thread stopped to every thread resumed, single
steps of blocking threads included) and the total time of the pass
(validation, stop, thread check, coalesced writes, read-back, resume), as
medians over the repeats; a batch that a thread held back is finished in
further passes, and its figures are the sums over them. For one stop per
patch, the sums over the patches of one pass. The ratios are per patch /
batch.

The goal: 4,096 patches in one pause of at most 5 ms, and at least 20 times
faster than one stop per patch. The target checks every result it computes;
a wrong one (neither the old nor the new value) makes the command fail.

With --patches, the command times bounded pauses instead: the target gets
as many generated functions as the largest size, and a stall thread that
sleeps 100 us in a loop and records the longest time it could not run
beyond that. For each size it installs (and removes) every stride-th
function's patch, in one unbounded pass and in passes under --max-pause
(batchpatch.Options.MaxPause), and gives the passes, the longest and the
median pause of a pass, the total time of the install, the target's worst
stall, and that thread's worst stall over as long with nothing patched
(the machine's noise). Patches a thread held back are applied again, their
passes counted with the others. The goals: no pause over the bound plus 10 %, every
size installed in at most 10 times the unbounded pass's total, and the
worst stall within the bound plus 10 %. With --json, one object per size
and bound (max_pause_ns 0 for none).

Needs Linux on x86-64 and permission to trace a child process.`,
		Example: `  probeopt bench patch
  probeopt bench patch --sizes 1,256 --threads 4 --json
  probeopt bench patch --patches 1000,10000,100000 --max-pause 2ms`,
		Args: argsRange(0, 0, ""),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if o.threads < 1 || o.threads > 64 {
				return usagef("--threads must be between 1 and 64, got %d", o.threads)
			}
			if o.repeat < 1 {
				return usagef("--repeat must be at least 1, got %d", o.repeat)
			}
			if cmd.Flags().Changed("patches") {
				return runBenchPause(cmd, &o)
			}
			for _, n := range o.sizes {
				if n < 1 || n > benchSites || benchSites%n != 0 {
					return usagef("--sizes: %d is not a divisor of %d", n, benchSites)
				}
			}
			rep, err := benchPatch(cmd.ErrOrStderr(), &o)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if err := writeReport(w, o.json, rep, func() error { return printBenchPatch(w, rep) }); err != nil {
				return err
			}
			if rep.Bad != 0 {
				return fmt.Errorf("the target computed %d wrong results", rep.Bad)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.sizes, "sizes", []int{1, 16, 256, 4096}, "batch sizes to time (divisors of 4096)")
	f.IntVar(&o.threads, "threads", 8, "threads of the target calling the patched functions")
	f.IntVar(&o.repeat, "repeat", 20, "passes per batch size for the medians (one stop per patch: fewer for large sizes; with --patches, installs per size and bound, default 5)")
	f.BoolVar(&o.json, "json", false, "print the report as one JSON object (with --patches: one object per size and bound)")
	f.IntSliceVar(&o.patches, "patches", nil, "time bounded pauses for these numbers of patches instead (at most 1,000,000)")
	f.DurationVar(&o.maxPause, "max-pause", 2*time.Millisecond, "with --patches: the pause bound of a pass")
	return cmd
}

// runBenchPause is "bench patch --patches": checks the flags, runs the
// benchmark and prints it.
func runBenchPause(cmd *cobra.Command, o *benchPatchOptions) error {
	if len(o.patches) == 0 {
		return usagef("--patches needs at least one size")
	}
	for _, n := range o.patches {
		if n < 1 || n > 1000000 {
			return usagef("--patches: %d is not between 1 and 1000000", n)
		}
	}
	if o.maxPause <= 0 {
		return usagef("--max-pause must be positive, got %v", o.maxPause)
	}
	if !cmd.Flags().Changed("repeat") {
		o.repeat = 5
	}
	rep, err := benchPause(cmd.ErrOrStderr(), o)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if o.json {
		err = writeBenchPauseJSON(w, rep)
	} else {
		err = printBenchPause(w, rep)
	}
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if rep.Bad != 0 {
		return fmt.Errorf("the target computed %d wrong results", rep.Bad)
	}
	return nil
}

// newBenchPatchTargetCmd is the hidden target process of "bench patch".
func newBenchPatchTargetCmd() *cobra.Command {
	var o patchTargetOptions
	cmd := &cobra.Command{
		Use:    "patch-target",
		Short:  "The target process of bench patch",
		Hidden: true,
		Args:   argsRange(0, 0, ""),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if o.sites < 1 || o.sites > 1<<24 {
				return usagef("--sites must be between 1 and %d, got %d", 1<<24, o.sites)
			}
			return runPatchTarget(cmd.OutOrStdout(), o)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.threads, "threads", 8, "calling threads")
	f.IntVar(&o.sites, "sites", benchSites, "generated functions")
	f.BoolVar(&o.stall, "stall", false, "run a thread that measures its own worst stall")
	return cmd
}

// patchTargetOptions are the flags of the hidden "bench patch-target".
type patchTargetOptions struct {
	threads int  // threads calling every function in a loop
	sites   int  // generated functions, 16 bytes apart
	stall   bool // run the stall thread
}

// benchSites is the number of generated functions in the target.
const benchSites = 4096

// printBenchPatch prints the report as a table.
func printBenchPatch(w io.Writer, rep *benchPatchReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "patches\tbatch pause\tbatch total\tper-patch pause\tper-patch total\tpause ratio\ttotal ratio\t\n")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%sx\t%sx\t\n", r.Patches, fmtDur(r.BatchPause), fmtDur(r.BatchTotal),
			fmtDur(r.PerPatchPause), fmtDur(r.PerPatchTotal), fmtRatio(r.PauseRatio), fmtRatio(r.TotalRatio))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d target threads; batch: median of %s passes; per patch: sum over one pass.\n", rep.Threads, repeatsText(rep.Rows))
	for _, r := range rep.Rows {
		if r.Patches != benchSites {
			continue
		}
		fmt.Fprintf(w, "goal, %d patches in one pause <= 5ms: %s (%s)\n", r.Patches, yesNo(r.BatchPause <= 5*time.Millisecond), fmtDur(r.BatchPause))
		fmt.Fprintf(w, "goal, >= 20x faster than one stop per patch: %s (%sx total, %sx pause)\n", yesNo(r.TotalRatio >= 20), fmtRatio(r.TotalRatio), fmtRatio(r.PauseRatio))
	}
	_, err := fmt.Fprintf(w, "wrong results seen by the target: %d\n", rep.Bad)
	return err
}

func repeatsText(rows []benchPatchRow) string {
	seen := map[int]bool{}
	var s []string
	for _, r := range rows {
		if !seen[r.Repeats] {
			seen[r.Repeats] = true
			s = append(s, strconv.Itoa(r.Repeats))
		}
	}
	return strings.Join(s, "/")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// fmtDur prints a duration with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.3gµs", float64(d)/1e3)
	}
}

func fmtRatio(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%.1f", r)
}
