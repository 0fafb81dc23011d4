//go:build linux && amd64

package probe_test

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/bpf"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
)

// usdtAttach is one attachment of libbpf's bpf_program__attach_usdt:
// a program, a probe PROVIDER:NAME of the workload, and the USDT cookie.
type usdtAttach struct {
	Prog, Probe string
	Cookie      uint64
}

// libbpfUSDTRun runs the workload exe with args, attaches the object's
// programs with libbpf's own USDT loader (testdata/bpf/usdtload.c) and
// returns every map of the object (a per-CPU map's values summed as
// 64-bit words) and the attachments libbpf refused, with their errno.
func libbpfUSDTRun(t *testing.T, objPath, exe string, args []string, attach []usdtAttach) (bpfDump, map[string]int) {
	t.Helper()
	loader := fixture.Build(t, fixture.USDTLoader)
	cmd, w := startWorkload(t, exe, args)
	in := w.in

	largs := []string{objPath, strconv.Itoa(cmd.Process.Pid), exe}
	for _, a := range attach {
		largs = append(largs, fmt.Sprintf("%s:%s:%d", a.Prog, a.Probe, a.Cookie))
	}
	var lerr strings.Builder
	lc, lrun := startPiped(t, loader, largs, &lerr)
	lin, out := lrun.in, lrun.out
	refused := map[string]int{}
	for {
		line, err := fixture.ReadLine(out, time.Minute)
		if err != nil {
			t.Fatalf("libbpf's loader: %v (%s)", err, lerr.String())
		}
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "refused" {
			refused[f[1]], _ = strconv.Atoi(f[2])
			continue
		}
		if len(f) != 1 || f[0] != "attached" {
			t.Fatalf("libbpf's loader: %q (%s)", line, lerr.String())
		}
		break
	}
	w.start(t)
	if _, err := lin.Write([]byte("dump\n")); err != nil {
		t.Fatal(err)
	}
	d := bpfDump{Maps: map[string]map[string]string{}, Records: map[string][]string{}}
	for {
		line, err := fixture.ReadLine(out, time.Minute)
		if err != nil {
			t.Fatalf("libbpf's loader: %v (%s)", err, lerr.String())
		}
		f := strings.Fields(line)
		if len(f) == 1 && f[0] == "end" {
			break
		}
		if len(f) != 3 {
			t.Fatalf("libbpf's loader: %q", line)
		}
		if d.Maps[f[0]] == nil {
			d.Maps[f[0]] = map[string]string{}
		}
		d.Maps[f[0]][f[1]] = f[2]
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	if err := lc.Wait(); err != nil {
		t.Fatalf("libbpf's loader: %v (%s)", err, lerr.String())
	}
	return d, refused
}

// usdtHit is the key of testdata/bpf/usdt.bpf.c's map hits.
func usdtHit(cookie uint64, vals ...int64) string {
	b := make([]byte, 208)
	binary.LittleEndian.PutUint64(b, cookie)
	binary.LittleEndian.PutUint64(b[8:], uint64(len(vals)))
	for i := 0; i < 12; i++ {
		ret := int64(-2) // -ENOENT past the note's arguments
		if i < len(vals) {
			ret = 0
			binary.LittleEndian.PutUint64(b[112+8*i:], uint64(vals[i]))
		}
		binary.LittleEndian.PutUint64(b[16+8*i:], uint64(ret))
	}
	return hex.EncodeToString(b)
}

func word(v int64) string {
	return hex.EncodeToString(binary.LittleEndian.AppendUint64(nil, uint64(v)))
}

// TestBPFUSDTArgs runs a program written with libbpf's usdt.bpf.h
// (bpf_usdt_arg, bpf_usdt_arg_cnt, bpf_usdt_cookie, BPF_USDT) on the USDT
// workload, attached by libbpf's own loader (bpf_program__attach_usdt on
// the kernel's uprobes) and by probeopt: every map of the object is
// equal, __bpf_usdt_specs (the specs and their IDs) and the empty
// __bpf_usdt_ip_to_spec_id included; the arguments the program read are
// the values the workload computed (constants, registers of 1, 2, 4 and 8
// bytes signed and unsigned, memory off %rbp and %rsp, a probe with a
// semaphore); and the probe whose argument is rip-relative is refused by
// both, with the text left as the file's.
func TestBPFUSDTArgs(t *testing.T) {
	needBPF(t)
	exe := fixture.Build(t, fixture.USDTWorkload)
	obj := fixture.Build(t, fixture.BPFObject("bpf", "usdt"))
	const rounds, threads = 2000, 2
	args := []string{strconv.Itoa(rounds), strconv.Itoa(threads)}
	attach := []usdtAttach{
		{"on_usdt", "usdtwork:regs", 11}, {"on_usdt", "usdtwork:consts", 12},
		{"on_usdt", "usdtwork:mem", 13}, {"on_usdt", "usdtwork:guarded", 14},
		{"three", "usdtwork:mem", 15},
	}
	kernel, refused := libbpfUSDTRun(t, obj, exe, args, append(attach, usdtAttach{"on_usdt", "usdtwork:global", 16}))
	if len(refused) != 1 || refused["on_usdt:usdtwork:global"] != 22 {
		t.Errorf("libbpf refused %v; want on_usdt:usdtwork:global with EINVAL (its argument -1@gsc(%%rip))", refused)
	}
	var ba []bpfAttach
	for _, a := range attach {
		ba = append(ba, bpfAttach{Prog: a.Prog, Symbol: "usdt:" + a.Probe, Cookie: a.Cookie})
	}
	ours, st := bpfProbeoptRun(t, obj, exe, args, ba)
	if st.Traps != 0 {
		t.Errorf("%d traps: the programs must run in trampoline slots", st.Traps)
	}

	hits, byArgs := usdtConstruction(rounds, threads)
	for name, d := range map[string]bpfDump{"libbpf": kernel, "probeopt": ours} {
		for m, want := range map[string]map[string]string{"hits": hits, "by_args": byArgs} {
			got := d.Maps[m]
			if len(got) != len(want) {
				t.Errorf("%s: map %s has %d entries, want %d", name, m, len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: map %s key %.64s...: %q, want %q", name, m, k, got[k], v)
				}
			}
		}
		// The per-CPU scratch value is the last hit's key, of some CPU.
		delete(d.Maps, "scratch")
	}
	entries, _ := compareDumps(t, kernel, ours, nil)
	t.Logf("%d map entries compared (%d spec IDs used)", entries, countNonZero(kernel.Maps[bpf.USDTSpecsMap]))

	t.Run("by-address", func(t *testing.T) { testUSDTByAddress(t, obj, exe, args, ba[:4], hits, kernel) })
	testUSDTAttachments(t, obj, exe)
}

// usdtConstruction is the workload's construction: every round hits
// each probe once per thread with k = round % 8. It returns the entries
// of the hits and by_args maps.
func usdtConstruction(rounds, threads int) (hits, byArgs map[string]string) {
	per := fmt.Sprintf("%016x", swap64(uint64(rounds/8*threads)))
	hits = map[string]string{usdtHit(12, 5, -1, 70000, -9): fmt.Sprintf("%016x", swap64(uint64(rounds*threads)))}
	byArgs = map[string]string{}
	for k := int64(0); k < 8; k++ {
		hits[usdtHit(11, -100-k, 200+k, -1000-k, 60000+k, -100000-k, 4000000000+k, -5000000000-k, int64(-0x0123456789abcdf0+k))] = per
		hits[usdtHit(13, -7-k, 123456789*k, k-4)] = per
		hits[usdtHit(13, -70-k, -123456789*k, k-40)] = per
		hits[usdtHit(14, k, 1)] = per
		byArgs[word(-7-k)] = word(int64(rounds/8*threads) * (123456789*k + k - 4))
		byArgs[word(-70-k)] = word(int64(rounds/8*threads) * (-123456789*k + k - 40))
	}
	return hits, byArgs
}

// testUSDTByAddress attaches by address (BPFOptions.USDTByAddress), as
// libbpf's loader does on a kernel without cookies, and checks the same
// hits; the specs of on_usdt's
// attachments, with the IDs libbpf gave them; and each note's
// run-time address (readelf's location plus the executable's load
// address) mapped to its spec's ID. A second program at the same
// notes is refused, as libbpf refuses an IP collision.
func testUSDTByAddress(t *testing.T, obj, exe string, args []string, ba []bpfAttach, hits map[string]string, kernel bpfDump) {
	addr, _ := bpfProbeoptRunBPF(t, obj, exe, args, ba, &probe.BPFOptions{USDTByAddress: true})
	if got := addr.Maps["hits"]; fmt.Sprint(got) != fmt.Sprint(hits) {
		t.Errorf("hits: %d entries, want the construction's %d (%v)", len(got), len(hits), got)
	}
	for k, v := range kernel.Maps[bpf.USDTSpecsMap] {
		if id := binary.LittleEndian.Uint32(mustHex(t, k)); id >= 5 {
			v = strings.Repeat("0", len(v)) // the attachment of three
		}
		if addr.Maps[bpf.USDTSpecsMap][k] != v {
			t.Errorf("spec %s: %s, libbpf's %s", k, addr.Maps[bpf.USDTSpecsMap][k], v)
		}
	}
	base := loadAddress(t, addr.Mappings, exe)
	want := map[string]string{}
	for i, loc := range readelfLocations(t, exe, "regs", "consts", "mem", "guarded") {
		want[word(int64(base+loc))] = hex.EncodeToString(binary.LittleEndian.AppendUint32(nil, uint32(i)))
	}
	if got := addr.Maps[bpf.USDTIPMap]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: %v, want %v", bpf.USDTIPMap, got, want)
	}
	_, w, b := spawnLoadedBPF(t, obj, exe, []string{"8", "1"}, nil, &probe.BPFOptions{USDTByAddress: true})
	defer w.in.Close()
	if _, err := b.Attach("on_usdt", "usdt:usdtwork:mem", nil); err != nil {
		t.Fatal(err)
	}
	if l, err := b.Attach("three", "usdt:usdtwork:mem", nil); err == nil {
		t.Errorf("a second program at the same notes by address: %v, %v; want a refusal", l, err)
	} else {
		t.Logf("refused: %v", err)
	}
}

