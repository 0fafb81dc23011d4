//go:build linux && amd64

package probe_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// wantHits checks the hits of some symbols.
func wantHits(t *testing.T, st probe.Stats, want map[string]uint64) {
	t.Helper()
	hits := hitsBySymbol(st)
	for sym, w := range want {
		if hits[sym] != w {
			t.Errorf("%s: %d hits, want %d", sym, hits[sym], w)
		}
	}
}

// TestThreads runs the same probes in eight threads at once: every probe is
// hit by several threads, the emulated accesses that another thread could
// see are stepped, and the locked add (stepped) keeps its count.
func TestThreads(t *testing.T) {
	const threads, n = 8, 200
	argv, want := traceeRun(t, "threads", strconv.Itoa(threads), strconv.Itoa(n))
	r := spawn(t, argv, nil, nil)
	if _, err := r.tr.Add("k_*", "c_sum", "work"); err != nil {
		t.Fatal(err)
	}
	r.finish(t, 2*time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	st := r.tr.Stats()
	wantHits(t, st, map[string]uint64{"work": threads, "k_push": threads * n, "k_mov": 2 * threads * n,
		"k_lock": threads * n, "k_sse": threads * n, "k_rep_stos": threads * n, "c_sum": threads * n})
	t.Logf("traps %d, emulated %d, stepped %d, emulations left to the CPU %d", st.Traps, st.Emulated, st.Stepped, st.Fallbacks)
}

// TestThreadEvents probes a compiled C function (a trampoline) hit by
// several threads with events on: every event names a thread of the
// program, and each worker thread's events are all there.
func TestThreadEvents(t *testing.T) {
	const threads, n = 8, 200
	argv, want := traceeRun(t, "threads", strconv.Itoa(threads), strconv.Itoa(n))
	r := spawn(t, argv, &probe.Options{Events: true, EventBuffer: 1 << 16}, nil)
	if _, err := r.tr.Add("c_sum"); err != nil {
		t.Fatal(err)
	}
	r.finish(t, 2*time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	st := r.tr.Stats()
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			if s.Strategy != plan.TrampolineDetour && s.Strategy != plan.TrampolineNop {
				t.Fatalf("c_sum: %s, want a trampoline (%s)", s.Strategy, s.Detail)
			}
		}
	}
	perThread := map[int]int{}
	total := 0
	for {
		select {
		case e, ok := <-r.tr.Events():
			if !ok {
				break // closed: the process is gone and every event read
			}
			total++
			perThread[e.Tid]++
			if e.Pid != r.tr.Pid() || e.Time.IsZero() {
				t.Errorf("event %+v", e)
			}
			continue
		default:
		}
		break
	}
	if total != threads*n || st.DroppedEvents != 0 {
		t.Errorf("%d events, %d dropped; want %d", total, st.DroppedEvents, threads*n)
	}
	if perThread[0] != 0 || len(perThread) != threads {
		t.Errorf("events per thread %v, want %d threads with %d each", perThread, threads, n)
	}
	for tid, c := range perThread {
		if c != n || tid == r.tr.Pid() {
			t.Errorf("thread %d: %d events, want %d from a worker", tid, c, n)
		}
	}
}

