package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// needLiveTrace skips the test of command, which traces live processes,
// where it cannot run: not linux/amd64, or no ptrace (a failure under CI).
func needLiveTrace(t *testing.T, command string) {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("%s needs linux/amd64", command)
	}
	testenv.NeedPtrace(t)
}

// traceTracee builds testdata/trace into a temporary directory of the test
// and returns the path of its tracee program.
func traceTracee(t *testing.T) string {
	t.Helper()
	needLiveTrace(t, "trace")
	testenv.MustHaveTool(t, "make")
	testenv.MustHaveTool(t, "gcc")
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", filepath.Join(fixture.Dir(t), "trace"), "OUT="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make -C testdata/trace: %v\n%s", err, b)
	}
	return filepath.Join(dir, "tracee")
}

func TestTraceUsage(t *testing.T) {
	for _, args := range [][]string{
		{"trace"},
		{"trace", "main"},
		{"trace", "--", "true"},
		{"trace", "-p", "1", "main", "--", "true"},
		{"trace", "-p", "-3", "main"},
	} {
		if _, stderr, code := runCLI(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", args, code, exitUsage, stderr)
		}
	}
}

// TestTraceCommand traces the fixture and checks the JSON report and the
// refusal of a probe inside an instruction.
func TestTraceCommand(t *testing.T) {
	rep, stderr := traceWork(t, "k_*", "c_sum", "k_syscall+1")
	if !strings.Contains(stderr, "k_syscall+1") || !strings.Contains(stderr, "mid-instruction") {
		t.Errorf("no refusal with its reason on stderr:\n%s", stderr)
	}
	if rep.Exit == nil || rep.Exit.Code != 0 || rep.Detached || len(rep.Probes) != 2 || rep.XOL == "" {
		t.Fatalf("report %+v", rep)
	}
}

// traceWork runs "trace --json -o FILE ARGS... -- tracee work 50", checks
// that the program printed what it prints untraced and that the report
// counts the calls "work 50" makes of k_push, k_mov, k_sse and c_sum, and
// returns the report and probeopt's standard error.
func traceWork(t *testing.T, args ...string) (*traceReport, string) {
	t.Helper()
	tracee := traceTracee(t)
	bin := probeoptBinary(t)
	report := filepath.Join(t.TempDir(), "report.json")
	argv := append([]string{"trace", "--json", "-o", report}, args...)
	cmd := exec.Command(bin, append(argv, "--", tracee, "work", "50")...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if strings.Contains(errb.String(), "operation not permitted") {
			testenv.Unavailable(t, "ptrace: %s", errb.String())
		}
		t.Fatalf("trace: %v\n%s", err, errb.String())
	}
	want, err := exec.Command(tracee, "work", "50").Output()
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("the traced program printed %q, untraced %q", out.String(), want)
	}
	rep := readTraceReport(t, report)
	hits := rep.hitsBySymbol()
	for sym, w := range map[string]uint64{"k_push": 50, "k_mov": 100, "k_sse": 50, "c_sum": 50} {
		if hits[sym] != w {
			t.Errorf("%s: %d hits, want %d", sym, hits[sym], w)
		}
	}
	return rep, errb.String()
}

// readTraceReport reads the JSON report of trace --report path.
func readTraceReport(t *testing.T, path string) *traceReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep traceReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, b)
	}
	return &rep
}

// hitsBySymbol sums the hits of the report's sites by symbol.
func (r *traceReport) hitsBySymbol() map[string]uint64 {
	hits := map[string]uint64{}
	for _, p := range r.Probes {
		for _, s := range p.Sites {
			hits[s.Symbol] += s.Hits
		}
	}
	return hits
}

// TestTraceRefusedOnly checks that a command whose only probe is refused
// fails with the reason.
func TestTraceRefusedOnly(t *testing.T) {
	tracee := traceTracee(t)
	stdout, stderr, code := runBinary(t, "trace", "k_syscall+7", "--", tracee, "work", "1")
	if code != exitFailed || !strings.Contains(stderr, "syscall") {
		t.Errorf("exit %d, stderr %q, stdout %q; want %d and the reason", code, stderr, stdout, exitFailed)
	}
}

