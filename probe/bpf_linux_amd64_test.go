//go:build linux && amd64

package probe_test

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/bpf"
	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// bpfAttach is one program of an object at the sites of a spec: a
// function of the workload (Module "" ) or of a library, at its entry or
// its return.
type bpfAttach struct {
	Prog   string
	Module string // "" for the workload itself, else the library's base name (libc.so.6)
	Symbol string
	Return bool
	Cookie uint64 // the attachment's cookie (get_attach_cookie)
}

// bpfDump is what a run of an object leaves: every map's entries (key
// and value in hex; a per-CPU map's values summed per key, as 64-bit
// words) and the ring buffers' records, sorted (a multiset).
type bpfDump struct {
	Maps    map[string]map[string]string
	Records map[string][]string
	// Printk are the trace_printk lines, sorted (with printk only).
	Printk []string
	// Mappings is the process's /proc/PID/maps at the end of the work.
	Mappings string
}

// kernelPrintk mounts a tracefs of the test's own (the top-level
// instance, where bpf_trace_printk writes) and clears its buffer; lines
// returns the trace_printk lines of the tasks named comm since, sorted,
// and unmounts it.
func kernelPrintk(t *testing.T, comm string) (lines func() []string) {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		t.Fatalf("mount tracefs: %v", err)
	}
	trace := filepath.Join(dir, "trace")
	if err := os.WriteFile(trace, nil, 0); err != nil {
		unix.Unmount(dir, 0)
		t.Fatal(err)
	}
	return func() []string {
		defer unix.Unmount(dir, 0)
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, line := range strings.Split(string(b), "\n") {
			_, text, ok := strings.Cut(line, "bpf_trace_printk: ")
			if ok && strings.HasPrefix(strings.TrimSpace(line), comm+"-") {
				out = append(out, text)
			}
		}
		sort.Strings(out)
		return out
	}
}

// symbolize rewrites the keys of the maps whose names start with
// "stacks" (user stacks: 64-bit addresses) as FILE+OFFSET per address in
// an executable mapping of the run (mappings: /proc/PID/maps), "0" for
// zero and "other" for any other value: the runs' address spaces differ.
func symbolize(d *bpfDump, mappings string) {
	type area struct {
		lo, hi, off uint64
		file        string
	}
	var exec []area
	for _, line := range strings.Split(mappings, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[1], "x") {
			continue
		}
		lohi := strings.SplitN(f[0], "-", 2)
		lo, _ := strconv.ParseUint(lohi[0], 16, 64)
		hi, _ := strconv.ParseUint(lohi[1], 16, 64)
		off, _ := strconv.ParseUint(f[2], 16, 64)
		exec = append(exec, area{lo, hi, off, filepath.Base(f[5])})
	}
	for name, m := range d.Maps {
		if !strings.HasPrefix(name, "stacks") {
			continue
		}
		out := map[string]string{}
		for k, v := range m {
			b, _ := hex.DecodeString(k)
			var parts []string
			for i := 0; i+8 <= len(b); i += 8 {
				x := binary.LittleEndian.Uint64(b[i:])
				s := "other"
				if x == 0 {
					s = "0"
				}
				for _, a := range exec {
					if x >= a.lo && x < a.hi {
						s = fmt.Sprintf("%s+%#x", a.file, x-a.lo+a.off)
					}
				}
				parts = append(parts, s)
			}
			out[strings.Join(parts, " ")] = v
		}
		d.Maps[name] = out
	}
}

// mappingsOf returns /proc/PID/maps.
func mappingsOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// workloadRun starts the workload and waits for its "ready"; go starts
// the work and waits for its end.
type workloadRun struct {
	in  *os.File
	out *bufio.Reader
}

func (w *workloadRun) waitLine(t *testing.T, want string) {
	t.Helper()
	line, err := fixture.ReadLine(w.out, 2*time.Minute)
	if err != nil || strings.TrimSpace(line) != want {
		t.Fatalf("workload: got %q, %v; want %q", line, err, want)
	}
}

func (w *workloadRun) start(t *testing.T) {
	t.Helper()
	if _, err := w.in.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	w.waitLine(t, "done")
}

