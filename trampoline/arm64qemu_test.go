package trampoline_test

// Tests that run arm64 trampolines for real, under qemu-aarch64: a static
// aarch64 program (testdata/arm64tramp) is built with the cross compiler,
// and a patched copy of its ELF file is made per case — slots written into
// an area of zeros the program reserves in .text, the b written over each
// site, the data area's header written into the program's page-aligned
// array in .data. The patched program must print exactly what the
// original prints, and the data area it writes out at exit must hold the
// expected counters and events.

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/trampoline"
)

// arm64ProgFlags are the flags of testdata/arm64tramp/Makefile.
var arm64ProgFlags = []string{"-static", "-O2", "-pthread", "-Wall", "-Wextra", "-Werror"}

// arm64ProgCalls is N in main.c: calls of probed per thread.
const arm64ProgCalls = 1000

var arm64Prog struct {
	once sync.Once
	path string
	err  error
}

// buildARM64Prog builds the test program once per content of its sources
// and flags, cached under the temporary directory.
func buildARM64Prog(t *testing.T) string {
	t.Helper()
	cc := testenv.MustHaveTool(t, "aarch64-linux-gnu-gcc")
	testenv.MustHaveTool(t, "qemu-aarch64")
	arm64Prog.once.Do(func() {
		src := filepath.Join("testdata", "arm64tramp")
		files := []string{"main.c", "probed.S"}
		h := sha256.New()
		fmt.Fprintln(h, arm64ProgFlags, cc)
		if ver, err := exec.Command(cc, "--version").Output(); err == nil {
			h.Write(ver)
		}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				arm64Prog.err = err
				return
			}
			h.Write(b)
		}
		dir := filepath.Join(os.TempDir(), "probeopt-arm64tramp-"+hex.EncodeToString(h.Sum(nil))[:16])
		out := filepath.Join(dir, "prog")
		if _, err := os.Stat(out); err == nil {
			arm64Prog.path = out
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			arm64Prog.err = err
			return
		}
		tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
		args := append(append([]string{}, arm64ProgFlags...), "-o", tmp)
		for _, f := range files {
			args = append(args, filepath.Join(src, f))
		}
		if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			arm64Prog.err = fmt.Errorf("%s: %v\n%s", cc, err, b)
			return
		}
		arm64Prog.err = os.Rename(tmp, out)
		arm64Prog.path = out
	})
	if arm64Prog.err != nil {
		t.Fatal(arm64Prog.err)
	}
	return arm64Prog.path
}

// arm64Image is the test program's file with its symbols.
type arm64Image struct {
	file  []byte
	syms  map[string]uint64
	progs []*elf.Prog
}

func loadARM64Image(t *testing.T, path string) *arm64Image {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, syms := fixture.OpenELF(t, path)
	img := &arm64Image{file: b, syms: map[string]uint64{}}
	for _, s := range syms {
		img.syms[s.Name] = s.Value
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			img.progs = append(img.progs, p)
		}
	}
	return img
}

func (img *arm64Image) sym(t *testing.T, name string) uint64 {
	t.Helper()
	a, ok := img.syms[name]
	if !ok {
		t.Fatalf("no symbol %s", name)
	}
	return a
}

// off returns the file offset of n bytes at virtual address a.
func (img *arm64Image) off(t *testing.T, a uint64, n int) int {
	t.Helper()
	for _, p := range img.progs {
		if a >= p.Vaddr && a+uint64(n) <= p.Vaddr+p.Filesz {
			return int(p.Off + a - p.Vaddr)
		}
	}
	t.Fatalf("%#x (+%d) is not in the file", a, n)
	return 0
}

// arm64Probe is one probe of a case.
type arm64Probe struct {
	site    string
	handler trampoline.Handler
}

// arm64Case is a patched copy of the program.
type arm64Case struct {
	name    string
	area    string // slot_near or slot_far
	probes  []arm64Probe
	opts    trampoline.ARM64Options
	ring    int // ring records
	threads int
	cpu     string
	// stripes, when not 0, enables the per-thread data plane: stripes
	// stripes of 16 counters, and per-thread rings of threadRing records.
	stripes, threadRing int
}

