package trampoline_test

// Tests that execute generated trampolines on the CPU, inside the test
// process: the functions of testdata/trampoline/sites_x86.S are copied
// into executable memory, their sites rewritten with the package's
// patches, and called through internal/native with a full register file.
// Each result is compared with the same call before the rewrite, which
// does not depend on the generator's own view of its code.

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/trampoline/internal/native"
)

var (
	sitesOnce sync.Once
	sitesText []byte
	sitesSyms map[string]uint64
	sitesErr  error
)

// loadSites assembles sites_x86.S (cached by content) and returns its
// .text and symbol offsets.
func loadSites(t testing.TB) ([]byte, map[string]uint64) {
	t.Helper()
	gcc := testenv.MustHaveTool(t, "gcc")
	sitesOnce.Do(func() {
		src := filepath.Join("..", "testdata", "trampoline", "sites_x86.S")
		b, err := os.ReadFile(src)
		if err != nil {
			sitesErr = err
			return
		}
		h := sha256.Sum256(b)
		dir := filepath.Join(os.TempDir(), "probeopt-tramp-sites-"+hex.EncodeToString(h[:8]))
		obj := filepath.Join(dir, "sites.o")
		if _, err := os.Stat(obj); err != nil {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				sitesErr = err
				return
			}
			tmp := fmt.Sprintf("%s.%d", obj, os.Getpid())
			if out, err := exec.Command(gcc, "-c", "-o", tmp, src).CombinedOutput(); err != nil {
				sitesErr = fmt.Errorf("gcc: %v\n%s", err, out)
				return
			}
			if err := os.Rename(tmp, obj); err != nil {
				sitesErr = err
				return
			}
		}
		f, err := elf.Open(obj)
		if err != nil {
			sitesErr = err
			return
		}
		defer f.Close()
		for _, s := range f.Sections {
			if s.Type == elf.SHT_RELA || s.Type == elf.SHT_REL {
				sitesErr = fmt.Errorf("%s has relocations (%s)", obj, s.Name)
				return
			}
		}
		text := f.Section(".text")
		if sitesText, err = text.Data(); err != nil {
			sitesErr = err
			return
		}
		syms, err := f.Symbols()
		if err != nil {
			sitesErr = err
			return
		}
		sitesSyms = map[string]uint64{}
		for _, s := range syms {
			if s.Section == elf.SectionIndex(indexOf(f, ".text")) && s.Name != "" {
				sitesSyms[s.Name] = s.Value
			}
		}
	})
	if sitesErr != nil {
		t.Fatalf("sites fixture: %v", sitesErr)
	}
	return sitesText, sitesSyms
}

