package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/probe/kuprobe"
)

// benchCompare runs argv traced by probeopt with specs, then under kernel
// uprobes at the same sites, and compares.
func benchCompare(specs, argv []string, stdin []byte, o *benchCompareOptions, stderr io.Writer) (*compareReport, error) {
	rep := &compareReport{Command: argv}
	in, err := stdinFile(stdin)
	if err != nil {
		return nil, err
	}
	defer in.Close()

	ours, st, code, elapsed, err := compareTraced(specs, argv, in, o, stderr)
	if err != nil {
		return nil, err
	}
	rep.ExitProbeopt, rep.ProbeoptNs = code, elapsed.Nanoseconds()

	type key struct {
		module string
		addr   uint64
	}
	sites := map[key]*compareSite{}
	var order []key
	files := map[string]*elfscan.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var ks []kuprobe.Site
	var placed []*compareSite
	for _, p := range st.Probes {
		ret := isReturnSpec(p.Spec)
		for _, s := range p.Sites {
			if s.Pid != st.Pid {
				continue // a child's: the kernel counts CMD's process only
			}
			k := key{s.Module, s.Addr}
			if cs := sites[k]; cs != nil {
				cs.Probeopt += s.Hits
				continue
			}
			f := files[s.Module]
			if f == nil {
				if f, err = elfscan.Open(s.Module); err != nil {
					return nil, err
				}
				files[s.Module] = f
			}
			pl, err := kuprobe.Place(f, s.Addr)
			if err != nil {
				return nil, err
			}
			if pl.Refused != "" {
				rep.Skipped = append(rep.Skipped, compareSkip{Module: s.Module, Symbol: s.Symbol, Addr: s.Addr, Reason: string(pl.Refused)})
				continue
			}
			// A Go function's return probe is a probe at each return
			// instruction: the kernel counts there with a uprobe.
			pl.Return = ret && !s.AtReturn
			cs := &compareSite{Module: s.Module, Symbol: s.Symbol, Addr: s.Addr, Offset: pl.Offset, Strategy: string(s.Strategy),
				Probeopt: s.Hits, PerIteration: pl.PerIteration && !ret}
			sites[k] = cs
			order = append(order, k)
			ks = append(ks, pl.Site)
			placed = append(placed, cs)
		}
	}
	if len(ks) == 0 {
		return nil, errors.New("bench compare: no site to compare (none installed, or the kernel refuses every one)")
	}

	rep.Runs, rep.SameOutput = o.runs, true
	for _, cs := range placed {
		cs.ProbeoptMin, cs.ProbeoptMax = cs.Probeopt, cs.Probeopt
	}
	for run := 1; run < o.runs; run++ {
		out, st, code, _, err := compareTraced(specs, argv, in, o, io.Discard)
		if err != nil {
			return nil, err
		}
		if code != rep.ExitProbeopt {
			return nil, fmt.Errorf("bench compare: the runs traced by probeopt exited %d and %d", rep.ExitProbeopt, code)
		}
		rep.SameOutput = rep.SameOutput && bytes.Equal(ours, out)
		hits := map[key]uint64{}
		for _, p := range st.Probes {
			for _, s := range p.Sites {
				if s.Pid == st.Pid {
					hits[key{s.Module, s.Addr}] += s.Hits
				}
			}
		}
		for _, k := range order {
			cs := sites[k]
			cs.ProbeoptMin, cs.ProbeoptMax = min(cs.ProbeoptMin, hits[k]), max(cs.ProbeoptMax, hits[k])
		}
	}
	for run := range o.runs {
		kout, counts, err := compareKernelRun(rep, argv, in, ks, run == 0)
		if err != nil {
			return nil, err
		}
		rep.SameOutput = rep.SameOutput && bytes.Equal(ours, kout)
		for i, cs := range placed {
			c := counts[i]
			if run == 0 {
				cs.Kernel, cs.KernelMin, cs.KernelMax = c, c, c
			}
			cs.KernelMin, cs.KernelMax = min(cs.KernelMin, c), max(cs.KernelMax, c)
		}
	}
	for _, k := range order {
		cs := sites[k]
		if cs.PerIteration {
			cs.Differs = cs.ProbeoptMin > cs.KernelMax || (cs.ProbeoptMax > 0) != (cs.KernelMax > 0)
		} else {
			cs.Differs = cs.ProbeoptMax < cs.KernelMin || cs.ProbeoptMin > cs.KernelMax
		}
		cs.Varies = cs.ProbeoptMin != cs.ProbeoptMax || cs.KernelMin != cs.KernelMax
		rep.Compared++
		rep.Probeopt += cs.Probeopt
		rep.Kernel += cs.Kernel
		if cs.ProbeoptMax > 0 || cs.KernelMax > 0 {
			rep.Hit++
		}
		if cs.Differs {
			rep.Differ++
			if cs.Varies {
				rep.DifferVaries++
			}
		}
		if cs.Differs || o.all {
			rep.Sites = append(rep.Sites, *cs)
		}
	}
	sort.SliceStable(rep.Sites, func(i, j int) bool {
		return rep.Sites[i].Kernel+rep.Sites[i].Probeopt > rep.Sites[j].Kernel+rep.Sites[j].Probeopt
	})
	return rep, nil
}

