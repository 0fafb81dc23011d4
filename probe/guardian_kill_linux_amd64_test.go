//go:build linux && amd64

package probe_test

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
)

// killCampaignEnv makes the test binary a tracer for TestGuardianKill:
// "MODE:PID:SEED". It attaches to PID, adds killCampaignSpecs, prints
// "ready" once the process runs probed, then does what MODE says (see
// killCampaignTracer) until it is killed or dies.
const killCampaignEnv = "PROBEOPT_TEST_KILL_CAMPAIGN"

// killCampaignSpecs probe the tracee with every kind of site: trampolines
// (c_sum, k_nop), return probes (c_fib%return, work%return), emulated traps
// (k_push, k_mov, mix) and traps single-stepped in place (k_sse, k_lock,
// k_rep), most of them hit in every thread.
var killCampaignSpecs = []string{"c_sum", "k_nop", "c_fib%return", "work%return", "k_push", "k_mov", "mix", "k_sse", "k_lock", "k_rep", "k_riprel"}

// killCampaignTracer is the tracer of one run. Modes: serve (serve traps
// until killed), churn (remove and add probes in a loop: batches while the
// threads run), bounded (churn under Options.MaxPause, a pass per site), detach (print "detaching", then Detach), panic (panic
// after a random delay), exit (os.Exit without Detach after a random
// delay).
func killCampaignTracer(arg string) int {
	f := strings.SplitN(arg, ":", 3)
	if len(f) != 3 {
		fmt.Println("bad argument", arg)
		return 1
	}
	seed, _ := strconv.ParseInt(f[2], 10, 64)
	rnd := rand.New(rand.NewSource(seed))
	// spawn-MODE: the tracer starts "EXE tserve 2" itself (f[1] is EXE),
	// its standard input and output on descriptors 3 and 4, and prints
	// "pid N" once Spawn returned; then as MODE.
	// fork-MODE: as MODE, following forks (the program forks a child
	// that inherits the probes).
	mode, spawned := strings.CutPrefix(f[0], "spawn-")
	mode, forks := strings.CutPrefix(mode, "fork-")
	// frozen: every site a trap (see TestGuardianKillFrozen); gofrozen:
	// the same on a Go program, whose one probe is main.work+11 (past
	// the stack check and the push %rbp, at mov %rsp,%rbp: emulated,
	// never stepped in place, so that the threads stop in trap stops
	// rather than with the world; longer than a byte, so that a thread
	// just past its int3 cannot also be one served and not resumed).
	opts := &probe.Options{Events: mode == "churn", NoGuardian: mode == "unguarded", FollowForks: forks, NoTrampolines: mode == "frozen" || mode == "gofrozen"}
	if mode == "bounded" {
		opts.MaxPause = time.Nanosecond // a pass per site
	}
	var tr *probe.Tracer
	var err error
	if spawned {
		tr, err = probe.Spawn([]string{f[1], "tserve", "2"}, &probe.SpawnOptions{Options: *opts, Stdin: os.NewFile(3, "stdin"), Stdout: os.NewFile(4, "stdout"), Stderr: os.Stderr})
		if err == nil {
			fmt.Println("pid", tr.Pid())
		}
	} else {
		pid, _ := strconv.Atoi(f[1])
		tr, err = probe.Attach(pid, opts)
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	specs := killCampaignSpecs
	if mode == "gofrozen" {
		specs = []string{"main.work+11"}
	}
	if mode == "frozen" {
		// Traps only: no return probes (they need a trampoline).
		specs = nil
		for _, s := range killCampaignSpecs {
			if !strings.HasSuffix(s, "%return") {
				specs = append(specs, s)
			}
		}
	}
	probes, err := tr.Add(specs...)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := tr.Resume(); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("ready")
	switch mode {
	case "churn", "bounded":
		for i := 0; ; i++ {
			k := i % len(probes)
			if err := tr.Remove(probes[k]); err != nil {
				fmt.Println(err)
				return 1
			}
			ps, err := tr.Add(probes[k].Spec)
			if err != nil || len(ps) != 1 {
				fmt.Println(err)
				return 1
			}
			probes[k] = ps[0]
		}
	case "detach":
		time.Sleep(time.Duration(rnd.Intn(20)) * time.Millisecond)
		fmt.Println("detaching")
		if err := tr.Detach(); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Println("detached")
	case "panic":
		time.Sleep(time.Duration(rnd.Intn(30)) * time.Millisecond)
		var st *probe.Stats
		fmt.Println(st.Traps) // a nil dereference, as a tracer bug would
	case "exit":
		time.Sleep(time.Duration(rnd.Intn(30)) * time.Millisecond)
		os.Exit(3)
	}
	for {
		time.Sleep(time.Hour)
	}
}

// killRun is one run of the campaign.
type killRun struct {
	mode string
	// delay is how long after the tracer started (install) or said
	// "ready" (serve, churn) or "detaching" (detach) it is killed; panic
	// and exit modes die on their own.
	delay time.Duration
	seed  int64
}

// TestGuardianKill kills the tracer of a multi-threaded program (three
// threads, two of them working at once on every request, with trampoline,
// return, emulated and stepped sites) at random points: during the attach and the
// install batch, while traps are served and threads stepped, during
// batches that remove and add probes (in one stop, or in bounded passes
// of a site each, slots written and the guardian's record made after the
// staging stop), during Detach; and lets it panic or
// call os.Exit. In every run the program's answers before, during and
// after are those of the untraced program, it ends traced by nobody and
// running, and its text and its libraries' equal their files within a
// second of the tracer's death. PROBEOPT_LONG=1 makes 280 runs; CI 14.
// The one window no arrangement of ptrace closes (see package guardian: a
// thread in a trap stop the tracer has not collected when it dies gets its
// SIGTRAP) shows as a rare damaged run; the long campaign's count is in
// the package's history.
func TestGuardianKill(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	want := tserveAnswer(t, exe, 3, 2)
	killCampaign(t, 2, 40, func(rnd *rand.Rand) []killRun {
		return []killRun{
			{mode: "install", delay: time.Duration(rnd.Intn(400)) * time.Millisecond},
			{mode: "serve", delay: time.Duration(rnd.Intn(60)) * time.Millisecond},
			{mode: "churn", delay: time.Duration(rnd.Intn(200)) * time.Millisecond},
			{mode: "bounded", delay: time.Duration(rnd.Intn(200)) * time.Millisecond},
			{mode: "detach", delay: time.Duration(rnd.Intn(4000)) * time.Microsecond},
			{mode: "panic"},
			{mode: "exit"},
		}
	}, func(t *testing.T, r killRun) time.Duration { return runKill(t, exe, r, want) })
}

// killCampaign makes per rounds (long with PROBEOPT_LONG=1) of the runs
// round returns, from the seed PROBEOPT_SEED or the clock, each a subtest
// run by run that returns how long the restore took, and logs the counts:
// runs, kill points, targets damaged, the slowest restore.
func killCampaign(t *testing.T, per, long int, round func(*rand.Rand) []killRun, run func(*testing.T, killRun) time.Duration) {
	if os.Getenv("PROBEOPT_LONG") != "" {
		per = long
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("PROBEOPT_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (PROBEOPT_SEED)", seed)
	rnd := rand.New(rand.NewSource(seed))
	var runs []killRun
	for i := 0; i < per; i++ {
		runs = append(runs, round(rnd)...)
	}
	counts, damaged := map[string]int{}, map[string]int{}
	var slowest time.Duration
	for i := range runs {
		r := &runs[i]
		r.seed = rnd.Int63()
		t.Run(fmt.Sprintf("%03d-%s", i, r.mode), func(t *testing.T) {
			slowest = max(slowest, run(t, *r))
			if t.Failed() {
				damaged[r.mode]++
				t.Logf("run %+v", *r)
			}
		})
		counts[r.mode]++
	}
	n := 0
	for _, d := range damaged {
		n += d
	}
	t.Logf("%d runs, targets damaged: %d %v; runs per kill point: %v; slowest restore: %v", len(runs), n, damaged, counts, slowest)
}

// startReadyTracer starts the test binary as a campaign tracer with
// argument arg (see killCampaignTracer) and returns it once it said
// "ready".
func startReadyTracer(t *testing.T, arg string) *exec.Cmd {
	t.Helper()
	tracer := exec.Command(os.Args[0])
	tracer.Env = append(os.Environ(), killCampaignEnv+"="+arg)
	tracer.Stderr = os.Stderr
	out, err := tracer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(l) != "ready" {
		_ = tracer.Process.Kill()
		_ = tracer.Wait()
		t.Fatalf("tracer said %q, %v", l, err)
	}
	return tracer
}

// frozenFor is how long TestGuardianKillFrozen keeps the tracer stopped
// before it kills it.
const frozenFor = 50 * time.Millisecond

// TestGuardianKillFrozen stops the tracer (SIGSTOP) while two threads hit
// trap sites, so that they stay in trap stops it never collects, and
// kills it 50 ms later: the kernel hands each such thread its SIGTRAP as
// it detaches it (see package guardian), which the program's SIGTRAP
// handler the engine installs sends back to the restored site. In every run the
// program answers as the untraced one before, during and after, and its
// text equals its files within a second. PROBEOPT_LONG=1 makes 40 runs;
// CI 3.
func TestGuardianKillFrozen(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	want := tserveAnswer(t, exe, 3, 2)
	killCampaign(t, 3, 40, func(rnd *rand.Rand) []killRun {
		return []killRun{{mode: "frozen", delay: time.Duration(rnd.Intn(40)) * time.Millisecond}}
	}, func(t *testing.T, r killRun) time.Duration { return runKill(t, exe, r, want) })
}

// TestGuardianKillFrozenGo is TestGuardianKillFrozen on a Go program,
// whose runtime handles SIGTRAP (so the engine installs no trap guard, and
// the runtime's handler would end the program with "SIGTRAP: trace
// trap"): gothreads' four goroutines call main.work, with a trap site,
// in a loop; the tracer is stopped 50 ms while they hit it, then killed. The
// kernel delivers each uncollected trap's SIGTRAP to the runtime's
// handler, and the guardian returns the thread from the handler to the
// restored site before the handler runs. In every run the program ends
// with status 0 and its goroutines' sums equal the untraced run's, and
// within a second of the tracer's death its text equals its file.
// PROBEOPT_LONG=1 makes 20 runs; CI 3.
func TestGuardianKillFrozenGo(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := fixture.GoCommandFor(t, "gothreads", runtime.GOARCH, false)
	const calls = "200000"
	sums := func(out []byte) []string {
		var s []string
		for _, l := range strings.Split(string(out), "\n") {
			if i := strings.Index(l, " sum "); i >= 0 {
				s = append(s, strings.Fields(l)[1]+l[i:])
			}
		}
		return s
	}
	want := sums(untraced(t, []string{exe, "2", calls}, nil))
	if len(want) != 4 {
		t.Fatalf("gothreads printed %q", want)
	}
	killCampaign(t, 3, 20, func(rnd *rand.Rand) []killRun {
		return []killRun{{mode: "gofrozen", delay: time.Duration(rnd.Intn(40)) * time.Millisecond}}
	}, func(t *testing.T, r killRun) time.Duration {
		cmd := exec.Command(exe, "2", calls)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill() }()
		tracer := startReadyTracer(t, fmt.Sprintf("%s:%d:%d", r.mode, cmd.Process.Pid, r.seed))
		time.Sleep(r.delay)
		_ = tracer.Process.Signal(syscall.SIGSTOP)
		time.Sleep(frozenFor)
		n := uncollectedTraps(cmd.Process.Pid)
		_ = tracer.Process.Kill()
		_ = tracer.Wait()
		died := time.Now()
		// Within a second: traced by nobody, running, its text whole
		// (or already ended, which its status then tells).
		var took time.Duration
		for {
			last := killCheck(cmd.Process.Pid, exe)
			took = time.Since(died)
			if last == "" || took > time.Second {
				if last != "" && !strings.Contains(last, "no such process") {
					t.Errorf("%v after the tracer's death: %s", took, last)
				}
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if ended, err := fixture.WaitWithin(cmd, 30*time.Second); !ended || err != nil {
			t.Errorf("gothreads (%d threads in uncollected trap stops) ended %v with %v: %s", n, ended, err, out.String())
		} else if got := sums([]byte(out.String())); !slices.Equal(got, want) {
			t.Errorf("gothreads printed %q, want %q", got, want)
		}
		t.Logf("%d threads in uncollected trap stops", n)
		return took
	})
}

// uncollectedTraps counts the threads of process pid in a ptrace stop
// ("t (tracing stop)" in /proc/PID/task/TID/stat's state).
func uncollectedTraps(pid int) int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	n := 0
	for _, e := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, e.Name()))
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 't' {
			n++
		}
	}
	return n
}

