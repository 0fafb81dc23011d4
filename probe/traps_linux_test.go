//go:build linux && (amd64 || arm64)

package probe_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// loopsFuncs are the functions of loops whose every instruction the trap
// tests probe.
var loopsFuncs = []string{"leaf", "sum", "pick", "scale", "rec", "store", "divmod", "bump", "main"}

// instSpecs returns a spec ("func+0xOFF") for every instruction of the
// named functions of the executable at path, found by a sweep from each
// function's start.
func instSpecs(t *testing.T, path string, funcs []string) []string {
	t.Helper()
	f, all := elfFuncs(t, path)
	want := map[string]bool{}
	for _, n := range funcs {
		want[n] = true
	}
	var specs []string
	for _, fn := range all {
		if !want[fn.Name] {
			continue
		}
		delete(want, fn.Name)
		code, err := f.Code(fn.Addr, fn.End-fn.Addr)
		if err != nil {
			t.Fatalf("%s: %v", fn.Name, err)
		}
		for off := 0; off < len(code); {
			n := 4
			if f.Arch == decode.X86_64 {
				var in decode.X86Inst
				if err := (decode.X86Decoder{}).Decode(code[off:], fn.Addr+uint64(off), &in); err != nil {
					break
				}
				n = in.Len
			}
			specs = append(specs, fmt.Sprintf("%s+%#x", fn.Name, off))
			off += n
		}
	}
	if len(want) > 0 {
		t.Fatalf("%s has no function %v", path, want)
	}
	return specs
}

// elfFuncs opens the ELF file at path for the rest of the test and
// returns it with its functions.
func elfFuncs(t *testing.T, path string) (*elfscan.File, []elfscan.Func) {
	t.Helper()
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	all, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	return f, all
}

// tracedRun spawns argv with opts, adds specs, runs it to its end and
// returns its output and the engine's statistics.
func tracedRun(t *testing.T, argv []string, opts *probe.Options, specs []string) ([]byte, probe.Stats) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, err := probe.Spawn(argv, &probe.SpawnOptions{Options: *opts, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Add(specs...); err != nil {
		// Refused sites of an accepted spec are listed in the stats; a
		// spec all of whose sites were refused is an error here, which
		// the caller looks at through the stats too.
		t.Logf("add: %v", firstLines(err.Error(), 5))
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Exited():
	case <-time.After(5 * time.Minute):
		_ = tr.Kill()
		t.Fatalf("%q did not end within 5 minutes under the tracer", argv)
	}
	st, err := tr.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("traced %q: status %+v, %v", argv, st, err)
	}
	stats := tr.Stats()
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b, stats
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines[n] = "..."
	}
	return strings.Join(lines, "\n")
}

// TestTrapsAgainstKernel probes every instruction of the loops fixture
// with traps only (each instruction emulated, or stepped where it stands),
// and checks that the program prints what it prints untraced, and that
// every site counts what a kernel uprobe at the same instruction counts in
// a run of its own (the sites the kernel accepts, as the linux-uprobes
// policy predicts). Both trap paths must have served hits.
func TestTrapsAgainstKernel(t *testing.T) {
	st := loopsAgainstKernel(t, &probe.Options{NoTrampolines: true})
	if st.Emulated == 0 || st.Stepped == 0 {
		t.Errorf("emulated %d, stepped %d: both trap paths should have run", st.Emulated, st.Stepped)
	}
}

// TestTrampolinesAgainstKernel is TestTrapsAgainstKernel with the plan's
// trampolines: on arm64 every instruction the plan lets take one is a
// word replaced by a b to its slot, on x86-64 a jump over the
// instructions it displaces (a site whose instruction another site's
// jump displaced takes traps). On arm64 most hit sites must have counted
// through their trampolines.
func TestTrampolinesAgainstKernel(t *testing.T) {
	st := loopsAgainstKernel(t, nil)
	tramp, hit := 0, 0
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			if s.Hits == 0 {
				continue
			}
			hit++
			if (s.Strategy == plan.TrampolineNop || s.Strategy == plan.TrampolineDetour) && s.Fallback == "" {
				tramp++
			}
		}
	}
	t.Logf("%d of %d hit sites counted by trampolines", tramp, hit)
	// On x86-64 a jump covers several of these sites, which then take
	// traps (17 of 139 hit sites had trampolines on the host).
	want := 1
	if runtime.GOARCH == "arm64" {
		want = hit / 2
	}
	if tramp < want {
		t.Errorf("%d of %d hit sites counted by trampolines", tramp, hit)
	}
}

