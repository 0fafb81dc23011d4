package bpf

import (
	"encoding/binary"
	"testing"
)

// benchRun runs program name of the test object per iteration, the first
// argument varying as a workload's would.
func benchRun(b *testing.B, name string) {
	l := instantiateB(b)
	var regs [regsSize]byte
	f := l.funcs[name]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		binary.LittleEndian.PutUint64(regs[regsRDI:], uint64(i))
		f.Run(ptr(&regs), 0)
	}
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
