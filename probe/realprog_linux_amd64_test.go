//go:build linux && amd64

package probe_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/probe/kuprobe"
)

// realRun traces argv with the specs, runs it again untraced with a
// counting kernel uprobe on every site the kernel accepts, and checks that
// both runs print what a plain run prints and that every site's hits equal
// the kernel's count. The program must be deterministic: the same
// arguments, environment and input make the same calls. slack is the
// relative difference a site may show and be logged instead of failing (0:
// exact; see compareWithKernel).
//
// The two counts come from twin runs rather than one because a kernel
// uprobe and a ptrace int3 cannot share an instruction: the kernel serves
// an int3 at an address where it has a uprobe itself, and the tracer never
// sees it.
func realRun(t *testing.T, argv, env, specs []string, limit time.Duration, slack float64, opts probe.Options) probe.Stats {
	t.Helper()
	defer pinToOneCPU(t)()
	plain := exec.Command(argv[0], argv[1:]...)
	plain.Env = env
	var plainErr bytes.Buffer
	plain.Stderr = &plainErr
	want, err := plain.Output()
	if err != nil {
		t.Fatalf("%q: %v\n%s", argv, err, plainErr.String())
	}

	o := probe.SpawnOptions{Options: opts}
	o.Env = env
	outR, outW := fixture.Pipe(t)
	// Standard error is a pipe too, as in the other runs: a program may
	// behave differently on /dev/null.
	errR, errW := fixture.Pipe(t)
	o.Stdout, o.Stderr = outW, errW
	tr, err := probe.Spawn(argv, &o)
	outW.Close()
	errW.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Kill()
	var got, gotErr bytes.Buffer
	copied := make(chan struct{}, 2)
	go func() { got.ReadFrom(outR); outR.Close(); copied <- struct{}{} }()
	go func() { gotErr.ReadFrom(errR); errR.Close(); copied <- struct{}{} }()
	if _, err := tr.Add(specs...); err != nil {
		t.Logf("add %d specs: %v", len(specs), err)
	}
	anchor, haveAnchor := entryAnchor(t, argv[0])
	for _, p := range tr.Stats().Probes {
		for _, s := range p.Sites {
			if s.Module == anchor.module && s.Addr == anchor.addr {
				haveAnchor = false // probed already: no room for a kernel uprobe
			}
		}
	}
	if haveAnchor {
		c, err := kuprobe.Open(anchor.module, anchor.offset, tr.Pid(), nil)
		if err != nil {
			t.Fatalf("anchor %s: %v", anchor.siteKey, err)
		}
		defer c.Close()
	}
	start := time.Now()
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Exited():
	case <-time.After(limit):
		t.Fatalf("%q traced did not finish in %v", argv, limit)
	}
	traced := time.Since(start)
	st, werr := tr.Wait()
	<-copied
	<-copied
	if werr != nil || !st.Success() {
		t.Fatalf("traced %q: %+v %v", argv, st, werr)
	}
	stats := tr.Stats()
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("traced output differs from an untraced run (%d bytes vs %d)", got.Len(), len(want))
	}

	sites, skipped := kernelSites(t, stats)
	ksites := sites
	if haveAnchor {
		ksites = append(append([]kernelSite(nil), sites...), anchor)
	}
	kout, kcounts := kernelRun(t, argv, env, nil, ksites)
	if !bytes.Equal(kout, want) {
		t.Errorf("output under kernel uprobes differs from an untraced run (%d bytes vs %d)", len(kout), len(want))
	}
	report := compareWithKernel(t, stats, sites, kcounts, slack)
	var tramps, trampHits uint64
	for _, p := range stats.Probes {
		for _, s := range p.Sites {
			if s.Strategy == plan.TrampolineNop || s.Strategy == plan.TrampolineDetour {
				tramps++
				trampHits += s.Hits
			}
		}
	}
	t.Logf("%s\n%s; %d sites with trampolines (%d hits without a trap); traced in %v: %d traps (%.0f us each), %d emulated, %d boosted, %d stepped, %d emulations refused at run time; %d sites the kernel refuses not compared\nmost hit:\n%s",
		strings.Join(argv, " "), report, tramps, trampHits, traced.Round(time.Millisecond), stats.Traps,
		float64(traced.Microseconds())/float64(max(stats.Traps, 1)), stats.Emulated, stats.Boosted, stats.Stepped, stats.Fallbacks,
		len(skipped), topSites(stats, kcounts, 12))
	for _, s := range skipped {
		t.Logf("not compared: %s", s)
	}
	return stats
}