// startWorkload starts exe with args, untraced, and waits for its
// "ready"; it is killed at the end of the test if it still runs.
func startWorkload(t *testing.T, exe string, args []string) (*exec.Cmd, *workloadRun) {
	t.Helper()
	cmd, w := startPiped(t, exe, args, nil)
	w.waitLine(t, "ready")
	return cmd, w
}

// startPiped starts exe with args, its standard input and output pipes
// of the test's (its standard error to stderr, or discarded); it is
// killed at the end of the test if it still runs.
func startPiped(t *testing.T, exe string, args []string, stderr io.Writer) (*exec.Cmd, *workloadRun) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW := fixture.Pipe(t)
	cmd.Stdout = outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, &workloadRun{in: in.(*os.File), out: bufio.NewReader(outR)}
}

// needBPF skips (fails under CI) without root: loading programs and
// kernel uprobes need it.
func needBPF(t *testing.T) {
	t.Helper()
	testenv.NeedPtrace(t)
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "BPF programs and kernel uprobes need root (euid %d)", os.Geteuid())
	}
}

// bpfKernelRun runs the workload with the object's programs attached by the
// kernel (cilium/ebpf link.Uprobe and Uretprobe, filtered on the
// workload's pid) and returns the maps and records.
func bpfKernelRun(t *testing.T, objPath, exe string, args []string, attach []bpfAttach, printk bool) bpfDump {
	t.Helper()
	var printkLines func() []string
	if printk {
		printkLines = kernelPrintk(t, filepath.Base(exe))
	}
	spec, err := ebpf.LoadCollectionSpec(objPath)
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	cmd, w := startWorkload(t, exe, args)
	defer kernelAttach(t, coll, cmd.Process.Pid, exe, attach)()
	rd := newKernelRecords(t, coll)
	defer rd.close()
	w.start(t)
	mappings := mappingsOf(t, cmd.Process.Pid)
	w.in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	d := bpfDump{Maps: map[string]map[string]string{}, Records: rd.drain(t)}
	for name, m := range coll.Maps {
		if m.Type() == ebpf.RingBuf || m.Type() == ebpf.PerfEventArray || strings.HasPrefix(name, ".") {
			continue
		}
		d.Maps[name] = kernelMapEntries(t, m)
	}
	symbolize(&d, mappings)
	d.Mappings = mappings
	if printkLines != nil {
		d.Printk = printkLines()
	}
	return d
}

// kernelAttach attaches the programs of coll to process pid as attach
// says, and returns what detaches them.
func kernelAttach(t *testing.T, coll *ebpf.Collection, pid int, exe string, attach []bpfAttach) (detach func()) {
	t.Helper()
	var links []link.Link
	detach = func() {
		for _, l := range links {
			l.Close()
		}
	}
	for _, a := range attach {
		path := exe
		if a.Module != "" {
			path = mappedPath(t, pid, a.Module)
		}
		ex, err := link.OpenExecutable(path)
		if err != nil {
			detach()
			t.Fatal(err)
		}
		opts := &link.UprobeOptions{PID: pid, Cookie: a.Cookie}
		var l link.Link
		if a.Return {
			l, err = ex.Uretprobe(a.Symbol, coll.Programs[a.Prog], opts)
		} else {
			l, err = ex.Uprobe(a.Symbol, coll.Programs[a.Prog], opts)
		}
		if err != nil {
			detach()
			t.Fatalf("kernel uprobe %s at %s: %v", a.Prog, a.Symbol, err)
		}
		links = append(links, l)
	}
	return detach
}

// kernelRecords reads the ring buffers and perf event arrays of a
// collection.
type kernelRecords struct {
	rings map[string]*ringbuf.Reader
	perfs map[string]*perf.Reader
}

