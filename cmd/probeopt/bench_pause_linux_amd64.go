//go:build linux && amd64

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/proc"
)

// benchPause times installs of each size in o.patches, in one unbounded
// pass and in passes under o.maxPause, on a target with max(o.patches)
// generated functions and a stall thread.
func benchPause(stderr io.Writer, o *benchPatchOptions) (*benchPauseReport, error) {
	sites := slices.Max(o.patches)
	dir, err := os.MkdirTemp("", "probeopt-bench-pause-")
	if err != nil {
		return nil, fmt.Errorf("bench patch: %w", err)
	}
	defer os.RemoveAll(dir)
	t, err := startPauseTarget(dir, o.threads, sites, proc.Options{StopNice: o.stopNice, StopFIFO: o.stopFIFO})
	if err != nil {
		return nil, fmt.Errorf("bench patch: %w", err)
	}
	defer t.p.Kill()
	all := t.patches()
	rep := &benchPauseReport{Threads: o.threads, Sites: sites, StopNice: o.stopNice, StopFIFO: o.stopFIFO}
	prog := newProgress(stderr, "bench patch", "installs", 2*len(o.patches)*o.repeat)
	if !isTerminal(stderr) {
		prog = nil
	}
	done := 0
	for _, size := range o.patches {
		stride := sites / size
		ps := make([]batchpatch.Patch, 0, size)
		for i := 0; len(ps) < size; i += stride {
			ps = append(ps, all[i])
		}
		for _, bound := range []time.Duration{0, o.maxPause} {
			row, err := benchPauseRun(t, ps, bound, o.repeat, func() { done++; prog.update(done) })
			if err != nil {
				return nil, fmt.Errorf("bench patch: %d patches, max pause %v: %w", size, bound, err)
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	prog.done()
	if rep.Bad, err = t.read64(t.bad); err != nil {
		return nil, fmt.Errorf("bench patch: read the target's counter: %w", err)
	}
	return rep, nil
}

// startPauseTarget compiles the workload with sites functions into dir
// and starts it with threads calling threads, traced with the stop
// priorities of stop.
func startPauseTarget(dir string, threads, sites int, stop proc.Options) (*patchTarget, error) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		return nil, fmt.Errorf("the bounded-pause workload is compiled with gcc: %w", err)
	}
	exe := filepath.Join(dir, "pause")
	src := []string{filepath.Join(dir, "pause.c"), filepath.Join(dir, "pausesites.S")}
	for i, b := range [][]byte{pauseSource, pauseSitesSource} {
		if err := os.WriteFile(src[i], b, 0o644); err != nil {
			return nil, err
		}
	}
	args := append(append(append([]string{}, pauseCFlags...), fmt.Sprintf("-DNSITES=%d", sites), "-o", exe), src...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gcc: %w\n%s", err, out)
	}
	return spawnPatchTarget([]string{exe, strconv.Itoa(threads)}, os.Environ(), stop, sites, pauseOld, pauseNew)
}

// benchPauseRun installs and removes ps repeat times under the bound (0:
// one pass) and sums up the figures.
func benchPauseRun(t *patchTarget, ps []batchpatch.Patch, bound time.Duration, repeat int, tick func()) (benchPauseRow, error) {
	row := benchPauseRow{Patches: len(ps), MaxPause: bound, Repeats: repeat}
	var opts *batchpatch.Options
	if bound > 0 {
		opts = &batchpatch.Options{MaxPause: bound}
	}
	var pauses, totals []time.Duration
	var passes, removals []int
	for r := 0; r < repeat; r++ {
		// The machine's own noise, over as long as the last install
		// took (at least 20 ms).
		window := max(20*time.Millisecond, median(totals))
		idle, err := t.worstStall(func() error { time.Sleep(window); return nil })
		if err != nil {
			return row, err
		}
		row.IdleWorstStall = max(row.IdleWorstStall, idle)
		var res *batchpatch.Result
		var total time.Duration
		stall, err := t.worstStall(func() error {
			t0 := time.Now()
			var err error
			res, err = applyUntilDone(t.p, ps, opts)
			total = time.Since(t0)
			return err
		})
		if err != nil {
			return row, err
		}
		row.TargetWorstStall = max(row.TargetWorstStall, stall)
		row.Applied = len(res.Applied)
		totals = append(totals, total)
		passes = append(passes, len(res.Passes))
		for _, p := range res.Passes {
			pauses = append(pauses, p.Pause)
			row.Deferred += p.Deferred
			if p.Pause > row.LongestPause {
				row.LongestPause = p.Pause
				row.Longest = benchPassPhases{Patches: p.Patches, Pages: p.Pages, Steps: p.Steps, Stop: p.Stop, Read: p.Read,
					Check: p.Check, Write: p.Write, ReadBack: p.ReadBack, Other: p.Other, Resume: p.Resume}
			}
		}
		tick()
		inv := make([]batchpatch.Patch, len(res.Applied))
		for i, q := range res.Applied {
			inv[i] = q.Inverse()
		}
		rres, err := applyUntilDone(t.p, inv, opts)
		if err != nil {
			return row, fmt.Errorf("remove: %w", err)
		}
		removals = append(removals, len(rres.Passes))
		tick()
	}
	slices.Sort(passes)
	slices.Sort(removals)
	row.Passes, row.RemovalPasses = passes[len(passes)/2], removals[len(removals)/2]
	row.MedianPause, row.Total = median(pauses), median(totals)
	return row, nil
}

// stallWake is how long worstStall waits for the stall thread (which
// sleeps 100 us at a time) to wake once more.
const stallWake = 200 * time.Microsecond

// worstStall resets the stall thread's worst stall, runs fn, lets the
// stall thread wake once more, and returns the worst stall it saw.
func (t *patchTarget) worstStall(fn func() error) (time.Duration, error) {
	var zero [8]byte
	if err := t.p.WriteMemory(t.stall, zero[:]); err != nil {
		return 0, fmt.Errorf("reset the stall: %w", err)
	}
	if err := fn(); err != nil {
		return 0, err
	}
	time.Sleep(stallWake)
	d, err := t.read64(t.stall)
	if err != nil {
		return 0, fmt.Errorf("read the stall: %w", err)
	}
	return time.Duration(d), nil
}

// applyUntilDone applies ps, and applies again the patches a thread held
// back (a thread that did not finish its single step in time on a loaded
// machine), as the passes of one batch: the Result sums them up.
func applyUntilDone(p *proc.Process, ps []batchpatch.Patch, opts *batchpatch.Options) (*batchpatch.Result, error) {
	all := &batchpatch.Result{}
	for try := 0; len(ps) > 0; try++ {
		if try == 100 {
			return nil, fmt.Errorf("%d patches still held back after 100 batches", len(ps))
		}
		res, err := batchpatch.Apply(p, ps, opts)
		if err != nil {
			return nil, err
		}
		all.Applied = append(all.Applied, res.Applied...)
		all.Passes = append(all.Passes, res.Passes...)
		held := map[uint64]bool{}
		for _, b := range res.Refused {
			held[b.Addr] = true
		}
		var left []batchpatch.Patch
		for _, q := range ps {
			if held[q.Addr] {
				left = append(left, q)
			}
		}
		ps = left
	}
	batchpatch.Sort(all.Applied)
	return all, nil
}