// TestGuardianKillUnguarded is the campaign's control: the same kill
// while traps are served, without a guardian, leaves the program's text
// changed (int3 bytes and jumps) a second after the tracer's death, or the
// program dead. It shows that TestGuardianKill's checks see damage.
func TestGuardianKillUnguarded(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	s := startThreadServer(t, exe, 2)
	defer s.stop()
	tracer := startReadyTracer(t, fmt.Sprintf("unguarded:%d:1", s.cmd.Process.Pid))
	_ = tracer.Process.Kill()
	_ = tracer.Wait()
	time.Sleep(time.Second)
	if why := killCheck(s.cmd.Process.Pid, exe); why == "" {
		t.Fatal("without a guardian the program's text is whole a second after its tracer's death")
	} else {
		t.Logf("without a guardian: %s", why)
	}
}

// tserveAnswer returns what "tracee tserve T" answers to "n": every
// thread's checksum of "work n", from an untraced run.
func tserveAnswer(t *testing.T, exe string, n, threads int) string {
	f := strings.Fields(string(untraced(t, []string{exe, "work", strconv.Itoa(n)}, nil)))
	if len(f) < 3 {
		t.Fatalf("tracee work %d printed %q", n, f)
	}
	return "work " + strconv.Itoa(n) + strings.Repeat(" "+f[2], threads)
}

