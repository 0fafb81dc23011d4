package trampoline_test

// Tests against a traced C++ program (testdata/trampoline/fixture.cc):
// the trampolines are installed the way the engine will install them — a
// memfd and mappings made inside the tracee through proc, the slot area
// placed from its /proc/PID/maps, code written through /proc/PID/mem, the
// site rewrites applied with batchpatch in one stop — and the program is
// detached before it runs, so that every hit goes through a trampoline
// and nothing traps.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// fixtureFlags are the flags of testdata/trampoline/Makefile.
var fixtureFlags = []string{"-O2", "-g", "-pthread", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls"}

var (
	fixtureOnce sync.Once
	fixturePath string
	fixtureErr  error
)

func buildFixture(t testing.TB) string {
	t.Helper()
	gxx := testenv.MustHaveTool(t, "g++")
	fixtureOnce.Do(func() {
		src := filepath.Join("..", "testdata", "trampoline")
		files := []string{"fixture.cc", "leaf_x86.S"}
		h := sha256.New()
		fmt.Fprintln(h, fixtureFlags)
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				fixtureErr = err
				return
			}
			h.Write(b)
		}
		dir := filepath.Join(os.TempDir(), "probeopt-tramp-fixture-"+hex.EncodeToString(h.Sum(nil))[:16])
		out := filepath.Join(dir, "fixture")
		if _, err := os.Stat(out); err == nil {
			fixturePath = out
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fixtureErr = err
			return
		}
		tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
		args := append(append([]string{}, fixtureFlags...), "-o", tmp)
		for _, f := range files {
			args = append(args, filepath.Join(src, f))
		}
		if b, err := exec.Command(gxx, args...).CombinedOutput(); err != nil {
			fixtureErr = fmt.Errorf("g++: %v\n%s", err, b)
			return
		}
		fixtureErr = os.Rename(tmp, out)
		fixturePath = out
	})
	if fixtureErr != nil {
		t.Fatalf("build fixture: %v", fixtureErr)
	}
	return fixturePath
}

// kv parses "word k=v k=v ..." into a map.
func kv(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

func num(t testing.TB, m map[string]string, k string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(m[k], "0x"), map[bool]int{true: 16, false: 10}[strings.HasPrefix(m[k], "0x")], 64)
	if err != nil {
		if n, err2 := strconv.ParseInt(m[k], 10, 64); err2 == nil {
			return uint64(n)
		}
		t.Fatalf("field %s=%q: %v", k, m[k], err)
	}
	return v
}

// traced is a running fixture. It runs untraced (signals reach it at full
// speed); install attaches to it like an engine attaching to a pid, and
// detaches once the trampolines are in.
type traced struct {
	t     testing.TB
	cmd   *exec.Cmd
	pid   int
	in    *os.File
	out   *bufio.Reader
	ready map[string]string
}

func startTraced(t testing.TB) *traced {
	t.Helper()
	testenv.NeedPtrace(t)
	path := buildFixture(t)
	inR, inW := fixture.Pipe(t)
	outR, outW := fixture.Pipe(t)
	cmd := exec.Command(path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, outW
	err := cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	tr := &traced{t: t, cmd: cmd, pid: cmd.Process.Pid, in: inW, out: bufio.NewReader(outR)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		inW.Close()
		outR.Close()
	})
	tr.ready = kv(tr.line(10 * time.Second))
	return tr
}

// line reads the next output line.
func (tr *traced) line(d time.Duration) string {
	tr.t.Helper()
	type res struct {
		s   string
		err error
	}
	c := make(chan res, 1)
	go func() {
		s, err := tr.out.ReadString('\n')
		c <- res{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			tr.t.Fatalf("fixture output: %v (%q)", r.err, r.s)
		}
		return r.s
	case <-time.After(d):
		tr.t.Fatalf("no output line within %v", d)
	}
	return ""
}