func newKernelRecords(t *testing.T, coll *ebpf.Collection) *kernelRecords {
	t.Helper()
	kr := &kernelRecords{rings: map[string]*ringbuf.Reader{}, perfs: map[string]*perf.Reader{}}
	for name, m := range coll.Maps {
		switch m.Type() {
		case ebpf.RingBuf:
			rd, err := ringbuf.NewReader(m)
			if err != nil {
				kr.close()
				t.Fatal(err)
			}
			kr.rings[name] = rd
		case ebpf.PerfEventArray:
			rd, err := perf.NewReader(m, 1<<18)
			if err != nil {
				kr.close()
				t.Fatal(err)
			}
			kr.perfs[name] = rd
		}
	}
	return kr
}

func (kr *kernelRecords) close() {
	for _, rd := range kr.rings {
		rd.Close()
	}
	for _, rd := range kr.perfs {
		rd.Close()
	}
}

// drain reads every record left, in hex, sorted per map; a perf ring
// that lost samples is an error.
func (kr *kernelRecords) drain(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	// each reads a map's records until the reader's deadline passes.
	each := func(name string, setDeadline func(time.Time), read func() ([]byte, uint64, error)) {
		setDeadline(time.Now().Add(200 * time.Millisecond))
		for {
			rec, lost, err := read()
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal(err)
				}
				break
			}
			if lost != 0 {
				t.Errorf("perf %s: the kernel lost %d samples", name, lost)
			}
			out[name] = append(out[name], hex.EncodeToString(rec))
		}
		sort.Strings(out[name])
	}
	for name, rd := range kr.rings {
		each(name, rd.SetDeadline, func() ([]byte, uint64, error) {
			rec, err := rd.Read()
			return rec.RawSample, 0, err
		})
	}
	for name, rd := range kr.perfs {
		each(name, rd.SetDeadline, func() ([]byte, uint64, error) {
			rec, err := rd.Read()
			return rec.RawSample, rec.LostSamples, err
		})
	}
	return out
}