// runKill makes one run and returns how long after the tracer's death the
// text was whole again.
func runKill(t *testing.T, exe string, r killRun, want string) time.Duration {
	t.Helper()
	s := startThreadServer(t, exe, 2)
	defer s.stop()
	// Requests go on during the whole run, each answer checked.
	var wg sync.WaitGroup
	quit := make(chan struct{})
	bad := make(chan string, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-quit:
				return
			default:
			}
			if got, err := s.ask(3); err != nil || got != want {
				select {
				case bad <- fmt.Sprintf("answer %q (%v), want %q", got, err, want):
				default:
				}
				return
			}
		}
	}()
	tracer := exec.Command(os.Args[0])
	tracer.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d:%d", killCampaignEnv, r.mode, s.cmd.Process.Pid, r.seed))
	tracer.Stderr = os.Stderr
	out, err := tracer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(want string) {
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Errorf("tracer (%s) ended before %q", r.mode, want)
					return
				}
				if l == want {
					return
				}
				if l != "ready" {
					t.Errorf("tracer (%s): %s", r.mode, l)
				}
			case <-time.After(20 * time.Second):
				// Its goroutines on its standard error, for the record.
				_ = tracer.Process.Signal(syscall.SIGQUIT)
				t.Errorf("tracer (%s) said nothing for 20 s", r.mode)
				return
			}
		}
	}
	switch r.mode {
	case "install":
		time.Sleep(r.delay)
	case "serve", "churn", "bounded":
		waitLine("ready")
		time.Sleep(r.delay)
	case "frozen":
		// The tracer stopped collects no trap stop: the threads that run
		// into a trap site stay in trap stops it has not collected.
		waitLine("ready")
		time.Sleep(r.delay)
		_ = tracer.Process.Signal(syscall.SIGSTOP)
		time.Sleep(frozenFor)
		if n := uncollectedTraps(s.cmd.Process.Pid); n == 0 {
			t.Logf("no thread in a trap stop after %v", frozenFor)
		}
	case "detach":
		waitLine("detaching")
		time.Sleep(r.delay)
	}
	if r.mode != "panic" && r.mode != "exit" {
		_ = tracer.Process.Signal(syscall.SIGKILL)
	}
	_ = tracer.Wait()
	for range lines {
	}
	died := time.Now()
	// Within a second: traced by nobody, not stopped, the text whole.
	var took time.Duration
	var last string
	for {
		last = killCheck(s.cmd.Process.Pid, exe)
		took = time.Since(died)
		if last == "" || took > time.Second {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if last != "" {
		t.Errorf("%s run, %v after the tracer's death: %s", r.mode, took, last)
	}
	time.Sleep(20 * time.Millisecond) // more requests after the restore
	close(quit)
	wg.Wait()
	select {
	case b := <-bad:
		t.Errorf("%s run: %s", r.mode, b)
	default:
	}
	if got, err := s.ask(3); err != nil || got != want {
		t.Errorf("%s run: after the tracer's death: answer %q (%v), want %q", r.mode, got, err, want)
	}
	if err := s.finish(); err != nil {
		t.Errorf("%s run: the program ended with %v", r.mode, err)
	}
	return took
}

// killCheck returns "" when process pid is traced by nobody, not stopped,
// and its executable, C library and dynamic linker equal their files; else
// what is not so.
func killCheck(pid int, exe string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
			return "traced by " + strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "State:"); ok && strings.ContainsAny(v, "tT") {
			return "stopped: " + strings.TrimSpace(v)
		}
	}
	for _, path := range append([]string{exe}, mappedLibs(pid)...) {
		d, err := testenv.TextDiff(pid, path)
		if err != nil {
			return err.Error()
		}
		if d != "" {
			return d
		}
	}
	return ""
}