// loopsAgainstKernel probes every instruction of loops with opts, checks
// the traced output and the counts against the kernel's uprobes, and
// returns the traced run's statistics.
func loopsAgainstKernel(t *testing.T, opts *probe.Options) probe.Stats {
	t.Helper()
	needKernelUprobes(t)
	exe := fixture.Build(t, fixture.Loops)
	argv := []string{exe, "40"} // 40 rounds: about 6,000 hits (each trap a few ms in the arm64 guest under TCG)
	plain, err := exec.Command(exe, argv[1:]...).Output()
	if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	if opts == nil {
		opts = &probe.Options{}
	}
	specs := instSpecs(t, exe, loopsFuncs)
	out, st := tracedRun(t, argv, opts, specs)
	if !bytes.Equal(out, plain) {
		t.Errorf("traced output %q, untraced %q", out, plain)
	}
	nsites, hit, refused := 0, 0, map[plan.Reason]int{}
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			nsites++
			if s.Hits > 0 {
				hit++
			}
		}
		for _, r := range p.Refused {
			refused[r.Reason]++
		}
	}
	t.Logf("%s (%s): %d specs, %d sites installed, %d hit, refused %v; traps %d, emulated %d, stepped %d", exe, runtime.GOARCH, len(specs), nsites, hit, refused, st.Traps, st.Emulated, st.Stepped)
	sites, skipped := kernelSites(t, st)
	if len(skipped) > 0 {
		sort.Strings(skipped)
		t.Logf("not compared (%d): %s", len(skipped), strings.Join(skipped, "; "))
	}
	kout, kernel := kernelRun(t, argv, nil, nil, sites)
	if !bytes.Equal(kout, plain) {
		t.Errorf("output under kernel uprobes %q, untraced %q", kout, plain)
	}
	t.Log(compareWithKernel(t, st, sites, kernel, 0))
	if len(sites) < nsites/2 {
		t.Errorf("%d of %d installed sites compared with the kernel", len(sites), nsites)
	}
	return st
}

