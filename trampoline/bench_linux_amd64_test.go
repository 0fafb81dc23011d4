package trampoline_test

import (
	"testing"

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
			if r.GPR[0] != 42 {
				b.Fatalf("%s(41) = %d", c.fn, r.GPR[0])
			}
			if c.h.Count && e.view.Counter(0) != uint64(b.N) {
				b.Fatalf("counter %d after %d calls", e.view.Counter(0), b.N)
			}
		})
	}
}
