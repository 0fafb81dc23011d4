package trampoline_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/trampoline/internal/native"
)

// withTCB runs fn on a locked OS thread whose %fs:0 holds the thread
// pointer itself, as the x86-64 TLS ABI of the C libraries makes it: a
// Go thread without cgo has 0 there (the word after the runtime's g
// pointer, unused on linux/amd64), so the slot code reading the thread
// pointer with ThreadTCB would see no thread. The word is put back after.
func withTCB(t testing.TB, fn func(tp uint64)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var fs uint64
	const archGetFS = 0x1003
	if _, _, errno := unix.Syscall(unix.SYS_ARCH_PRCTL, archGetFS, uintptr(unsafe.Pointer(&fs)), 0); errno != 0 {
		t.Errorf("arch_prctl(ARCH_GET_FS): %v", errno)
		return
	}
	p := (*uint64)(unsafe.Add(unsafe.Pointer(nil), fs))
	old := *p
	if old != 0 && old != fs {
		t.Errorf("%%fs:0 holds %#x, neither 0 nor the thread pointer %#x", old, fs)
		return
	}
	*p = fs
	defer func() { *p = old }()
	fn(fs)
}

// threadEnv returns an env whose slots read the thread pointer the way
// withTCB sets it up, with the per-thread data plane.
func threadEnv(t testing.TB, stripes, ring int) *env {
	return newEnv(t, envOptions{ring: 1 << 10, tp: trampoline.ThreadTCB, stripes: stripes, stripeCounters: 8, threadRing: ring})
}

// TestNativeThreadStripes: N threads hit one site; every thread counts
// in its own stripe (no other thread writes it), the totals are exact,
// every event is read from its thread's ring or counted dropped, and a
// retired stripe's counts move to the shared words and its slot is
// claimed again.
func TestNativeThreadStripes(t *testing.T) {
	for _, c := range []stripeCase{
		{"counter", 8, false, 0, 0},
		{"counter+event", 8, true, 0, 0},
		// One stripe for four threads: three count in the shared word
		// and record in the shared ring.
		{"fallback", 1, true, 0, 0},
		// Rings smaller than a stripe (2 records, 128 bytes, against
		// 1 KiB): each thread's ring is found by its own size, not the
		// stripe's.
		{"small-rings", 8, true, 32, 2},
	} {
		t.Run(c.name, func(t *testing.T) { testThreadStripes(t, c) })
	}
}

// stripeCase is a case of TestNativeThreadStripes: the number of stripes
// for its 4 threads, whether the site records events, and the counters
// of a stripe and the records of a thread's ring (0: threadEnv's).
type stripeCase struct {
	name     string
	stripes  int
	event    bool
	counters int
	ring     int
}

// Each of the stripeThreads threads of TestNativeThreadStripes makes
// stripeHits hits.
const stripeThreads, stripeHits = 4, 100_000

func testThreadStripes(t *testing.T, c stripeCase) {
	const threads, per = stripeThreads, stripeHits
	e := threadEnv(t, c.stripes, 1<<10)
	if c.counters != 0 {
		e = newEnv(t, envOptions{counters: c.counters, ring: 1 << 10, tp: trampoline.ThreadTCB, stripes: c.stripes, stripeCounters: c.counters, threadRing: c.ring})
	}
	h := trampoline.Handler{ID: 9, Count: true, Counter: 5, Event: c.event}
	e.install(e.site("bench_target", nil), h)
	prev := runtime.GOMAXPROCS(threads + 1)
	defer runtime.GOMAXPROCS(prev)
	d := startStripeDrain(t, e)
	tps := hitFromThreads(t, e)
	events, wrong := d.finish()
	if got := e.view.Counter(5); got != threads*per {
		t.Fatalf("counter %d, want %d", got, threads*per)
	}
	st := e.view.Stripes()
	want := min(c.stripes, threads)
	if len(st) != want {
		t.Fatalf("%d stripes claimed by %d threads with %d slots, want %d", len(st), threads, c.stripes, want)
	}
	for _, s := range st {
		if _, ok := tps.Load(s.Key); !ok {
			t.Errorf("stripe %d held by %#x, not a thread pointer of the test's threads", s.Slot, s.Key)
		}
		// Each thread ran per hits; with a stripe, all of them counted
		// there.
		if n := e.view.ThreadCounter(s.Slot, 5); n != per {
			t.Errorf("stripe %d counted %d, want %d", s.Slot, n, per)
		}
	}
	if c.event {
		checkStripeEvents(t, e, c, events, wrong)
	}
	retireStripes(t, e, st)
}

