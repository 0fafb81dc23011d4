package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/probe/kuprobe"
)

// benchScale runs every measurement of "bench scale".
func benchScale(progress io.Writer, o *benchScaleOptions) (*benchScaleReport, error) {
	if _, err := kuprobe.PMUType(); err != nil {
		return nil, fmt.Errorf("bench scale needs kernel uprobes: %w", err)
	}
	dir, err := os.MkdirTemp("", "probeopt-bench-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	exe, err := buildScale(dir)
	if err != nil {
		return nil, err
	}
	off, err := scaleOffset(exe, "hot")
	if err != nil {
		return nil, err
	}
	term := isTerminal(progress)
	rep := &benchScaleReport{CPUs: runtime.NumCPU(), RingSize: probe.DefaultRingSize}
	for _, n := range o.threads {
		for _, mode := range []string{"untraced", "counts", "events", "kernel"} {
			if term {
				fmt.Fprintf(progress, "\rbench scale: %d threads, %-8s ...", n, mode)
			}
			row, err := scaleRun(exe, off, mode, n, o.calls)
			if err != nil {
				return nil, fmt.Errorf("%d threads, %s: %w", n, mode, err)
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	scaleRatios(rep.Rows)
	threads := 2
	perThread := o.rate / threads
	for _, d := range []struct {
		format string
		rate   int
		calls  int
	}{
		{formatBin, o.rate, int(float64(perThread) * o.seconds)},
		{formatBin, 0, o.calls},
		{formatJSON, 0, o.calls},
	} {
		if term {
			fmt.Fprintf(progress, "\rbench scale: drain, %-4s ...          ", d.format)
		}
		row, err := scaleDrain(exe, dir, d.format, threads, d.rate, d.calls)
		if err != nil {
			return nil, fmt.Errorf("drain %s: %w", d.format, err)
		}
		rep.Drain = append(rep.Drain, row)
	}
	if term {
		fmt.Fprint(progress, "\r                                          \r")
	}
	return rep, nil
}

// buildScale compiles the embedded workload into dir.
func buildScale(dir string) (string, error) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		return "", fmt.Errorf("bench scale compiles its workload with gcc: %w", err)
	}
	src, exe := filepath.Join(dir, "scale.c"), filepath.Join(dir, "scale")
	if err := os.WriteFile(src, scaleSource, 0o644); err != nil {
		return "", err
	}
	args := append(append([]string{}, scaleCFlags...), "-o", exe, src)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc: %w\n%s", err, out)
	}
	return exe, nil
}

// scaleOffset returns the file offset of function name in exe.
func scaleOffset(exe, name string) (uint64, error) {
	f, err := elfscan.Open(exe)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	funcs, err := f.Funcs()
	if err != nil {
		return 0, err
	}
	for i := range funcs {
		if funcs[i].Name == name {
			return f.TextOffset(funcs[i].Addr)
		}
	}
	return 0, fmt.Errorf("%s: no function %s: %w", exe, name, elfscan.ErrNoSymbol)
}

// scaleElapsed reads the workload's time of its loop and the mean CPU
// time of its threads' loops from its output.
func scaleElapsed(out []byte) (elapsed, cpu int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	threads := int64(0)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "elapsed_ns "); ok {
			elapsed, err = strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, 0, err
			}
			continue
		}
		if i := strings.Index(line, " cpu_ns "); strings.HasPrefix(line, "thread ") && i > 0 {
			c, err := strconv.ParseInt(line[i+len(" cpu_ns "):], 10, 64)
			if err != nil {
				return 0, 0, err
			}
			cpu += c
			threads++
		}
	}
	if elapsed == 0 || threads == 0 {
		return 0, 0, fmt.Errorf("no elapsed_ns or thread lines in the workload's output: %q", out)
	}
	return elapsed, cpu / threads, nil
}

// scaleRun runs the workload with n threads of calls iterations in one
// mode and returns its row.
func scaleRun(exe string, off uint64, mode string, n, calls int) (benchScaleRow, error) {
	row := benchScaleRow{Threads: n, Mode: mode, Calls: calls}
	args := []string{strconv.Itoa(n), strconv.Itoa(calls)}
	var out []byte
	var err error
	switch mode {
	case "untraced":
		out, err = exec.Command(exe, args...).Output()
	case "kernel":
		out, row.Hits, err = scaleKernel(exe, off, args)
	default:
		var st probe.Stats
		var events atomic.Uint64
		opts := probe.Options{}
		if mode == "events" {
			opts.Events = true
			opts.OnEvents = func(evs []probe.Event) { events.Add(uint64(len(evs))) }
		}
		out, st, _, err = scaleTraced(exe, args, opts)
		for _, p := range st.Probes {
			row.Hits += p.Hits
		}
		row.Events, row.Dropped = events.Load(), st.DroppedEvents
	}
	if err != nil {
		return row, err
	}
	if row.ElapsedNs, row.CPUNs, err = scaleElapsed(out); err != nil {
		return row, err
	}
	if mode != "untraced" && row.Hits != uint64(n*calls) {
		return row, fmt.Errorf("%d hits counted for %d calls", row.Hits, n*calls)
	}
	row.NsPerCall = float64(row.CPUNs) / float64(calls)
	row.ThreadRate = float64(calls) / (float64(row.CPUNs) / 1e9)
	row.TotalRate = float64(n*calls) / (float64(row.ElapsedNs) / 1e9)
	return row, nil
}