// TestSignalsDuringSteps runs the stepped kinds under a 50 µs interval
// timer: signals arrive while threads are single-stepped, are delivered
// after the step, and every hit is counted once.
func TestSignalsDuringSteps(t *testing.T) {
	const n = 400
	argv, want := traceeRun(t, "signals", strconv.Itoa(n))
	// Traps: the test is about signals that arrive during single steps.
	r := spawn(t, argv, &probe.Options{NoTrampolines: true}, nil)
	if _, err := r.tr.Add("k_sse", "k_riprel", "k_lock", "k_rep_stos"); err != nil {
		t.Fatal(err)
	}
	r.finish(t, 2*time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	st := r.tr.Stats()
	wantHits(t, st, map[string]uint64{"k_sse": n, "k_riprel": n, "k_lock": n, "k_rep_stos": n})
	var alarms int
	fmt.Sscanf(r.stderr.String(), "alarms %d", &alarms)
	if alarms == 0 || st.DeferredSignals == 0 {
		t.Errorf("%d SIGALRM while tracing, %d during a step (stderr %q)", alarms, st.DeferredSignals, r.stderr)
	}
	t.Logf("%d signals, %d of them during one of %d single steps", alarms, st.DeferredSignals, st.Stepped)
}

// TestVfork checks children that share their parent's memory (vfork, as
// posix_spawn makes them) and run probed code before they exit: their hits
// are served, with traps and with trampolines, and each child computes
// what it computes untraced. The parent calls k_push and k_sse n times
// and so does each child in the parent's memory: the parent's counts are
// n (as a kernel uprobe of its pid counts), the children's 2n hits are
// counted apart (Stats.VforkHits).
func TestVfork(t *testing.T) {
	const n = 50
	argv, want := traceeRun(t, "vfork", strconv.Itoa(n))
	if string(want) != fmt.Sprintf("vfork %d ok %d\n", n, n) {
		t.Fatalf("untraced: %q", want)
	}
	for _, mode := range []struct {
		name string
		opts probe.Options
	}{{"trampolines", probe.Options{}}, {"traps", probe.Options{NoTrampolines: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			r := spawn(t, argv, &mode.opts, nil)
			if _, err := r.tr.Add("k_push", "k_sse"); err != nil {
				t.Fatal(err)
			}
			r.finish(t, time.Minute)
			if !bytes.Equal(r.stdout.Bytes(), want) {
				t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
			}
			st := r.tr.Stats()
			wantHits(t, st, map[string]uint64{"k_push": n, "k_sse": n})
			if st.VforkHits != 2*n {
				t.Errorf("%d hits of the vfork children, they made %d", st.VforkHits, 2*n)
			}
		})
	}
}

// TestFork checks a forked child: without FollowForks its int3 bytes and
// jumps are removed and it runs untraced; with it, its hits are counted
// too, at its own sites (trampolines included: it gets a data area of its
// own), and its events carry its pid.
func TestFork(t *testing.T) {
	const n = 100
	argv, want := traceeRun(t, "fork", strconv.Itoa(n))
	for _, follow := range []bool{false, true} {
		t.Run(fmt.Sprintf("follow=%v", follow), func(t *testing.T) {
			r := spawn(t, argv, &probe.Options{FollowForks: follow, Events: true, EventBuffer: 1 << 14}, nil)
			if _, err := r.tr.Add("k_*", "work"); err != nil {
				t.Fatal(err)
			}
			r.finish(t, 2*time.Minute)
			if !bytes.Equal(r.stdout.Bytes(), want) {
				t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
			}
			procs := uint64(1)
			if follow {
				procs = 2
			}
			st := r.tr.Stats()
			wantHits(t, st, map[string]uint64{"work": procs, "k_push": procs * n, "k_sse": procs * n, "k_rep_stos": procs * n})
			sites := 0
			pids := map[int]bool{}
			for _, p := range st.Probes {
				for _, s := range p.Sites {
					if s.Hits > 0 {
						pids[s.Pid] = true
					}
				}
			}
			if len(pids) != int(procs) {
				t.Errorf("hits in %d processes, want %d", len(pids), procs)
			}
			// Every process makes its own n calls of k_push, k_sse and
			// k_rep_stos, counted at its own sites and reported in its
			// own events.
			events := map[string]map[int]uint64{}
			ids := map[int]string{}
			for _, p := range st.Probes {
				ids[p.ID] = p.Spec
			}
			for {
				select {
				case e, ok := <-r.tr.Events():
					if !ok {
						break // closed: the process is gone and every event read
					}
					if !e.Return {
						sym := ""
						for _, p := range st.Probes {
							for _, s := range p.Sites {
								if s.Pid == e.Pid && s.RuntimeAddr == e.Addr {
									sym = s.Symbol
								}
							}
						}
						if events[sym] == nil {
							events[sym] = map[int]uint64{}
						}
						events[sym][e.Pid]++
					}
					continue
				default:
				}
				break
			}
			for _, p := range st.Probes {
				for _, s := range p.Sites {
					if s.Symbol != "k_push" && s.Symbol != "k_sse" && s.Symbol != "k_rep_stos" {
						continue
					}
					sites++
					if s.Hits != n {
						t.Errorf("%s in %d (%s): %d hits, want %d", s.Symbol, s.Pid, s.Strategy, s.Hits, n)
					}
					if ev := events[s.Symbol][s.Pid]; ev != n {
						t.Errorf("%s in %d (%s): %d events, want %d", s.Symbol, s.Pid, s.Strategy, ev, n)
					}
				}
			}
			if sites != 3*int(procs) {
				t.Errorf("%d sites of k_push, k_sse and k_rep_stos, want %d", sites, 3*procs)
			}
		})
	}
}

// TestExec checks that the probes are resolved again after an exec.
func TestExec(t *testing.T) {
	const n = 100
	argv, want := traceeRun(t, "exec", strconv.Itoa(n))
	r := spawn(t, argv, nil, nil)
	if _, err := r.tr.Add("k_push", "work"); err != nil {
		t.Fatal(err)
	}
	r.finish(t, 2*time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	st := r.tr.Stats()
	images := 0
	for _, p := range st.Probes {
		if p.Spec == "k_push" {
			images = len(p.Sites)
		}
	}
	if images != 2 {
		t.Errorf("k_push was installed in %d images, want 2 (before and after the exec)", images)
	}
	// The new image is held at the exec until it is probed: no hit is
	// missed.
	hits := hitsBySymbol(st)
	if hits["k_push"] != 2*n || hits["work"] != 2 {
		t.Errorf("k_push: %d hits, want %d; work %d, want 2", hits["k_push"], 2*n, hits["work"])
	}
	t.Logf("hits across the exec: k_push %d of %d, work %d of 2", hits["k_push"], 2*n, hits["work"])
}

// TestDlopen checks that a library loaded with dlopen is probed before
// its code runs (the dynamic linker's rendezvous).
func TestDlopen(t *testing.T) {
	lib := traceFixture(t, "libtracelib.so")
	const n = 100
	argv, want := traceeRun(t, "dlopen", lib, strconv.Itoa(n))
	r := spawn(t, argv, nil, nil)
	probes, err := r.tr.Add("libtracelib*:lib_*")
	if err != nil || len(probes) != 1 {
		t.Fatalf("add: %v %v", probes, err)
	}
	if st := r.tr.Stats(); !st.Probes[0].Pending {
		t.Errorf("a probe on a library not loaded yet is not pending: %+v", st.Probes[0])
	}
	r.finish(t, time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	wantHits(t, r.tr.Stats(), map[string]uint64{"lib_work": 1, "lib_square": n})
}

// server is the fixture in "serve" mode.
type server struct {
	exe string // the fixture's path
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startServer starts "tracee serve" untraced and waits for "ready".
func startServer(t *testing.T, exe string) *server {
	t.Helper()
	cmd := exec.Command(exe, "serve")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{exe: exe, cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	if l := s.line(t); l != "ready" {
		t.Fatalf("server said %q", l)
	}
	return s
}

// attachServer starts the tracee fixture's server untraced and attaches a
// tracer to it with opts (nil: the defaults). The caller detaches the
// tracer; the server is killed when the test ends.
func attachServer(t *testing.T, opts *probe.Options) (*server, *probe.Tracer) {
	t.Helper()
	testenv.NeedPtrace(t)
	s := startServer(t, traceFixture(t, "tracee"))
	tr, err := probe.Attach(s.cmd.Process.Pid, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, tr
}

// addResume adds one probe of the specs and resumes the process.
func addResume(t *testing.T, tr *probe.Tracer, specs ...string) {
	t.Helper()
	if _, err := tr.Add(specs...); err != nil {
		t.Fatal(err)
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
}

func (s *server) line(t *testing.T) string {
	t.Helper()
	l, err := s.out.ReadString('\n')
	if err != nil {
		t.Fatalf("read from the server: %v", err)
	}
	return strings.TrimSpace(l)
}

// work asks the server for "work n" and checks the answer.
func (s *server) work(t *testing.T, n int) {
	t.Helper()
	fmt.Fprintf(s.in, "%d\n", n)
	got := s.line(t)
	want := strings.Fields(string(untraced(t, []string{s.exe, "work", strconv.Itoa(n)}, nil)))
	if len(want) < 3 || got != strings.Join(want[:3], " ") {
		t.Fatalf("server answered %q, want %q", got, want)
	}
}

// TestAttachDetach attaches to a running server, probes it, detaches, and
// checks that its text equals the file and that it carries on.
func TestAttachDetach(t *testing.T) {
	s, tr := attachServer(t, nil)
	addResume(t, tr, "k_*", "c_sum", "work")
	s.work(t, 50)
	wantHits(t, tr.Stats(), map[string]uint64{"work": 1, "k_push": 50, "k_sse": 50, "c_sum": 50})
	if err := tr.Detach(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the tracer did not end after Detach")
	}
	if _, err := tr.Wait(); !errors.Is(err, probe.ErrClosed) {
		t.Errorf("Wait after Detach: %v, want ErrClosed", err)
	}
	testenv.TextEqualsFile(t, s.cmd.Process.Pid, s.exe)
	s.work(t, 20)
	s.in.Close()
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("server after detach: %v", err)
	}
}

// TestAddRemoveWhileRunning adds and removes probes in batches while the
// program keeps hitting them.
func TestAddRemoveWhileRunning(t *testing.T) {
	s, tr := attachServer(t, nil)
	defer tr.Detach()
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	push, err := tr.Add("k_push")
	if err != nil {
		t.Fatal(err)
	}
	s.work(t, 10)
	more, err := tr.Add("k_nop", "k_sse", "work")
	if err != nil {
		t.Fatal(err)
	}
	s.work(t, 10)
	if err := tr.Remove(push...); err != nil {
		t.Fatal(err)
	}
	if err := tr.Remove(push...); !errors.Is(err, probe.ErrUnknownProbe) {
		t.Errorf("removing twice: %v, want ErrUnknownProbe", err)
	}
	s.work(t, 10)
	wantHits(t, tr.Stats(), map[string]uint64{"k_push": 20, "k_nop": 20, "k_sse": 20, "work": 2})

	// Toggle probes from another goroutine while the server works.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var toggles int
	var toggleErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ps, err := tr.Add("k_mov", "k_riprel", "c_*")
			if err == nil {
				err = tr.Remove(ps...)
			}
			if err != nil {
				toggleErr = err
				return
			}
			toggles++
		}
	}()
	for i := 0; i < 20; i++ {
		s.work(t, 20)
	}
	close(stop)
	wg.Wait()
	if toggleErr != nil {
		t.Fatal(toggleErr)
	}
	if err := tr.Remove(more...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d add/remove batches while the server ran", toggles)
	if err := tr.Detach(); err != nil {
		t.Fatal(err)
	}
	testenv.TextEqualsFile(t, s.cmd.Process.Pid, s.exe)
	s.work(t, 5)
}

// TestEvents checks the events of a probe: one per hit, with the argument
// registers.
func TestEvents(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	const n = 20
	r := spawn(t, []string{exe, "work", strconv.Itoa(n)}, &probe.Options{Events: true}, nil)
	probes, err := r.tr.Add("k_mov")
	if err != nil {
		t.Fatal(err)
	}
	r.finish(t, time.Minute)
	seen := map[[2]uint64]int{}
	for {
		select {
		case e, ok := <-r.tr.Events():
			if !ok {
				break // closed: the process is gone and every event read
			}
			if e.Probe != probes[0].ID || e.Pid != r.tr.Pid() || e.Tid != e.Pid || e.Time.IsZero() {
				t.Errorf("event %+v", e)
			}
			seen[[2]uint64{e.Args[0], e.Args[1]}]++
			continue
		default:
		}
		break
	}
	// k_mov(i, 3) directly and k_mov(i, 5) through k_jmp.
	for i := uint64(0); i < n; i++ {
		for _, b := range []uint64{3, 5} {
			if seen[[2]uint64{i, b}] != 1 {
				t.Errorf("events with arguments (%d, %d): %d, want 1", i, b, seen[[2]uint64{i, b}])
			}
		}
	}
	if st := r.tr.Stats(); st.DroppedEvents != 0 {
		t.Errorf("%d events dropped", st.DroppedEvents)
	}
}

// TestSpecs checks module-qualified specs and the refusal of a site whose
// text differs from the file.
func TestSpecs(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	r := spawn(t, []string{exe, "work", "5"}, nil, nil)
	if _, err := r.tr.Add("tracee:k_push", "libc.so.6:getpid", "*:no_such_function_anywhere"); err != nil {
		t.Fatalf("add: %v", err)
	}
	if _, err := r.tr.Add("bad glob["); !errors.Is(err, elfscan.ErrBadSpec) {
		t.Errorf("bad spec: %v, want ErrBadSpec", err)
	}
	st := r.tr.Stats()
	if len(st.Probes) != 3 || len(st.Probes[0].Sites) != 1 || st.Probes[2].Sites != nil || !st.Probes[2].Pending {
		t.Errorf("stats %+v", st.Probes)
	}
	r.finish(t, time.Minute)
	wantHits(t, r.tr.Stats(), map[string]uint64{"k_push": 5})
}

// TestDetachAfterTextChange detaches after the program's text changed
// under a probe (as a program that rewrites its code would): the batch
// fails as a whole, and every site that still holds its int3 is restored
// one by one.
func TestDetachAfterTextChange(t *testing.T) {
	// Traps: the test writes over the int3 of a site.
	s, tr := attachServer(t, &probe.Options{NoTrampolines: true})
	addResume(t, tr, "k_push", "k_nop")
	s.work(t, 5)
	var nop uint64
	for _, p := range tr.Stats().Probes {
		if p.Spec == "k_nop" && len(p.Sites) == 1 {
			nop = p.Sites[0].RuntimeAddr
		}
	}
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", s.cmd.Process.Pid), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mem.WriteAt([]byte{0x90}, int64(nop)) // the nop the int3 replaced
	mem.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Detach(); err != nil {
		t.Fatalf("detach: %v", err)
	}
	testenv.TextEqualsFile(t, s.cmd.Process.Pid, s.exe)
	s.work(t, 5)
}
