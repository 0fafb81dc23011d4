package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// pauseSource and pauseSitesSource are the workload of "bench patch
// --patches" (benchdata/pause.c and benchdata/pausesites.S, whose
// functions the assembler generates), compiled by the command with gcc
// for the number of sites it needs.
var (
	//go:embed benchdata/pause.c
	pauseSource []byte
	//go:embed benchdata/pausesites.S
	pauseSitesSource []byte
)

// pauseCFlags are the compiler flags of the workload (as in
// benchdata/Makefile), without -DNSITES.
var pauseCFlags = []string{"-O2", "-g", "-pthread", "-Wall", "-Wextra", "-fno-omit-frame-pointer"}

// The workload's function i is lea K(%rdi),%rax; nop; ret with K = i & 63
// (pausesites.S); the patch makes it lea M(%rdi),%rax with M = 64 + K.
func pauseOld(i int) []byte { return []byte{0x48, 0x8d, 0x47, byte(i & 63), 0x90} }
func pauseNew(i int) []byte { return []byte{0x48, 0x8d, 0x47, byte(64 + i&63), 0x90} }

// benchPauseRow is one object of "bench patch --patches ... --json": one
// batch size under one bound (MaxPause 0: no bound, one pass). Durations
// are in nanoseconds.
type benchPauseRow struct {
	Patches  int           `json:"patches"`
	MaxPause time.Duration `json:"max_pause_ns"` // the bound, 0 for none
	// Passes is the median over the repeats of the passes of one install.
	Passes int `json:"passes"`
	// LongestPause is the longest pause of any pass of any repeat, from
	// the first thread stopped to the last resumed.
	LongestPause time.Duration `json:"longest_pause_ns"`
	// MedianPause is the median pause over every pass of every repeat.
	MedianPause time.Duration `json:"median_pause_ns"`
	// Total is the median over the repeats of one install's Apply call.
	Total time.Duration `json:"total_ns"`
	// TargetWorstStall is the longest time the target's stall thread
	// could not run during any install (beyond the sleep it asked for).
	TargetWorstStall time.Duration `json:"target_worst_stall_ns"`
	// IdleWorstStall is the same, measured as long as one install lasts
	// with nothing patched: the machine's own noise.
	IdleWorstStall time.Duration `json:"idle_worst_stall_ns"`
	// Applied is the patches the last install wrote (all of them: a
	// patch a thread kept back is retried in a later pass).
	Applied int `json:"applied"`
	// RemovalPasses is the median passes of the removal that follows
	// each install, under the same bound.
	RemovalPasses int `json:"removal_passes"`
	Repeats       int `json:"repeats"`
	// Deferred is the units the passes' clocks left for a later pass,
	// over every install.
	Deferred int `json:"deferred"`
	// Longest is where the time of the longest pass went.
	Longest benchPassPhases `json:"longest_pass"`
}

// benchPassPhases is one pass's figures (batchpatch.PassStats), in
// nanoseconds.
type benchPassPhases struct {
	Patches  int           `json:"patches"`
	Pages    int           `json:"pages"`
	Steps    int           `json:"steps"`
	Stop     time.Duration `json:"stop_ns"`
	Read     time.Duration `json:"read_ns"`
	Check    time.Duration `json:"check_ns"`
	Write    time.Duration `json:"write_ns"`
	ReadBack time.Duration `json:"read_back_ns"`
	Other    time.Duration `json:"other_ns"`
	Resume   time.Duration `json:"resume_ns"`
}

// benchPauseReport is the result of the bounded-pause benchmark.
type benchPauseReport struct {
	StopNice int  // the tracer's nice value during a stop (proc.Options.StopNice)
	StopFIFO bool // the tracer under SCHED_FIFO during a stop (proc.Options.StopFIFO)
	Threads  int
	Sites    int
	Rows     []benchPauseRow
	Bad      int64 // wrong results the target's threads computed: must be 0
}

// writeBenchPauseJSON prints one JSON object per row.
func writeBenchPauseJSON(w io.Writer, rep *benchPauseReport) error {
	enc := json.NewEncoder(w)
	for _, r := range rep.Rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// printBenchPause prints the report as a table with the goals.
func printBenchPause(w io.Writer, rep *benchPauseReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "patches\tmax pause\tpasses\tlongest pause\tmedian pause\ttotal\ttarget worst stall\tidle worst stall\tremoval passes\t\n")
	for _, r := range rep.Rows {
		bound := "none"
		if r.MaxPause > 0 {
			bound = fmtDur(r.MaxPause)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.Patches, bound, r.Passes, fmtDur(r.LongestPause),
			fmtDur(r.MedianPause), fmtDur(r.Total), fmtDur(r.TargetWorstStall), fmtDur(r.IdleWorstStall), r.RemovalPasses)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nwhere the longest pass went:\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "patches\tmax pause\tits patches\tpages\tsteps\tstop\tread\tcheck\twrite\tread back\tother\tresume\tdeferred units\t\n")
	for _, r := range rep.Rows {
		bound := "none"
		if r.MaxPause > 0 {
			bound = fmtDur(r.MaxPause)
		}
		l := r.Longest
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.Patches, bound, l.Patches, l.Pages, l.Steps,
			fmtDur(l.Stop), fmtDur(l.Read), fmtDur(l.Check), fmtDur(l.Write), fmtDur(l.ReadBack), fmtDur(l.Other), fmtDur(l.Resume), r.Deferred)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	policy := ""
	if rep.StopFIFO {
		policy = " under SCHED_FIFO"
	}
	fmt.Fprintf(w, "\n%d target threads and a stall thread over %d generated functions; medians of %d installs; the tracer at nice %d%s while stopped.\n", rep.Threads, rep.Sites, repeatsOf(rep.Rows), rep.StopNice, policy)
	unbounded := map[int]benchPauseRow{}
	for _, r := range rep.Rows {
		if r.MaxPause == 0 {
			unbounded[r.Patches] = r
		}
	}
	for _, r := range rep.Rows {
		if r.MaxPause == 0 {
			continue
		}
		limit := r.MaxPause + r.MaxPause/10
		fmt.Fprintf(w, "goal, %d patches, no pause over %s: %s (longest %s)\n", r.Patches, fmtDur(limit), yesNo(r.LongestPause <= limit), fmtDur(r.LongestPause))
		if u, ok := unbounded[r.Patches]; ok && u.Total > 0 {
			ratio := float64(r.Total) / float64(u.Total)
			fmt.Fprintf(w, "goal, %d patches in <= 10x one unbounded pass: %s (%sx)\n", r.Patches, yesNo(ratio <= 10), fmtRatio(ratio))
		}
		fmt.Fprintf(w, "goal, %d patches, target's worst stall <= %s: %s (%s; idle %s)\n", r.Patches, fmtDur(limit), yesNo(r.TargetWorstStall <= limit), fmtDur(r.TargetWorstStall), fmtDur(r.IdleWorstStall))
	}
	_, err := fmt.Fprintf(w, "wrong results seen by the target: %d\n", rep.Bad)
	return err
}

func repeatsOf(rows []benchPauseRow) int {
	if len(rows) == 0 {
		return 0
	}
	return rows[0].Repeats
}
