//go:build linux && amd64

package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/probeopt/probeopt/bpf"
	"github.com/probeopt/probeopt/internal/hostcpu"
	"github.com/probeopt/probeopt/probe"
)

// benchBPF runs every measurement of "bench bpf".
func benchBPF(progress io.Writer, o *benchBPFOptions) (*benchBPFReport, error) {
	dir, err := os.MkdirTemp("", "probeopt-bench-bpf-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	exe, obj, err := buildBPFBench(dir)
	if err != nil {
		return nil, err
	}
	term := isTerminal(progress)
	rep := &benchBPFReport{CPU: hostcpu.Host().ModelName, Runs: o.runs}
	for _, entry := range []string{"emulated", "stepped"} {
		for _, n := range []int{1, 2} {
			var untraced float64
			for _, mode := range []string{"untraced", "probeopt", "kernel"} {
				if term {
					fmt.Fprintf(progress, "\rbench bpf: %s, %d threads, %-8s ...", entry, n, mode)
				}
				calls := o.calls
				if mode == "kernel" {
					calls = o.kernelCalls
				}
				var cpus []float64
				row := benchBPFRow{Entry: entry, Threads: n, Mode: mode, Calls: calls}
				for range o.runs {
					cpu, hits, strategy, err := bpfBenchRun(exe, obj, entry, mode, n, calls)
					if err != nil {
						return nil, fmt.Errorf("%s, %d threads, %s: %w", entry, n, mode, err)
					}
					if mode != "untraced" && hits != uint64(n*calls) {
						return nil, fmt.Errorf("%s, %d threads, %s: the program counted %d hits, not %d", entry, n, mode, hits, n*calls)
					}
					cpus = append(cpus, cpu)
					row.Hits, row.Strategy = hits, strategy
				}
				sort.Float64s(cpus)
				row.CPUNs = cpus[len(cpus)/2]
				row.NsPerCall = row.CPUNs / float64(calls)
				if mode == "untraced" {
					untraced = row.NsPerCall
				} else {
					row.NsPerHit = row.NsPerCall - untraced
				}
				rep.Rows = append(rep.Rows, row)
			}
		}
	}
	if term {
		fmt.Fprint(progress, "\r                                                  \r")
	}
	return rep, nil
}

// buildBPFBench compiles the embedded workload (gcc) and program (clang)
// into dir.
func buildBPFBench(dir string) (exe, obj string, err error) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		return "", "", fmt.Errorf("bench bpf compiles its workload with gcc: %w", err)
	}
	clang, err := exec.LookPath("clang")
	if err != nil {
		return "", "", fmt.Errorf("bench bpf compiles its program with clang: %w", err)
	}
	src, exe := filepath.Join(dir, "bpfbench.c"), filepath.Join(dir, "bpfbench")
	bsrc, obj := filepath.Join(dir, "bpfbench.bpf.c"), filepath.Join(dir, "bpfbench.bpf.o")
	if err := os.WriteFile(src, bpfBenchSource, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(bsrc, bpfBenchProgram, 0o644); err != nil {
		return "", "", err
	}
	if out, err := exec.Command(cc, "-O2", "-g", "-pthread", "-Wall", "-o", exe, src).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("gcc: %w\n%s", err, out)
	}
	if out, err := exec.Command(clang, "-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86", "-I/usr/include/x86_64-linux-gnu", "-Wall", "-c", "-o", obj, bsrc).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("clang: %w\n%s", err, out)
	}
	return exe, obj, nil
}

// bpfBenchProc is the workload started, waiting for its line.
type bpfBenchProc struct {
	in  *os.File
	out *bufio.Reader
}

func (p *bpfBenchProc) ready() error {
	line, err := p.out.ReadString('\n')
	if err != nil || line != "ready\n" {
		return fmt.Errorf("the workload said %q: %v", line, err)
	}
	return nil
}