// pinToOneCPU runs every thread of the test process, and so the programs
// it starts, on one CPU until the function it returns is called. It is only
// for speed: a traced hit wakes the tracer and then the tracee, and on an
// idle virtual machine a wake-up on another CPU costs about 50 µs, which
// makes a hit several times slower than when both share a CPU (see
// docs/BENCHMARKS.md). Nothing the tests check depends on it.
func pinToOneCPU(t *testing.T) func() {
	t.Helper()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil || old.Count() < 2 {
		return func() {}
	}
	cpu := 0
	for ; cpu < 1024 && !old.IsSet(cpu); cpu++ {
	}
	var one unix.CPUSet
	one.Set(cpu)
	setAll := func(set *unix.CPUSet) {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		for _, task := range tasks {
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				unix.SchedSetaffinity(tid, set)
			}
		}
	}
	setAll(&one)
	return func() { setAll(&old) }
}

// entryAnchor returns the entry point of the executable exe as a kernel
// uprobe site, when the kernel single-steps the instruction there (out of
// line: the first such hit maps the kernel's "[uprobes]" page into the
// process). Both twin runs get a kernel uprobe there, so that the page is
// mapped at the same moment in both and the address-space layout is the
// same: a program whose behaviour depends on addresses (python's method
// cache is indexed by them) makes the same calls in both runs only then.
func entryAnchor(t *testing.T, exe string) (kernelSite, bool) {
	t.Helper()
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	entry := ef.Entry
	ef.Close()
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off, err := f.TextOffset(entry)
	if err != nil {
		return kernelSite{}, false
	}
	code, err := f.Code(entry, 16)
	if err != nil {
		return kernelSite{}, false
	}
	fn := f.FuncAt(entry)
	var an *plan.Function
	if fn != nil {
		if body, err := f.Code(fn.Addr, fn.End-fn.Addr); err == nil {
			an = plan.AnalyzeX86(fn.Addr, body, decode.X86Decoder{})
		}
	}
	d := plan.Decide(plan.LinuxUprobes, &plan.Site{Arch: f.Arch, Addr: entry, Code: code, Func: an, USDT: true}, nil)
	if d.Strategy != plan.XOL {
		return kernelSite{}, false
	}
	return kernelSite{siteKey: siteKey{exe, entry}, symbol: "(entry)", offset: off}, true
}

// TestFixtureAgainstKernel probes every function of the fixture and
// compares each site's hits with the kernel's.
func TestFixtureAgainstKernel(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	exe := traceFixture(t, "tracee")
	forModes(t, func(t *testing.T, o probe.Options) {
		realRun(t, []string{exe, "work", "500"}, os.Environ(), []string{"*"}, 2*time.Minute, 0, o)
	})
}

// forModes runs f twice: with trampolines (the default) and with traps
// only.
func forModes(t *testing.T, f func(t *testing.T, o probe.Options)) {
	t.Run("trampolines", func(t *testing.T) { f(t, probe.Options{}) })
	t.Run("traps", func(t *testing.T) { f(t, probe.Options{NoTrampolines: true}) })
}