// TestTraceSignalDetaches interrupts probeopt while it traces a server: it
// must detach, report, and leave the server running with its text as in
// its file.
func TestTraceSignalDetaches(t *testing.T) {
	tracee := traceTracee(t)
	bin := probeoptBinary(t)
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(bin, "trace", "--json", "-o", report, "k_*", "work", "--", tracee, "serve")
	// Pipes of our own rather than StdinPipe and StdoutPipe, which Wait
	// closes: the server goes on using them after probeopt has exited.
	inR, in := fixture.Pipe(t)
	defer in.Close()
	cmd.Stdin = inR
	outPipe, outW := fixture.Pipe(t)
	defer outPipe.Close()
	cmd.Stdout = outW
	// A file, not a buffer: the server inherits probeopt's standard error
	// and keeps it open after probeopt exits, so Wait would wait for the
	// server to end before it stopped copying into a buffer.
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd.Stderr = errFile
	errb := stderrText{errFile.Name()}
	err = cmd.Start()
	outW.Close()
	inR.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(outPipe)
	line := func() string {
		l, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v (stderr %s)", err, errb.String())
		}
		return strings.TrimSpace(l)
	}
	if l := line(); l != "ready" {
		t.Fatalf("server said %q", l)
	}
	answer := func(n int) string {
		b, err := exec.Command(tracee, "work", fmt.Sprint(n)).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(b))[:3], " ")
	}
	fmt.Fprintln(in, 10)
	if l := line(); l != answer(10) {
		t.Fatalf("server answered %q", l)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	switch ended, err := fixture.WaitWithin(cmd, 30*time.Second); {
	case !ended:
		t.Fatal("probeopt did not end after SIGINT")
	case err != nil:
		t.Fatalf("probeopt after SIGINT: %v\n%s", err, errb.String())
	}
	rep := readTraceReport(t, report)
	if !rep.Detached || rep.Exit != nil {
		t.Errorf("report %+v: want detached", rep)
	}
	if want := fmt.Sprintf("probeopt: left in process %d: nothing: ", rep.Pid); !strings.Contains(errb.String(), want) {
		t.Errorf("stderr %q lacks %q", errb.String(), want)
	}
	// The server carries on, untraced, with the file's text.
	fmt.Fprintln(in, 7)
	if l := line(); l != answer(7) {
		t.Fatalf("server answered %q after the detach", l)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", rep.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(status, []byte("TracerPid:\t0\n")) {
		t.Errorf("the server is still traced:\n%s", status)
	}
	in.Close()
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", rep.Pid)); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("the server did not exit when its input closed")
}

// stderrText reads a file that receives a process's standard error.
type stderrText struct{ path string }

func (s stderrText) String() string {
	b, _ := os.ReadFile(s.path)
	return string(b)
}

// TestBenchTrace runs "bench trace" with few calls and checks the report's
// shape. Timings are not checked: they depend on the machine.
func TestBenchTrace(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("bench trace needs linux/amd64")
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "bench trace needs root for kernel uprobes")
	}
	stdout, stderr, code := runBinary(t, "bench", "trace", "--calls", "300", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep benchTraceReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, stdout)
	}
	if len(rep.Rows) != len(benchTraceKinds) || rep.XOLMethod == "" {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Rows {
		if r.Calls != 300 || r.KernelNs <= 0 || r.SteppedNs <= 0 || r.SteppedRatio <= 0 || r.Instruction == "" ||
			(r.KernelPath != "emulate" && r.KernelPath != "xol") || r.ProbeoptNs <= 0 ||
			(r.Kind == "sse") != (r.ProbeoptPath == "boosted") || (r.Kind != "sse") != (r.ProbeoptPath == "emulated") ||
			!strings.HasPrefix(r.TrampolinePath, "trampoline-") || r.TrampolineNs <= 0 || r.TrampolineSpeedup <= 0 ||
			r.KernelReturnNs <= 0 || !strings.HasPrefix(r.ReturnPath, "trampoline-") || r.ReturnNs <= 0 || r.ReturnSpeedup <= 0 {
			t.Errorf("row %+v", r)
		}
	}
	if _, stderr, code := runBinary(t, "bench", "trace", "--calls", "0"); code != exitUsage {
		t.Errorf("--calls 0: exit %d (%s)", code, stderr)
	}
}

// childOf returns the pid of the child process pid traces (not its
// guardian), waiting for it up to a few seconds.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	for i := 0; i < 500; i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, field := range strings.Fields(string(b)) {
				// The traced command, not the tracer's guardian.
				var c int
				fmt.Sscan(field, &c)
				if tp := statusField(c, "TracerPid"); tp != "" && tp != "0" {
					return c
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d has no child", pid)
	return 0
}

