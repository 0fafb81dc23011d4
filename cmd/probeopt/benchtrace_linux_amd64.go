package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/probe/kuprobe"
)

// benchTraceSite is a probed function of the target, in its file.
type benchTraceSite struct {
	name        string
	addr        uint64 // link-time address (the executable is not a PIE)
	offset      uint64 // file offset, for the kernel uprobe
	instruction string
	kernelPath  plan.Strategy
	strategy    plan.Strategy // probeopt's plan
}

// benchTraceFind locates the function of a kind in the executable: the
// assembly body (the ".abi0" symbol), not the Go wrapper around it.
// pf plans the executable.
func benchTraceFind(pf *plan.File, kind string) (benchTraceSite, error) {
	f := pf.ELF()
	name := "main.benchTrace" + strings.ToUpper(kind[:1]) + kind[1:]
	if kind == "rip" || kind == "sse" {
		name = "main.benchTrace" + strings.ToUpper(kind)
	}
	funcs, err := f.Funcs()
	if err != nil {
		return benchTraceSite{}, err
	}
	for i := range funcs {
		fn := &funcs[i]
		abi0 := false
		for _, n := range fn.Names() {
			if n == name+".abi0" {
				abi0 = true
			}
		}
		if !abi0 {
			continue
		}
		s := benchTraceSite{name: name, addr: fn.Addr}
		if s.offset, err = f.TextOffset(fn.Addr); err != nil {
			return s, err
		}
		code, err := f.Code(fn.Addr, 16)
		if err != nil {
			return s, err
		}
		var inst decode.X86Inst
		if err := (decode.X86Decoder{}).Decode(code, fn.Addr, &inst); err != nil {
			return s, err
		}
		s.instruction = inst.Text("gnu")
		site := &elfscan.Site{Kind: elfscan.SiteEntry, Addr: fn.Addr, Func: fn}
		d, err := pf.Decide(plan.LinuxUprobes, site, nil)
		if err != nil {
			return s, err
		}
		s.kernelPath = d.Strategy
		d, _ = pf.Decide(plan.Probeopt, site, &plan.Options{Live: true})
		s.strategy = d.Strategy
		return s, nil
	}
	return benchTraceSite{}, fmt.Errorf("%s: no function %s.abi0: %w", f.Path, name, elfscan.ErrNoSymbol)
}