// TestSortAgainstKernel probes every function of sort (and its PLT stubs,
// through which it calls the C library) while it sorts 1 MB.
func TestSortAgainstKernel(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	sortPath := testenv.MustHaveTool(t, "sort")
	in := filepath.Join(t.TempDir(), "input")
	if err := os.WriteFile(in, sortInput(1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "LC_ALL=C")
	forModes(t, func(t *testing.T, o probe.Options) {
		realRun(t, []string{sortPath, in}, env, []string{"*", "*@plt"}, 5*time.Minute, 0, o)
	})
}

// sortInput returns about n bytes of lines of random words (about 70
// bytes a line, so that the traced sort makes a few hundred thousand
// calls rather than millions), always the same.
func sortInput(n int) []byte {
	rng := rand.New(rand.NewSource(1))
	var b bytes.Buffer
	for b.Len() < n {
		words := 6 + rng.Intn(8)
		for w := 0; w < words; w++ {
			if w > 0 {
				b.WriteByte(' ')
			}
			for l := 3 + rng.Intn(6); l > 0; l-- {
				b.WriteByte(byte('a' + rng.Intn(26)))
			}
		}
		fmt.Fprintf(&b, " %d\n", rng.Intn(1000))
	}
	return b.Bytes()
}

// pythonScript is the small script python3 runs.
const pythonScript = `import json
data = {"primes": [2, 3, 5, 7, 11, 13], "words": sorted("the quick brown fox".split())}
text = json.dumps(data, sort_keys=True)
print(len(text), sum(data["primes"]), json.loads(text)["words"][:2])
`

// pythonSlack is the relative difference a site of the python run may show
// against the kernel's count. On an AMD EPYC of family 26 (model 2) under
// KVM, 2 of 1,444 sites (PyErr_Occurred and _PyDict_GetItem_KnownHash, the
// type method cache's miss path) counted 0.1 % fewer calls traced than under
// kernel uprobes, in trap and trampoline modes alike, with the tree from
// before the per-thread data plane too, while two kernel runs agreed with
// each other; the interpreter then made the same number of dictionary
// lookups traced and untraced (a kernel uprobe on them). The cause is not
// established; a method cache indexed by addresses would explain it if the
// two runs' allocations land at different addresses. Every other site must
// be equal, and these are logged.
const pythonSlack = 0.002

// TestPythonAgainstKernel probes every function the python3 interpreter
// exports (see pythonTarget) while it runs a small script, without the
// site module (-S) to keep the number of calls down.
//
// Both runs must make the same calls. The interpreter gets a fixed string
// hash seed (PYTHONHASHSEED=0; hence -s and no -I, which would ignore the
// variable and randomize the hashes), an environment without any other
// PYTHON* variable, and byte-compiled modules from a cache of the test's
// own (-X pycache_prefix, filled by a first run), so that whatever another
// python writes into the system's caches meanwhile, both runs load the same
// files (compiling a module instead of loading it makes very different
// calls). The address-space layout is the same in both (see TestMain and
// entryAnchor): python's method cache is indexed by addresses.
func TestPythonAgainstKernel(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	py, specs := pythonTarget(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "script.py")
	if err := os.WriteFile(script, []byte(pythonScript), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHON") {
			env = append(env, kv)
		}
	}
	env = append(env, "PYTHONHASHSEED=0")
	prefix := "pycache_prefix=" + filepath.Join(dir, "pycache")
	warm := exec.Command(py, "-s", "-S", "-X", prefix, script)
	warm.Env = env
	if out, err := warm.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", py, err, out)
	}
	forModes(t, func(t *testing.T, o probe.Options) {
		realRun(t, []string{py, "-s", "-S", "-B", "-X", prefix, script}, env, specs, 8*time.Minute, pythonSlack, o)
	})
}

// pythonTarget finds the python3 interpreter on PATH and the specs of
// every function it exports: the executable's dynamic symbols and, for an
// interpreter linked with a shared libpython, the library's. (The static
// functions of a libpython with a symbol table are left out: the script
// would make millions of calls to them.)
func pythonTarget(t *testing.T) (string, []string) {
	t.Helper()
	py := testenv.MustHaveTool(t, "python3")
	out, err := exec.Command(py, "-I", "-c", `import os, sys, sysconfig
print(os.path.realpath(sys.executable))
print(os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "") if sysconfig.get_config_var("Py_ENABLE_SHARED") else "")`).Output()
	if err != nil {
		t.Fatalf("%s: %v", py, err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	exe := lines[0]
	var specs []string
	add := func(path, prefix string) {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		entry := uint64(0)
		if f.Type == elf.ET_EXEC || prefix == "" {
			entry = f.Entry // left to the anchor (see entryAnchor)
		}
		syms, err := f.DynamicSymbols()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		seen := map[string]bool{}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 || s.Value == entry || seen[s.Name] {
				continue
			}
			seen[s.Name] = true
			specs = append(specs, prefix+s.Name)
		}
	}
	add(exe, "")
	if len(lines) > 1 && lines[1] != "" {
		if real, err := filepath.EvalSymlinks(lines[1]); err == nil {
			add(real, filepath.Base(real)+":")
		}
	}
	sort.Strings(specs)
	return exe, specs
}