// statusField returns a field of /proc/PID/status ("TracerPid"), "" when
// the process is gone.
func statusField(pid int, name string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// startTraceServer starts the fixture in serve mode, untraced, and
// returns it with its input and output once it is ready.
func startTraceServer(t *testing.T, tracee string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	srv := exec.Command(tracee, "serve")
	in, out := fixture.StartReady(t, srv, "ready")
	return srv, in, out
}

// waitTraced waits until process pid is traced by a thread of process
// tracer (TracerPid is the thread that attached).
func waitTraced(t *testing.T, pid, tracer int) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if tp := statusField(pid, "TracerPid"); tp != "" && tp != "0" {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%s", tracer, tp)); err == nil {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d is not traced by %d", pid, tracer)
}

// TestTraceAttachedExits attaches to a server that exits while traced:
// probeopt reports the exit, prints the counts, and exits with status 0.
// A spec that names nothing, given with -p, fails and leaves the server
// untraced with its text as in its file.
func TestTraceAttachedExits(t *testing.T) {
	tracee := traceTracee(t)
	bin := probeoptBinary(t)
	srv, in, out := startTraceServer(t, tracee)
	pid := srv.Process.Pid

	stdout, stderr, code := runBinary(t, "trace", "mian", "-p", fmt.Sprint(pid))
	if code != exitFailed || !strings.Contains(stderr, `probeopt: probe "mian": no probe site matches; did you mean main?`) || stdout != "" {
		t.Errorf("unknown symbol: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if want := fmt.Sprintf("probeopt: left in process %d: nothing: ", pid); !strings.Contains(stderr, want) {
		t.Errorf("unknown symbol: stderr %q lacks %q", stderr, want)
	}
	checkMessages(t, stderr, code)
	if tp := statusField(pid, "TracerPid"); tp != "0" {
		t.Errorf("TracerPid %q after the failed trace", tp)
	}
	testenv.TextEqualsFile(t, pid, tracee)

	cmd := exec.Command(bin, "trace", "k_push", "c_sum", "-p", fmt.Sprint(pid))
	var outb, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitTraced(t, pid, cmd.Process.Pid)
	fmt.Fprintln(in, 10) // served once probeopt resumes the server, probes installed
	if l, err := out.ReadString('\n'); err != nil || !strings.HasPrefix(l, "work 10 ") {
		t.Fatalf("server answered %q, %v", l, err)
	}
	in.Close() // the server exits
	switch ended, err := fixture.WaitWithin(cmd, 30*time.Second); {
	case !ended:
		t.Fatal("probeopt did not end when the process exited")
	case err != nil:
		t.Errorf("probeopt: %v", err)
	}
	if want := fmt.Sprintf("probeopt: process %d exited with status 0 while traced\n", pid); errb.String() != want {
		t.Errorf("stderr %q, want %q", errb.String(), want)
	}
	for _, want := range []string{"tracer:k_push", fmt.Sprintf("process %d exited with status 0", pid)} {
		if !strings.Contains(outb.String(), strings.Replace(want, "tracer:", filepath.Base(tracee)+":", 1)) {
			t.Errorf("report lacks %q:\n%s", want, outb.String())
		}
	}
	if !strings.Contains(outb.String(), " 10\n") {
		t.Errorf("report without the 10 hits:\n%s", outb.String())
	}
}

// TestTraceSpecErrors gives trace the specs a new user may get wrong: an
// unknown symbol, an address inside an instruction (refused with its
// reason) and USDT probes with a semaphore (raised by probeopt, counted).
func TestTraceSpecErrors(t *testing.T) {
	tracee := traceTracee(t)
	stdout, stderr, code := runBinary(t, "trace", "mian", "--", tracee, "work", "1")
	if code != exitFailed || stderr != "probeopt: probe \"mian\": no probe site matches; did you mean main?\n" || stdout != "" {
		t.Errorf("unknown symbol: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	checkMessages(t, stderr, code)
	stdout, stderr, code = runBinary(t, "trace", "k_syscall+1", "--", tracee, "work", "1")
	if code != exitFailed || !strings.Contains(stderr, "refused: mid-instruction: the address is inside the instruction that starts at") {
		t.Errorf("mid-instruction: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	checkMessages(t, stderr, code)
	usdt := fixture.Path(t, "x86_64", "usdt-pie")
	stdout, stderr, code = runBinary(t, "trace", "usdt:demo:sema_*", "--", usdt)
	if code != exitOK || stderr != "" {
		t.Errorf("semaphore: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"usdt:demo:sema_start", "usdt:demo:sema_done"} {
		if !regexp.MustCompile(regexp.QuoteMeta(want) + `\s.*\s1\n`).MatchString(stdout) {
			t.Errorf("semaphore: %s not hit once:\n%s", want, stdout)
		}
	}
}