// finish starts the loop and reads the mean CPU time of the threads.
func (p *bpfBenchProc) finish() (float64, error) {
	if _, err := p.in.WriteString("go\n"); err != nil {
		return 0, err
	}
	p.in.Close()
	var sum float64
	n := 0
	for {
		line, err := p.out.ReadString('\n')
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cpu_ns "); ok {
			x, perr := strconv.ParseFloat(v, 64)
			if perr != nil {
				return 0, perr
			}
			sum += x
			n++
		}
		if err != nil {
			break
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("the workload printed no CPU time")
	}
	return sum / float64(n), nil
}

// bpfBenchRun runs the workload once in mode and returns the mean CPU
// time of its threads' loops, the program's count and probeopt's
// strategy at the site.
func bpfBenchRun(exe, obj, entry, mode string, threads, calls int) (float64, uint64, string, error) {
	args := []string{entry, strconv.Itoa(threads), strconv.Itoa(calls)}
	inR, inW, err := os.Pipe()
	if err != nil {
		return 0, 0, "", err
	}
	defer inR.Close()
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return 0, 0, "", err
	}
	defer outR.Close()
	p := &bpfBenchProc{in: inW, out: bufio.NewReader(outR)}
	if mode == "probeopt" {
		tr, err := probe.Spawn(append([]string{exe}, args...), &probe.SpawnOptions{Stdin: inR, Stdout: outW})
		outW.Close()
		if err != nil {
			return 0, 0, "", err
		}
		defer tr.Kill()
		if err := tr.Resume(); err != nil {
			return 0, 0, "", err
		}
		if err := p.ready(); err != nil {
			return 0, 0, "", err
		}
		o, err := bpf.Open(obj)
		if err != nil {
			return 0, 0, "", err
		}
		b, err := tr.LoadBPF(o, nil)
		if err != nil {
			return 0, 0, "", err
		}
		if _, err := b.Attach("count", entry, nil); err != nil {
			return 0, 0, "", err
		}
		strategy := ""
		for _, pr := range tr.Stats().Probes {
			for _, s := range pr.Sites {
				strategy = string(s.Strategy)
			}
		}
		cpu, err := p.finish()
		if err != nil {
			return 0, 0, "", err
		}
		if es, err := tr.Wait(); err != nil || es.Code != 0 || es.Signal != 0 {
			return 0, 0, "", fmt.Errorf("workload: %+v %v", es, err)
		}
		vals, err := b.Map("hits").LookupPerCPU([]byte{0, 0, 0, 0})
		return cpu, sumCounts(vals), strategy, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout = inR, outW
	var coll *ebpf.Collection
	if mode == "kernel" {
		spec, err := ebpf.LoadCollectionSpec(obj)
		if err != nil {
			return 0, 0, "", err
		}
		if coll, err = ebpf.NewCollection(spec); err != nil {
			return 0, 0, "", err
		}
		defer coll.Close()
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, "", err
	}
	outW.Close()
	defer cmd.Process.Kill()
	if err := p.ready(); err != nil {
		return 0, 0, "", err
	}
	if coll != nil {
		ex, err := link.OpenExecutable(exe)
		if err != nil {
			return 0, 0, "", err
		}
		l, err := ex.Uprobe(entry, coll.Programs["count"], &link.UprobeOptions{PID: cmd.Process.Pid})
		if err != nil {
			return 0, 0, "", err
		}
		defer l.Close()
	}
	cpu, err := p.finish()
	if err != nil {
		return 0, 0, "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return 0, 0, "", fmt.Errorf("workload: %w", err)
		}
	case <-time.After(time.Minute):
		return 0, 0, "", fmt.Errorf("the workload did not exit")
	}
	if coll == nil {
		return cpu, 0, "", nil
	}
	var vals [][]byte
	if err := coll.Maps["hits"].Lookup(uint32(0), &vals); err != nil {
		return 0, 0, "", err
	}
	return cpu, sumCounts(vals), "", nil
}

// sumCounts adds per-CPU 64-bit counters.
func sumCounts(vals [][]byte) uint64 {
	var n uint64
	for _, v := range vals {
		if len(v) >= 8 {
			n += binary.LittleEndian.Uint64(v)
		}
	}
	return n
}