// kernelMapEntries returns a kernel map's entries, key to value in hex,
// a per-CPU map's values summed as words (sumWords).
func kernelMapEntries(t *testing.T, m *ebpf.Map) map[string]string {
	t.Helper()
	entries := map[string]string{}
	it := m.Iterate()
	key := make([]byte, m.KeySize())
	if m.Type() == ebpf.PerCPUArray || m.Type() == ebpf.PerCPUHash {
		var vals [][]byte
		for it.Next(&key, &vals) {
			entries[hex.EncodeToString(key)] = sumWords(vals)
		}
	} else {
		val := make([]byte, m.ValueSize())
		for it.Next(&key, &val) {
			entries[hex.EncodeToString(key)] = hex.EncodeToString(val)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return entries
}

// mappedPath returns the path of the file process pid maps whose base
// name is name.
func mappedPath(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && filepath.Base(f[5]) == name {
			return f[5]
		}
	}
	t.Fatalf("process %d maps no %s", pid, name)
	return ""
}

// sumWords adds per-CPU values as little-endian 64-bit words.
func sumWords(vals [][]byte) string {
	if len(vals) == 0 {
		return ""
	}
	sum := make([]byte, len(vals[0]))
	for _, v := range vals {
		for i := 0; i+8 <= len(v) && i+8 <= len(sum); i += 8 {
			binary.LittleEndian.PutUint64(sum[i:], binary.LittleEndian.Uint64(sum[i:])+binary.LittleEndian.Uint64(v[i:]))
		}
	}
	return hex.EncodeToString(sum)
}

// spawnLoaded spawns the workload exe with args under probeopt (opts,
// nil for the defaults), waits for its "ready" and loads the object at
// objPath into it. The tracer is killed at the end of the test.
func spawnLoaded(t *testing.T, objPath, exe string, args []string, opts *probe.Options) (*probe.Tracer, *workloadRun, *probe.BPF) {
	t.Helper()
	return spawnLoadedBPF(t, objPath, exe, args, opts, nil)
}

// spawnLoadedBPF is spawnLoaded with the object loaded with bopts.
func spawnLoadedBPF(t *testing.T, objPath, exe string, args []string, opts *probe.Options, bopts *probe.BPFOptions) (*probe.Tracer, *workloadRun, *probe.BPF) {
	t.Helper()
	inR, inW := fixture.Pipe(t)
	outR, outW := fixture.Pipe(t)
	so := &probe.SpawnOptions{Stdin: inR, Stdout: outW}
	if opts != nil {
		so.Options = *opts
	}
	tr, err := probe.Spawn(append([]string{exe}, args...), so)
	if err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	t.Cleanup(func() { tr.Kill() })
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	w := &workloadRun{in: inW, out: bufio.NewReader(outR)}
	w.waitLine(t, "ready")
	obj, err := bpf.Open(objPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.LoadBPF(obj, bopts)
	if err != nil {
		t.Fatal(err)
	}
	return tr, w, b
}

// bpfProbeoptRun runs the workload with the object's programs attached by
// probeopt and returns the maps and records, and the tracer's stats.
func bpfProbeoptRun(t *testing.T, objPath, exe string, args []string, attach []bpfAttach) (bpfDump, probe.Stats) {
	t.Helper()
	return bpfProbeoptRunBPF(t, objPath, exe, args, attach, nil)
}

// bpfProbeoptRunBPF is bpfProbeoptRun with the object loaded with bopts.
func bpfProbeoptRunBPF(t *testing.T, objPath, exe string, args []string, attach []bpfAttach, bopts *probe.BPFOptions) (bpfDump, probe.Stats) {
	t.Helper()
	tr, w, b := spawnLoadedBPF(t, objPath, exe, args, nil, bopts)
	for _, a := range attach {
		spec := a.Symbol
		if a.Module != "" {
			spec = a.Module + ":" + a.Symbol
		}
		if _, err := b.Attach(a.Prog, spec, &probe.AttachOptions{Cookie: a.Cookie}); err != nil {
			t.Fatalf("attach %s at %s: %v", a.Prog, spec, err)
		}
	}
	w.start(t)
	mappings := mappingsOf(t, tr.Pid())
	w.in.Close()
	st := tr.Stats()
	if s, err := tr.Wait(); err != nil || s.Code != 0 {
		t.Fatalf("workload: %v %v", s, err)
	}
	d := bpfDump{Maps: map[string]map[string]string{}, Records: map[string][]string{}}
	for _, name := range b.MapNames() {
		m := b.Map(name)
		if strings.HasPrefix(name, ".") {
			continue
		}
		if m.Type() == ebpf.RingBuf || m.Type() == ebpf.PerfEventArray {
			rd, err := maps.NewReader(m)
			if err != nil {
				t.Fatal(err)
			}
			rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
			for {
				rec, err := rd.Read()
				if err != nil {
					break
				}
				d.Records[name] = append(d.Records[name], hex.EncodeToString(rec.RawSample))
			}
			sort.Strings(d.Records[name])
			continue
		}
		entries := map[string]string{}
		es, err := m.Entries()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Values != nil {
				entries[hex.EncodeToString(e.Key)] = sumWords(e.Values)
			} else {
				entries[hex.EncodeToString(e.Key)] = hex.EncodeToString(e.Value)
			}
		}
		d.Maps[name] = entries
	}
	symbolize(&d, mappings)
	d.Mappings = mappings
	pr, err := b.Printk()
	if err != nil {
		t.Fatal(err)
	}
	pr.SetDeadline(time.Now().Add(50 * time.Millisecond))
	for {
		line, err := pr.Read()
		if err != nil {
			break
		}
		d.Printk = append(d.Printk, line)
	}
	sort.Strings(d.Printk)
	return d, st
}

// compareDumps fails the test on any difference and returns the number
// of map entries and records compared. The maps of idKeys are keyed by
// process or thread ids, which differ between the runs: their values are
// compared as multisets, each cut to its first idKeys[name] bytes (0:
// whole).
func compareDumps(t *testing.T, kernel, ours bpfDump, idKeys map[string]int) (entries, records int) {
	t.Helper()
	for name, km := range kernel.Maps {
		om, ok := ours.Maps[name]
		if !ok {
			t.Errorf("map %s: missing in probeopt's run", name)
			continue
		}
		if n, ok := idKeys[name]; ok {
			values := func(m map[string]string) []string {
				var vs []string
				for _, v := range m {
					if n > 0 && len(v) > 2*n {
						v = v[:2*n]
					}
					vs = append(vs, v)
				}
				sort.Strings(vs)
				return vs
			}
			kv, ov := values(km), values(om)
			entries += len(kv)
			if strings.Join(kv, ",") != strings.Join(ov, ",") {
				t.Errorf("map %s (values by id): kernel %v, probeopt %v", name, kv, ov)
			}
			continue
		}
		keys := map[string]bool{}
		for k := range km {
			keys[k] = true
		}
		for k := range om {
			keys[k] = true
		}
		for k := range keys {
			entries++
			if km[k] != om[k] {
				t.Errorf("map %s key %s: kernel %q, probeopt %q", name, k, km[k], om[k])
			}
		}
	}
	for name, kr := range kernel.Records {
		or := ours.Records[name]
		records += len(kr)
		if strings.Join(kr, ",") != strings.Join(or, ",") {
			t.Errorf("ring %s: kernel %d records, probeopt %d; they differ (kernel %.200v, probeopt %.200v)", name, len(kr), len(or), kr, or)
		}
	}
	if strings.Join(kernel.Printk, "\n") != strings.Join(ours.Printk, "\n") {
		t.Errorf("trace_printk: kernel %d lines, probeopt %d; they differ (kernel %.300q, probeopt %.300q)", len(kernel.Printk), len(ours.Printk), kernel.Printk, ours.Printk)
	}
	return entries, records
}

// TestBPFAgainstKernel runs the same object on the same deterministic
// workload attached by the kernel and by probeopt: every map and every
// ring record must be equal. The programs run in trampoline slots (the
// test fails if a site took traps), with the per-CPU map a stripe per
// thread.
func TestBPFAgainstKernel(t *testing.T) {
	needBPF(t)
	obj := fixture.Build(t, fixture.BPFObject("bpf", "e2e"))
	exe := fixture.Build(t, fixture.BPFWorkload)
	const n = 20000
	for _, threads := range []int{1, 4} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			args := []string{strconv.Itoa(n), strconv.Itoa(threads)}
			attach := []bpfAttach{{Prog: "on_work", Symbol: "work", Cookie: 0x1234_5678_9abc}, {Prog: "on_work_return", Symbol: "work", Return: true, Cookie: 77}}
			kernel := bpfKernelRun(t, obj, exe, args, attach, true)
			ours, st := bpfProbeoptRun(t, obj, exe, args, attach)
			for _, p := range st.Probes {
				if p.Hits != uint64(n*threads) {
					t.Errorf("probe %s: %d hits, want %d", p.Spec, p.Hits, n*threads)
				}
				for _, s := range p.Sites {
					if s.Strategy != plan.TrampolineNop && s.Strategy != plan.TrampolineDetour || s.Fallback != "" {
						t.Errorf("probe %s: site %s strategy %s %s", p.Spec, s.Symbol, s.Strategy, s.Fallback)
					}
				}
			}
			// The maps' own totals, independent of both runs.
			if got := ours.Maps["entries"]["00000000"]; got != fmt.Sprintf("%016x", swap64(uint64(n*threads))) {
				t.Errorf("entries: %s, want %d", got, n*threads)
			}
			t.Logf("stacks %v, stack_rets %v", ours.Maps["stacks"], ours.Maps["stack_rets"])
			t.Logf("trace_printk: %d lines, first %q %q", len(ours.Printk), ours.Printk[:min(2, len(ours.Printk))], kernel.Printk[:min(2, len(kernel.Printk))])
			if len(ours.Printk) == 0 {
				t.Error("no trace_printk line")
			}
			entries, records := compareDumps(t, kernel, ours, nil)
			if records == 0 || entries < 37+11 {
				t.Errorf("compared %d entries and %d records: too few to mean anything", entries, records)
			}
			t.Logf("%d threads: %d map entries and %d ring records compared", threads, entries, records)
		})
	}
}