func indexOf(f *elf.File, name string) int {
	for i, s := range f.Sections {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// mmapAt maps length bytes (at addr with MAP_FIXED_NOREPLACE when addr is
// not 0).
func mmapAt(t testing.TB, addr uint64, length int, prot, flags int) []byte {
	t.Helper()
	b, err := tryMmapAt(t, addr, length, prot, flags)
	if err != nil {
		t.Fatalf("mmap %d bytes at %#x: %v", length, addr, err)
	}
	return b
}

func tryMmapAt(t testing.TB, addr uint64, length int, prot, flags int) ([]byte, error) {
	if addr != 0 {
		flags |= unix.MAP_FIXED_NOREPLACE
	}
	hint := uintptr(addr)
	p, err := unix.MmapPtr(-1, 0, *(*unsafe.Pointer)(unsafe.Pointer(&hint)), uintptr(length), prot, flags|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	if addr != 0 && uintptr(p) != uintptr(addr) {
		_ = unix.MunmapPtr(p, uintptr(length))
		return nil, fmt.Errorf("mapped at %p instead", p)
	}
	t.Cleanup(func() { _ = unix.MunmapPtr(p, uintptr(length)) })
	return unsafe.Slice((*byte)(p), length), nil
}

// mmapNear maps length bytes where every address of reach reaches them
// with a rel32. The Go runtime maps memory of its own on other threads,
// so the gap found in the maps may be gone by the time of the mmap: then
// the maps are read again.
func mmapNear(t testing.TB, reach []uint64, length int, prot, flags int) []byte {
	t.Helper()
	for try := 0; ; try++ {
		at, err := trampoline.Place(selfMaps(t), reach, uint64(length), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tryMmapAt(t, at, length, prot, flags)
		if err == nil {
			return b
		}
		if !errors.Is(err, unix.EEXIST) || try == 9 {
			t.Fatalf("mmap %d bytes at %#x: %v", length, at, err)
		}
	}
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

func protect(t testing.TB, b []byte, prot int) {
	t.Helper()
	if err := unix.Mprotect(b, prot); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
}

func selfMaps(t testing.TB) []trampoline.Mapping {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := proc.ParseMaps(f)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]trampoline.Mapping, len(ms))
	for i, m := range ms {
		out[i] = trampoline.Mapping{Start: m.Start, End: m.End, Path: m.Path}
	}
	return out
}

// env is a copy of the sites fixture with a data area, a thread table and
// a slot area, all in this process.
type env struct {
	t       testing.TB
	text    []byte // the executable copy
	base    uint64 // its address
	syms    map[string]uint64
	data    *trampoline.Data
	dataMem []byte
	view    *trampoline.View
	threads *trampoline.Threads
	thrMem  []byte
	area    *trampoline.Area
	areaMem []byte
	cfg     *trampoline.Config
	tramps  []*trampoline.Trampoline
}

type envOptions struct {
	counters, ring, threadSlots int
	dataAt                      uint64 // fixed address of the data area, 0: anywhere
	returnAt                    uint64 // fixed address of the return trampoline, 0: in the slot area
	flags                       trampoline.FlagsSave
	tp                          trampoline.ThreadPointer
	// stripes, stripeCounters and threadRing enable the per-thread data
	// plane (Data.SetThreads) when stripes is not 0.
	stripes, stripeCounters, threadRing int
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	if !native.Supported {
		t.Skip("native execution needs linux/amd64")
	}
	text, syms := loadSites(t)
	e := &env{t: t, syms: syms}
	e.text = mmapAt(t, 0, (len(text)+4095)&^4095, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	copy(e.text, text)
	protect(t, e.text, unix.PROT_READ|unix.PROT_EXEC)
	e.base = addrOf(e.text)
	if o.counters == 0 {
		o.counters = 16
	}
	if o.threadSlots == 0 {
		o.threadSlots = 64
	}
	var err error
	if e.data, err = trampoline.NewData(0, o.counters, o.ring); err != nil {
		t.Fatal(err)
	}
	if o.stripes > 0 {
		if err := e.data.SetThreads(o.stripes, o.stripeCounters, o.threadRing); err != nil {
			t.Fatal(err)
		}
	}
	e.dataMem = mmapAt(t, o.dataAt, int(e.data.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	e.data.Addr = addrOf(e.dataMem)
	if err := e.data.Init(e.dataMem); err != nil {
		t.Fatal(err)
	}
	if e.view, err = trampoline.NewView(e.dataMem); err != nil {
		t.Fatal(err)
	}
	if e.threads, err = trampoline.NewThreads(0, o.threadSlots); err != nil {
		t.Fatal(err)
	}
	e.thrMem = mmapAt(t, 0, int(e.threads.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	e.threads.Addr = addrOf(e.thrMem)
	const areaSize = 64 << 10
	e.areaMem = mmapNear(t, []uint64{e.base, e.base + uint64(len(text))}, areaSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	at := addrOf(e.areaMem)
	if e.area, err = trampoline.NewArea(at, areaSize); err != nil {
		t.Fatal(err)
	}
	e.cfg = &trampoline.Config{Data: e.data, Threads: e.threads, ThreadPointer: o.tp, Flags: o.flags}
	if o.returnAt == 0 {
		rat, code, err := e.area.ReturnX86(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		copy(e.areaMem[rat-at:], code)
	} else {
		mem := mmapAt(t, o.returnAt, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
		ra, err := trampoline.NewArea(o.returnAt, 4096)
		if err != nil {
			t.Fatal(err)
		}
		rat, code, err := ra.ReturnX86(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		copy(mem[rat-o.returnAt:], code)
		protect(t, mem, unix.PROT_READ|unix.PROT_EXEC)
	}
	protect(t, e.areaMem, unix.PROT_READ|unix.PROT_EXEC)
	return e
}

func (e *env) sym(name string) uint64 {
	e.t.Helper()
	off, ok := e.syms[name]
	if !ok {
		e.t.Fatalf("no symbol %s in the sites fixture", name)
	}
	return e.base + off
}

// site analyzes the site at symbol name (name_site when it exists).
func (e *env) site(name string, opts *trampoline.SiteOptions) *trampoline.Site {
	e.t.Helper()
	addr := e.sym(name)
	if _, ok := e.syms[name+"_site"]; ok {
		addr = e.sym(name + "_site")
	}
	off := addr - e.base
	s, err := trampoline.AnalyzeX86(addr, e.text[off:min(off+64, uint64(len(e.text)))], opts)
	if err != nil {
		e.t.Fatalf("analyze %s: %v", name, err)
	}
	return s
}

// install builds the trampoline for site s and handler h, writes its code
// and applies its patch.
func (e *env) install(s *trampoline.Site, h trampoline.Handler) *trampoline.Trampoline {
	e.t.Helper()
	tr, err := e.area.BuildX86(s, &h, e.cfg)
	if err != nil {
		e.t.Fatalf("build at %#x: %v", s.Addr, err)
	}
	protect(e.t, e.areaMem, unix.PROT_READ|unix.PROT_WRITE)
	copy(e.areaMem[tr.Slot-e.area.Addr:], tr.Code)
	protect(e.t, e.areaMem, unix.PROT_READ|unix.PROT_EXEC)
	e.patch(tr.Install)
	e.tramps = append(e.tramps, tr)
	return tr
}

func (e *env) patch(p trampoline.Patch) {
	e.t.Helper()
	off := p.Addr - e.base
	if !bytes.Equal(e.text[off:off+uint64(len(p.Old))], p.Old) {
		e.t.Fatalf("patch at %#x: text % x, want % x", p.Addr, e.text[off:off+uint64(len(p.Old))], p.Old)
	}
	protect(e.t, e.text, unix.PROT_READ|unix.PROT_WRITE)
	copy(e.text[off:], p.New)
	protect(e.t, e.text, unix.PROT_READ|unix.PROT_EXEC)
}

// stack returns the top of a fresh 1 MiB stack.
func (e *env) stack() uintptr {
	s := mmapAt(e.t, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	return uintptr(addrOf(s)) + 1<<20
}

// call runs function name with the registers r (returned updated).
func (e *env) call(name string, r native.Regs, stack uintptr) native.Regs {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	native.Call(uintptr(e.sym(name)), &r, stack)
	return r
}

func randRegs(rng *rand.Rand) native.Regs {
	var r native.Regs
	for i := range r.GPR {
		r.GPR[i] = rng.Uint64()
	}
	r.Flags = rng.Uint64() & native.ArithFlags
	return r
}

var regNames = [16]string{"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"}

func diffRegs(a, b native.Regs) string {
	var s string
	for i := range a.GPR {
		if a.GPR[i] != b.GPR[i] {
			s += fmt.Sprintf(" %s %#x/%#x", regNames[i], a.GPR[i], b.GPR[i])
		}
	}
	if a.Flags&native.ArithFlags != b.Flags&native.ArithFlags {
		s += fmt.Sprintf(" flags %#x/%#x", a.Flags&native.ArithFlags, b.Flags&native.ArithFlags)
	}
	return s
}

// handlers are the handler shapes every site is run with.
func handlers(ring bool) map[string]trampoline.Handler {
	hs := map[string]trampoline.Handler{
		"none":     {ID: 1},
		"counter":  {ID: 2, Count: true, Counter: 0},
		"return":   {ID: 4, Return: &trampoline.ReturnHandler{Count: true, Counter: 1}},
		"unhijack": {ID: 5, Unhijack: true},
		"rehijack": {ID: 7, Rehijack: true},
	}
	if ring {
		hs["event"] = trampoline.Handler{ID: 3, Event: true}
		hs["all"] = trampoline.Handler{ID: 6, Count: true, Counter: 2, Event: true,
			Return: &trampoline.ReturnHandler{Count: true, Counter: 3, Event: true}}
	}
	return hs
}

// sameAsUnpatched runs fn on random register files before and after the
// site is rewritten and requires identical registers and flags.
func sameAsUnpatched(t *testing.T, o envOptions, fn string, args func(*rand.Rand, *native.Regs), siteOpts *trampoline.SiteOptions) {
	for hname, h := range handlers(o.ring > 0) {
		t.Run(hname, func(t *testing.T) {
			e := newEnv(t, o)
			rng := rand.New(rand.NewPCG(1, uint64(len(hname))))
			stack := e.stack()
			var in []native.Regs
			var want []native.Regs
			for i := 0; i < 50; i++ {
				r := randRegs(rng)
				if args != nil {
					args(rng, &r)
				}
				in = append(in, r)
				want = append(want, e.call(fn, r, stack))
			}
			s := e.site(fn, siteOpts)
			tr := e.install(s, h)
			for i, r := range in {
				got := e.call(fn, r, stack)
				if d := diffRegs(got, want[i]); d != "" {
					t.Fatalf("%s with %s handler (%s site, % x -> slot at %#x): registers differ (got/want):%s", fn, hname, s.Kind, s.Old, tr.Slot, d)
				}
				if got.GPR[4] != native.StackTop(stack) {
					t.Fatalf("stack pointer %#x after the call, want %#x", got.GPR[4], native.StackTop(stack))
				}
			}
			n := uint64(len(in))
			// A Go thread's %fs:0 is a TCB self pointer only when the
			// program uses the C TLS layout (cgo, the race detector);
			// otherwise it is 0 and with ThreadTCB return probes are not
			// armed (and do no harm). Either way, all or none.
			armed := h.Return != nil
			if armed && o.tp == trampoline.ThreadTCB {
				switch c := e.view.Counter(h.Return.Counter); c {
				case 0:
					armed = false
				case n:
				default:
					t.Errorf("return counter %d with ThreadTCB, want 0 or %d", c, n)
				}
			}
			if h.Count && e.view.Counter(h.Counter) != n {
				t.Errorf("entry counter %d, want %d", e.view.Counter(h.Counter), n)
			}
			if armed && h.Return.Count && e.view.Counter(h.Return.Counter) != n {
				t.Errorf("return counter %d, want %d", e.view.Counter(h.Return.Counter), n)
			}
			var evs [256]trampoline.Event
			got := e.view.Read(evs[:])
			wantEv := 0
			if h.Event {
				wantEv += len(in)
			}
			if armed && h.Return.Event {
				wantEv += len(in)
			}
			if got != wantEv {
				t.Errorf("%d events, want %d", got, wantEv)
			}
		})
	}
}

func TestNativeNopSitesPreserveEverything(t *testing.T) {
	for _, fn := range []string{"f_nop5", "f_nop10", "f_nopnop5", "f_nopnop10"} {
		for _, o := range []envOptions{{ring: 1024}, {ring: 1024, flags: trampoline.FlagsPushf}, {ring: 1024, tp: trampoline.ThreadTCB}} {
			t.Run(fmt.Sprintf("%s/flags%d/tp%d", fn, o.flags, o.tp), func(t *testing.T) {
				sameAsUnpatched(t, o, fn, nil, nil)
			})
		}
	}
}

func TestNativeDetoursPreserveEverything(t *testing.T) {
	small := func(rng *rand.Rand, r *native.Regs) {
		r.GPR[7] = rng.Uint64N(30) // rdi
		r.GPR[6] = rng.Uint64N(30) // rsi
	}
	for _, fn := range []string{"d_push", "d_sub", "d_endbr", "d_rip", "d_ripload", "d_jcc", "d_call", "d_short", "d_jmp", "flags_live", "args6", "rz_leaf"} {
		t.Run(fn, func(t *testing.T) {
			args := small
			if fn == "flags_live" || fn == "rz_leaf" {
				args = nil
			}
			sameAsUnpatched(t, envOptions{ring: 1024}, fn, args, nil)
		})
	}
	t.Run("d_jcc/taken", func(t *testing.T) {
		sameAsUnpatched(t, envOptions{ring: 1024}, "d_jcc", func(rng *rand.Rand, r *native.Regs) {
			r.GPR[7] = 0
		}, nil)
	})
	t.Run("d_endbr/replaced", func(t *testing.T) {
		sameAsUnpatched(t, envOptions{ring: 1024}, "d_endbr", small, &trampoline.SiteOptions{ReplaceEndbr: true})
	})
	t.Run("far-data", func(t *testing.T) {
		// The data area more than 2 GiB away from the slots: counters are
		// reached through a register.
		sameAsUnpatched(t, envOptions{ring: 1024, dataAt: 0x10_0000_0000}, "d_push", small, nil)
	})
}

// TestNativeRedZone runs the red-zone leaf with a counter trampoline at
// its nop5, and shows that a call at the site (what Linux's nop5
// optimization writes) would corrupt it.
func TestNativeRedZone(t *testing.T) {
	e := newEnv(t, envOptions{ring: 64})
	stack := e.stack()
	r := native.Regs{}
	r.GPR[7], r.GPR[6] = 0x1111, 0x2222
	want := e.call("rz_leaf", r, stack).GPR[0]
	s := e.site("rz_leaf", nil)
	if s.Kind != trampoline.SiteNop {
		t.Fatalf("rz_leaf site is %s", s.Kind)
	}
	e.install(s, trampoline.Handler{ID: 1, Count: true, Counter: 0, Event: true})
	for i := 0; i < 10; i++ {
		if got := e.call("rz_leaf", r, stack).GPR[0]; got != want {
			t.Fatalf("rz_leaf = %#x with the trampoline, %#x without", got, want)
		}
	}
	if c := e.view.Counter(0); c != 10 {
		t.Fatalf("counter %d, want 10", c)
	}
	// Control: a call to a `ret` at the site pushes into the red zone.
	e2 := newEnv(t, envOptions{})
	site := e2.sym("rz_leaf_site")
	retAt := e2.area.Addr + 0x8000
	protect(t, e2.areaMem, unix.PROT_READ|unix.PROT_WRITE)
	e2.areaMem[retAt-e2.area.Addr] = 0xC3
	protect(t, e2.areaMem, unix.PROT_READ|unix.PROT_EXEC)
	d := int32(retAt - (site + 5))
	call := []byte{0xE8, byte(d), byte(d >> 8), byte(d >> 16), byte(d >> 24)}
	e2.patch(trampoline.Patch{Addr: site, Old: []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}, New: call})
	if got := e2.call("rz_leaf", r, e2.stack()).GPR[0]; got == want {
		t.Fatalf("a call at the site left the red zone intact: the fixture does not test the red zone")
	}
}

// TestNativeCounterThreads hammers one counter trampoline from 8 OS
// threads (more than the CPUs, so that threads are preempted inside the
// slot) and requires the exact count.
func TestNativeCounterThreads(t *testing.T) {
	for _, hname := range []string{"counter", "counter+event"} {
		t.Run(hname, func(t *testing.T) {
			e := newEnv(t, envOptions{ring: 4096})
			h := trampoline.Handler{ID: 9, Count: true, Counter: 5}
			if hname == "counter+event" {
				h.Event = true
			}
			e.install(e.site("bench_target", nil), h)
			prev := runtime.GOMAXPROCS(8)
			defer runtime.GOMAXPROCS(prev)
			const threads, per, chunk = 8, 200_000, 10_000
			stacks := make([]uintptr, threads)
			for i := range stacks {
				stacks[i] = e.stack()
			}
			var events uint64
			stop := make(chan struct{})
			drained := make(chan struct{})
			if h.Event {
				go func() {
					defer close(drained)
					var buf [512]trampoline.Event
					for {
						n := e.view.Read(buf[:])
						for _, ev := range buf[:n] {
							if ev.Probe != 9 || ev.Kind != trampoline.EventEntry || ev.IP != e.sym("bench_target_site") {
								t.Errorf("bad event %+v", ev)
							}
						}
						events += uint64(n)
						select {
						case <-stop:
							if n == 0 && e.view.Pending() == 0 {
								return
							}
						default:
							if n == 0 {
								runtime.Gosched()
							}
						}
					}
				}()
			} else {
				close(drained)
			}
			var wg sync.WaitGroup
			for i := 0; i < threads; i++ {
				wg.Add(1)
				go func(stack uintptr) {
					defer wg.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					e.hitBenchTarget(t, stack, per, chunk)
				}(stacks[i])
			}
			wg.Wait()
			close(stop)
			<-drained
			if got := e.view.Counter(5); got != threads*per {
				t.Fatalf("counter %d, want %d", got, threads*per)
			}
			if h.Event {
				if total := events + e.view.Dropped(); total != threads*per {
					t.Fatalf("events %d + dropped %d = %d, want %d", events, e.view.Dropped(), total, threads*per)
				}
				t.Logf("%d events read, %d dropped", events, e.view.Dropped())
			}
		})
	}
}

// TestNativeEventArgs checks the fields of entry events.
func TestNativeEventArgs(t *testing.T) {
	e := newEnv(t, envOptions{ring: 16})
	e.install(e.site("args6", nil), trampoline.Handler{ID: 77, Event: true})
	stack := e.stack()
	var r native.Regs
	for i := 0; i < 40; i++ {
		args := [6]uint64{uint64(i), 0xAAAA_0000 + uint64(i), 0xFFFF_FFFF_FFFF_FFF0 + uint64(i%8), 3, 1 << 40, ^uint64(i)}
		for j, reg := range []int{7, 6, 2, 1, 8, 9} {
			r.GPR[reg] = args[j]
		}
		e.call("args6", r, stack)
		if i%4 == 3 {
			var evs [16]trampoline.Event
			n := e.view.Read(evs[:])
			if n != 4 {
				t.Fatalf("%d events after 4 calls", n)
			}
			for k, ev := range evs[:n] {
				call := i - 3 + k
				want := [6]uint64{uint64(call), 0xAAAA_0000 + uint64(call), 0xFFFF_FFFF_FFFF_FFF0 + uint64(call%8), 3, 1 << 40, ^uint64(call)}
				if ev.Args != want || ev.Probe != 77 || ev.Kind != trampoline.EventEntry || ev.IP != e.sym("args6_site") ||
					ev.Seq != uint64(call) || ev.SP != native.StackTop(stack)-8 || ev.Thread == 0 || ev.TSC == 0 {
					t.Fatalf("event %d: %+v, want args %x", call, ev, want)
				}
			}
		}
	}
	// A full ring drops and counts.
	for i := 0; i < 20; i++ {
		e.call("args6", r, stack)
	}
	if e.view.Pending() != 16 || e.view.Dropped() != 4 {
		t.Fatalf("pending %d dropped %d, want 16 and 4", e.view.Pending(), e.view.Dropped())
	}
}

// TestNativeReturnProbes: recursion, nop entry, tail calls, longjmp and
// the unwinder stand-in.
func TestNativeReturnProbes(t *testing.T) {
	// far: the return trampoline (and its gate) beyond the reach of a
	// jmp rel32 from the slots.
	for _, fn := range []string{"fib", "nopfib", "fib/far"} {
		t.Run(fn, func(t *testing.T) { testReturnRecursion(t, fn) })
	}
	t.Run("tailcall", testReturnTailCall)
	t.Run("longjmp", testReturnLongjmp)
	t.Run("tombstone", testReturnTombstone)
	t.Run("unhijack", testReturnUnhijack)
}

// fibValue is the n-th Fibonacci number, what the fixture's fib returns.
func fibValue(n uint64) uint64 {
	a, b := uint64(0), uint64(1)
	for i := uint64(0); i < n; i++ {
		a, b = b, a+b
	}
	return a
}

// fibCalls is the number of calls of the recursive fib for n.
func fibCalls(n uint64) uint64 {
	if n <= 1 {
		return 1
	}
	c := make([]uint64, n+1)
	c[0], c[1] = 1, 1
	for i := uint64(2); i <= n; i++ {
		c[i] = 1 + c[i-1] + c[i-2]
	}
	return c[n]
}

// testReturnRecursion probes the entry and the return of the recursive
// fn (fib, nopfib; with "/far", the return trampoline out of a jmp rel32's
// reach): the counts are the calls, and the events pair up.
func testReturnRecursion(t *testing.T, fn string) {
	o := envOptions{ring: 1 << 14}
	if f, ok := strings.CutSuffix(fn, "/far"); ok {
		fn, o.returnAt = f, 0x20_0000_0000
	}
	e := newEnv(t, o)
	tr := e.install(e.site(fn, nil), trampoline.Handler{ID: 3, Count: true, Counter: 0, Event: true,
		Return: &trampoline.ReturnHandler{Count: true, Counter: 1, Event: true}})
	if far := bytes.Contains(tr.Code, []byte{0xff, 0x64, 0x24, 0xf0}); far != (o.returnAt != 0) {
		t.Fatalf("slot leaves through jmp *-16(%%rsp): %v, want %v", far, o.returnAt != 0)
	}
	stack := e.stack()
	var r native.Regs
	for _, n := range []uint64{0, 1, 5, 12, 15} {
		r.GPR[7] = n
		if got := e.call(fn, r, stack).GPR[0]; got != fibValue(n) {
			t.Fatalf("%s(%d) = %d, want %d", fn, n, got, fibValue(n))
		}
	}
	want := fibCalls(0) + fibCalls(1) + fibCalls(5) + fibCalls(12) + fibCalls(15)
	if a, b := e.view.Counter(0), e.view.Counter(1); a != want || b != want {
		t.Fatalf("entries %d returns %d, want %d", a, b, want)
	}
	// Events pair up: every return's SP is an entry's SP and the
	// return value of fib(rdi).
	evs := make([]trampoline.Event, 2*want+10)
	n := e.view.Read(evs)
	if uint64(n) != 2*want {
		t.Fatalf("%d events, want %d", n, 2*want)
	}
	var stackArgs []uint64
	var sps []uint64
	for _, ev := range evs[:n] {
		switch ev.Kind {
		case trampoline.EventEntry:
			stackArgs = append(stackArgs, ev.Args[0])
			sps = append(sps, ev.SP)
		case trampoline.EventReturn:
			k := len(sps) - 1
			if k < 0 || sps[k] != ev.SP || ev.Ret != fibValue(stackArgs[k]) {
				t.Fatalf("return event %+v does not match the innermost entry (arg %d, sp %#x)", ev, stackArgs[k], sps[k])
			}
			sps, stackArgs = sps[:k], stackArgs[:k]
		}
	}
	if d := e.depth(t); d != 0 {
		t.Fatalf("shadow stack depth %d after all returns", d)
	}
}

// testReturnTailCall probes the returns of tc_a and of tc_b, which tc_a
// tail-calls: each return fires once, tc_b's first.
func testReturnTailCall(t *testing.T) {
	e := newEnv(t, envOptions{ring: 64})
	e.install(e.site("tc_a", nil), trampoline.Handler{ID: 1, Return: &trampoline.ReturnHandler{Count: true, Counter: 0, Event: true}})
	e.install(e.site("tc_b", nil), trampoline.Handler{ID: 2, Return: &trampoline.ReturnHandler{Count: true, Counter: 1, Event: true}})
	stack := e.stack()
	var r native.Regs
	for i := uint64(0); i < 5; i++ {
		r.GPR[7] = i
		if got := e.call("tc_a", r, stack).GPR[0]; got != 2*(i+1)+3 {
			t.Fatalf("tc_a(%d) = %d", i, got)
		}
	}
	if a, b := e.view.Counter(0), e.view.Counter(1); a != 5 || b != 5 {
		t.Fatalf("tc_a returns %d, tc_b returns %d, want 5 and 5", a, b)
	}
	var evs [16]trampoline.Event
	if n := e.view.Read(evs[:]); n != 10 || evs[0].Probe != 2 || evs[1].Probe != 1 || evs[0].Ret != 5 {
		t.Fatalf("events %d: %+v %+v (want tc_b's return, then tc_a's)", n, evs[0], evs[1])
	}
	if d := e.depth(t); d != 0 {
		t.Fatalf("shadow stack depth %d", d)
	}
}

// testReturnLongjmp probes lj_top and lj_deep, whose frames a longjmp
// abandons: the abandoned entries are dropped, not returned.
func testReturnLongjmp(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.install(e.site("lj_top", nil), trampoline.Handler{ID: 1, Return: &trampoline.ReturnHandler{Count: true, Counter: 0}})
	e.install(e.site("lj_deep", nil), trampoline.Handler{ID: 2, Count: true, Counter: 2, Return: &trampoline.ReturnHandler{Count: true, Counter: 1}})
	stack := e.stack()
	var r native.Regs
	for i := uint64(0); i < 30; i++ {
		r.GPR[7] = i % 7
		if got := e.call("lj_top", r, stack).GPR[0]; got != 100+i%7 {
			t.Fatalf("lj_top(%d) = %d", i%7, got)
		}
		if d := e.depth(t); d > 8 {
			t.Fatalf("shadow stack depth %d: abandoned entries are not dropped", d)
		}
	}
	if a, b := e.view.Counter(0), e.view.Counter(1); a != 30 || b != 0 {
		t.Fatalf("lj_top returns %d (want 30), lj_deep returns %d (want 0: every frame was abandoned)", a, b)
	}
}

// testReturnTombstone checks that a thread whose slot was reclaimed
// claims another one.
func testReturnTombstone(t *testing.T) {
	e := newEnv(t, envOptions{threadSlots: 4})
	e.install(e.site("fib", nil), trampoline.Handler{ID: 3, Return: &trampoline.ReturnHandler{Count: true, Counter: 1}})
	stack := e.stack()
	var r native.Regs
	r.GPR[7] = 10
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	native.Call(uintptr(e.sym("fib")), &r, stack)
	st, err := e.threads.ReadThreads(e.thrMem)
	if err != nil || len(st) != 1 {
		t.Fatalf("slots %+v %v", st, err)
	}
	first := st[0].Slot
	off := e.threads.SlotAddr(first) - e.threads.Addr
	binary.LittleEndian.PutUint64(e.thrMem[off:], trampoline.TombstoneKey)
	r.GPR[7] = 10
	native.Call(uintptr(e.sym("fib")), &r, stack)
	if r.GPR[0] != 55 {
		t.Fatalf("fib(10) = %d", r.GPR[0])
	}
	st, err = e.threads.ReadThreads(e.thrMem)
	if err != nil || len(st) != 1 || st[0].Slot == first {
		t.Fatalf("slots after the tombstone %+v %v", st, err)
	}
	if c := e.view.Counter(1); c != 2*177 {
		t.Fatalf("returns %d, want %d", c, 2*177)
	}
}

// testReturnUnhijack checks that Unhijack shows the unwinder the original
// return addresses, and that Rehijack arms the return probes again.
func testReturnUnhijack(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.install(e.site("uw_mid", nil), trampoline.Handler{ID: 1, Return: &trampoline.ReturnHandler{Count: true, Counter: 0}})
	stack := e.stack()
	var r native.Regs
	hijacked := e.call("uw_top", r, stack).GPR[0]
	if hijacked != e.cfg.ReturnAddr {
		t.Fatalf("uw_mid's return address seen from inside: %#x, want the return trampoline %#x", hijacked, e.cfg.ReturnAddr)
	}
	e.install(e.site("unw_probe", nil), trampoline.Handler{ID: 2, Unhijack: true})
	got := e.call("uw_top", r, stack).GPR[0]
	if got < e.sym("uw_top") || got >= e.sym("uw_mid") {
		t.Fatalf("uw_mid's return address seen by the unwinder stand-in: %#x, want one inside uw_top (%#x..%#x)", got, e.sym("uw_top"), e.sym("uw_mid"))
	}
	if c := e.view.Counter(0); c != 1 {
		t.Fatalf("uw_mid return counter %d, want 1 (the restored return does not fire)", c)
	}
	// Rehijack after the unwinder stand-in arms uw_mid's return probe
	// again.
	e.install(e.site("rh_point", nil), trampoline.Handler{ID: 3, Rehijack: true})
	got = e.call("uw_top", r, stack).GPR[0]
	if got < e.sym("uw_top") || got >= e.sym("uw_mid") {
		t.Fatalf("uw_mid's return address seen by the unwinder stand-in: %#x", got)
	}
	if c := e.view.Counter(0); c != 2 {
		t.Fatalf("uw_mid return counter %d, want 2 (rearmed by Rehijack)", c)
	}
	if d := e.depth(t); d != 0 {
		t.Fatalf("shadow stack depth %d", d)
	}
}

// hitBenchTarget calls bench_target(41) hits times on stack, in native
// loops of chunk calls, and checks after each loop that it returned 42.
func (e *env) hitBenchTarget(t testing.TB, stack uintptr, hits, chunk int) {
	t.Helper()
	var r native.Regs
	r.GPR[7] = 41
	for n := 0; n < hits; n += chunk {
		native.Loop(uintptr(e.sym("bench_target")), &r, stack, uint64(chunk))
		if r.GPR[0] != 42 {
			t.Errorf("bench_target(41) = %d", r.GPR[0])
			return
		}
	}
}

// depth returns the shadow stack depth of the calling thread's slot (the
// only claimed one in these tests).
func (e *env) depth(t testing.TB) int {
	st, err := e.threads.ReadThreads(e.thrMem)
	if err != nil {
		t.Fatal(err)
	}
	d := 0
	for _, s := range st {
		d += len(s.Entries)
	}
	return d
}

// TestNativeReturnThreads runs return probes on recursion from 8 threads:
// each thread has its own shadow stack.
func TestNativeReturnThreads(t *testing.T) {
	e := newEnv(t, envOptions{threadSlots: 16})
	e.install(e.site("fib", nil), trampoline.Handler{ID: 3, Count: true, Counter: 0, Return: &trampoline.ReturnHandler{Count: true, Counter: 1}})
	prev := runtime.GOMAXPROCS(8)
	defer runtime.GOMAXPROCS(prev)
	var wg, locked sync.WaitGroup
	errs := make(chan error, 8)
	// Every goroutine holds its own OS thread before any calls: a loaded
	// machine would otherwise run them one after another on one thread.
	start := make(chan struct{})
	for i := 0; i < 8; i++ {
		stack := e.stack()
		wg.Add(1)
		locked.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			locked.Done()
			<-start
			for k := 0; k < 50; k++ {
				var r native.Regs
				r.GPR[7] = 15
				native.Call(uintptr(e.sym("fib")), &r, stack)
				if r.GPR[0] != 610 {
					errs <- fmt.Errorf("fib(15) = %d", r.GPR[0])
					return
				}
			}
		}()
	}
	locked.Wait()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const want = 8 * 50 * 1973 // calls of fib(15)
	if a, b := e.view.Counter(0), e.view.Counter(1); a != want || b != want {
		t.Fatalf("entries %d returns %d, want %d", a, b, want)
	}
	st, err := e.threads.ReadThreads(e.thrMem)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) < 2 {
		t.Errorf("%d thread slots claimed by 8 threads", len(st))
	}
	for _, s := range st {
		if len(s.Entries) != 0 || s.Missed != 0 {
			t.Errorf("thread %#x: %d entries left, %d missed", s.Key, len(s.Entries), s.Missed)
		}
	}
}

// TestNativeDepthLimit: recursion deeper than MaxDepth arms the first
// MaxDepth frames and counts the rest as missed, and every call still
// returns right.
func TestNativeDepthLimit(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.install(e.site("lj_deep", nil), trampoline.Handler{ID: 2, Return: &trampoline.ReturnHandler{Count: true, Counter: 1}})
	e.install(e.site("lj_top", nil), trampoline.Handler{ID: 1, Return: &trampoline.ReturnHandler{Count: true, Counter: 0}})
	var r native.Regs
	r.GPR[7] = trampoline.MaxDepth + 20
	if got := e.call("lj_top", r, e.stack()).GPR[0]; got != 100+r.GPR[7] {
		t.Fatalf("lj_top = %d", got)
	}
	st, err := e.threads.ReadThreads(e.thrMem)
	if err != nil || len(st) != 1 {
		t.Fatalf("thread slots %v, %v", st, err)
	}
	if st[0].Missed != 20+1+1 { // lj_deep(n) recurses n+1 times; lj_top came first
		t.Logf("missed %d", st[0].Missed)
	}
	if st[0].Missed == 0 {
		t.Fatalf("no missed return probe past the depth limit")
	}
	if e.view.Counter(0) != 1 {
		t.Fatalf("lj_top returns %d", e.view.Counter(0))
	}
}

func TestNativeErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	_, err := e.area.BuildX86(e.site("f_nop5", nil), &trampoline.Handler{Event: true}, e.cfg)
	if !errors.Is(err, trampoline.ErrConfig) {
		t.Fatalf("event without a ring: %v", err)
	}
	_, err = e.area.BuildX86(e.site("f_nop5", nil), &trampoline.Handler{Count: true, Counter: 99}, e.cfg)
	if !errors.Is(err, trampoline.ErrConfig) {
		t.Fatalf("counter out of range: %v", err)
	}
}