// stripeDrain reads the events of every stripe's ring and of the shared
// ring while the threads hit, and checks their fields.
type stripeDrain struct {
	stop, drained chan struct{}
	events, wrong uint64
}

// startStripeDrain starts reading e's events.
func startStripeDrain(t *testing.T, e *env) *stripeDrain {
	d := &stripeDrain{stop: make(chan struct{}), drained: make(chan struct{})}
	go func() {
		defer close(d.drained)
		var buf [256]trampoline.Event
		for {
			// Whether the producers were done before this pass (which
			// then reads everything).
			stopped := false
			select {
			case <-d.stop:
				stopped = true
			default:
			}
			n := 0
			for _, s := range e.view.Stripes() {
				k := e.view.ReadThread(s.Slot, buf[:])
				for _, ev := range buf[:k] {
					if ev.Thread != s.Key || ev.Probe != 9 || ev.TSC == 0 || ev.Kind != trampoline.EventEntry || ev.Args[0] != 41 {
						if d.wrong == 0 {
							t.Logf("slot %d key %#x: %+v", s.Slot, s.Key, ev)
						}
						d.wrong++
					}
				}
				n += k
			}
			n += e.view.Read(buf[:])
			d.events += uint64(n)
			if n == 0 {
				if stopped {
					return
				}
				runtime.Gosched()
			}
		}
	}()
	return d
}

// finish reads what is left once the threads are done, and returns the
// events read and those with wrong fields.
func (d *stripeDrain) finish() (events, wrong uint64) {
	close(d.stop)
	<-d.drained
	return d.events, d.wrong
}

// hitFromThreads makes stripeHits calls of bench_target(41) from each of
// stripeThreads threads (with thread pointers of their own), and returns
// the set of their thread pointers.
func hitFromThreads(t *testing.T, e *env) *sync.Map {
	t.Helper()
	const chunk = 10_000
	var tps sync.Map // thread pointer -> true
	// Every thread keeps its OS thread until all are done, so that no two
	// of them share one (and its thread pointer).
	var wg, done sync.WaitGroup
	done.Add(stripeThreads)
	for i := 0; i < stripeThreads; i++ {
		stack := e.stack()
		wg.Add(1)
		go func() {
			defer wg.Done()
			withTCB(t, func(tp uint64) {
				defer done.Wait()
				defer done.Done()
				tps.Store(tp, true)
				e.hitBenchTarget(t, stack, stripeHits, chunk)
			})
		}()
	}
	wg.Wait()
	return &tps
}

// checkStripeEvents checks the events of a stripe case: every event read
// has the right fields, and each hit gave an event read or dropped.
func checkStripeEvents(t *testing.T, e *env, c stripeCase, events, wrong uint64) {
	t.Helper()
	const total = stripeThreads * stripeHits
	if wrong != 0 {
		t.Errorf("%d events with wrong fields", wrong)
	}
	if got := events + e.view.Dropped(); got != total {
		for _, s := range e.view.Stripes() {
			t.Logf("stripe %d: pending %d dropped %d counted %d", s.Slot, e.view.ThreadPending(s.Slot), e.view.ThreadDropped(s.Slot), e.view.ThreadCounter(s.Slot, 5))
		}
		t.Logf("shared pending %d, by counter %d", e.view.Pending(), e.view.DroppedBy(5))
		t.Fatalf("events %d + dropped %d = %d, want %d", events, e.view.Dropped(), got, total)
	}
	if c.stripes >= stripeThreads && e.view.DroppedBy(5) != e.view.Dropped() {
		t.Errorf("dropped %d for counter 5, %d in all", e.view.DroppedBy(5), e.view.Dropped())
	}
	t.Logf("%d events read, %d dropped", events, e.view.Dropped())
}

