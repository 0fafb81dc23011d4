package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// benchCompareOptions are the flags of "bench compare".
type benchCompareOptions struct {
	json  bool
	traps bool
	stdin string
	all   bool
	// runs is how many times CMD runs on each side.
	runs int
}

// compareSite is one site of "bench compare".
type compareSite struct {
	Module   string `json:"module"`
	Symbol   string `json:"symbol,omitempty"`
	Addr     uint64 `json:"addr"`
	Offset   uint64 `json:"offset"`
	Strategy string `json:"strategy"`
	// Probeopt and Kernel are the counts of each side's first run, the
	// Min and Max fields the least and the most of its runs (--runs).
	Probeopt    uint64 `json:"probeopt"`
	ProbeoptMin uint64 `json:"probeopt_min"`
	ProbeoptMax uint64 `json:"probeopt_max"`
	Kernel      uint64 `json:"kernel"`
	KernelMin   uint64 `json:"kernel_min"`
	KernelMax   uint64 `json:"kernel_max"`
	// PerIteration marks a string instruction with a repeat prefix: the
	// kernel counts its iterations, probeopt its executions.
	PerIteration bool `json:"per_iteration,omitempty"`
	// Differs is set when the two sides' counts do not overlap (for a
	// per-iteration site: when probeopt's least count exceeds the
	// kernel's most, or only one of them counts any); Varies when one
	// side's own runs counted differently: the command itself does not
	// run the site the same number of times in every run.
	Differs bool `json:"differs"`
	Varies  bool `json:"varies,omitempty"`
}

// compareSkip is a site the kernel does not take.
type compareSkip struct {
	Module string `json:"module"`
	Symbol string `json:"symbol,omitempty"`
	Addr   uint64 `json:"addr"`
	Reason string `json:"reason"`
}

// compareReport is the result of "bench compare".
type compareReport struct {
	Command []string `json:"command"`
	// SameOutput reports whether the two runs wrote the same standard
	// output; Exit the exit status of each run.
	SameOutput   bool  `json:"same_output"`
	ExitProbeopt int   `json:"exit_probeopt"`
	ExitKernel   int   `json:"exit_kernel"`
	ProbeoptNs   int64 `json:"probeopt_ns"`
	KernelNs     int64 `json:"kernel_ns"`
	// Sites are the sites compared (with --all; otherwise those that
	// differ), Skipped those the kernel refuses.
	Sites   []compareSite `json:"sites"`
	Skipped []compareSkip `json:"skipped,omitempty"`
	// Compared, Differ and Hit count the sites compared, those whose
	// counts differ, and those either counted a hit at; DifferVaries
	// those of the sites that differ where one side's own runs
	// disagree. Probeopt and Kernel are the hits of all of them (each
	// side's first run); Runs the runs of each side.
	Compared, Differ, Hit int
	DifferVaries          int `json:"differ_varies"`
	Probeopt, Kernel      uint64
	Runs                  int `json:"runs"`
}