// benchTrace runs every measurement of "bench trace".
func benchTrace(progress io.Writer, o *benchTraceOptions) (*benchTraceReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	f, err := elfscan.Open(exe)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := kuprobe.PMUType(); err != nil {
		return nil, fmt.Errorf("bench trace needs kernel uprobes: %w", err)
	}
	rep := &benchTraceReport{XOLMethod: "in-place step"}
	term := isTerminal(progress)
	pf := plan.NewFile(f, &plan.FileOptions{Vendor: decode.VendorAMD})
	for _, kind := range o.kinds {
		s, err := benchTraceFind(pf, kind)
		if err != nil {
			return nil, err
		}
		if term {
			fmt.Fprintf(progress, "\rbench trace: %-4s ...", kind)
		}
		row := benchTraceRow{Kind: kind, Function: s.name, Instruction: s.instruction, Calls: o.calls, KernelPath: string(s.kernelPath)}
		base, err := benchTraceRun(exe, kind, o.calls, nil)
		if err != nil {
			return nil, err
		}
		row.BaseNs = perCall(base, o.calls)
		kernel, err := benchTraceRun(exe, kind, o.calls, func(pid int) (func() error, error) {
			return benchTraceKernel(exe, s, pid, o.calls, false)
		})
		if err != nil {
			return nil, err
		}
		row.KernelNs = perCall(kernel, o.calls) - row.BaseNs
		entry := fmt.Sprintf("%#x", s.addr)
		d, path, _, err := benchTraceProbed(exe, kind, o.calls, s, entry, probe.Options{})
		if err != nil {
			return nil, err
		}
		row.TrampolinePath = path
		row.TrampolineNs = max(perCall(d, o.calls)-row.BaseNs, 0.01)
		row.TrampolineSpeedup = row.KernelNs / row.TrampolineNs
		kernel, err = benchTraceRun(exe, kind, o.calls, func(pid int) (func() error, error) {
			return benchTraceKernel(exe, s, pid, o.calls, true)
		})
		if err != nil {
			return nil, err
		}
		row.KernelReturnNs = perCall(kernel, o.calls) - row.BaseNs
		d, path, _, err = benchTraceProbed(exe, kind, o.calls, s, s.name+".abi0%return", probe.Options{})
		if err != nil {
			return nil, err
		}
		row.ReturnPath = path
		row.ReturnNs = max(perCall(d, o.calls)-row.BaseNs, 0.01)
		row.ReturnSpeedup = row.KernelReturnNs / row.ReturnNs
		d, path, xol, err := benchTraceProbed(exe, kind, o.calls, s, entry, probe.Options{NoTrampolines: true})
		if err != nil {
			return nil, err
		}
		rep.XOLMethod = xol
		row.ProbeoptPath = path
		row.ProbeoptNs = perCall(d, o.calls) - row.BaseNs
		row.ProbeoptRatio = row.ProbeoptNs / row.KernelNs
		d, _, _, err = benchTraceProbed(exe, kind, o.calls, s, entry, probe.Options{StepOnly: true})
		if err != nil {
			return nil, err
		}
		row.SteppedNs = perCall(d, o.calls) - row.BaseNs
		row.SteppedRatio = row.SteppedNs / row.KernelNs
		rep.Rows = append(rep.Rows, row)
	}
	if term {
		fmt.Fprintf(progress, "\r%30s\r", "")
	}
	return rep, nil
}

// benchTraceKernel puts a counting kernel uprobe (a uretprobe with ret) on
// the function for every thread of process pid (a perf event counts the
// thread it is opened for, and, inherited, the threads that thread
// creates): the Go runtime may run the loop on any of them. The function
// it returns checks the count and removes the probes.
func benchTraceKernel(exe string, s benchTraceSite, pid, calls int, ret bool) (func() error, error) {
	counter, err := kuprobe.OpenTasks(exe, s.offset, pid, &kuprobe.Options{Inherit: true, Return: ret})
	if err != nil {
		return nil, err
	}
	return func() error {
		defer counter.Close()
		total, err := counter.Count()
		if err != nil {
			return err
		}
		if total != uint64(calls) {
			return fmt.Errorf("kernel uprobe on %s: %d hits for %d calls", s.name, total, calls)
		}
		return nil
	}, nil
}

func perCall(d time.Duration, calls int) float64 { return float64(d.Nanoseconds()) / float64(calls) }