// retireStripes retires every stripe of st: the totals do not change, the
// slots are free for new threads, which count on.
func retireStripes(t *testing.T, e *env, st []trampoline.Stripe) {
	t.Helper()
	const total = stripeThreads * stripeHits
	dropped := e.view.Dropped()
	for _, s := range st {
		if _, err := e.view.Retire(s.Slot); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.view.Counter(5); got != total {
		t.Fatalf("counter %d after retiring, want %d", got, total)
	}
	if e.view.Dropped() != dropped || len(e.view.Stripes()) != 0 {
		t.Fatalf("after retiring: dropped %d (was %d), %d stripes", e.view.Dropped(), dropped, len(e.view.Stripes()))
	}
	withTCB(t, func(uint64) {
		var r native.Regs
		native.Loop(uintptr(e.sym("bench_target")), &r, e.stack(), 1000)
	})
	if got := e.view.Counter(5); got != total+1000 || len(e.view.Stripes()) != 1 {
		t.Fatalf("counter %d with %d stripes after a new thread's 1000 hits, want %d and 1", got, len(e.view.Stripes()), total+1000)
	}
}

// TestNativeThreadRingFull: a thread's ring that nobody reads keeps the
// first ThreadRing events and counts the others dropped, per counter;
// after a read it takes events again.
func TestNativeThreadRingFull(t *testing.T) {
	e := threadEnv(t, 4, 16)
	e.install(e.site("args6", nil), trampoline.Handler{ID: 77, Counter: 3, Event: true})
	withTCB(t, func(tp uint64) {
		stack := e.stack()
		var r native.Regs
		for i := 0; i < 40; i++ {
			r.GPR[7] = uint64(i)
			native.Call(uintptr(e.sym("args6")), &r, stack)
		}
		st := e.view.Stripes()
		if len(st) != 1 || st[0].Key != tp {
			t.Fatalf("stripes %+v, want one of %#x", st, tp)
		}
		slot := st[0].Slot
		if p, d := e.view.ThreadPending(slot), e.view.ThreadDropped(slot); p != 16 || d != 24 || e.view.DroppedBy(3) != 24 {
			t.Fatalf("pending %d dropped %d (counter 3: %d), want 16 and 24", p, d, e.view.DroppedBy(3))
		}
		var evs [32]trampoline.Event
		n := e.view.ReadThread(slot, evs[:])
		if n != 16 {
			t.Fatalf("read %d, want 16", n)
		}
		for i, ev := range evs[:n] {
			if ev.Seq != uint64(i) || ev.Args[0] != uint64(i) || ev.Thread != tp || ev.Kind != trampoline.EventEntry || ev.Ret != 0 {
				t.Fatalf("event %d: %+v", i, ev)
			}
		}
		r.GPR[7] = 99
		native.Call(uintptr(e.sym("args6")), &r, stack)
		if n := e.view.ReadThread(slot, evs[:]); n != 1 || evs[0].Args[0] != 99 || evs[0].Seq != 16 {
			t.Fatalf("after the read: %d events, first %+v", n, evs[0])
		}
	})
}

// TestNativeNoThreadPointer: a thread whose thread pointer reads 0 has no
// stripe and counts exactly in the shared word.
func TestNativeNoThreadPointer(t *testing.T) {
	e := threadEnv(t, 4, 16)
	e.install(e.site("bench_target", nil), trampoline.Handler{ID: 1, Count: true, Counter: 2, Event: true})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var fs uint64
	if _, _, errno := unix.Syscall(unix.SYS_ARCH_PRCTL, 0x1003, uintptr(unsafe.Pointer(&fs)), 0); errno != 0 {
		t.Fatal(errno)
	}
	if *(*uint64)(unsafe.Add(unsafe.Pointer(nil), fs)) != 0 {
		t.Skip("the fs:0 word is not 0 in this test binary (built with cgo or the race detector)")
	}
	var r native.Regs
	native.Loop(uintptr(e.sym("bench_target")), &r, e.stack(), 100)
	if e.view.Counter(2) != 100 || len(e.view.Stripes()) != 0 || e.view.Pending() != 100 || e.view.Dropped() != 0 {
		t.Fatalf("counter %d, %d stripes, shared ring pending %d dropped %d; want 100, 0, 100, 0",
			e.view.Counter(2), len(e.view.Stripes()), e.view.Pending(), e.view.Dropped())
	}
}

// TestNativeEventArgRegs: an event records the registers its handler's
// ArgRegs names (System V's rdi..r9, Go's rax rbx rcx rdi rsi r8), from
// the shared ring and from a thread's own, whatever the slot used them
// for before it stored them.
func TestNativeEventArgRegs(t *testing.T) {
	// native.Regs numbers the registers by their encoding.
	abis := map[trampoline.ArgRegs][6]int{
		trampoline.SysVArgs: {7, 6, 2, 1, 8, 9},
		trampoline.GoArgs:   {0, 3, 1, 7, 6, 8},
	}
	var r native.Regs
	for i := range r.GPR {
		if i != 4 { // rsp
			r.GPR[i] = 0x1111_0000_0000 + uint64(i)*0x0101
		}
	}
	for abi, regs := range abis {
		var want [6]uint64
		for i, g := range regs {
			want[i] = r.GPR[g]
		}
		h := trampoline.Handler{ID: 5, Counter: 3, Event: true, ArgRegs: abi}
		t.Run(fmt.Sprintf("shared/%d", abi), func(t *testing.T) {
			e := newEnv(t, envOptions{ring: 16})
			e.install(e.site("args6", nil), h)
			e.call("args6", r, e.stack())
			var evs [4]trampoline.Event
			if n := e.view.Read(evs[:]); n != 1 || evs[0].Args != want {
				t.Fatalf("%d events, first %+v; want args %x", n, evs[0], want)
			}
		})
		t.Run(fmt.Sprintf("thread/%d", abi), func(t *testing.T) {
			e := threadEnv(t, 4, 16)
			e.install(e.site("args6", nil), h)
			withTCB(t, func(uint64) {
				native.Call(uintptr(e.sym("args6")), &r, e.stack())
				st := e.view.Stripes()
				var evs [4]trampoline.Event
				if len(st) != 1 {
					t.Fatalf("stripes %+v", st)
				}
				if n := e.view.ReadThread(st[0].Slot, evs[:]); n != 1 || evs[0].Args != want {
					t.Fatalf("%d events, first %+v; want args %x", n, evs[0], want)
				}
			})
		})
	}
}

// TestNativeThreadReturns: N threads return through a return probe's
// trampoline; a per-thread counter counts each thread's returns in its own
// stripe (no lock prefix, no shared line), the shared word none; with one
// stripe for four threads the others count in the shared word, and the
// totals are exact either way.
func TestNativeThreadReturns(t *testing.T) {
	for _, stripes := range []int{8, 1} {
		t.Run(fmt.Sprintf("stripes=%d", stripes), func(t *testing.T) {
			e := threadEnv(t, stripes, 1<<10)
			const entries, returns = 5, 6
			e.install(e.site("bench_target", nil), trampoline.Handler{ID: 9, Count: true, Counter: entries,
				Return: &trampoline.ReturnHandler{Count: true, Counter: returns}})
			prev := runtime.GOMAXPROCS(stripeThreads + 1)
			defer runtime.GOMAXPROCS(prev)
			tps := hitFromThreads(t, e)
			const total = stripeThreads * stripeHits
			if got, ret := e.view.Counter(entries), e.view.Counter(returns); got != total || ret != total {
				t.Fatalf("entries %d, returns %d; want %d of each", got, ret, total)
			}
			var inStripes uint64
			for _, s := range e.view.Stripes() {
				if _, ok := tps.Load(s.Key); !ok {
					t.Errorf("stripe %d held by %#x, not a thread pointer of the test's threads", s.Slot, s.Key)
				}
				n := e.view.ThreadCounter(s.Slot, returns)
				if n != stripeHits || e.view.ThreadCounter(s.Slot, entries) != stripeHits {
					t.Errorf("stripe %d: %d entries, %d returns; want %d", s.Slot, e.view.ThreadCounter(s.Slot, entries), n, stripeHits)
				}
				inStripes += n
			}
			if want := uint64(min(stripes, stripeThreads) * stripeHits); inStripes != want {
				t.Errorf("%d returns counted in stripes, want %d (the rest in the shared word)", inStripes, want)
			}
		})
	}
}
