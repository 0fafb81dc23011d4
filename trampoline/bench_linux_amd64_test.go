package trampoline_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/trampoline/internal/native"
)

// BenchmarkProbeHit measures one call of a tiny function (lea 1(%rdi),%rax;
// ret, with a nop5 before it in bench_target) with and without a
// trampoline, executed natively in the test process: ns/op is the cost of
// one call including the probe hit. The difference to "unprobed" is the
// cost of the hit.
//
//	go test ./trampoline -run '^$' -bench ProbeHit
func BenchmarkProbeHit(b *testing.B) {
	cases := []struct {
		name  string
		fn    string // function called
		site  string // probed function, "" for none
		h     trampoline.Handler
		flags trampoline.FlagsSave
	}{
		{name: "unprobed-nop5", fn: "bench_target"},
		{name: "unprobed-plain", fn: "bench_plain"},
		{name: "nop5/jump-only", fn: "bench_target", site: "bench_target", h: trampoline.Handler{ID: 1}},
		{name: "nop5/counter", fn: "bench_target", site: "bench_target", h: trampoline.Handler{ID: 1, Count: true}},
		{name: "nop5/counter-pushf", fn: "bench_target", site: "bench_target", h: trampoline.Handler{ID: 1, Count: true}, flags: trampoline.FlagsPushf},
		{name: "detour/counter", fn: "bench_plain", site: "bench_plain", h: trampoline.Handler{ID: 1, Count: true}},
		{name: "nop5/event", fn: "bench_target", site: "bench_target", h: trampoline.Handler{ID: 1, Event: true}},
		// An event of a Go function: the goroutine and its thread read
		// through r14 (a g and an m laid out as GoG says).
		{name: "nop5/event-go", fn: "bench_target", site: "bench_target", h: trampoline.Handler{ID: 1, Event: true,
			Go: &trampoline.GoG{M: 0x30, Goid: 0x98, Procid: 0x40}}},
		{name: "nop5/counter+return", fn: "bench_target", site: "bench_target", h: trampoline.Handler{ID: 1, Count: true,
			Return: &trampoline.ReturnHandler{Count: true, Counter: 1}}},
		{name: "nop5/return-bare", fn: "bench_target", site: "bench_target", h: trampoline.Handler{ID: 1,
			Return: &trampoline.ReturnHandler{}}},
		{name: "nop5/return", fn: "bench_target", site: "bench_target", h: trampoline.Handler{ID: 1,
			Return: &trampoline.ReturnHandler{Count: true, Counter: 1}}},
		{name: "detour/counter+return", fn: "bench_plain", site: "bench_plain", h: trampoline.Handler{ID: 1, Count: true,
			Return: &trampoline.ReturnHandler{Count: true, Counter: 1}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b, envOptions{ring: 1 << 12, flags: c.flags})
			if c.site != "" {
				e.install(e.site(c.site, nil), c.h)
			}
			stack := e.stack()
			var r native.Regs
			r.GPR[7] = 41
			m, g := make([]uint64, 64), make([]uint64, 64)
			if c.h.Go != nil {
				m[0x40/8], g[0x98/8] = 7, 9
				g[0x30/8] = uint64(uintptr(unsafe.Pointer(&m[0])))
				r.GPR[14] = uint64(uintptr(unsafe.Pointer(&g[0])))
			}
			fn := uintptr(e.sym(c.fn))
			// The ring fills up after 4096 events; later events are
			// dropped (and counted), which costs the same reservation
			// attempt. Drain it between chunks so that events are written.
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(b.N-done, 1<<12)
				native.Loop(fn, &r, stack, uint64(n))
				done += n
				if c.h.Event {
					b.StopTimer()
					var evs [1 << 12]trampoline.Event
					e.view.Read(evs[:])
					b.StartTimer()
				}
			}
			b.StopTimer()
			runtime.KeepAlive(m)
			runtime.KeepAlive(g)
			if r.GPR[0] != 42 {
				b.Fatalf("%s(41) = %d", c.fn, r.GPR[0])
			}
			if c.h.Count && e.view.Counter(0) != uint64(b.N) {
				b.Fatalf("counter %d after %d calls", e.view.Counter(0), b.N)
			}
		})
	}
}

