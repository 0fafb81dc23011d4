package bpf

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/bpf/jit"
	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
)

// benchRun runs program name of the test object per iteration, the first
// argument varying as a workload's would. Besides the wall time it
// reports cpu-ns/op, the calling thread's own CPU time per run
// (getrusage RUSAGE_THREAD), which time spent descheduled on a loaded
// machine does not inflate.
func benchRun(b *testing.B, name string) {
	l := loadObject(b, "probes", 1<<20)
	var regs [regsSize]byte
	f := l.funcs[name]
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	start := threadCPU()
	for i := 0; i < b.N; i++ {
		binary.LittleEndian.PutUint64(regs[regsRDI:], uint64(i))
		f.Run(ptr(&regs), 0)
	}
	b.ReportMetric(float64((threadCPU()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// threadCPU is the calling thread's CPU time (getrusage RUSAGE_THREAD).
func threadCPU() time.Duration {
	var r unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
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

// benchUSDT runs usdt.bpf.c's program on_usdt per iteration: 12 calls of
// bpf_usdt_arg on the spec of a note of eight register arguments (spec
// ID 0, the cookie), bpf_usdt_arg_cnt, bpf_usdt_cookie and a hash map
// update. With onStack the context lies on the code's stack as a probe
// slot puts it (the registers read by a plain copy); else elsewhere (each
// read a system call).
func benchUSDT(b *testing.B, onStack bool) {
	l := loadObject(b, "usdt", 16<<20)
	in := l.in
	note := &elfscan.USDTProbe{Provider: "usdtwork", Name: "regs", Args: "-1@%al 1@%r8b -2@%dx 2@%r9w -4@%ecx 4@%r10d -8@%rsi 8@%rdi"}
	note.Arguments, note.ArgsErr = elfscan.ParseUSDTArgs(decode.X86_64, note.Args)
	spec, err := NewUSDTSpec(note, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := in.Maps[USDTSpecsMap].Update([]byte{0, 0, 0, 0}, spec.Bytes(), maps.UpdateAny); err != nil {
		b.Fatal(err)
	}
	f := l.funcs["on_usdt"]
	var ctx [jit.CtxFlags + 8]byte
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	start := threadCPU()
	for i := 0; i < b.N; i++ {
		binary.LittleEndian.PutUint64(ctx[regsRDI:], uint64(i%8))
		if onStack {
			f.RunStackCtx(ctx[:], 0)
		} else {
			f.Run(unsafe.Pointer(&ctx[0]), 0)
		}
	}
	b.ReportMetric(float64((threadCPU()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.StopTimer()
	n, err := in.Maps["hits"].Entries()
	if want := min(b.N, 8); err != nil || len(n) != want {
		b.Fatalf("hits: %d keys, %v; want %d", len(n), err, want)
	}
}

// BenchmarkUSDTArgs: a usdt.bpf.h program's run with its context on its
// stack, as in a probe slot.
func BenchmarkUSDTArgs(b *testing.B) { benchUSDT(b, true) }

// BenchmarkUSDTArgsSyscall: the same with the context elsewhere, every
// register read through process_vm_readv.
func BenchmarkUSDTArgsSyscall(b *testing.B) { benchUSDT(b, false) }