// scaleTraced runs the workload under probeopt, probing hot with opts,
// and returns its output, the tracer's statistics and the CPU time this
// process spent while the workload ran (from its start, the probes
// installed, to its exit: the drain and the tracer's other work).
func scaleTraced(exe string, args []string, opts probe.Options) ([]byte, probe.Stats, int64, error) {
	f, err := os.CreateTemp("", "probeopt-scale-out-")
	if err != nil {
		return nil, probe.Stats{}, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	tr, err := probe.Spawn(append([]string{exe}, args...), &probe.SpawnOptions{Options: opts, Stdout: f})
	if err != nil {
		return nil, probe.Stats{}, 0, err
	}
	if _, err := tr.Add("hot"); err != nil {
		tr.Kill()
		return nil, probe.Stats{}, 0, err
	}
	cpu0 := selfCPU()
	if err := tr.Resume(); err != nil {
		tr.Kill()
		return nil, probe.Stats{}, 0, err
	}
	es, err := tr.Wait()
	cpu := selfCPU() - cpu0
	if err == nil && (es.Code != 0 || es.Signal != 0) {
		err = fmt.Errorf("workload exited with %+v", es)
	}
	st := tr.Stats()
	if err != nil {
		return nil, st, cpu, err
	}
	out, err := os.ReadFile(f.Name())
	return out, st, cpu, err
}

// scaleKernel runs the workload untraced with a kernel uprobe counting
// hot in each of its threads from their first call (the workload stops
// itself once its threads exist: SCALE_STOP), and returns its output and
// the kernel's count.
func scaleKernel(exe string, off uint64, args []string) ([]byte, uint64, error) {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "SCALE_STOP=1")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil && strings.Contains(string(b), ") T ") {
			break
		}
		if err != nil || time.Now().After(deadline) {
			return nil, 0, errors.New("the workload did not stop before its loop")
		}
	}
	counter, err := kuprobe.OpenTasks(exe, off, pid, nil)
	if err != nil {
		return nil, 0, err
	}
	defer counter.Close()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return nil, 0, err
	}
	if err := cmd.Wait(); err != nil {
		return nil, 0, fmt.Errorf("workload: %w", err)
	}
	hits, err := counter.Count()
	if err != nil {
		return nil, 0, err
	}
	return out.Bytes(), hits, nil
}

// scaleDrain runs the workload with events of hot written to a file in
// format (paced to rate events per second in all, 0 for unpaced) and
// returns the row.
func scaleDrain(exe, dir, format string, threads, rate, calls int) (benchDrainRow, error) {
	row := benchDrainRow{Format: format, Threads: threads, Rate: rate}
	path := filepath.Join(dir, "events."+format)
	f, err := os.Create(path)
	if err != nil {
		return row, err
	}
	defer os.Remove(path)
	defer f.Close()
	sink := newEventSink(format, f)
	if err := sink.start([]*probe.Probe{{ID: 1, Spec: "hot"}}); err != nil {
		return row, err
	}
	args := []string{strconv.Itoa(threads), strconv.Itoa(calls)}
	if rate > 0 {
		args = append(args, strconv.Itoa(rate/threads))
	}
	out, st, cpu, err := scaleTraced(exe, args, probe.Options{Events: true, OnEvents: sink.write})
	row.TracerCPUNs = cpu
	if err != nil {
		return row, err
	}
	if err := sink.flush(); err != nil {
		return row, err
	}
	if row.ElapsedNs, _, err = scaleElapsed(out); err != nil {
		return row, err
	}
	for _, p := range st.Probes {
		row.Hits += p.Hits
	}
	row.Written, row.Dropped = sink.written(), st.DroppedEvents
	if fi, err := f.Stat(); err == nil {
		row.Bytes = fi.Size()
	}
	if row.Written+row.Dropped != row.Hits {
		return row, fmt.Errorf("%d events written + %d dropped for %d hits", row.Written, row.Dropped, row.Hits)
	}
	row.WrittenPS = float64(row.Written) / (float64(row.ElapsedNs) / 1e9)
	if row.TracerCPUNs > 0 {
		row.PerCPUSecond = float64(row.Written) / (float64(row.TracerCPUNs) / 1e9)
	}
	return row, nil
}

// selfCPU returns the CPU time (user and system) of this process so far,
// in nanoseconds.
func selfCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