// testUSDTAttachments checks what an attachment refuses (a rip-relative
// argument, as libbpf refuses it; a USDT program at a function) and that
// a closed link's spec IDs serve the next attachment, the text equal to
// the file's after each.
func testUSDTAttachments(t *testing.T, obj, exe string) {
	// The rip-relative argument: refused, as libbpf refuses it.
	tr, w, b := spawnLoaded(t, obj, exe, []string{"8", "1"}, nil)
	defer w.in.Close()
	l, err := b.Attach("on_usdt", "usdt:usdtwork:global", &probe.AttachOptions{Cookie: 16})
	var re *probe.RejectedError
	if l != nil || !errors.As(err, &re) || re.Reason != probe.ReasonUSDTArg || !strings.Contains(err.Error(), "gsc(%rip)") {
		t.Fatalf("attach at usdtwork:global: %v, %v; want a %s refusal naming -1@gsc(%%rip)", l, err, probe.ReasonUSDTArg)
	}
	t.Logf("refused: %v", err)
	testenv.TextEqualsFile(t, tr.Pid(), exe)
	// A usdt.bpf.h program at a function is refused at once.
	if _, err := b.Attach("on_usdt", "regs", nil); !errors.Is(err, probe.ErrBPF) {
		t.Errorf("attach of a USDT program at a function: %v", err)
	}
	// A closed link's spec IDs serve the next attachment, as libbpf's
	// detach gives them back: consts' spec takes regs' ID 0.
	argCount := func(id uint32) uint16 {
		v, err := b.Map(bpf.USDTSpecsMap).Lookup(binary.LittleEndian.AppendUint32(nil, id))
		if err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint16(v[200:])
	}
	regs, err := b.Attach("on_usdt", "usdt:usdtwork:regs", nil)
	if err != nil || argCount(0) != 8 {
		t.Fatalf("attach at regs: %v, spec 0 of %d arguments", err, argCount(0))
	}
	if err := regs.Close(); err != nil {
		t.Fatal(err)
	}
	consts, err := b.Attach("on_usdt", "usdt:usdtwork:consts", nil)
	if err != nil || argCount(0) != 4 || argCount(1) != 0 {
		t.Fatalf("attach at consts after regs' close: %v, specs 0 and 1 of %d and %d arguments, want 4 and 0", err, argCount(0), argCount(1))
	}
	if err := consts.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.TextEqualsFile(t, tr.Pid(), exe)
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadAddress returns the address at which mappings (/proc/PID/maps) map
// file exe's offset 0.
func loadAddress(t *testing.T, mappings, exe string) uint64 {
	t.Helper()
	for _, line := range strings.Split(mappings, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[5] == exe && strings.Trim(f[2], "0") == "" {
			lo, _, _ := strings.Cut(f[0], "-")
			v, err := strconv.ParseUint(lo, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("%s not mapped at offset 0", exe)
	return 0
}

// readelfLocations returns the locations of exe's usdtwork notes named
// names, in that order of names and then in note order, as readelf -n
// prints them.
func readelfLocations(t *testing.T, exe string, names ...string) []uint64 {
	t.Helper()
	out, err := exec.Command(testenv.MustHaveTool(t, "readelf"), "-n", exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]uint64{}
	var name string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "Name:":
			name = f[1]
		case len(f) >= 2 && f[0] == "Location:":
			v, err := strconv.ParseUint(strings.TrimSuffix(f[1], ","), 0, 64)
			if err != nil {
				t.Fatal(err)
			}
			byName[name] = append(byName[name], v)
		}
	}
	var locs []uint64
	for _, n := range names {
		locs = append(locs, byName[n]...)
	}
	return locs
}

// countNonZero counts the entries of m whose value is not all zeros.
func countNonZero(m map[string]string) int {
	n := 0
	for _, v := range m {
		if strings.Trim(v, "0") != "" {
			n++
		}
	}
	return n
}

// TestBPFUSDTPython attaches the pyfunc example to the python3 of the
// system (/usr/bin/python3.11, which carries CPython's USDT notes): its
// function__entry site is a 1-byte nop in a function that only the file's
// .dynsym could name, and it has none, so the site takes no trampoline
// and the program is refused (bpf-needs-trampoline), the text left as
// the file's.
func TestBPFUSDTPython(t *testing.T) {
	needBPF(t)
	const python = "/usr/bin/python3.11"
	f, err := elfscan.Open(python)
	if err != nil {
		testenv.Unavailable(t, "%s: %v", python, err)
		return
	}
	notes, err := f.USDT()
	f.Close()
	found := false
	for _, n := range notes {
		found = found || n.Provider == "python" && n.Name == "function__entry"
	}
	if err != nil || !found {
		testenv.Unavailable(t, "%s has no python:function__entry note (%v)", python, err)
		return
	}
	obj := fixture.Build(t, fixture.BPFObject(filepath.Join("..", "examples", "pyfunc"), "pyfunc"))
	tr, w, b := spawnLoaded(t, obj, python, []string{"-c", `import sys; print("ready", flush=True); sys.stdin.readline()`}, nil)
	defer w.in.Close()
	l, err := b.Attach("entry", "usdt:python:function__entry", nil)
	var re *probe.RejectedError
	if l != nil || !errors.As(err, &re) || re.Reason != probe.ReasonNeedsTrampoline {
		t.Fatalf("attach at python:function__entry: %v, %v; want a %s refusal", l, err, probe.ReasonNeedsTrampoline)
	}
	t.Logf("refused: %v", err)
	testenv.TextEqualsFile(t, tr.Pid(), python)
}
