package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// benchStressOptions are the flags of "bench stress".
type benchStressOptions struct {
	runs       int
	trapsEvery int
	stdin      string
	json       bool
}

// stressRun is one traced run of "bench stress" that did not behave as
// the untraced run did.
type stressRun struct {
	Run   int    `json:"run"`
	Traps bool   `json:"traps"`
	Exit  int    `json:"exit"`
	Why   string `json:"why"`
}

// stressReport is the result of "bench stress".
type stressReport struct {
	Command []string `json:"command"`
	// Exit is the untraced run's exit status; Runs the traced runs, Traps
	// those served through traps only.
	Exit     int `json:"exit"`
	Runs     int `json:"runs"`
	TrapRuns int `json:"trap_runs"`
	// Failures are the traced runs whose output or exit status differed,
	// or whose tracer failed.
	Failures []stressRun `json:"failures"`
	// Sites, Trampolines and Hits describe the first traced run with
	// trampolines: its sites, how many took one, its hits.
	Sites       int    `json:"sites"`
	Trampolines int    `json:"trampolines"`
	Hits        uint64 `json:"hits"`
	UntracedNs  int64  `json:"untraced_ns"`
	TracedNs    int64  `json:"traced_ns"` // the median traced run
}

func newBenchStressCmd() *cobra.Command {
	o := benchStressOptions{runs: 100, trapsEvery: 2}
	cmd := &cobra.Command{
		Use:   "stress [flags] SPEC... -- CMD [ARGS...]",
		Short: "Trace the same command many times and check that every run behaves as the untraced one",
		Long: `Run CMD once untraced, then --runs times traced with the probes the SPECs
name (as trace takes them), every --traps-every-th run through traps only
and the others with trampolines (and traps where a site takes no
trampoline), each with the same standard input. Every traced run must write
the same standard output, byte for byte, and end with the same exit status
as the untraced run; a run that does not, or whose tracer fails, is listed.

The report gives the runs, the failures and, for the first traced run with
trampolines, its sites and hits; with --json one JSON object. The exit
status is 1 when a run failed. A command whose output depends on more than
its input (time, thread scheduling) cannot be checked this way.

Needs Linux on x86-64 and ptrace.`,
		Example: `  probeopt bench stress --runs 1000 '*' 'liblzma.so.5:*' libc.so.6:malloc libc.so.6:free -- xz -T2 -6 -c data.txt
  probeopt bench stress --stdin words.txt --runs 200 'sort:*' -- sort --parallel=2`,
		Args: func(cmd *cobra.Command, args []string) error { return nil },
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if o.runs < 1 || o.trapsEvery < 0 {
				return usagef("bench stress: --runs must be at least 1 and --traps-every at least 0")
			}
			specs, argv, stdin, err := specsCommandInput(cmd, args, "bench stress", o.stdin)
			if err != nil {
				return err
			}
			rep, err := benchStress(specs, argv, stdin, &o, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := writeReport(cmd.OutOrStdout(), o.json, rep, func() error { printStress(cmd.OutOrStdout(), rep); return nil }); err != nil {
				return err
			}
			if len(rep.Failures) > 0 {
				return errReported
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.runs, "runs", o.runs, "traced runs")
	f.IntVar(&o.trapsEvery, "traps-every", o.trapsEvery, "serve every `K`-th run through traps only (0: never)")
	f.StringVar(&o.stdin, "stdin", "", "`FILE` given to CMD as standard input in every run (default: none)")
	f.BoolVar(&o.json, "json", false, "print one JSON object")
	return cmd
}

// printStress prints the report.
func printStress(w io.Writer, rep *stressReport) {
	for _, f := range rep.Failures {
		mode := "trampolines"
		if f.Traps {
			mode = "traps"
		}
		fmt.Fprintf(w, "run %d (%s): %s\n", f.Run, mode, f.Why)
	}
	fmt.Fprintf(w, "runs      %d traced (%d through traps only), %d failed\n", rep.Runs, rep.TrapRuns, len(rep.Failures))
	fmt.Fprintf(w, "sites     %d, %d with trampolines; %d hits in the first run\n", rep.Sites, rep.Trampolines, rep.Hits)
	fmt.Fprintf(w, "time      untraced %v, traced %v (median); exit status %d\n",
		time.Duration(rep.UntracedNs).Round(time.Millisecond), time.Duration(rep.TracedNs).Round(time.Millisecond), rep.Exit)
}