// TestPatchWhileThreadsRun adds and removes probes at the entries of
// loops's functions while four threads run them, three times, then
// detaches while they run on. store, scale, divmod and bump are each
// called once per round, and a batch makes all its sites live (and takes
// them out) in one stop: in each window their hits may differ by at most
// two per thread (rounds cut at either end). After Detach the program's
// text must be byte for byte its file's, and it must run on.
func TestPatchWhileThreadsRun(t *testing.T) {
	exe := fixture.Build(t, fixture.Loops)
	const threads = 4
	tr, err := probe.Spawn([]string{exe, "1000000000", strconv.Itoa(threads)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Kill()
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	// The rounds start once the threads run (the program's start-up
	// takes seconds in the arm64 guest under load).
	if !fixture.Eventually(60*time.Second, func() bool {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", tr.Pid()))
		return err == nil && len(ents) > threads
	}) {
		t.Fatalf("the program did not start its %d threads", threads)
	}
	once := []string{"store", "scale", "divmod", "bump"}
	for round := 0; round < 3; round++ {
		time.Sleep(100 * time.Millisecond)
		probes, err := tr.Add(loopsFuncs...)
		if err != nil {
			t.Fatalf("round %d: add: %v", round, err)
		}
		time.Sleep(200 * time.Millisecond)
		st := tr.Stats()
		if err := tr.Remove(probes...); err != nil {
			t.Fatalf("round %d: remove: %v", round, err)
		}
		after := tr.Stats()
		hits := map[string]uint64{}
		tramps := 0
		for _, p := range after.Probes {
			if p.ID < probes[0].ID {
				continue
			}
			for _, s := range p.Sites {
				hits[s.Symbol] += s.Hits
				if s.Strategy == plan.TrampolineNop || s.Strategy == plan.TrampolineDetour {
					tramps++
				}
			}
		}
		lo, hi := hits[once[0]], hits[once[0]]
		for _, f := range once {
			lo, hi = min(lo, hits[f]), max(hi, hits[f])
		}
		t.Logf("round %d: %d trampolines; hits %v (stats before the removal: %d traps)", round, tramps, hits, st.Traps)
		if lo == 0 || hi-lo > 2*threads {
			t.Errorf("round %d: hits of the once-a-round functions %v differ by more than %d", round, hits, 2*threads)
		}
		select {
		case <-tr.Exited():
			t.Fatalf("round %d: the program ended", round)
		default:
		}
	}
	pid := tr.Pid()
	if err := tr.Detach(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := unix.Kill(pid, 0); err != nil {
		t.Fatalf("after Detach: %v", err)
	}
	compareText(t, pid, exe, loopsFuncs)
	_ = unix.Kill(pid, unix.SIGKILL)
}

// compareText compares the bytes of the named functions of exe in the
// memory of process pid with the file's.
func compareText(t *testing.T, pid int, exe string, funcs []string) {
	t.Helper()
	f, all := elfFuncs(t, exe)
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The load bias: the first mapping of the file is its first page.
	var base uint64
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.HasSuffix(line, exe) {
			fmt.Sscanf(line, "%x-", &base)
			break
		}
	}
	if base == 0 {
		t.Fatalf("%s not mapped in %d", exe, pid)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	checked := 0
	for _, fn := range all {
		if !slices.Contains(funcs, fn.Name) {
			continue
		}
		want, err := f.Code(fn.Addr, fn.End-fn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if _, err := mem.ReadAt(got, int64(base+fn.Addr)); err != nil {
			t.Fatalf("%s: %v", fn.Name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: memory %x, file %x", fn.Name, got, want)
		}
		checked += len(want)
	}
	t.Logf("%d bytes of %d functions as in the file", checked, len(funcs))
}

// TestEventArgs traces the entry of leaf with Options.Events (on arm64 a
// trap site: the engine makes no arm64 trampolines with events) and
// checks every event's first two argument registers against the calls
// loops makes by construction: in round i, leaf(i, 3), and from pick,
// leaf(i, i) when i%8 == 2 and leaf(i, 2) when i%8 == 5.
func TestEventArgs(t *testing.T) {
	exe := fixture.Build(t, fixture.Loops)
	const rounds = 40
	want := map[[2]uint64]int{}
	for i := uint64(0); i < rounds; i++ {
		want[[2]uint64{i, 3}]++
		switch i % 8 {
		case 2:
			want[[2]uint64{i, i}]++
		case 5:
			want[[2]uint64{i, 2}]++
		}
	}
	tr, err := probe.Spawn([]string{exe, strconv.Itoa(rounds)}, &probe.SpawnOptions{Options: probe.Options{Events: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Kill()
	if _, err := tr.Add("leaf"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	got := map[[2]uint64]int{}
	n := 0
	for ev := range tr.Events() {
		// int arguments: the upper halves of the registers are not set.
		got[[2]uint64{ev.Args[0] & 0xffffffff, ev.Args[1] & 0xffffffff}]++
		n++
	}
	if st, err := tr.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("traced: %+v, %v", st, err)
	}
	st := tr.Stats()
	t.Logf("%d events (%d dropped), %d traps", n, st.DroppedEvents, st.Traps)
	for k, w := range want {
		if got[k] != w {
			t.Errorf("leaf(%d, %d): %d events, want %d", k[0], k[1], got[k], w)
		}
	}
	for k, g := range got {
		if want[k] == 0 {
			t.Errorf("leaf(%d, %d): %d events, no such call", k[0], k[1], g)
		}
	}
}

// TestUSDTSemaphores traces every USDT probe of the committed usdt-pie
// fixture (its notes, two of them guarded by semaphores) with its own
// trampolines, then with traps, and checks each count against the
// program's construction for "usdt-pie a b" (argc 3): the seven probes of
// work and loop once per round (8 rounds), sema_start once and sema_done
// argc times, which the program runs only when the engine has raised
// their semaphores. The output must be the untraced one.
func TestUSDTSemaphores(t *testing.T) {
	exe := fixture.Committed(t, "usdt-pie")
	argv := []string{exe, "a", "b"}
	plain, err := exec.Command(exe, argv[1:]...).Output()
	if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	want := map[string]uint64{"sema_start": 1, "sema_done": 3}
	for _, n := range []string{"noargs", "one_reg", "imm", "mixed", "indexed", "global", "six", "loop"} {
		want[n] = 8
	}
	for _, traps := range []bool{false, true} {
		out, st := tracedRun(t, argv, &probe.Options{NoTrampolines: traps}, []string{"usdt:demo:*"})
		if !bytes.Equal(out, plain) {
			t.Errorf("traps %v: traced output %q, untraced %q", traps, out, plain)
		}
		got := map[string]uint64{}
		for _, p := range st.Probes {
			for _, s := range p.Sites {
				got[strings.TrimPrefix(s.Symbol, "usdt:demo:")] += s.Hits
			}
		}
		t.Logf("traps %v: %v (traps %d)", traps, got, st.Traps)
		for n, w := range want {
			if got[n] != w {
				t.Errorf("traps %v: usdt:demo:%s counted %d, want %d", traps, n, got[n], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("traps %v: probes %v, want %v", traps, got, want)
		}
	}
}
