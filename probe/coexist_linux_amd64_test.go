//go:build linux && amd64

package probe_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/probe/kuprobe"
)

// coexistFixture builds testdata/coexist (flags as in its Makefile): the
// program and its library, side by side.
func coexistFixture(t *testing.T) (prog, lib string) {
	t.Helper()
	return fixture.Build(t, fixture.Coexist), fixture.Build(t, fixture.CoexistLib)
}

// coexistRun is a traced run of the coexist fixture.
type coexistRun struct {
	tr    *probe.Tracer
	lines chan string // the program's output, line by line
	lib   string
	elf   *elfscan.File
}

// startCoexist spawns the fixture for ms milliseconds with the probes of
// specs (on the library's functions) in force once it has loaded its
// library, and returns when it prints "started" with every probe live.
func startCoexist(t *testing.T, ms int, opts *probe.Options, specs ...string) *coexistRun {
	t.Helper()
	prog, lib := coexistFixture(t)
	f, err := elfscan.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	so := &probe.SpawnOptions{Stdout: wr}
	if opts != nil {
		so.Options = *opts
	}
	tr, err := probe.Spawn([]string{prog, lib, strconv.Itoa(ms)}, so)
	wr.Close()
	if err != nil {
		rd.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Kill() })
	if _, err := tr.Add(specs...); err != nil {
		t.Fatal(err)
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	r := &coexistRun{tr: tr, lines: make(chan string, 16), lib: lib, elf: f}
	go func() {
		defer rd.Close()
		sc := bufio.NewScanner(rd)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	r.expect(t, "started")
	// The library is loaded (dlopen returned): its sites are live.
	deadline := time.Now().Add(10 * time.Second)
	for live := 0; live < len(specs); {
		if time.Now().After(deadline) {
			t.Fatalf("the probes are not live: %+v", tr.Stats().Probes)
		}
		live = 0
		for _, p := range tr.Stats().Probes {
			for _, s := range p.Sites {
				if s.Live {
					live++
					break
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	return r
}

// expect waits for the program's line want.
func (r *coexistRun) expect(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("the program ended before printing %q", want)
			}
			if l == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %q from the program", want)
		}
	}
}

// kernelProbe registers a counting kernel uprobe on the library's
// function sym for the traced process.
func (r *coexistRun) kernelProbe(t *testing.T, sym string) *kuprobe.Counter {
	t.Helper()
	off, err := r.elf.TextOffset(funcAddr(t, r.elf, sym))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kuprobe.Open(r.lib, off, r.tr.Pid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var callsLine = regexp.MustCompile(`^calls cx_push (\d+) cx_test (\d+) cx_args (\d+)$`)

// finish waits for the program's end: it must exit 0 after printing its
// calls, which it returns by function.
func (r *coexistRun) finish(t *testing.T) map[string]uint64 {
	t.Helper()
	calls := map[string]uint64{}
	for l := range r.lines {
		if m := callsLine.FindStringSubmatch(l); m != nil {
			for i, name := range []string{"cx_push", "cx_test", "cx_args"} {
				calls[name], _ = strconv.ParseUint(m[i+1], 10, 64)
			}
		} else if l != "args on" && l != "args off" {
			t.Errorf("the program says %q", l)
		}
	}
	st, err := r.tr.Wait()
	if err != nil || st.Signal != 0 || st.Code != 0 {
		t.Fatalf("the traced program ended with %+v, %v (a torn site kills it)", st, err)
	}
	if len(calls) == 0 {
		t.Fatal("the program printed no call counts")
	}
	return calls
}

// siteOf returns the site of the probe on sym.
func siteOf(t *testing.T, st probe.Stats, sym string) probe.SiteStats {
	t.Helper()
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			if s.Symbol == sym {
				return s
			}
		}
	}
	t.Fatalf("no site at %s in %+v", sym, st.Probes)
	return probe.SiteStats{}
}

// coexistOnce is the reproducer on the fixture: entry probes on
// a malloc-like and a free-like function (their first instructions: push
// %r13, test %rdi,%rdi), with ret their return probes too, then a kernel
// uprobe on each for hold, then removed, and the program runs on for
// after. The program must run on and compute right, and probeopt's counts
// equal its calls (the jumps follow the kept first instructions: the
// kernel's int3 and its removal touch no byte of theirs; under a return
// probe the slot undoes the kept push and runs it again); the kernel
// counts too.
func coexistOnce(t *testing.T, ret bool, hold, after time.Duration) {
	specs := []string{"libcoexist.so:cx_push", "libcoexist.so:cx_test"}
	if ret {
		specs = append(specs, "libcoexist.so:cx_push%return", "libcoexist.so:cx_test%return")
	}
	r := startCoexist(t, 60000, nil, specs...)
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", r.tr.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for sym, kept := range map[string]int{"cx_push": 2, "cx_test": 3} {
		s := siteOf(t, r.tr.Stats(), sym)
		if s.Strategy != plan.TrampolineDetour {
			t.Fatalf("%s: %s (%s), want a detour", sym, s.Strategy, s.Detail)
		}
		// The first instruction is the file's, the jump follows it.
		file, err := r.elf.Code(s.Addr, uint64(kept+1))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, kept+1)
		if _, err := mem.ReadAt(got, int64(s.RuntimeAddr)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:kept], file[:kept]) || got[kept] != 0xe9 {
			t.Fatalf("%s: memory holds %x, the file %x: want the first instruction kept and a jump after it", sym, got, file)
		}
	}
	kp, kt := r.kernelProbe(t, "cx_push"), r.kernelProbe(t, "cx_test")
	time.Sleep(hold)
	np, _ := kp.Count()
	nt, _ := kt.Count()
	kp.Close()
	kt.Close()
	time.Sleep(after)
	syscall.Kill(r.tr.Pid(), syscall.SIGINT)
	calls := r.finish(t)
	for _, p := range r.tr.Stats().Probes {
		sym := strings.TrimSuffix(strings.TrimPrefix(p.Spec, "libcoexist.so:"), "%return")
		if len(p.Sites) != 1 || p.Sites[0].Lost != "" || p.Hits != calls[sym] || p.DepthMissed != 0 {
			t.Errorf("%s: probeopt counted %d (%+v), the program made %d calls", p.Spec, p.Hits, p.Sites, calls[sym])
		}
	}
	for sym, kernel := range map[string]uint64{"cx_push": np, "cx_test": nt} {
		if kernel == 0 || kernel > calls[sym] {
			t.Errorf("%s: the kernel counted %d of %d calls while its uprobe was there", sym, kernel, calls[sym])
		}
	}
}

