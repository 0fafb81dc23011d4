//go:build linux

package main

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// needRun skips (fails under CI) where run cannot work: not linux/amd64,
// not root (BPF programs), no ptrace.
func needRun(t *testing.T) {
	t.Helper()
	needLiveTrace(t, "run")
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "BPF programs need root (euid %d)", os.Geteuid())
	}
}

// le64 is v as the hex of a little-endian 64-bit word.
func le64(v uint64) string {
	return hex.EncodeToString(binary.LittleEndian.AppendUint64(nil, v))
}

// TestRunAgainstConstruction runs the end-to-end object on the workload
// with "run --json -o": the workload's own output is untouched, and every
// map and record is what the workload's construction gives (counts per
// key and per return value, the log2 histogram, the per-thread counter
// summed over its stripes, the records with the probe address's page
// offset from the ELF symbol).
func TestRunAgainstConstruction(t *testing.T) {
	needRun(t)
	probeoptBinary(t)
	obj := fixture.Build(t, fixture.BPFObject("bpf", "e2e"))
	exe := fixture.Build(t, fixture.BPFWorkload)
	const n, threads = 3000, 2
	out := filepath.Join(t.TempDir(), "maps.json")
	stdout, stderr, code := runBinary(t, "run", "--json", "-o", out, "--attach", "on_work=work", "--attach", "on_work_return=work",
		obj, "--", exe, strconv.Itoa(n), strconv.Itoa(threads), "now")
	if code != 0 || stdout != "ready\ndone\n" {
		t.Fatalf("run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	checkRunOutput(t, out, e2eConstruction(symbolPageOffset(t, exe, "work"), n, threads))
}

// TestRunSignalDetaches attaches run to a waiting workload, lets it make
// its calls with the programs attached, then sends run SIGINT: run removes
// the probes, detaches and exits 0 having printed every map and record as
// the construction gives them; the workload's text equals its file again,
// it is untraced, and it exits 0 on its own.
func TestRunSignalDetaches(t *testing.T) {
	needRun(t)
	bin := probeoptBinary(t)
	obj := fixture.Build(t, fixture.BPFObject("bpf", "e2e"))
	exe := fixture.Build(t, fixture.BPFWorkload)
	const n, threads = 1000, 1
	work := exec.Command(exe, strconv.Itoa(n), strconv.Itoa(threads))
	in, r := fixture.StartReady(t, work, "ready")
	pid := work.Process.Pid
	out := filepath.Join(t.TempDir(), "maps.json")
	var stderr strings.Builder
	run := exec.Command(bin, "run", "--json", "-o", out, "--attach", "on_work=work", "--attach", "on_work_return=work", obj, "-p", strconv.Itoa(pid))
	run.Stderr = &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { run.Process.Kill(); run.Wait() }()
	// Every program is attached before run lets the workload go on: it
	// then sleeps in its read again, traced, its text patched.
	attached := fixture.Eventually(time.Minute, func() bool {
		d, err := testenv.TextDiff(pid, exe)
		return err == nil && d != "" && statusField(pid, "TracerPid") != "0" && strings.HasPrefix(statusField(pid, "State"), "S")
	})
	if !attached {
		t.Fatalf("the workload was never traced, patched and running; run's stderr: %s", stderr.String())
	}
	fmt.Fprintln(in, "go")
	if line, err := fixture.ReadLine(r, time.Minute); err != nil || line != "done" {
		t.Fatalf("workload: %q %v", line, err)
	}
	if err := run.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if ended, err := fixture.WaitWithin(run, time.Minute); !ended || err != nil {
		t.Fatalf("run after SIGINT: ended %v, %v; stderr: %s", ended, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "removing the probes and detaching") {
		t.Errorf("stderr: %q", stderr.String())
	}
	testenv.TextEqualsFile(t, pid, exe)
	if tp := statusField(pid, "TracerPid"); tp != "0" {
		t.Errorf("TracerPid %q after run", tp)
	}
	checkRunOutput(t, out, e2eConstruction(symbolPageOffset(t, exe, "work"), n, threads))
	in.Close()
	if ended, err := fixture.WaitWithin(work, time.Minute); !ended || err != nil {
		t.Errorf("workload after run: ended %v, %v", ended, err)
	}
}

// e2eWant is what the e2e object's maps and rings hold after the workload
// ran: sums are the sums of each map's values per key (hex of the key),
// over a per-CPU map's stripes; records, perf and printk the lines of the
// ring buffer, the perf event array and trace_printk, in any order.
type e2eWant struct {
	sums                  map[string]map[string]uint64
	records, perf, printk []string
}

// e2eConstruction computes what the e2e object records when the BPF
// workload makes n calls work(i%37, i*i) in each of threads threads, work
// being at page offset workPage.
func e2eConstruction(workPage uint64, n, threads uint64) e2eWant {
	byKey, byRet, hist := map[string]uint64{}, map[string]uint64{}, map[string]uint64{}
	var w e2eWant
	var bad uint64
	for i := uint64(0); i < n; i++ {
		key, value := i%37, i*i
		byKey[le64(key)] += threads
		byRet[le64((key*7+value)%11)] += threads
		slot := uint32(0)
		if value > 0 {
			slot = uint32(bits.Len64(value) - 1)
		}
		hist[hex.EncodeToString(binary.LittleEndian.AppendUint32(nil, slot))] += threads
		if key == 5 && value%1000 == 25 {
			for range threads {
				rec := le64(key) + le64(value) + le64(1) + le64(workPage) + le64(workPage) + le64(0)
				w.records = append(w.records, rec)
				// Raw samples padded as the kernel pads them: 48+4 and
				// 5+7 bytes.
				w.perf = append(w.perf, rec+"00000000", rec[:10]+"00000000000000")
				bad++
				w.printk = append(w.printk, fmt.Sprintf("key=%d value=%d low=%x", key, value, uint32(value)),
					fmt.Sprintf("%05d|%-4x|%c%%", uint32(value)%1000, 171, 'z'))
			}
		}
	}
	w.sums = map[string]map[string]uint64{"by_key": byKey, "by_ret": byRet, "value_log2": hist,
		"entries":    {"00000000": n * threads},
		"ret_ids":    {le64(workPage): n * threads},
		"by_ret_bad": {le64(uint64(0xffffffffffffeaf9)): bad}}
	return w
}

// checkRunOutput checks the JSON lines run wrote to path against the
// construction: every map's sums (checkMapSums), every map printed, and
// the records, perf records and trace_printk lines, in any order.
func checkRunOutput(t *testing.T, path string, want e2eWant) {
	t.Helper()
	var gotRecords, gotPerf, gotPrintk []string
	seen := map[string]bool{}
	for _, m := range readRunLines(t, path) {
		switch {
		case m.Data != "" && m.Map == "perf_records":
			gotPerf = append(gotPerf, m.Data)
		case m.Data != "":
			gotRecords = append(gotRecords, m.Data)
		case m.Printk != "":
			gotPrintk = append(gotPrintk, m.Printk)
		default:
			seen[m.Map] = true
			checkMapSums(t, m, want)
		}
	}
	for m := range want.sums {
		if !seen[m] {
			t.Errorf("map %s not printed", m)
		}
	}
	checkSameLines(t, "perf records", gotPerf, want.perf)
	checkSameLines(t, "trace_printk", gotPrintk, want.printk)
	checkSameLines(t, "records", gotRecords, want.records)
	if len(want.records) == 0 {
		t.Error("the construction has no records")
	}
}

// checkMapSums checks a map line of run against the construction: its
// values summed per key (a per-CPU map's over its stripes) are want's,
// and no other key has a value. The counter "entries" is a per-CPU
// array. A map want does not know is not checked.
func checkMapSums(t *testing.T, m runLine, want e2eWant) {
	t.Helper()
	sums, ok := want.sums[m.Map]
	if !ok {
		return
	}
	if m.Map == "entries" && m.Type != "percpu_array" {
		t.Errorf("entries: type %s, want percpu_array", m.Type)
	}
	got := map[string]uint64{}
	for _, e := range m.Entries {
		vals := e.Values
		if e.Value != "" {
			vals = []string{e.Value}
		}
		for _, v := range vals {
			w, _ := hex.DecodeString(v)
			got[e.Key] += binary.LittleEndian.Uint64(w)
		}
	}
	for k, v := range sums {
		if got[k] != v {
			t.Errorf("%s[%s]: %d, want %d", m.Map, k, got[k], v)
		}
	}
	for k, v := range got {
		if sums[k] == 0 && v != 0 {
			t.Errorf("%s[%s]: %d, want none", m.Map, k, v)
		}
	}
}

// checkSameLines fails the test unless got and want hold the same lines,
// in any order.
func checkSameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	got, want = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %d %.200q, want %d %.200q", what, len(got), got, len(want), want)
	}
}

// symbolPageOffset is the offset in its page of symbol name of the ELF
// file at path.
func symbolPageOffset(t *testing.T, path, name string) uint64 {
	t.Helper()
	_, syms := fixture.OpenELF(t, path)
	for _, s := range syms {
		if s.Name == name {
			return s.Value & 0xfff
		}
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return 0
}

// runLine is a JSON line of "run --json": a ring or perf record (Map and
// Data), a trace_printk line, or a map (Map, Type and Entries; a per-CPU
// map's entries with Values).
type runLine struct {
	Printk  string `json:"trace_printk"`
	Map     string
	Data    string
	Type    string
	Entries []struct {
		Key    string
		Value  string
		Values []string
	}
}

// readRunLines reads the JSON lines "run --json" wrote to path.
func readRunLines(t *testing.T, path string) []runLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []runLine
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m runLine
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestRunErrors: a file that is no BPF object, a program the verifier
// rejects (its log on stderr), a program without a target, an unknown
// symbol with a command and with a process: each is one clear error and
// exit status 1, and the process is left as it was (its text the file's,
// untraced, and it runs on).
func TestRunErrors(t *testing.T) {
	needRun(t)
	probeoptBinary(t)
	obj := fixture.Build(t, fixture.BPFObject("bpf", "e2e"))
	rejected := fixture.Build(t, fixture.BPFObject("bpf", "rejected"))
	exe := fixture.Build(t, fixture.BPFWorkload)
	notObj := filepath.Join(t.TempDir(), "not.o")
	if err := os.WriteFile(notObj, []byte("not an object\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"not an object", []string{"run", notObj, "--", exe, "1", "1", "now"}, []string{"read BPF object"}},
		{"rejected", []string{"run", "--attach", "beyond=work", rejected, "--", exe, "1", "1", "now"}, []string{"verifier:", "rejected by the kernel's verifier"}},
		{"no target", []string{"run", "--attach", "on_work=work", obj, "--", exe, "1", "1", "now"}, []string{"on_work_return", "names no target"}},
		{"unknown program", []string{"run", "--attach", "nosuch=work", obj, "--", exe, "1", "1", "now"}, []string{`no program "nosuch"`}},
		{"unknown symbol", []string{"run", "--attach", "on_work=nosuch", "--attach", "on_work_return=work", obj, "--", exe, "1", "1", "now"}, []string{"program on_work", "nosuch"}},
	} {
		stdout, stderr, code := runBinary(t, tc.args...)
		if code != exitFailed || strings.Contains(stdout, "done") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", tc.name, code, stdout, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr lacks %q: %q", tc.name, w, stderr)
			}
		}
	}

	// A process: one program attaches, the other names nothing; the
	// first is removed again, and the process runs on untraced.
	cmd := exec.Command(exe, "1000", "1")
	in, r := fixture.StartReady(t, cmd, "ready")
	pid := strconv.Itoa(cmd.Process.Pid)
	_, stderr, code := runBinary(t, "run", "--attach", "on_work=work", "--attach", "on_work_return=nosuch", obj, "-p", pid)
	if code != exitFailed || !strings.Contains(stderr, "nosuch") {
		t.Errorf("-p with an unknown symbol: exit %d, stderr %q", code, stderr)
	}
	testenv.TextEqualsFile(t, cmd.Process.Pid, exe)
	if tp := statusField(cmd.Process.Pid, "TracerPid"); tp != "0" {
		t.Errorf("TracerPid %q after run", tp)
	}
	fmt.Fprintln(in, "go")
	if line, err := fixture.ReadLine(r, time.Minute); err != nil || line != "done" {
		t.Errorf("workload after run: %q %v", line, err)
	}
}