// run runs the workloads with n iterations per thread and returns the
// result line (skipping other output, such as a C++ terminate message,
// which it returns as an error line).
func (tr *traced) run(n int) map[string]string {
	tr.t.Helper()
	return tr.result(fmt.Sprintf("run %d", n))
}

// result sends the fixture the command and returns its result line's
// fields.
func (tr *traced) result(cmd string) map[string]string {
	tr.t.Helper()
	fmt.Fprintln(tr.in, cmd)
	l := tr.line(60 * time.Second)
	if !strings.HasPrefix(l, "result ") {
		tr.t.Fatalf("fixture: %q", l)
	}
	return kv(l)
}

// setup is the engine's part: shared data in a memfd, the thread table,
// the slot area, all mapped inside the tracee.
type setup struct {
	data    *trampoline.Data
	view    *trampoline.View
	threads *trampoline.Threads
	areas   []*trampoline.Area
	cfg     *trampoline.Config
	patches []batchpatch.Patch
	slots   []*trampoline.Trampoline
}

type probeSpec struct {
	addr uint64
	h    trampoline.Handler
}

// install attaches to the traced process, maps a data area (ring
// records), a thread table and slot areas in it, builds a slot for every
// probe with cfg, and writes them and the sites' jumps in one batch.
func (tr *traced) install(cfg trampoline.Config, ring int, probes []probeSpec) *setup {
	t := tr.t
	t.Helper()
	p, err := proc.Attach(tr.pid, nil)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	defer func() {
		if err := p.Detach(); err != nil {
			t.Errorf("detach: %v", err)
		}
	}()
	st := &setup{}
	if st.data, err = trampoline.NewData(0, 32, ring); err != nil {
		t.Fatal(err)
	}
	if st.threads, err = trampoline.NewThreads(0, 64); err != nil {
		t.Fatal(err)
	}
	sites := readSites(t, p, probes)
	// Sites far apart (the executable, libgcc_s) get an area each.
	groups := siteGroups(sites)
	memfd, areaAt := st.mapAreas(t, p, sites, groups)
	st.mapView(t, tr.pid, memfd)
	for _, at := range areaAt {
		a, err := trampoline.NewArea(at, fixtureAreaSize)
		if err != nil {
			t.Fatal(err)
		}
		st.areas = append(st.areas, a)
	}
	cfg.Data, cfg.Threads = st.data, st.threads
	st.cfg = &cfg
	st.writeSlots(t, p, probes, sites, groups)
	return st
}

// fixtureAreaSize is the size of each slot area install maps.
const fixtureAreaSize = 1 << 16

// readSites reads and analyses the site of every probe: its bytes, and
// what the slots must reach.
func readSites(t testing.TB, p *proc.Process, probes []probeSpec) []*trampoline.Site {
	t.Helper()
	var sites []*trampoline.Site
	for _, pr := range probes {
		code := make([]byte, 48)
		if err := p.ReadMemory(pr.addr, code); err != nil {
			t.Fatal(err)
		}
		s, err := trampoline.AnalyzeX86(pr.addr, code, nil)
		if err != nil {
			t.Fatalf("site %#x: %v", pr.addr, err)
		}
		sites = append(sites, s)
	}
	return sites
}

// siteGroups is the group of every site (trampoline.Clusters): one slot
// area serves each group.
func siteGroups(sites []*trampoline.Site) []int {
	var addrs []uint64
	for _, s := range sites {
		addrs = append(addrs, s.Addr)
	}
	groups := trampoline.Clusters(addrs, 0)
	of := make([]int, len(sites))
	for i, s := range sites {
		of[i] = -1
		for g, members := range groups {
			if slices.Contains(members, s.Addr) {
				of[i] = g
				break
			}
		}
	}
	return of
}