// benchTraceRun runs the target untraced and returns the time of its loop.
// attach, when not nil, is called with the target's pid once it is ready,
// before the loop; the function it returns is called after the loop.
func benchTraceRun(exe, kind string, calls int, attach func(pid int) (func() error, error)) (time.Duration, error) {
	cmd := exec.Command(exe, "bench", "trace", "target", kind, strconv.Itoa(calls))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	r := bufio.NewReader(stdout)
	var after func() error
	d, err := benchTraceDialog(r, stdin, func() error {
		if attach == nil {
			return nil
		}
		var err error
		after, err = attach(cmd.Process.Pid)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("bench trace target %s: %w (%s)", kind, err, strings.TrimSpace(stderr.String()))
	}
	if after != nil {
		if err := after(); err != nil {
			return 0, err
		}
	}
	return d, nil
}

// benchTraceProbed runs the target traced by probeopt with the probe spec
// on the function (every hit single-stepped with opts.StepOnly) and
// returns the time of its loop, how the hits ran (a trampoline path,
// "emulated", "boosted" or "stepped") and the XOL method.
func benchTraceProbed(exe, kind string, calls int, s benchTraceSite, spec string, opts probe.Options) (time.Duration, string, string, error) {
	step := opts.StepOnly
	inR, inW, err := os.Pipe()
	if err != nil {
		return 0, "", "", err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return 0, "", "", err
	}
	tr, err := probe.Spawn([]string{exe, "bench", "trace", "target", kind, strconv.Itoa(calls)},
		&probe.SpawnOptions{Options: opts, Stdin: inR, Stdout: outW})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return 0, "", "", err
	}
	defer func() {
		inW.Close()
		outR.Close()
		tr.Kill()
	}()
	if _, err := tr.Add(spec); err != nil {
		return 0, "", "", err
	}
	if err := tr.Resume(); err != nil {
		return 0, "", "", err
	}
	d, err := benchTraceDialog(bufio.NewReader(outR), inW, nil)
	if err != nil {
		return 0, "", "", fmt.Errorf("bench trace target %s (traced): %w", kind, err)
	}
	<-tr.Exited()
	st := tr.Stats()
	var hits, stepped, emulated, boosted uint64
	tramp := ""
	for _, p := range st.Probes {
		for _, site := range p.Sites {
			if site.Strategy == plan.TrampolineNop || site.Strategy == plan.TrampolineDetour {
				tramp = string(site.Strategy)
			}
			hits += site.Hits
			stepped += site.Stepped
			emulated += site.Emulated
			boosted += site.Boosted
		}
	}
	if hits != uint64(calls) {
		return 0, "", "", fmt.Errorf("probe on %s: %d hits for %d calls", s.name, hits, calls)
	}
	if step && stepped != hits {
		return 0, "", "", fmt.Errorf("probe on %s: %d of %d hits stepped", s.name, stepped, hits)
	}
	// The way most hits ran (an emulation may be left to the CPU now and
	// then: a stack the tracer had not seen yet, say).
	path := "stepped"
	switch {
	case tramp != "":
		path = tramp
	case emulated > stepped && emulated >= boosted:
		path = "emulated"
	case boosted > stepped:
		path = "boosted"
	}
	return d, path, st.XOLMethod, nil
}

// benchTraceDialog waits for the target's "ready", calls ready (when not
// nil), starts the loop and returns its time as the target measured it.
func benchTraceDialog(r *bufio.Reader, w io.Writer, ready func() error) (time.Duration, error) {
	line, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return 0, fmt.Errorf("no ready line (%q, %v)", line, err)
	}
	if ready != nil {
		if err := ready(); err != nil {
			return 0, err
		}
	}
	if _, err := io.WriteString(w, "go\n"); err != nil {
		return 0, err
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("no result (%q, %v)", line, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("result %q: %w", line, err)
	}
	return time.Duration(ns), nil
}

// runBenchTraceTarget is the target: it prints "ready", waits for a line,
// calls the function of kind calls times and prints the time it took in
// nanoseconds: the median of five rounds (the first also makes the
// remainder of the calls), scaled to the calls, so that what only the
// first calls pay (page faults on the tracer's memory, a thread claiming
// its slot) does not count.
func runBenchTraceTarget(in io.Reader, out io.Writer, kind, callsArg string) error {
	fn, ok := benchTraceFuncs[kind]
	if !ok {
		return usagef("unknown kind %q", kind)
	}
	calls, err := strconv.Atoi(callsArg)
	if err != nil || calls < 1 {
		return usagef("invalid CALLS %q", callsArg)
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for go: %w", err)
	}
	const rounds = 5
	per := calls / rounds
	if per == 0 {
		start := time.Now()
		for i := 0; i < calls; i++ {
			fn()
		}
		_, err = fmt.Fprintln(out, time.Since(start).Nanoseconds())
		return err
	}
	var ds []time.Duration
	for r := 0; r < rounds; r++ {
		n := per
		if r == 0 {
			n += calls - per*rounds
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			fn()
		}
		if r > 0 || n == per {
			ds = append(ds, time.Since(start))
		}
	}
	_, err = fmt.Fprintln(out, median(ds).Nanoseconds()*int64(calls)/int64(per))
	return err
}