// TestBenchBPF runs "bench bpf" small: every traced run's program counted
// every call (threads x calls, the kernel's and probeopt's), and
// probeopt's site is a trampoline. No timing is checked.
func TestBenchBPF(t *testing.T) {
	needRun(t)
	testenv.MustHaveTool(t, "clang")
	stdout, stderr, code := runBinary(t, "bench", "bpf", "--calls", "20000", "--kernel-calls", "2000", "--runs", "1", "--json")
	if code != 0 {
		t.Fatalf("bench bpf: exit %d: %s", code, stderr)
	}
	var rep benchBPFReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 12 {
		t.Fatalf("%d rows, want 12", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		want := uint64(r.Threads * r.Calls)
		if r.Mode == "untraced" {
			want = 0
		}
		if r.Hits != want || r.Mode == "probeopt" && !strings.HasPrefix(r.Strategy, "trampoline") {
			t.Errorf("%+v: want %d hits and a trampoline", r, want)
		}
	}
}

// TestRunUSDT runs an object whose usdt/PATH:PROVIDER:NAME sections name
// the USDT workload's probes, written with libbpf's usdt.bpf.h: the
// arguments the programs read (a signed byte, an unsigned byte and an
// unsigned 64-bit register; a probe's semaphore, raised by probeopt) are
// the workload's construction.
func TestRunUSDT(t *testing.T) {
	needRun(t)
	probeoptBinary(t)
	exe := fixture.Build(t, fixture.USDTWorkload)
	p := fixture.BPFObject("bpf", "usdtrun")
	p.Flags = append(p.Flags, `-DUSDT_PATH="`+exe+`"`)
	obj := fixture.Build(t, p)
	const rounds, threads = 800, 2
	out := filepath.Join(t.TempDir(), "maps.json")
	stdout, stderr, code := runBinary(t, "run", "--json", "-o", out, obj, "--", exe, strconv.Itoa(rounds), strconv.Itoa(threads), "now")
	if code != 0 || stdout != "ready\ndone\n" {
		t.Fatalf("run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	byC, byK := map[string]string{}, map[string]string{}
	for k := int64(0); k < 8; k++ {
		byC[le64(uint64(-100-k))] = le64(rounds/8*threads) + le64(uint64(200+k)) + le64(0xfedcba9876543210+uint64(k))
		byK[le64(uint64(k))] = le64(1)
	}
	seen := map[string]bool{}
	for _, m := range readRunLines(t, out) {
		want, ok := map[string]map[string]string{"by_c": byC, "by_k": byK}[m.Map]
		if !ok {
			continue
		}
		seen[m.Map] = true
		got := map[string]string{}
		for _, e := range m.Entries {
			got[e.Key] = e.Value
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("map %s: %v, want %v", m.Map, got, want)
		}
	}
	if !seen["by_c"] || !seen["by_k"] {
		t.Errorf("maps printed: %v", seen)
	}
}