// mapAreas maps, in one stop of the process, the data area (in a memfd,
// returned), the thread table and a slot area within reach of each group
// of sites, at the addresses it returns by group.
func (st *setup) mapAreas(t testing.TB, p *proc.Process, sites []*trampoline.Site, groups []int) (memfd int, areaAt []uint64) {
	t.Helper()
	areaAt = make([]uint64, slices.Max(groups)+1)
	_, err := p.Stopped(func(w *proc.World) error {
		fd, err := w.MemfdCreate("probeopt-data", unix.MFD_CLOEXEC)
		if err != nil {
			return err
		}
		memfd = fd
		if _, err := w.Syscall(unix.SYS_FTRUNCATE, uint64(fd), st.data.Size()); err != nil {
			return err
		}
		if st.data.Addr, err = w.Mmap(0, st.data.Size(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED, fd, 0); err != nil {
			return err
		}
		if st.threads.Addr, err = w.Mmap(0, st.threads.Size(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1, 0); err != nil {
			return err
		}
		pm, err := w.Maps()
		if err != nil {
			return err
		}
		maps := make([]trampoline.Mapping, len(pm))
		for i, m := range pm {
			maps[i] = trampoline.Mapping{Start: m.Start, End: m.End, Path: m.Path}
		}
		for g := range areaAt {
			var reach []uint64
			for i, s := range sites {
				if groups[i] == g {
					reach = append(reach, s.Reach()...)
				}
			}
			at, err := trampoline.Place(maps, reach, fixtureAreaSize, nil)
			if err != nil {
				return err
			}
			got, err := w.Mmap(at, fixtureAreaSize, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, -1, 0)
			if err == nil && got != at {
				err = fmt.Errorf("slot area mapped at %#x, asked %#x", got, at)
			}
			if err != nil {
				return err
			}
			areaAt[g] = at
			maps = append(maps, trampoline.Mapping{Start: at, End: at + fixtureAreaSize})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("tracee mappings: %v", err)
	}
	return memfd, areaAt
}

// mapView maps the tracer's own view of the data area's memfd (the
// tracee's fd memfd), initialises the area and sets st.view.
func (st *setup) mapView(t testing.TB, pid, memfd int) {
	t.Helper()
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, memfd), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.data.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	if err := st.data.Init(mem); err != nil {
		t.Fatal(err)
	}
	if st.view, err = trampoline.NewView(mem); err != nil {
		t.Fatal(err)
	}
}

// writeSlots writes the return trampoline (one serves every area) and the
// slot of every probe into the areas, then the sites' jumps in one batch.
func (st *setup) writeSlots(t testing.TB, p *proc.Process, probes []probeSpec, sites []*trampoline.Site, groups []int) {
	t.Helper()
	rat, code, err := st.areas[0].ReturnX86(st.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteMemory(rat, code); err != nil {
		t.Fatal(err)
	}
	for i, pr := range probes {
		h := pr.h
		tramp, err := st.areas[groups[i]].BuildX86(sites[i], &h, st.cfg)
		if err != nil {
			t.Fatalf("build %#x: %v", pr.addr, err)
		}
		if err := p.WriteMemory(tramp.Slot, tramp.Code); err != nil {
			t.Fatal(err)
		}
		st.slots = append(st.slots, tramp)
		st.patches = append(st.patches, batchpatch.Patch{Addr: tramp.Install.Addr, Old: tramp.Install.Old, New: tramp.Install.New})
	}
	batchpatch.Sort(st.patches)
	res, err := batchpatch.Apply(p, st.patches, nil)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if err := res.Err(); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// Probe ids and counters of the full run.
const (
	idWork = iota + 1
	idFib
	idLjTop
	idLjDeep
	idThrower
	idCatcher
	idRZ
	idUSDT
	idRaise
	idResume
	idRethrow
	idBeginCatch
)

func fullProbes(tr *traced, unhijack bool) []probeSpec {
	a := func(k string) uint64 { return num(tr.t, tr.ready, k) }
	ps := []probeSpec{
		{a("work"), trampoline.Handler{ID: idWork, Count: true, Counter: 0, Event: true}},
		{a("fibr"), trampoline.Handler{ID: idFib, Count: true, Counter: 1, Return: &trampoline.ReturnHandler{Count: true, Counter: 2}}},
		{a("lj_top"), trampoline.Handler{ID: idLjTop, Count: true, Counter: 3, Return: &trampoline.ReturnHandler{Count: true, Counter: 4}}},
		{a("lj_deep"), trampoline.Handler{ID: idLjDeep, Count: true, Counter: 5, Return: &trampoline.ReturnHandler{Count: true, Counter: 6}}},
		{a("thrower"), trampoline.Handler{ID: idThrower, Count: true, Counter: 7, Return: &trampoline.ReturnHandler{Count: true, Counter: 8}}},
		{a("catcher"), trampoline.Handler{ID: idCatcher, Count: true, Counter: 9, Return: &trampoline.ReturnHandler{Count: true, Counter: 10, Event: true}}},
		{a("rz_site"), trampoline.Handler{ID: idRZ, Count: true, Counter: 11}},
		{a("usdt_site"), trampoline.Handler{ID: idUSDT, Count: true, Counter: 12}},
	}
	if unhijack {
		ps = append(ps,
			probeSpec{a("raise"), trampoline.Handler{ID: idRaise, Count: true, Counter: 13, Unhijack: true}},
			probeSpec{a("resume"), trampoline.Handler{ID: idResume, Count: true, Counter: 14, Unhijack: true}},
			probeSpec{a("rethrow"), trampoline.Handler{ID: idRethrow, Count: true, Counter: 15, Unhijack: true}},
			probeSpec{a("begin_catch"), trampoline.Handler{ID: idBeginCatch, Count: true, Counter: 16, Rehijack: true}})
	}
	return ps
}

// TestFixture runs the fixture's workloads before and after installing
// trampolines at every kind of site, detached, and checks that the
// program computes the same results and that the counters, events and
// return probes match what the program counted itself.
func TestFixture(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  trampoline.Config
	}{
		{"fsbase-lahf", trampoline.Config{ThreadPointer: trampoline.ThreadFSBase, Flags: trampoline.FlagsLAHF}},
		{"tcb-pushf", trampoline.Config{ThreadPointer: trampoline.ThreadTCB, Flags: trampoline.FlagsPushf}},
	} {
		t.Run(c.name, func(t *testing.T) { testFixture(t, c.cfg) })
	}
}

// fixtureRuns is the n of the fixture's runs in TestFixture.
const fixtureRuns = 5000

// testFixture runs the fixture untraced, installs the full set of probes
// with cfg and runs it again, with and without signals: the program's
// results do not change, and the counters and events are what it did.
func testFixture(t *testing.T, cfg trampoline.Config) {
	const n = fixtureRuns
	tr := startTraced(t)
	before := tr.run(n)
	beforeSig := tr.runSig(n)
	// install detaches: every hit must be served without the tracer.
	st := tr.install(cfg, 1<<16, fullProbes(tr, true))
	after := tr.run(n)
	for _, k := range []string{"sum", "fib", "lj", "exc", "usdt", "work_calls", "fib_calls", "lj_deep_calls", "thrower_calls", "dtor_calls"} {
		if before[k] != after[k] {
			t.Errorf("%s: %s before the trampolines, %s after", k, before[k], after[k])
		}
	}
	if after["rzbad"] != "0" {
		t.Errorf("the red-zone leaf returned a wrong value %s times", after["rzbad"])
	}
	checkFixtureCounters(t, st.view, after)
	checkFixtureEvents(t, tr, st.view, after)
	checkFixtureSignals(t, tr, st, beforeSig)
	fmt.Fprintln(tr.in, "quit")
	if l := tr.line(10 * time.Second); l != "bye" {
		t.Fatalf("fixture: %q", l)
	}
}

// checkCounter checks that counter what is want.
func checkCounter(t *testing.T, what string, got, want uint64) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %d, want %d", what, got, want)
	}
}

// checkFixtureCounters checks the counters of the full probes after a run
// whose results are after.
func checkFixtureCounters(t *testing.T, v *trampoline.View, after map[string]string) {
	t.Helper()
	const n = fixtureRuns
	ctr := func(i int) uint64 { return v.Counter(i) }
	calls := func(k string) uint64 { return num(t, after, k) }
	checkCounter(t, "work entries", ctr(0), calls("work_calls"))
	checkCounter(t, "fibr entries", ctr(1), calls("fib_calls"))
	checkCounter(t, "fibr returns", ctr(2), calls("fib_calls"))
	checkCounter(t, "lj_top entries", ctr(3), 8*n/100)
	checkCounter(t, "lj_top returns", ctr(4), 8*n/100)
	checkCounter(t, "lj_deep entries", ctr(5), calls("lj_deep_calls"))
	checkCounter(t, "lj_deep returns (all abandoned by longjmp)", ctr(6), 0)
	checkCounter(t, "thrower entries", ctr(7), calls("thrower_calls"))
	checkCounter(t, "thrower returns (all left by the exception)", ctr(8), 0)
	checkCounter(t, "catcher entries", ctr(9), 8*n/100)
	checkCounter(t, "catcher returns", ctr(10), 8*n/100)
	checkCounter(t, "red-zone leaf hits", ctr(11), 8*n)
	checkCounter(t, "usdt hits", ctr(12), 8*n)
	if ctr(13) != 8*n/100 {
		t.Errorf("_Unwind_RaiseException hits %d, want %d", ctr(13), 8*n/100)
	}
	if ctr(14) == 0 {
		t.Errorf("_Unwind_Resume never hit (the destructors' landing pads resume unwinding)")
	}
	checkCounter(t, "__cxa_begin_catch hits", ctr(16), 8*n/100)
}

// checkFixtureEvents checks the events of the full probes after a run
// whose results are after: one per work call with the arguments the
// threads passed, and one per catcher return with its value.
func checkFixtureEvents(t *testing.T, tr *traced, v *trampoline.View, after map[string]string) {
	t.Helper()
	const n = fixtureRuns
	tps := map[uint64]uint64{} // thread pointer -> thread index
	for i, s := range strings.Split(after["tps"], ",") {
		p, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		tps[p] = uint64(i)
	}
	evs := make([]trampoline.Event, 1<<16)
	nev := v.Read(evs)
	if v.Dropped() != 0 {
		t.Fatalf("%d events dropped", v.Dropped())
	}
	perThread := map[uint64][]uint64{}
	var catcherRets []int64
	for _, ev := range evs[:nev] {
		switch ev.Probe {
		case idWork:
			th, ok := tps[ev.Thread]
			a := ev.Args
			if !ok || ev.Kind != trampoline.EventEntry || a[0] != th || a[2] != 3*a[1] || int64(a[3]) != -int64(a[1]) ||
				a[4] != th<<32|a[1] || a[5] != 0x5555 || ev.IP != num(t, tr.ready, "work") {
				t.Fatalf("work event %+v (thread pointers %s)", ev, after["tps"])
			}
			perThread[th] = append(perThread[th], a[1])
		case idCatcher:
			if ev.Kind != trampoline.EventReturn {
				t.Fatalf("catcher event %+v", ev)
			}
			catcherRets = append(catcherRets, int64(ev.Ret))
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
	for th := uint64(0); th < 8; th++ {
		is := perThread[th]
		sort.Slice(is, func(a, b int) bool { return is[a] < is[b] })
		if len(is) != n || is[0] != 0 || is[n-1] != n-1 {
			t.Fatalf("thread %d: %d work events", th, len(is))
		}
		for i := range is {
			if is[i] != uint64(i) {
				t.Fatalf("thread %d: iteration %d missing", th, i)
			}
		}
	}
	var sum int64
	for _, r := range catcherRets {
		sum += r
	}
	if len(catcherRets) != 8*n/100 || sum != int64(num(t, after, "exc")) {
		t.Fatalf("%d catcher return events summing to %d, want %d and %s", len(catcherRets), sum, 8*n/100, after["exc"])
	}

}

// checkFixtureSignals runs the fixture again with signals whose handler
// calls probed functions, interrupting trampolines and return probes
// anywhere: its results are beforeSig, those of the untraced run.
func checkFixtureSignals(t *testing.T, tr *traced, st *setup, beforeSig map[string]string) {
	t.Helper()
	const n = fixtureRuns
	v := st.view
	ctr := func(i int) uint64 { return v.Counter(i) }
	for i := 0; i < 32; i++ {
		v.ResetCounter(i)
	}
	afterSig := tr.runSig(n)
	for _, k := range []string{"sum", "fib", "lj", "exc", "usdt", "rzbad", "work_calls", "thrower_calls", "dtor_calls", "sig_bad"} {
		if beforeSig[k] != afterSig[k] {
			t.Errorf("with signals: %s: %s before the trampolines, %s after", k, beforeSig[k], afterSig[k])
		}
	}
	sigs := num(t, afterSig, "sig_count")
	if sigs == 0 {
		t.Errorf("no signal was handled")
	}
	calls := func(k string) uint64 { return num(t, afterSig, k) }
	checkCounter(t, "with signals: fibr entries", ctr(1), calls("fib_calls"))
	checkCounter(t, "with signals: fibr returns", ctr(2), calls("fib_calls"))
	checkCounter(t, "with signals: lj_top entries", ctr(3), 8*n/100+sigs)
	checkCounter(t, "with signals: lj_top returns", ctr(4), 8*n/100+sigs)
	checkCounter(t, "with signals: lj_deep returns", ctr(6), 0)
	checkCounter(t, "with signals: catcher returns", ctr(10), 8*n/100)
	t.Logf("%d signals handled during the run", sigs)
	tr.checkShadowStacks(st)
}

// runSig runs the workloads with signals.
func (tr *traced) runSig(n int) map[string]string {
	tr.t.Helper()
	return tr.result(fmt.Sprintf("run %d sig", n))
}

// checkShadowStacks reads the thread table of the (detached) tracee:
// after every thread returned from every probed function, no armed entry
// may be left and none may have been missed.
func (tr *traced) checkShadowStacks(st *setup) {
	t := tr.t
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", tr.pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem := make([]byte, st.threads.Size())
	if _, err := f.ReadAt(mem, int64(st.threads.Addr)); err != nil {
		t.Fatalf("read the thread table: %v", err)
	}
	stacks, err := st.threads.ReadThreads(mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(stacks) == 0 {
		t.Fatalf("no thread slot claimed")
	}
	for _, s := range stacks {
		if len(s.Entries) != 0 || s.Missed != 0 {
			t.Errorf("thread %#x: %d entries left (%+v), %d missed", s.Key, len(s.Entries), s.Entries, s.Missed)
		}
	}
	t.Logf("%d thread slots claimed", len(stacks))
}

// TestFixtureExceptionNeedsUnhijack is the control for the unwinder
// probes: without them, an exception through a frame whose return address
// points at the return trampoline finds no unwind information there and
// the C++ runtime terminates the program (as it does through a Linux
// uretprobe).
func TestFixtureExceptionNeedsUnhijack(t *testing.T) {
	tr := startTraced(t)
	tr.install(trampoline.Config{}, 0, []probeSpec{
		{num(t, tr.ready, "thrower"), trampoline.Handler{ID: idThrower, Return: &trampoline.ReturnHandler{Count: true, Counter: 0}}},
	})
	fmt.Fprintf(tr.in, "run 100\n")
	l := tr.line(30 * time.Second)
	t.Logf("fixture: %s", l)
	if !strings.Contains(l, "terminate") {
		t.Fatalf("fixture survived an exception through a hijacked frame: %q", l)
	}
}
