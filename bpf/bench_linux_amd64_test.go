package bpf

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchRun runs program name of the test object per iteration, the first
// argument varying as a workload's would. Besides the wall time it
// reports cpu-ns/op, the calling thread's own CPU time per run
// (getrusage RUSAGE_THREAD), which time spent descheduled on a loaded
// machine does not inflate.
func benchRun(b *testing.B, name string) {
	l := instantiateB(b)
	var regs [regsSize]byte
	f := l.funcs[name]
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r0, r1 unix.Rusage
	b.ResetTimer()
	unix.Getrusage(unix.RUSAGE_THREAD, &r0)
	for i := 0; i < b.N; i++ {
		binary.LittleEndian.PutUint64(regs[regsRDI:], uint64(i))
		f.Run(ptr(&regs), 0)
	}
	unix.Getrusage(unix.RUSAGE_THREAD, &r1)
	cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkCounter: a per-CPU array counter (map_lookup_elem and an
// increment), per run.
func BenchmarkCounter(b *testing.B) { benchRun(b, "counter") }

// BenchmarkCounterHistogram: the counter and a log2 histogram of the
// first argument in an array (two lookups, an atomic add), per run.
func BenchmarkCounterHistogram(b *testing.B) { benchRun(b, "count") }

// BenchmarkCall: the call alone, a program that returns 0 (the stub that
// switches to the code's stack, the frame and the return).
func BenchmarkCall(b *testing.B) { benchRun(b, "offset") }
