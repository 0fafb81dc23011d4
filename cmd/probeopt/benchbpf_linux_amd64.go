//go:build linux && amd64

package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
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
					r, err := bpfBenchRun(exe, obj, entry, mode, n, calls)
					if err != nil {
						return nil, fmt.Errorf("%s, %d threads, %s: %w", entry, n, mode, err)
					}
					if mode != "untraced" {
						if err := r.check(n, calls); err != nil {
							return nil, fmt.Errorf("%s, %d threads, %s: %w", entry, n, mode, err)
						}
					}
					cpus = append(cpus, r.cpu)
					row.Hits, row.Strategy = r.hits, r.strategy
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

// bpfBenchResult is what one run of the workload gave.
type bpfBenchResult struct {
	cpu      float64    // mean CPU ns of the threads' loops
	hits     uint64     // the program's counter, its stripes summed
	hist     [64]uint64 // the program's histogram, its stripes summed
	strategy string     // probeopt's strategy at the site
}

// check compares the program's maps with the calls the workload made:
// threads x calls hits, and each thread's arguments 0..calls-1 in the
// log2 slots they fall in.
func (r *bpfBenchResult) check(threads, calls int) error {
	if r.hits != uint64(threads*calls) {
		return fmt.Errorf("the program counted %d hits, not %d", r.hits, threads*calls)
	}
	var want [64]uint64
	for v := uint64(0); v < uint64(calls); v++ {
		want[max(bits.Len64(v), 1)-1] += uint64(threads)
	}
	if r.hist != want {
		return fmt.Errorf("the program's histogram is %v, not %v", r.hist, want)
	}
	return nil
}

// readMaps reads the program's counter and histogram through lookup,
// which returns a key's per-CPU values.
func (r *bpfBenchResult) readMaps(lookup func(m string, key uint32) ([][]byte, error)) error {
	vals, err := lookup("hits", 0)
	if err != nil {
		return err
	}
	r.hits = sumCounts(vals)
	for k := range r.hist {
		if vals, err = lookup("hist", uint32(k)); err != nil {
			return err
		}
		r.hist[k] = sumCounts(vals)
	}
	return nil
}

// bpfBenchRun runs the workload once in mode.
func bpfBenchRun(exe, obj, entry, mode string, threads, calls int) (*bpfBenchResult, error) {
	args := []string{entry, strconv.Itoa(threads), strconv.Itoa(calls)}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer inR.Close()
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer outR.Close()
	p := &bpfBenchProc{in: inW, out: bufio.NewReader(outR)}
	if mode == "probeopt" {
		tr, err := probe.Spawn(append([]string{exe}, args...), &probe.SpawnOptions{Stdin: inR, Stdout: outW})
		outW.Close()
		if err != nil {
			return nil, err
		}
		defer tr.Kill()
		if err := tr.Resume(); err != nil {
			return nil, err
		}
		if err := p.ready(); err != nil {
			return nil, err
		}
		o, err := bpf.Open(obj)
		if err != nil {
			return nil, err
		}
		b, err := tr.LoadBPF(o, nil)
		if err != nil {
			return nil, err
		}
		if _, err := b.Attach("count", entry, nil); err != nil {
			return nil, err
		}
		r := &bpfBenchResult{}
		for _, pr := range tr.Stats().Probes {
			for _, s := range pr.Sites {
				r.strategy = string(s.Strategy)
			}
		}
		if r.cpu, err = p.finish(); err != nil {
			return nil, err
		}
		if es, err := tr.Wait(); err != nil || es.Code != 0 || es.Signal != 0 {
			return nil, fmt.Errorf("workload: %+v %v", es, err)
		}
		err = r.readMaps(func(m string, key uint32) ([][]byte, error) {
			return b.Map(m).LookupPerCPU(binary.LittleEndian.AppendUint32(nil, key))
		})
		return r, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout = inR, outW
	var coll *ebpf.Collection
	if mode == "kernel" {
		spec, err := ebpf.LoadCollectionSpec(obj)
		if err != nil {
			return nil, err
		}
		if coll, err = ebpf.NewCollection(spec); err != nil {
			return nil, err
		}
		defer coll.Close()
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	outW.Close()
	defer cmd.Process.Kill()
	if err := p.ready(); err != nil {
		return nil, err
	}
	if coll != nil {
		ex, err := link.OpenExecutable(exe)
		if err != nil {
			return nil, err
		}
		l, err := ex.Uprobe(entry, coll.Programs["count"], &link.UprobeOptions{PID: cmd.Process.Pid})
		if err != nil {
			return nil, err
		}
		defer l.Close()
	}
	r := &bpfBenchResult{}
	if r.cpu, err = p.finish(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, fmt.Errorf("workload: %w", err)
		}
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("the workload did not exit")
	}
	if coll == nil {
		return r, nil
	}
	err = r.readMaps(func(m string, key uint32) ([][]byte, error) {
		var vals [][]byte
		err := coll.Maps[m].Lookup(key, &vals)
		return vals, err
	})
	return r, err
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