// arm64Run is what one run printed and the data area it wrote.
type arm64Run struct {
	out  string
	data []byte
}

func runARM64(t *testing.T, exe string, threads int, cpu string) arm64Run {
	t.Helper()
	dir := t.TempDir()
	dataFile := filepath.Join(dir, "data")
	args := []string{}
	if cpu != "" {
		args = append(args, "-cpu", cpu)
	}
	args = append(args, exe, dataFile)
	if threads > 0 {
		args = append(args, fmt.Sprint(threads))
	}
	cmd := exec.Command("qemu-aarch64", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("qemu-aarch64 %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	data, err := os.ReadFile(dataFile)
	if err != nil {
		t.Fatal(err)
	}
	return arm64Run{out: stdout.String(), data: data}
}

// patch makes the patched copy of a case and returns its path, the data
// area description and the trampolines.
func (img *arm64Image) patch(t *testing.T, c *arm64Case) (string, *trampoline.Data, []*trampoline.Trampoline) {
	t.Helper()
	file := bytes.Clone(img.file)
	data, err := trampoline.NewData(img.sym(t, "probe_data"), 32, c.ring)
	if err != nil {
		t.Fatal(err)
	}
	if c.stripes > 0 {
		if err := data.SetThreads(c.stripes, 16, c.threadRing); err != nil {
			t.Fatal(err)
		}
	}
	doff := img.off(t, data.Addr, int(data.Size()))
	if err := data.Init(file[doff : doff+int(data.Size())]); err != nil {
		t.Fatal(err)
	}
	cfg := &trampoline.Config{Data: data}
	area, err := trampoline.NewArea(img.sym(t, c.area), 16384)
	if err != nil {
		t.Fatal(err)
	}
	var tramps []*trampoline.Trampoline
	for _, p := range c.probes {
		addr := img.sym(t, p.site)
		o := img.off(t, addr, 8)
		s, err := trampoline.AnalyzeARM64(addr, file[o:o+8], nil)
		if err != nil {
			t.Fatalf("%s: %v", p.site, err)
		}
		h := p.handler
		tr, err := area.BuildARM64(s, &h, cfg, &c.opts)
		if err != nil {
			t.Fatalf("%s: %v", p.site, err)
		}
		so := img.off(t, tr.Slot, len(tr.Code))
		if !bytes.Equal(file[so:so+len(tr.Code)], make([]byte, len(tr.Code))) {
			t.Fatalf("%s: slot at %#x is not free", p.site, tr.Slot)
		}
		copy(file[so:], tr.Code)
		po := img.off(t, tr.Install.Addr, len(tr.Install.New))
		if !bytes.Equal(file[po:po+len(tr.Install.Old)], tr.Install.Old) {
			t.Fatalf("%s: old bytes % x, want % x", p.site, file[po:po+len(tr.Install.Old)], tr.Install.Old)
		}
		copy(file[po:], tr.Install.New)
		tramps = append(tramps, tr)
	}
	exe := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(exe, file, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe, data, tramps
}

// arm64Sites are the probe sites of probed.S with what they displace.
var arm64Sites = []string{
	"site_entry",  // stp x29, x30, [sp, #-48]! (function entry)
	"site_mov",    // mov x29, sp
	"site_bcond",  // b.lo
	"site_cbz",    // cbz
	"site_adrp",   // adrp
	"site_ldrlit", // ldr x4, literal
	"site_adr",    // adr
	"site_ldrd",   // ldr d0, literal (FP/SIMD)
	"site_ldrq",   // ldr q1, literal (FP/SIMD, 16 bytes)
	"site_ldrzr",  // ldr wzr, literal (only the access matters)
	"site_tbz",    // tbz
	"site_flags",  // add between cmp and csel (NZCV live)
	"site_bl",     // bl
	"site_blr",    // blr x7
	"site_nop",    // nop (a NOP site)
	"site_b",      // b
	"site_cbnz",   // cbnz
	"site_ret",    // ret
	"site_leaf",   // entry of a leaf function
	"site_bti",    // bti c at a function entry: kept, the b follows it
}

// arm64Hits is how many times a site runs per call of probed, when not
// once.
var arm64Hits = map[string]uint64{"site_leaf": 2}

func hits(site string) uint64 {
	if n, ok := arm64Hits[site]; ok {
		return n
	}
	return 1
}

func countAll(sites []string) []arm64Probe {
	var out []arm64Probe
	for i, s := range sites {
		out = append(out, arm64Probe{site: s, handler: trampoline.Handler{ID: uint32(i), Count: true, Counter: i}})
	}
	return out
}

// TestARM64Qemu runs patched copies of the test program under
// qemu-aarch64 and compares them with the original: same output, and
// every counter equal to the number of calls.
func TestARM64Qemu(t *testing.T) {
	exe := buildARM64Prog(t)
	img := loadARM64Image(t, exe)
	base := runARM64(t, exe, 0, "")
	baseThreads := runARM64(t, exe, 4, "")
	if len(strings.Split(strings.TrimSpace(base.out), "\n")) != arm64ProgCalls {
		t.Fatalf("unprobed run printed %d lines", strings.Count(base.out, "\n"))
	}
	var cases []arm64Case
	// Each site alone, from the near area and from the far one (2 MiB
	// away: conditional branches and literals need their long forms).
	for _, area := range []string{"slot_near", "slot_far"} {
		for i, s := range arm64Sites {
			cases = append(cases, arm64Case{
				name: area + "/" + s, area: area,
				probes: []arm64Probe{{site: s, handler: trampoline.Handler{ID: uint32(i), Count: true, Counter: 0}}},
			})
		}
	}
	cases = append(cases,
		arm64Case{name: "all/near", area: "slot_near", probes: countAll(arm64Sites)},
		arm64Case{name: "all/far/lse", area: "slot_far", probes: countAll(arm64Sites), opts: trampoline.ARM64Options{LSE: true}, cpu: "max"},
		arm64Case{name: "all/threads", area: "slot_near", probes: countAll(arm64Sites), threads: 4},
		arm64Case{name: "all/threads/lse", area: "slot_far", probes: countAll(arm64Sites), threads: 4, opts: trampoline.ARM64Options{LSE: true}, cpu: "max"},
		arm64Case{name: "event/entry", area: "slot_near", ring: 1024, probes: []arm64Probe{
			{site: "site_entry", handler: trampoline.Handler{ID: 7, Count: true, Counter: 3, Event: true}},
			{site: "site_nop", handler: trampoline.Handler{ID: 8, Count: true, Counter: 4}},
		}},
		arm64Case{name: "event/drop", area: "slot_far", ring: 256, probes: []arm64Probe{
			{site: "site_bcond", handler: trampoline.Handler{ID: 9, Event: true}},
			{site: "site_bl", handler: trampoline.Handler{ID: 10, Count: true, Counter: 1, Event: true}},
		}, opts: trampoline.ARM64Options{LSE: true}, cpu: "max"},
		arm64Case{name: "event/threads", area: "slot_near", ring: 4096, threads: 4, probes: []arm64Probe{
			{site: "site_entry", handler: trampoline.Handler{ID: 11, Event: true}},
			{site: "site_leaf", handler: trampoline.Handler{ID: 12, Count: true, Counter: 31}},
		}},
		// The per-thread data plane: counters 0-15 count in the
		// threads' stripes, 16-31 in the shared words.
		arm64Case{name: "stripes/threads", area: "slot_near", probes: countAll(arm64Sites), threads: 4, stripes: 8},
		arm64Case{name: "stripes/threads/far", area: "slot_far", probes: countAll(arm64Sites), threads: 4, stripes: 8, opts: trampoline.ARM64Options{LSE: true}, cpu: "max"},
		arm64Case{name: "stripes/main", area: "slot_near", probes: countAll(arm64Sites), stripes: 1},
		// Two stripes for four threads: two threads count in the
		// shared words, exactly.
		arm64Case{name: "stripes/fallback", area: "slot_near", probes: countAll(arm64Sites), threads: 4, stripes: 2},
		arm64Case{name: "stripes/events", area: "slot_near", ring: 256, threads: 4, stripes: 8, threadRing: 1024, probes: []arm64Probe{
			{site: "site_entry", handler: trampoline.Handler{ID: 13, Count: true, Counter: 2, Event: true}},
			{site: "site_leaf", handler: trampoline.Handler{ID: 14, Count: true, Counter: 3}},
		}},
		// Rings of 256 for 1,000 calls a thread: 744 drops each.
		arm64Case{name: "stripes/events/drop", area: "slot_far", ring: 256, threads: 4, stripes: 4, threadRing: 256, probes: []arm64Probe{
			{site: "site_entry", handler: trampoline.Handler{ID: 15, Count: true, Counter: 1, Event: true}},
		}, opts: trampoline.ARM64Options{LSE: true}, cpu: "max"},
	)
	for i := range cases {
		c := &cases[i]
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			exe, data, tramps := img.patch(t, c)
			run := runARM64(t, exe, c.threads, c.cpu)
			want := base.out
			if c.threads > 0 {
				want = baseThreads.out
			}
			if run.out != want {
				t.Fatalf("output differs from the unprobed run:\n%s", firstDiff(want, run.out))
			}
			v, err := trampoline.NewView(run.data)
			if err != nil {
				t.Fatal(err)
			}
			calls := uint64(arm64ProgCalls * max(c.threads, 1))
			wantCount := map[int]uint64{}
			for _, p := range c.probes {
				if p.handler.Count {
					wantCount[p.handler.Counter] += calls * hits(p.site)
				}
			}
			for i := 0; i < data.NumCounters; i++ {
				if got := v.Counter(i); got != wantCount[i] {
					t.Errorf("counter %d = %d, want %d", i, got, wantCount[i])
				}
			}
			if c.stripes > 0 {
				checkARM64Stripes(t, c, v)
			}
			if c.threadRing > 0 {
				checkARM64ThreadEvents(t, c, v)
			} else {
				checkARM64Events(t, c, v, img, calls)
			}
			if testing.Verbose() && len(tramps) == 1 {
				t.Logf("slot at %#x, %d bytes, site %#x", tramps[0].Slot, len(tramps[0].Code), tramps[0].Install.Addr)
			}
		})
	}
}

// checkARM64Events checks the ring of the event cases.
func checkARM64Events(t *testing.T, c *arm64Case, v *trampoline.View, img *arm64Image, calls uint64) {
	t.Helper()
	var evProbes []arm64Probe
	for _, p := range c.probes {
		if p.handler.Event {
			evProbes = append(evProbes, p)
		}
	}
	if len(evProbes) == 0 {
		return
	}
	var total uint64
	for _, p := range evProbes {
		total += calls * hits(p.site)
	}
	stored := min(total, uint64(c.ring))
	if got := v.Dropped(); got != total-stored {
		t.Errorf("dropped %d, want %d", got, total-stored)
	}
	evs := make([]trampoline.Event, c.ring+1)
	n := v.Read(evs)
	if uint64(n) != stored {
		t.Fatalf("read %d events, want %d", n, stored)
	}
	ids := map[uint32]string{}
	for _, p := range evProbes {
		ids[p.handler.ID] = p.site
	}
	threads := map[uint64]bool{}
	next := map[uint64]uint64{} // per thread: the next argument of probed
	for i, e := range evs[:n] {
		site, ok := ids[e.Probe]
		if !ok || e.Kind != trampoline.EventEntry || e.Seq != uint64(i) {
			t.Fatalf("event %d: %+v", i, e)
		}
		if e.IP != img.sym(t, site) {
			t.Errorf("event %d: ip %#x, want %#x (%s)", i, e.IP, img.sym(t, site), site)
		}
		if e.Thread == 0 || e.SP == 0 || e.SP%16 != 0 {
			t.Errorf("event %d: thread %#x sp %#x", i, e.Thread, e.SP)
		}
		threads[e.Thread] = true
		if site == "site_entry" {
			// x0 is the argument: 0, 1, 2... in each thread.
			if e.Args[0] != next[e.Thread] {
				t.Errorf("event %d: x0 = %d, want %d", i, e.Args[0], next[e.Thread])
			}
			next[e.Thread]++
		}
	}
	if want := max(c.threads, 1); len(threads) != want && stored == total {
		t.Errorf("%d thread pointers, want %d", len(threads), want)
	}
}

// checkARM64Stripes checks the stripes of a per-thread case: each thread
// that holds one (distinct thread pointers) counted every hit of its own
// in it, N calls per thread, and the threads without one (more threads
// than stripes) counted in the shared words, which View.Counter adds.
func checkARM64Stripes(t *testing.T, c *arm64Case, v *trampoline.View) {
	t.Helper()
	sts := v.Stripes()
	threads := max(c.threads, 1)
	if want := min(threads, c.stripes); len(sts) != want {
		t.Fatalf("%d stripes held, want %d: %+v", len(sts), want, sts)
	}
	keys := map[uint64]bool{}
	for _, st := range sts {
		if keys[st.Key] {
			t.Errorf("stripe %d: thread pointer %#x holds another stripe too", st.Slot, st.Key)
		}
		keys[st.Key] = true
		for _, p := range c.probes {
			i := p.handler.Counter
			if !p.handler.Count || i >= v.ThreadCounters() {
				continue
			}
			if got, want := v.ThreadCounter(st.Slot, i), arm64ProgCalls*hits(p.site); got != want {
				t.Errorf("stripe %d (thread pointer %#x), counter %d (%s): %d, want %d", st.Slot, st.Key, i, p.site, got, want)
			}
		}
	}
}

// checkARM64ThreadEvents checks the per-thread rings of a case: each
// thread's ring holds the first records of its own calls, in order (x0 is
// the call's argument, 0, 1, 2... in each thread), with time stamps that
// never go back; the rest of its calls are counted dropped.
func checkARM64ThreadEvents(t *testing.T, c *arm64Case, v *trampoline.View) {
	t.Helper()
	var ev *arm64Probe
	for i := range c.probes {
		if c.probes[i].handler.Event {
			ev = &c.probes[i]
		}
	}
	per := arm64ProgCalls * hits(ev.site)
	stored := min(per, uint64(c.threadRing))
	buf := make([]trampoline.Event, c.threadRing+1)
	threads := uint64(max(c.threads, 1))
	for _, st := range v.Stripes() {
		n := v.ReadThread(st.Slot, buf)
		if uint64(n) != stored {
			t.Errorf("stripe %d: %d events, want %d", st.Slot, n, stored)
		}
		var last uint64
		for k, e := range buf[:n] {
			if e.Probe != ev.handler.ID || e.Thread != st.Key || e.Seq != uint64(k) || e.Args[0] != uint64(k) || e.TSC < last || e.TSC == 0 {
				t.Fatalf("stripe %d event %d: %+v (previous time %d)", st.Slot, k, e, last)
			}
			last = e.TSC
		}
		if got := v.ThreadDropped(st.Slot); got != per-stored {
			t.Errorf("stripe %d: %d dropped, want %d", st.Slot, got, per-stored)
		}
	}
	// Every thread had a stripe: the shared ring dropped nothing.
	if got, want := v.Dropped(), threads*(per-stored); got != want {
		t.Errorf("%d dropped in all, want %d", got, want)
	}
	if got, want := v.DroppedBy(ev.handler.Counter), threads*(per-stored); got != want {
		t.Errorf("%d dropped by counter %d, want %d", got, ev.handler.Counter, want)
	}
}

// firstDiff shows the first line where two outputs differ.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(la), len(lb)); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: want %q, got %q", i+1, x, y)
		}
	}
	return "(same lines)"
}