// swap64 returns v's bytes reversed (a little-endian word as hex).
func swap64(v uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return binary.BigEndian.Uint64(b[:])
}

// TestBPFExamples runs the objects of examples/ on the workload under the
// kernel's uprobes and probeopt's: malloc's size histogram equal bucket
// by bucket and its calls per process equal; the latency example's calls
// per thread equal as a multiset (the latencies themselves differ: the
// kernel's probes are slower), and no call left in flight; the stacks of
// mix's calls, symbolized, equal.
func TestBPFExamples(t *testing.T) {
	needBPF(t)
	exe := fixture.Build(t, fixture.BPFWorkload)
	args := []string{"5000", "3"}
	for _, tc := range []struct {
		name   string
		attach []bpfAttach
		idKeys map[string]int
		check  func(t *testing.T, d bpfDump)
	}{
		{"mallochist", []bpfAttach{{Prog: "malloc_size", Module: "libc.so.6", Symbol: "malloc"}}, map[string]int{"calls": 0},
			func(t *testing.T, d bpfDump) {
				var n uint64
				for _, v := range d.Maps["sizes"] {
					b, _ := hex.DecodeString(v)
					n += binary.LittleEndian.Uint64(b)
				}
				if n < 5000*3 {
					t.Errorf("sizes: %d calls, want at least the workload's 15,000", n)
				}
			}},
		{"latency", []bpfAttach{{Prog: "enter", Symbol: "work"}, {Prog: "leave", Symbol: "work", Return: true}}, map[string]int{"by_thread": 8},
			func(t *testing.T, d bpfDump) {
				if len(d.Maps["start"]) != 0 {
					t.Errorf("start: %d calls in flight at the end", len(d.Maps["start"]))
				}
				if len(d.Maps["by_thread"]) != 3 {
					t.Errorf("by_thread: %d threads, want 3", len(d.Maps["by_thread"]))
				}
				for k, v := range d.Maps["by_thread"] {
					if v[:16] != fmt.Sprintf("%016x", swap64(5000)) {
						t.Errorf("thread %s: calls %s, want 5000", k, v[:16])
					}
				}
			}},
		{"stackcount", []bpfAttach{{Prog: "count", Symbol: "mix"}}, nil,
			func(t *testing.T, d bpfDump) {
				// mix <- work <- run <- libc: one stack, every call.
				if len(d.Maps["stacks"]) != 1 {
					t.Errorf("stacks: %v, want one", d.Maps["stacks"])
				}
				for k, v := range d.Maps["stacks"] {
					if v != fmt.Sprintf("%016x", swap64(15000)) || !strings.HasPrefix(k, "workload+") {
						t.Errorf("stack %s: %s, want 15,000 calls", k, v)
					}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := fixture.Build(t, fixture.BPFObject(filepath.Join("..", "examples", tc.name), tc.name))
			kernel := bpfKernelRun(t, obj, exe, args, tc.attach, false)
			ours, _ := bpfProbeoptRun(t, obj, exe, args, tc.attach)
			tc.check(t, kernel)
			tc.check(t, ours)
			if s := ours.Maps["stacks"]; s != nil {
				t.Logf("stacks: %v", s)
			}
			entries, _ := compareDumps(t, kernel, ours, tc.idKeys)
			t.Logf("%s: %d map entries compared", tc.name, entries)
		})
	}
	// pyfunc reads USDT arguments with usdt.bpf.h: its peer is libbpf's
	// own loader, on CPython's probe in the pyentry fixture.
	t.Run("pyfunc", func(t *testing.T) {
		obj := fixture.Build(t, fixture.BPFObject(filepath.Join("..", "examples", "pyfunc"), "pyfunc"))
		exe := fixture.Build(t, fixture.PyEntry)
		kernel, refused := libbpfUSDTRun(t, obj, exe, args, []usdtAttach{{"entry", "python:function__entry", 0}})
		if len(refused) != 0 {
			t.Fatalf("libbpf refused %v", refused)
		}
		ours, _ := bpfProbeoptRun(t, obj, exe, args, []bpfAttach{{Prog: "entry", Symbol: "usdt:python:function__entry"}})
		// Per round and thread: main, mid, leaf twice and the library's
		// helper, whose file name the 64-byte buffer cuts to 63 bytes.
		const longFile = "/usr/lib/python3.11/site-packages/a/rather/long/package/path/module.py"
		want := map[string]uint64{"calls.py main": 5000 * 3, "calls.py mid": 5000 * 3, "calls.py leaf": 2 * 5000 * 3,
			longFile[:63] + " helper": 5000 * 3}
		for name, d := range map[string]bpfDump{"libbpf": kernel, "probeopt": ours} {
			got := map[string]uint64{}
			for k, v := range d.Maps["calls"] {
				b, _ := hex.DecodeString(k)
				c, _ := hex.DecodeString(v)
				cut := func(s []byte) string { return strings.TrimRight(string(s), "\x00") }
				got[cut(b[:64])+" "+cut(b[64:])] = binary.LittleEndian.Uint64(c)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: calls %v, want %v", name, got, want)
			}
		}
		entries, _ := compareDumps(t, kernel, ours, nil)
		t.Logf("pyfunc: %d map entries compared", entries)
	})
}

// TestBPFNeedsTrampoline: a program is never run at a trap. With
// NoTrampolines every site of its spec is refused with
// ReasonNeedsTrampoline, the attach fails, and the text stays the file's.
func TestBPFNeedsTrampoline(t *testing.T) {
	needBPF(t)
	obj := fixture.Build(t, fixture.BPFObject("bpf", "e2e"))
	exe := fixture.Build(t, fixture.BPFWorkload)
	tr, w, b := spawnLoaded(t, obj, exe, []string{"10", "1"}, &probe.Options{NoTrampolines: true})
	defer w.in.Close()
	l, err := b.Attach("on_work", "work", nil)
	var re *probe.RejectedError
	if l != nil || !errors.As(err, &re) || re.Reason != probe.ReasonNeedsTrampoline {
		t.Fatalf("attach without trampolines: %v, %v; want a %s refusal", l, err, probe.ReasonNeedsTrampoline)
	}
	testenv.TextEqualsFile(t, tr.Pid(), exe)
	// A program that is not in the object, and a uretprobe program at an
	// entry probe's spec form that names an offset.
	if _, err := b.Attach("nosuch", "work", nil); !errors.Is(err, probe.ErrBPF) {
		t.Errorf("attach of an unknown program: %v", err)
	}
	if _, err := b.Attach("on_work", "work%return", nil); !errors.Is(err, probe.ErrBPF) {
		t.Errorf("an entry program at a return probe: %v", err)
	}
}

// TestBPFLinkClose attaches an entry and a return program to one
// function and closes the entry's link before the workload runs: the
// slot is rebuilt without it (its map stays empty, the return program
// counts every call), and closing the other restores the text.
func TestBPFLinkClose(t *testing.T) {
	needBPF(t)
	obj := fixture.Build(t, fixture.BPFObject("bpf", "e2e"))
	exe := fixture.Build(t, fixture.BPFWorkload)
	tr, w, b := spawnLoaded(t, obj, exe, []string{"3000", "2"}, nil)
	entry, err := b.Attach("on_work", "work", nil)
	if err != nil {
		t.Fatal(err)
	}
	ret, err := b.Attach("on_work_return", "work", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := entry.Close(); err != nil {
		t.Fatal(err)
	}
	if len(b.Links()) != 1 {
		t.Errorf("%d links open, want 1", len(b.Links()))
	}
	w.start(t)
	es, err := b.Map("by_key").Entries()
	if err != nil || len(es) != 0 {
		t.Errorf("by_key after its program's link closed: %d entries, %v", len(es), err)
	}
	var returns uint64
	es, err = b.Map("by_ret").Entries()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		returns += binary.LittleEndian.Uint64(e.Value)
	}
	if returns != 6000 {
		t.Errorf("by_ret: %d returns, want 6000", returns)
	}
	if err := ret.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.TextEqualsFile(t, tr.Pid(), exe)
	w.in.Close()
	if s, err := tr.Wait(); err != nil || s.Code != 0 {
		t.Fatalf("workload: %v %v", s, err)
	}
}
