//go:build linux && amd64

package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/proc"
)

// The generated functions of the target, 16 bytes apart. Go's internal
// calling convention passes the argument and the result in RAX:
//
//	48 83 c0 KK   add  $K,%rax        \ the 5-byte patched range:
//	90            nop                 / two instructions
//	c3            ret
//
// The patch puts lea M(%rax),%rax (48 8d 40 MM) before the nop, so each
// function returns x+K or x+M with K = i & 63 and M = 64 + K.
func benchOld(i int) []byte { return []byte{0x48, 0x83, 0xc0, byte(i & 63), 0x90} }
func benchNew(i int) []byte { return []byte{0x48, 0x8d, 0x40, byte(64 + i&63), 0x90} }

// runPatchTarget is the target process: it maps the functions read-write,
// fills them, makes them read-execute (never both writable and
// executable), and calls them from o.threads goroutines, each locked to
// its own OS thread, forever. It prints the address of the functions and
// of its wrong-result counter, then waits to be killed.
func runPatchTarget(w io.Writer, o patchTargetOptions) error {
	sites := o.sites
	// One P for every calling thread and one for the main goroutine: the
	// callers never reach a preemption point (the tracer runs the target
	// with asyncpreemptoff), so with fewer Ps some would never run, and
	// the main goroutine, once its P was handed off during a system call,
	// would never print the line the tracer waits for.
	runtime.GOMAXPROCS(o.threads + 1)
	mem, err := unix.Mmap(-1, 0, sites*16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("map code: %w", err)
	}
	for i := 0; i < sites; i++ {
		fn := mem[16*i : 16*i+16]
		for j := range fn {
			fn[j] = 0xcc
		}
		copy(fn, benchOld(i))
		fn[5] = 0xc3
	}
	if err := unix.Mprotect(mem, unix.PROT_READ|unix.PROT_EXEC); err != nil {
		return fmt.Errorf("protect code: %w", err)
	}
	base := uintptr(unsafe.Pointer(&mem[0]))
	fns := make([]func(uint64) uint64, sites)
	for i := range fns {
		// A func value points to a word holding the code address.
		code := new(uintptr)
		*code = base + 16*uintptr(i)
		fns[i] = *(*func(uint64) uint64)(unsafe.Pointer(&code))
	}
	bad := new(atomic.Int64)
	for t := 0; t < o.threads; t++ {
		go func() {
			runtime.LockOSThread()
			x := uint64(t * 1000)
			for {
				for i, f := range fns {
					d := f(x) - x
					if k := uint64(i & 63); d != k && d != 64+k {
						bad.Add(1)
					}
					x = (x + 7) & 0xffff
				}
			}
		}()
	}
	if _, err := fmt.Fprintf(w, "target base=%#x n=%d bad=%#x stall=0x0\n", base, sites, uintptr(unsafe.Pointer(bad))); err != nil {
		return err
	}
	select {}
}

// patchTarget is a running "bench patch-target", or the bounded-pause
// workload (startPauseTarget).
type patchTarget struct {
	p                *proc.Process
	base, bad, stall uint64 // addresses the target printed (stall 0: none)
	sites            int
	old, new         func(i int) []byte // the bytes of function i's patch
}

// startPatchTarget spawns the target with threads calling sites
// functions, and returns it running once every thread has started. The
// caller kills it.
func startPatchTarget(threads, sites int) (*patchTarget, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// asyncpreemptoff: the Go scheduler of the target would otherwise
	// signal its threads every 10 ms, and each signal is a ptrace stop.
	env := append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
	args := []string{exe, "bench", "patch-target", "--threads", strconv.Itoa(threads), "--sites", strconv.Itoa(sites)}
	return spawnPatchTarget(args, env, proc.Options{}, sites, benchOld, benchNew)
}

// spawnPatchTarget spawns a target that prints its addresses (see
// runPatchTarget), traced with the stop priorities of stop (StopNice,
// StopFIFO), and returns it running once every thread has started.
func spawnPatchTarget(args, env []string, stop proc.Options, sites int, old, new func(int) []byte) (*patchTarget, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	p, err := proc.Spawn(args, &proc.SpawnOptions{Stdout: w, Env: env, Options: proc.Options{StopNice: stop.StopNice, StopFIFO: stop.StopFIFO}})
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("start target: %w", err)
	}
	t := &patchTarget{p: p, sites: sites, old: old, new: new}
	fail := func(err error) (*patchTarget, error) {
		_ = p.Kill()
		return nil, err
	}
	if err := p.Resume(); err != nil {
		return fail(err)
	}
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return fail(err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("target's first line: %w", err))
	}
	line = strings.TrimSpace(line)
	var n int
	if _, err := fmt.Sscanf(line, "target base=%v n=%d bad=%v stall=%v", &t.base, &n, &t.bad, &t.stall); err != nil || n != sites {
		return fail(fmt.Errorf("target said %q", line))
	}
	time.Sleep(200 * time.Millisecond) // let every thread start calling
	return t, nil
}

