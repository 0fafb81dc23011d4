//go:build linux && amd64

package probe_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
)

var traceFixtures struct {
	once sync.Once
	dir  string
	err  error
}

// traceFixture builds testdata/trace (once per test binary) and returns
// the path of one of its outputs: "tracee" or "libtracelib.so".
func traceFixture(t *testing.T, name string) string {
	t.Helper()
	testenv.MustHaveTool(t, "make")
	testenv.MustHaveTool(t, "gcc")
	traceFixtures.once.Do(func() {
		dir, err := os.MkdirTemp("", "probeopt-trace-")
		if err != nil {
			traceFixtures.err = err
			return
		}
		traceFixtures.dir = dir
		cmd := exec.Command("make", "-s", "-C", filepath.Join(fixture.Dir(t), "trace"), "OUT="+dir)
		if b, err := cmd.CombinedOutput(); err != nil {
			traceFixtures.err = fmt.Errorf("make -C testdata/trace: %v\n%s", err, b)
		}
	})
	if traceFixtures.err != nil {
		t.Fatal(traceFixtures.err)
	}
	return filepath.Join(traceFixtures.dir, name)
}

// noRandomizeEnv marks the test binary re-executed without address-space
// randomization.
const noRandomizeEnv = "PROBEOPT_TEST_NORANDOMIZE"

// TestMain runs the tests without address-space randomization (the
// personality flag ADDR_NO_RANDOMIZE, kept across execve and inherited by
// every thread and child): the real programs are run twice, traced and
// under kernel uprobes, and must make the same calls both times, which a
// program such as python does not do when its objects move (its method
// cache is indexed by addresses). The binary re-executes itself once with
// the flag set; if that fails the tests run as they are.
func TestMain(m *testing.M) {
	if pid := os.Getenv(killedTracerEnv); pid != "" {
		os.Exit(killedTracer(pid))
	}
	if arg := os.Getenv(killCampaignEnv); arg != "" {
		os.Exit(killCampaignTracer(arg))
	}
	if os.Getenv(noRandomizeEnv) == "" {
		reexecWithoutASLR()
	}
	code := m.Run()
	if traceFixtures.dir != "" {
		os.RemoveAll(traceFixtures.dir)
	}
	fixture.Cleanup()
	os.Exit(code)
}

// personality calls personality(2); 0xffffffff queries the flags.
func personality(p uintptr) (uintptr, error) {
	r, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, p, 0, 0)
	if e != 0 {
		return 0, e
	}
	return r, nil
}

func reexecWithoutASLR() {
	const query, addrNoRandomize = 0xffffffff, 0x0040000
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	flags, err := personality(query)
	if err != nil || flags&addrNoRandomize != 0 {
		return
	}
	if _, err := personality(flags | addrNoRandomize); err != nil {
		return
	}
	os.Setenv(noRandomizeEnv, "1")
	if exe, err := os.Executable(); err == nil {
		unix.Exec(exe, os.Args, os.Environ())
	}
	// Still here: run as we are.
	personality(flags)
}

// run is one traced run of a command.
type run struct {
	tr     *probe.Tracer
	stdout *bytes.Buffer
	stderr *bytes.Buffer
	wait   func() // waits for the output to be copied
}

// spawn starts argv traced with the given options, capturing its output.
func spawn(t *testing.T, argv []string, opts *probe.Options, stdin *os.File) *run {
	t.Helper()
	var o probe.SpawnOptions
	if opts != nil {
		o.Options = *opts
	}
	outR, outW := fixture.Pipe(t)
	errR, errW := fixture.Pipe(t)
	o.Stdout, o.Stderr, o.Stdin = outW, errW, stdin
	tr, err := probe.Spawn(argv, &o)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		t.Fatalf("spawn %q: %v", argv, err)
	}
	r := &run{tr: tr, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.stdout.ReadFrom(outR); outR.Close() }()
	go func() { defer wg.Done(); r.stderr.ReadFrom(errR); errR.Close() }()
	r.wait = wg.Wait
	t.Cleanup(func() { tr.Kill() })
	return r
}

// finish resumes the run and waits for its end (at most limit).
func (r *run) finish(t *testing.T, limit time.Duration) {
	t.Helper()
	if err := r.tr.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.tr.Exited():
	case <-time.After(limit):
		r.tr.Kill()
		t.Fatalf("the traced program did not finish in %v", limit)
	}
	st, err := r.tr.Wait()
	r.wait()
	if err != nil || !st.Success() {
		t.Fatalf("traced program: status %+v, %v\nstderr: %s", st, err, r.stderr)
	}
}

// traceeRun returns the argv of the tracee fixture run with args, and
// what that run prints untraced. It needs ptrace (the caller traces the
// run next).
func traceeRun(t *testing.T, args ...string) (argv []string, want []byte) {
	t.Helper()
	testenv.NeedPtrace(t)
	argv = append([]string{traceFixture(t, "tracee")}, args...)
	return argv, untraced(t, argv, nil)
}

// untraced runs argv without tracing and returns its stdout.
func untraced(t *testing.T, argv []string, stdin []byte) []byte {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%q: %v\n%s", argv, err, errb.String())
	}
	return out
}

// hitsBySymbol sums the hits of the live and gone sites of every probe by
// symbol.
func hitsBySymbol(st probe.Stats) map[string]uint64 {
	m := map[string]uint64{}
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			m[s.Symbol] += s.Hits
		}
	}
	return m
}