// TestKernelUprobeOverLiveSites: a kernel uprobe arrives at the entry of
// functions probeopt traces (entry probes, and in every other run return
// probes too), stays and goes; the traced program survives
// (PROBEOPT_LONG=1: 100 runs, and the count of survivors is logged).
func TestKernelUprobeOverLiveSites(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	runs := 3
	if testenv.Long() {
		runs = 100
	}
	survived := 0
	for i := 0; i < runs; i++ {
		// Every other run with return probes too.
		ok := t.Run(fmt.Sprint(i), func(t *testing.T) { coexistOnce(t, i%2 == 1, 150*time.Millisecond, 50*time.Millisecond) })
		if ok {
			survived++
		}
	}
	t.Logf("%d of %d traced runs survived a kernel uprobe over their live sites", survived, runs)
}

// TestKernelUprobeOverJump: a site whose jump must start at the
// address (cx_args writes rdx first, and entry events record it) is
// exposed to a kernel uprobe: the engine finds the kernel's int3 over its
// jump within the verification interval, puts the file's bytes back
// around it and reports the site lost; when the kernel's uprobe goes, the
// text is the file's and the program calls the function again, rightly.
// The program does not call the function while the kernel's int3 and the
// jump share it (a thread that did would run the kernel's copy of the
// first instruction, then the jump's displacement).
func TestKernelUprobeOverJump(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	r := startCoexist(t, 60000, &probe.Options{Events: true, VerifyInterval: 5 * time.Millisecond}, "libcoexist.so:cx_args")
	go func() {
		for range r.tr.Events() {
		}
	}()
	s := siteOf(t, r.tr.Stats(), "cx_args")
	if s.Strategy != plan.TrampolineDetour {
		t.Fatalf("cx_args: %s (%s), want a detour", s.Strategy, s.Detail)
	}
	// The site counts before the calls stop.
	for deadline := time.Now().Add(10 * time.Second); siteOf(t, r.tr.Stats(), "cx_args").Hits == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("cx_args is never called")
		}
	}
	syscall.Kill(r.tr.Pid(), syscall.SIGUSR1)
	r.expect(t, "args off")
	k := r.kernelProbe(t, "cx_args")
	deadline := time.Now().Add(10 * time.Second)
	for s = siteOf(t, r.tr.Stats(), "cx_args"); s.Lost == ""; s = siteOf(t, r.tr.Stats(), "cx_args") {
		if time.Now().After(deadline) {
			t.Fatal("the kernel's int3 over the jump was not found")
		}
		time.Sleep(time.Millisecond)
	}
	if s.Lost != probe.ReasonKernelUprobe || s.Live {
		t.Errorf("cx_args: lost %q, live %v: %s", s.Lost, s.Live, s.LostDetail)
	}
	t.Logf("cx_args: %s", s.LostDetail)
	k.Close()
	// The kernel wrote the file's byte back: the text is the file's.
	want, err := r.elf.Code(funcAddr(t, r.elf, "cx_args"), 8)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", r.tr.Pid()))
	if err != nil {
		st, werr := r.tr.Wait()
		t.Fatalf("%v; the program ended: %+v, %v", err, st, werr)
	}
	defer mem.Close()
	if _, err := mem.ReadAt(got, int64(s.RuntimeAddr)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("after the kernel's uprobe went, memory holds %x at cx_args, the file %x", got, want)
	}
	syscall.Kill(r.tr.Pid(), syscall.SIGUSR2)
	r.expect(t, "args on")
	syscall.Kill(r.tr.Pid(), syscall.SIGINT)
	calls := r.finish(t)
	// The worker thread may have been inside cx_args's slot, past the
	// jump and before its count, when the main thread said "args off":
	// one hit may land after the site was taken out; no more.
	if after := siteOf(t, r.tr.Stats(), "cx_args"); after.Hits < s.Hits || after.Hits > s.Hits+1 || after.Hits == 0 || after.Hits >= calls["cx_args"] {
		t.Errorf("cx_args: %d hits when lost, %d at the end, of %d calls", s.Hits, after.Hits, calls["cx_args"])
	}
}