// patches returns the target's patch of every function.
func (t *patchTarget) patches() []batchpatch.Patch {
	all := make([]batchpatch.Patch, t.sites)
	for i := range all {
		all[i] = batchpatch.Patch{Addr: t.base + 16*uint64(i), Old: t.old(i), New: t.new(i)}
	}
	return all
}

// read64 reads a counter of the target.
func (t *patchTarget) read64(addr uint64) (int64, error) {
	var b [8]byte
	if err := t.p.ReadMemory(addr, b[:]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[:])), nil
}

// benchPatch runs the target and times the passes.
func benchPatch(stderr io.Writer, o *benchPatchOptions) (*benchPatchReport, error) {
	t, err := startPatchTarget(o.threads, benchSites)
	if err != nil {
		return nil, fmt.Errorf("bench patch: %w", err)
	}
	defer t.p.Kill()
	p, all := t.p, t.patches()
	prog := isTerminal(stderr)
	rep := &benchPatchReport{Threads: o.threads}
	for k, size := range o.sizes {
		if prog {
			fmt.Fprintf(stderr, "\rbench patch: %d patches (%d/%d)", size, k+1, len(o.sizes))
		}
		row, err := benchPatchSize(p, all, size, o.repeat)
		if err != nil {
			return nil, fmt.Errorf("bench patch: %d patches: %w", size, err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	if prog {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if rep.Bad, err = t.read64(t.bad); err != nil {
		return nil, fmt.Errorf("bench patch: read the target's counter: %w", err)
	}
	return rep, nil
}

// applyAll applies ps, passing again for patches a thread blocked. It
// returns the pause and the total time summed over every pass the batch
// took, and the steps: a batch that needed a second pass froze the
// threads twice, and the per-patch figures it is compared with are sums
// over passes too. Each pass's pause runs from every thread stopped to
// every thread resumed, the single steps of that pass included.
func applyAll(p *proc.Process, ps []batchpatch.Patch) (pause, total time.Duration, steps int, err error) {
	for pass := 0; len(ps) > 0; pass++ {
		if pass == 100 {
			return 0, 0, 0, fmt.Errorf("%d patches still blocked after 100 passes", len(ps))
		}
		t0 := time.Now()
		res, err := batchpatch.Apply(p, ps, nil)
		total += time.Since(t0)
		if err != nil {
			return 0, 0, 0, err
		}
		pause += res.Stop.Pause
		steps += res.Steps
		var left []batchpatch.Patch
		for _, b := range res.Refused {
			for _, q := range ps {
				if q.Addr == b.Addr {
					left = append(left, q)
				}
			}
		}
		ps = left
	}
	return pause, total, steps, nil
}

// benchPatchSize times size patches (every 4096/size-th function).
func benchPatchSize(p *proc.Process, all []batchpatch.Patch, size, repeat int) (benchPatchRow, error) {
	row := benchPatchRow{Patches: size, Repeats: repeat}
	stride := benchSites / size
	ps := make([]batchpatch.Patch, 0, size)
	for i := 0; i < benchSites; i += stride {
		ps = append(ps, all[i])
	}
	inv := make([]batchpatch.Patch, len(ps))
	for i, q := range ps {
		inv[i] = q.Inverse()
	}
	var pauses, totals []time.Duration
	for r := 0; r < repeat; r++ {
		for _, batch := range [][]batchpatch.Patch{ps, inv} {
			pause, total, steps, err := applyAll(p, batch)
			if err != nil {
				return row, err
			}
			pauses, totals = append(pauses, pause), append(totals, total)
			row.Steps += steps
		}
	}
	row.BatchPause, row.BatchTotal = median(pauses), median(totals)
	// One stop per patch: fewer repeats as the passes get long.
	reps := max(1, min(repeat, 1024/size))
	pauses, totals = pauses[:0], totals[:0]
	for r := 0; r < reps; r++ {
		var sumPause, sumTotal time.Duration
		for _, q := range ps {
			pause, total, steps, err := applyAll(p, []batchpatch.Patch{q})
			if err != nil {
				return row, err
			}
			sumPause += pause
			sumTotal += total
			row.Steps += steps
		}
		pauses, totals = append(pauses, sumPause), append(totals, sumTotal)
		if _, _, _, err := applyAll(p, inv); err != nil {
			return row, err
		}
	}
	row.PerPatchPause, row.PerPatchTotal, row.Stops = median(pauses), median(totals), size
	if row.BatchPause > 0 {
		row.PauseRatio = float64(row.PerPatchPause) / float64(row.BatchPause)
	}
	if row.BatchTotal > 0 {
		row.TotalRatio = float64(row.PerPatchTotal) / float64(row.BatchTotal)
	}
	return row, nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