// BenchmarkThreadHit measures the hit path alone, executed natively in
// the test process by 1 and 2 threads at once, each calling the probed
// bench_target b.N times: shared (one lock inc counter, one ring whose
// head every thread moves with a compare-and-swap) against per-thread
// (each thread's stripe and ring, see Data.SetThreads). ns/hit is the
// time of one call including the hit, per thread (the mean of the
// threads' own times in native code, the ring reads between chunks left
// out); cpu-ns/hit the same in the threads' CPU time, which other work on
// the machine does not inflate; Mhit/s the hits of all threads per second
// of the slowest. The return rows probe bench_target's entry and return:
// a call is two hits.
//
//	go test ./trampoline -run '^$' -bench ThreadHit
func BenchmarkThreadHit(b *testing.B) {
	for _, mode := range []string{"shared", "thread"} {
		for _, kind := range []string{"counter", "event", "return"} {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%s/threads=%d", mode, kind, threads), func(b *testing.B) {
					benchThreadHit(b, mode == "thread", kind, threads)
				})
			}
		}
	}
}

func benchThreadHit(b *testing.B, perThread bool, kind string, threads int) {
	event := kind == "event"
	const chunk = 1 << 12
	o := envOptions{ring: 1 << 16, tp: trampoline.ThreadTCB}
	if perThread {
		o.stripes, o.stripeCounters, o.threadRing = 16, 8, 1<<13
	}
	e := newEnv(b, o)
	h := trampoline.Handler{ID: 1, Count: true, Counter: 0, Event: event}
	if kind == "return" {
		h.Return = &trampoline.ReturnHandler{Count: true, Counter: 1}
	}
	e.install(e.site("bench_target", nil), h)
	prev := runtime.GOMAXPROCS(max(threads, prev0()))
	defer runtime.GOMAXPROCS(prev)
	elapsed := make([]time.Duration, threads)
	cpu := make([]int64, threads)
	var mu sync.Mutex // one reader of the shared ring at a time
	var wg, ready sync.WaitGroup
	ready.Add(threads)
	start := make(chan struct{})
	b.ResetTimer()
	for i := 0; i < threads; i++ {
		stack := e.stack()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			withTCB(b, func(tp uint64) {
				var r native.Regs
				r.GPR[7] = 41
				var evs [chunk]trampoline.Event
				ready.Done()
				<-start
				for done := 0; done < b.N; {
					n := min(b.N-done, chunk)
					t0, c0 := time.Now(), threadCPU()
					native.Loop(uintptr(e.sym("bench_target")), &r, stack, uint64(n))
					elapsed[i] += time.Since(t0)
					cpu[i] += threadCPU() - c0
					done += n
					if !event {
						continue
					}
					if perThread {
						for _, s := range e.view.Stripes() {
							if s.Key == tp {
								e.view.ReadThread(s.Slot, evs[:])
							}
						}
					} else {
						mu.Lock()
						for e.view.Read(evs[:]) > 0 {
						}
						mu.Unlock()
					}
				}
			})
		}(i)
	}
	ready.Wait()
	close(start)
	wg.Wait()
	b.StopTimer()
	if got := e.view.Counter(0); got != uint64(threads*b.N) {
		b.Fatalf("counter %d after %d calls", got, threads*b.N)
	}
	if got := e.view.Counter(1); h.Return != nil && got != uint64(threads*b.N) {
		b.Fatalf("returns %d after %d calls", got, threads*b.N)
	}
	var sum, slowest time.Duration
	for _, d := range elapsed {
		sum += d
		slowest = max(slowest, d)
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(threads*b.N), "ns/hit")
	var cpuSum int64
	for _, c := range cpu {
		cpuSum += c
	}
	b.ReportMetric(float64(cpuSum)/float64(threads*b.N), "cpu-ns/hit")
	if slowest > 0 {
		b.ReportMetric(float64(threads*b.N)/slowest.Seconds()/1e6, "Mhit/s")
	}
	if event {
		b.ReportMetric(float64(e.view.Dropped()), "dropped")
	}
}

// threadCPU returns the CPU time of the calling thread in nanoseconds
// (other work on the machine does not inflate it).
func threadCPU() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// prev0 is GOMAXPROCS as it is.
func prev0() int { return runtime.GOMAXPROCS(0) }