// TestKernelUprobeFirst: a site a kernel uprobe already holds is refused
// with that reason (as a trap site, and as a jump at the address), and
// a site whose kept first instruction holds the kernel's int3 takes its
// jump beside it.
func TestKernelUprobeFirst(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	prog, lib := coexistFixture(t)
	f, err := elfscan.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		name string
		opts probe.Options
	}{{"traps", probe.Options{NoTrampolines: true}}, {"events", probe.Options{Events: true}}} {
		t.Run(c.name, func(t *testing.T) {
			so := &probe.SpawnOptions{Options: c.opts}
			tr, err := probe.Spawn([]string{prog, lib, "300"}, so)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Kill()
			go func() {
				for range tr.Events() {
				}
			}()
			// Run until the library is mapped, then hold the process
			// (an Add stops it) with a kernel uprobe on cx_args.
			if _, err := tr.Add("libcoexist.so:cx_test"); err != nil {
				t.Fatal(err)
			}
			if err := tr.Resume(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); tr.Stats().Probes[0].Hits == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("cx_test is never called")
				}
			}
			off, err := f.TextOffset(funcAddr(t, f, "cx_args"))
			if err != nil {
				t.Fatal(err)
			}
			k, err := kuprobe.Open(lib, off, tr.Pid(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			time.Sleep(20 * time.Millisecond) // the kernel's int3 is in (written at registration)
			_, err = tr.Add("libcoexist.so:cx_args")
			var rej *probe.RejectedError
			if !errors.As(err, &rej) || rej.Reason != probe.ReasonKernelUprobe {
				t.Fatalf("Add over a kernel uprobe: %v, want a refusal %q", err, probe.ReasonKernelUprobe)
			}
			t.Logf("%v", rej)
		})
	}
	// The kept first instruction: cx_push's jump follows its push.
	r := startCoexist(t, 60000, nil, "libcoexist.so:cx_test")
	k := r.kernelProbe(t, "cx_push")
	time.Sleep(20 * time.Millisecond)
	if _, err := r.tr.Add("libcoexist.so:cx_push"); err != nil {
		t.Fatalf("Add beside a kernel uprobe at the kept first instruction: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	n, _ := k.Count()
	k.Close()
	syscall.Kill(r.tr.Pid(), syscall.SIGINT)
	calls := r.finish(t)
	if s := siteOf(t, r.tr.Stats(), "cx_push"); s.Hits == 0 || s.Hits > calls["cx_push"] || n == 0 {
		t.Errorf("cx_push: probeopt %d, kernel %d, of %d calls", s.Hits, n, calls["cx_push"])
	}
}

// funcAddr returns the link-time address of function name of f.
func funcAddr(t *testing.T, f *elfscan.File, name string) uint64 {
	t.Helper()
	fns, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range fns {
		if fn.Name == name {
			return fn.Addr
		}
	}
	t.Fatalf("no function %s", name)
	return 0
}

// TestKernelUprobeOverTrap: a kernel uprobe arrives over an int3 of
// probeopt's (the kernel writes nothing over an int3, serves the hits
// while it is there, and writes the file's byte back when it goes). The
// program runs on, and probeopt reports the site lost to the kernel once
// the file's byte is back.
func TestKernelUprobeOverTrap(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	r := startCoexist(t, 60000, &probe.Options{NoTrampolines: true}, "libcoexist.so:cx_test")
	k := r.kernelProbe(t, "cx_test")
	time.Sleep(50 * time.Millisecond)
	n, _ := k.Count()
	k.Close()
	deadline := time.Now().Add(10 * time.Second)
	s := siteOf(t, r.tr.Stats(), "cx_test")
	for ; s.Lost == ""; s = siteOf(t, r.tr.Stats(), "cx_test") {
		if time.Now().After(deadline) {
			t.Fatal("the int3 the kernel's removal took away was not found")
		}
		time.Sleep(time.Millisecond)
	}
	syscall.Kill(r.tr.Pid(), syscall.SIGINT)
	calls := r.finish(t)
	if s.Lost != probe.ReasonKernelUprobe || n == 0 || s.Hits+n > calls["cx_test"] {
		t.Errorf("cx_test: lost %q (%s); probeopt %d, kernel %d, of %d calls", s.Lost, s.LostDetail, s.Hits, n, calls["cx_test"])
	}
	t.Logf("cx_test: probeopt %d, kernel %d, of %d calls: %s", s.Hits, n, calls["cx_test"], s.LostDetail)
}

// TestKernelUprobeInsideJump: a kernel uprobe at an instruction the jump
// would replace (cx_test's je, after the kept test): the site takes an
// int3 at its address instead, and SiteStats.Fallback says why; the
// program runs on while both count.
func TestKernelUprobeInsideJump(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	r := startCoexist(t, 60000, nil, "libcoexist.so:cx_push")
	off, err := r.elf.TextOffset(funcAddr(t, r.elf, "cx_test") + 3) // the je after test %rdi,%rdi
	if err != nil {
		t.Fatal(err)
	}
	k, err := kuprobe.Open(r.lib, off, r.tr.Pid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := r.tr.Add("libcoexist.so:cx_test"); err != nil {
		t.Fatal(err)
	}
	s := siteOf(t, r.tr.Stats(), "cx_test")
	if s.Strategy == plan.TrampolineDetour || s.Strategy == plan.TrampolineNop || !strings.Contains(s.Fallback, "kernel uprobe") {
		t.Errorf("cx_test beside a kernel uprobe inside its jump: %s, fallback %q", s.Strategy, s.Fallback)
	}
	t.Logf("cx_test: %s: %s", s.Strategy, s.Fallback)
	time.Sleep(20 * time.Millisecond)
	n, _ := k.Count()
	k.Close()
	syscall.Kill(r.tr.Pid(), syscall.SIGINT)
	calls := r.finish(t)
	if s := siteOf(t, r.tr.Stats(), "cx_test"); s.Hits == 0 || s.Hits > calls["cx_test"] || n == 0 || s.Lost != "" {
		t.Errorf("cx_test: probeopt %d, kernel %d, of %d calls; lost %q %s", s.Hits, n, calls["cx_test"], s.Lost, s.LostDetail)
	}
}

// TestSystemWideUprobeFirst: a kernel uprobe in every process (as
// bpftrace's and perf's are), registered before probeopt reads the file.
// The kernel puts its int3 in every private mapping of the file that may
// execute, the engine's own read-only view of the file too, from which the
// plan sees an int3 at the function's start: the site is refused as
// kernel-uprobe (the file, read with pread, has another byte there), not
// as an instruction that always traps. The program runs on.
func TestSystemWideUprobeFirst(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	_, lib := coexistFixture(t)
	f, err := elfscan.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	off, err := f.TextOffset(funcAddr(t, f, "cx_args"))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	k, err := kuprobe.Open(lib, off, -1, &kuprobe.Options{AllProcesses: true})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	r := startCoexist(t, 60000, nil, "libcoexist.so:cx_test")
	_, err = r.tr.Add("libcoexist.so:cx_args")
	var rej *probe.RejectedError
	if !errors.As(err, &rej) || rej.Reason != probe.ReasonKernelUprobe {
		t.Errorf("Add under a kernel uprobe of every process: %v, want a refusal %q", err, probe.ReasonKernelUprobe)
	}
	t.Logf("%v", err)
	syscall.Kill(r.tr.Pid(), syscall.SIGINT)
	r.finish(t)
}