func newBenchCompareCmd() *cobra.Command {
	var o benchCompareOptions
	cmd := &cobra.Command{
		Use:   "compare [flags] SPEC... -- CMD [ARGS...]",
		Short: "Count the hits of probes with probeopt and with kernel uprobes on the same command, site by site",
		Long: `Run CMD twice with the same input: traced by probeopt with the probes the
SPECs name (as trace takes them), then untraced by ptrace with a counting
kernel uprobe on each site probeopt installed (one BPF uprobe-multi link per
file, registered after CMD's execve and before its first instruction; return
probes through the uprobe PMU), and compare the counts site by site, and
CMD's standard output of the two runs byte for byte.

A site the kernel refuses (as the linux-uprobes policy predicts) is listed
as skipped. At a string instruction with a repeat prefix the kernel counts
each iteration and probeopt each execution: such a site differs only when
probeopt counts more, or when one of them counts nothing. Only CMD's own
process is counted: its children are not.

With --runs N, CMD runs N times on each side: a site differs when the
counts of one side do not overlap the other's, and a site where one side's
own runs disagree is marked: there the command does not run the site the
same number of times in every run (timers, locks, threads racing to
exit), and a difference says little about either counter.

The report lists the sites whose counts differ (every site with --all) and
the totals, or with --json one JSON object. The exit status is 1 when a
count or the output differs.

Needs Linux on x86-64, ptrace and kernel uprobes (root).`,
		Example: `  probeopt bench compare '*' -- /usr/bin/xz -T2 -c big.txt
  probeopt bench compare --stdin data.sql --all '*' 'libsqlite3.so*:*' -- sqlite3`,
		Args: func(cmd *cobra.Command, args []string) error { return nil },
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			specs, argv, stdin, err := specsCommandInput(cmd, args, "bench compare", o.stdin)
			if err != nil {
				return err
			}
			if o.runs < 1 {
				return usagef("bench compare: --runs %d: want 1 or more", o.runs)
			}
			rep, err := benchCompare(specs, argv, stdin, &o, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := writeReport(cmd.OutOrStdout(), o.json, rep, func() error { return printCompare(cmd.OutOrStdout(), rep) }); err != nil {
				return err
			}
			if rep.Differ > 0 || !rep.SameOutput {
				return errReported
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print one JSON object")
	f.BoolVar(&o.traps, "traps", false, "serve every probeopt site through traps (no trampolines)")
	f.StringVar(&o.stdin, "stdin", "", "`FILE` given to CMD as standard input in both runs (default: none)")
	f.BoolVar(&o.all, "all", false, "list every site compared, not only those that differ")
	f.IntVar(&o.runs, "runs", 1, "runs of CMD on each side: a site differs when the two sides' counts do not overlap")
	return cmd
}

// specsCommandInput splits the arguments "SPEC... -- CMD [ARGS...]" of
// subcommand name, and reads the file given as CMD's standard input (nil
// for none).
func specsCommandInput(cmd *cobra.Command, args []string, name, stdinPath string) (specs, argv []string, stdin []byte, err error) {
	dash := cmd.ArgsLenAtDash()
	if dash < 0 || dash == len(args) {
		return nil, nil, nil, usagef("%s: want SPEC... -- CMD [ARGS...]", name)
	}
	specs, argv = args[:dash], args[dash:]
	if len(specs) == 0 {
		return nil, nil, nil, usagef("%s: no SPEC", name)
	}
	if stdinPath != "" {
		if stdin, err = os.ReadFile(stdinPath); err != nil {
			return nil, nil, nil, err
		}
	}
	return specs, argv, stdin, nil
}

// printCompare prints the report as a table and totals.
func printCompare(w io.Writer, rep *compareReport) error {
	if len(rep.Sites) > 0 {
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "SITE\tSTRATEGY\tPROBEOPT\tKERNEL\t")
		for _, s := range rep.Sites {
			name := shortModule(s.Module)
			if s.Symbol != "" {
				name += ":" + s.Symbol
			}
			var marks []string
			if s.Differs {
				marks = append(marks, "differs")
			}
			if s.Varies {
				marks = append(marks, "(varies)")
			}
			if s.PerIteration {
				marks = append(marks, "(kernel: iterations)")
			}
			fmt.Fprintf(tw, "%s (%#x)\t%s\t%s\t%s\t%s\n", name, s.Addr, s.Strategy, countRange(s.ProbeoptMin, s.ProbeoptMax),
				countRange(s.KernelMin, s.KernelMax), strings.Join(marks, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	same := "the same"
	if !rep.SameOutput {
		same = "different"
	}
	fmt.Fprintf(w, "sites   %d compared, %d hit, %d differ; %d the kernel refuses\n", rep.Compared, rep.Hit, rep.Differ, len(rep.Skipped))
	if rep.Runs > 1 {
		fmt.Fprintf(w, "        %d of those that differ where one side's %d runs disagree too\n", rep.DifferVaries, rep.Runs)
	}
	fmt.Fprintf(w, "hits    probeopt %d, kernel %d\n", rep.Probeopt, rep.Kernel)
	fmt.Fprintf(w, "runs    probeopt %v (exit %d), kernel uprobes %v (exit %d); %s output\n",
		time.Duration(rep.ProbeoptNs).Round(time.Millisecond), rep.ExitProbeopt, time.Duration(rep.KernelNs).Round(time.Millisecond), rep.ExitKernel, same)
	return nil
}

// countRange prints the counts of a side's runs: one count, or the least
// and the most.
func countRange(lo, hi uint64) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}
