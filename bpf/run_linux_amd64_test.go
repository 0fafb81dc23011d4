package bpf

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/bpf/jit"
	"github.com/probeopt/probeopt/bpf/maps"
)

// The offsets of struct pt_regs (arch/x86/include/asm/ptrace.h) the test
// programs read.
const (
	regsRAX  = 80
	regsRSI  = 104
	regsRDI  = 112
	regsSize = 168
)

type loaded struct {
	in    *Instance
	funcs map[string]*jit.Func
}

// instantiate loads testdata's probes object for the test.
func instantiate(t *testing.T) *loaded { return loadObject(t, "probes", 1<<20) }

func ptr(regs *[regsSize]byte) unsafe.Pointer { return unsafe.Pointer(&regs[0]) }

// loadObject opens the BPF object built from testdata's name.bpf.c, has
// the kernel verify it (skipping without the privilege), instantiates it
// in an arena of arenaSize bytes with 4 stripes and loads every program's
// code into this process, all released when the test ends.
func loadObject(t testing.TB, name string, arenaSize int) *loaded {
	t.Helper()
	o, err := Open(bpfObject(t, name))
	if err != nil {
		t.Fatal(err)
	}
	needBPF(t)
	if err := o.Verify(); err != nil {
		t.Fatal(err)
	}
	arena, err := maps.NewArena(arenaSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { arena.Close() })
	in, err := o.Instantiate(arena, &InstanceOptions{Stripes: 4})
	if err != nil {
		t.Fatal(err)
	}
	l := &loaded{in: in, funcs: map[string]*jit.Func{}}
	for name, code := range in.Code {
		f, err := jit.Load(code.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		l.funcs[name] = f
	}
	return l
}

func (l *loaded) run(name string, regs *[regsSize]byte, stripe int) uint64 {
	return l.funcs[name].Run(ptr(regs), stripe)
}

func u64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// TestRunCount runs the counter and histogram program on argument values
// whose log2 math/bits computes, on two stripes.
func TestRunCount(t *testing.T) {
	l := instantiate(t)
	var regs [regsSize]byte
	want := map[uint32]uint64{}
	n := [2]int{}
	for i := 0; i < 1000; i++ {
		size := uint64(i*i*7919) >> (i % 40)
		binary.LittleEndian.PutUint64(regs[regsRDI:], size)
		s := i % 2
		l.run("count", &regs, s)
		n[s]++
		slot := uint32(0)
		if size > 0 {
			slot = uint32(bits.Len64(size) - 1)
		}
		want[slot]++
	}
	vs, err := l.in.Maps["hits"].LookupPerCPU([]byte{0, 0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	for s, v := range vs {
		w := uint64(0)
		if s < 2 {
			w = uint64(n[s])
		}
		if u64(v) != w {
			t.Errorf("hits stripe %d: %d, want %d", s, u64(v), w)
		}
	}
	for slot := uint32(0); slot < 64; slot++ {
		v, err := l.in.Maps["hist"].Lookup(binary.LittleEndian.AppendUint32(nil, slot))
		if err != nil {
			t.Fatal(err)
		}
		if u64(v) != want[slot] {
			t.Errorf("hist[%d] = %d, want %d", slot, u64(v), want[slot])
		}
	}
}

// TestRunKeyed runs the hash-map program on return values and compares
// the map with the counts kept here, and the .bss counter with the calls.
func TestRunKeyed(t *testing.T) {
	l := instantiate(t)
	var regs [regsSize]byte
	want := map[uint64]uint64{}
	const scale = 3 // the object's .rodata constant
	for i := 0; i < 500; i++ {
		ret := uint64(i % 37 * 1000003)
		binary.LittleEndian.PutUint64(regs[regsRAX:], ret)
		l.run("keyed", &regs, 0)
		want[ret] += scale
	}
	entries, err := l.in.Maps["by_arg"].Entries()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("%d entries, want %d", len(entries), len(want))
	}
	for _, e := range entries {
		if k := u64(e.Key); u64(e.Value) != want[k] {
			t.Errorf("by_arg[%d] = %d, want %d", k, u64(e.Value), want[k])
		}
	}
	var bss *maps.Map
	for name, m := range l.in.Maps {
		if bytes.HasSuffix([]byte(name), []byte(".bss")) {
			bss = m
		}
	}
	if bss == nil {
		t.Fatal("no .bss map")
	}
	v, err := bss.Lookup([]byte{0, 0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if u64(v) != 500 {
		t.Errorf(".bss calls = %d, want 500", u64(v))
	}
}

// TestRunRecord runs the ring buffer program: the record holds this
// thread's ids, the argument and the string, read through a good pointer,
// a pointer to an unmapped page (zeros, no fault) and a long string (cut).
func TestRunRecord(t *testing.T) {
	l := instantiate(t)
	rd, err := maps.NewReader(l.in.Maps["events"])
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	page, err := unix.Mmap(-1, 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	// "hi" ends 3 bytes before an unmapped page.
	if err := unix.Mprotect(page[4096:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	copy(page[4096-3:], "hi\x00")
	long := []byte("a string longer than sixteen bytes\x00")
	for _, c := range []struct {
		ptr  uintptr
		want string
	}{
		{uintptr(unsafe.Pointer(&page[4096-3])), "hi\x00" + string(make([]byte, 5))},
		{uintptr(unsafe.Pointer(&page[4096])), ""},
		{16, ""},
		{uintptr(unsafe.Pointer(&long[0])), "a string longer\x00"},
	} {
		var regs [regsSize]byte
		binary.LittleEndian.PutUint64(regs[regsRDI:], uint64(c.ptr))
		binary.LittleEndian.PutUint64(regs[regsRSI:], 77)
		l.run("record", &regs, 0)
		rd.SetDeadline(time.Now().Add(time.Second))
		rec, err := rd.Read()
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.RawSample) != 32 {
			t.Fatalf("record of %d bytes", len(rec.RawSample))
		}
		wantID := uint64(unix.Getpid())<<32 | uint64(unix.Gettid())
		if got := u64(rec.RawSample); got != wantID {
			t.Errorf("pid_tgid %#x, want %#x", got, wantID)
		}
		if got := u64(rec.RawSample[8:]); got != 77 {
			t.Errorf("arg %d", got)
		}
		str := rec.RawSample[16:32]
		want := []byte(c.want)
		want = append(want, make([]byte, 16-len(want))...)
		if !bytes.Equal(str, want) {
			t.Errorf("string at %#x: %q, want %q", c.ptr, str, want)
		}
	}
}

// TestRunManual runs the program with the clock and random helpers.
func TestRunManual(t *testing.T) {
	l := instantiate(t)
	var regs [regsSize]byte
	if r := l.run("manual", &regs, 1); r != 1 {
		t.Errorf("manual returned %d", r)
	}
}

// TestRunThreads runs the counter and histogram program on four threads
// at once, each with its own stripe: no update is lost, in the per-thread
// counters (plain increments) or in the shared histogram (atomic adds).
func TestRunThreads(t *testing.T) {
	l := instantiate(t)
	code := l.in.Code["count"]
	const threads, runs = 4, 200000
	done := make(chan error)
	for s := 0; s < threads; s++ {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f, err := jit.Load(code.Bytes) // a stack of its own
			if err != nil {
				done <- err
				return
			}
			defer f.Close()
			// Every other run in slot 0, which all threads share, the
			// others in slot s+1, the thread's own.
			var own, shared [regsSize]byte
			binary.LittleEndian.PutUint64(own[regsRDI:], 1<<uint(s+1))
			binary.LittleEndian.PutUint64(shared[regsRDI:], 1)
			for i := 0; i < runs; i += 2 {
				f.Run(ptr(&own), s)
				f.Run(ptr(&shared), s)
			}
			done <- nil
		}()
	}
	for s := 0; s < threads; s++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	vs, err := l.in.Maps["hits"].LookupPerCPU([]byte{0, 0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < threads; s++ {
		if u64(vs[s]) != runs {
			t.Errorf("stripe %d: %d, want %d", s, u64(vs[s]), runs)
		}
	}
	for slot := 0; slot <= threads; slot++ {
		v, err := l.in.Maps["hist"].Lookup(binary.LittleEndian.AppendUint32(nil, uint32(slot)))
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(runs / 2)
		if slot == 0 {
			want = threads * runs / 2
		}
		if u64(v) != want {
			t.Errorf("hist[%d] = %d, want %d", slot, u64(v), want)
		}
	}
}