// mappedLibs returns the C library and dynamic linker process pid maps.
func mappedLibs(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	seen := map[string]bool{}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.Contains(f[1], "x") {
			continue
		}
		p := f[5]
		if (strings.Contains(p, "/libc.so") || strings.Contains(p, "/ld-linux")) && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// threadServer is "tracee tserve T".
type threadServer struct {
	cmd *exec.Cmd
	in  *os.File
	out *bufio.Reader
	mu  sync.Mutex
}

func startThreadServer(t *testing.T, exe string, threads int) *threadServer {
	t.Helper()
	return startModeServer(t, exe, "tserve", threads)
}

// startModeServer starts "tracee MODE T" (tserve, or sserve: tserve under an
// interval timer).
func startModeServer(t *testing.T, exe, mode string, threads int) *threadServer {
	t.Helper()
	cmd := exec.Command(exe, mode, strconv.Itoa(threads))
	inW, out := fixture.StartPiped(t, cmd)
	s := &threadServer{cmd: cmd, in: inW, out: out}
	if l, err := s.out.ReadString('\n'); err != nil || strings.TrimSpace(l) != "ready" {
		s.stop()
		t.Fatalf("tserve said %q, %v", l, err)
	}
	return s
}

// ask sends n and returns the answer (an error after 10 s without one).
func (s *threadServer) ask(n int) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fmt.Fprintf(s.in, "%d\n", n); err != nil {
		return "", err
	}
	l, err := fixture.ReadLine(s.out, 10*time.Second)
	return strings.TrimSpace(l), err
}

// finish closes the program's input and waits for its exit status.
func (s *threadServer) finish() error {
	s.in.Close()
	return s.cmd.Wait()
}

func (s *threadServer) stop() {
	s.in.Close()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