// compareKernelRun runs argv under kernel uprobes at ks, with in (from
// its start) as standard input, and returns its standard output and the
// counts. The first run's time and exit status go into rep; a later
// run's exit status must be the same.
func compareKernelRun(rep *compareReport, argv []string, in *os.File, ks []kuprobe.Site, first bool) ([]byte, []uint64, error) {
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	var kout bytes.Buffer
	cmd.Stdin, cmd.Stdout = in, &kout
	start := time.Now()
	counts, err := kuprobe.Run(cmd, ks)
	elapsed := time.Since(start)
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		return nil, nil, fmt.Errorf("bench compare: the run under kernel uprobes: %w", err)
	}
	if first {
		rep.KernelNs, rep.ExitKernel = elapsed.Nanoseconds(), code
	} else if code != rep.ExitKernel {
		return nil, nil, fmt.Errorf("bench compare: the runs under kernel uprobes exited %d and %d", rep.ExitKernel, code)
	}
	return kout.Bytes(), counts, nil
}

// compareTraced runs argv traced by probeopt with specs, with in (from its
// start) as standard input, and returns its
// standard output, the tracer's statistics, the exit status and the time
// from the resume to the exit.
func compareTraced(specs, argv []string, in *os.File, o *benchCompareOptions, stderr io.Writer) ([]byte, compareStats, int, time.Duration, error) {
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return nil, compareStats{}, 0, 0, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, compareStats{}, 0, 0, err
	}
	tr, err := probe.Spawn(argv, &probe.SpawnOptions{Options: probe.Options{NoTrampolines: o.traps}, Stdin: in, Stdout: w})
	w.Close()
	if err != nil {
		r.Close()
		return nil, compareStats{}, 0, 0, traceStartError(err, 0)
	}
	defer tr.Kill()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { out.ReadFrom(r); r.Close(); close(copied) }()
	if _, err := tr.Add(specs...); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "probeopt: %s\n", line)
		}
	}
	start := time.Now()
	if err := tr.Resume(); err != nil {
		return nil, compareStats{}, 0, 0, err
	}
	<-tr.Exited()
	elapsed := time.Since(start)
	es, err := tr.Wait()
	<-copied
	if err != nil {
		return nil, compareStats{}, 0, 0, err
	}
	code := es.Code
	if es.Signal != 0 {
		code = 128 + es.Signal
	}
	return out.Bytes(), compareStats{Stats: tr.Stats(), Pid: tr.Pid()}, code, elapsed, nil
}

// compareStats are a traced run's statistics and its process.
type compareStats struct {
	probe.Stats
	Pid int
}

// stdinFile returns a file that holds b (an empty one for nil), to give
// both runs the same input.
func stdinFile(b []byte) (*os.File, error) {
	f, err := os.CreateTemp("", "probeopt-compare-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// isReturnSpec reports whether a spec names return probes.
func isReturnSpec(spec string) bool {
	return strings.HasSuffix(spec, "%return") || strings.HasPrefix(spec, "uretprobe:") || strings.HasPrefix(spec, "ur:")
}
