//go:build linux

package plan_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/hostcpu"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
)

// kindsFixture is one function per instruction kind; see
// testdata/src/kinds_x86.S.
const kindsFixture = "../testdata/x86_64/kinds"

// uprobePMUType is where the kernel publishes the perf event type of its
// uprobe PMU.
const uprobePMUType = "/sys/bus/event_source/devices/uprobe/type"

// Bits of the need_NAME symbols.
const (
	needNoRun  = 1
	needAVX2   = 2
	needAVX512 = 4
)

// kind is one probe site of the fixture.
type kind struct {
	name string
	addr uint64
	need uint64
}

// observation is what the kernel did with one probe.
type observation struct {
	strategy plan.Strategy // reject, emulate, xol, trampoline-nop; "" when registered but not run
	detail   string
}

// TestLinuxUprobesLive checks the linux-uprobes prediction against the
// kernel it runs on, kind by kind: a probe the kernel rejects makes
// registration fail while a process maps the file; after the probed
// function ran, a single-stepped probe has made the kernel map its XOL page
// "[uprobes]" into the process, an optimized nop5 its "[uprobes-trampoline]"
// page, and an emulated one neither. Kinds that cannot run on this CPU (or
// at all) are checked for registration only. Nothing is timed.
func TestLinuxUprobesLive(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the fixture is x86-64 and this is %s", runtime.GOARCH)
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "uprobes need root (euid %d)", os.Geteuid())
	}
	b, err := os.ReadFile(uprobePMUType)
	if err != nil {
		testenv.Unavailable(t, "no uprobe PMU: %v", err)
	}
	pmu, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", uprobePMUType, err)
	}
	path, err := filepath.Abs(kindsFixture)
	if err != nil {
		t.Fatal(err)
	}
	kinds := readKinds(t, path)
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cpu := hostcpu.Host()

	agree, runs := 0, 0
	var report []string
	for _, k := range kinds {
		site, fn := siteOf(t, f, k.addr)
		pred := plan.Decide(plan.LinuxUprobes, &plan.Site{Arch: f.Arch, Addr: k.addr, Code: site, Func: fn}, nil)
		off, err := f.TextOffset(k.addr)
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		run := k.need&needNoRun == 0 && (k.need&needAVX2 == 0 || cpu.HasFlag("avx2")) && (k.need&needAVX512 == 0 || cpu.HasFlag("avx512f"))
		obs := observe(t, path, pmu, off, k.name, run)
		ok := false
		switch {
		case obs.strategy == "":
			ok = pred.Strategy != plan.Reject
		case pred.Reason == plan.ReasonXOLSyscall:
			// The prediction is that the process does not survive.
			ok = obs.strategy == "crashed"
			runs++
		default:
			ok = obs.strategy == pred.Strategy
			runs++
		}
		mark := "ok"
		if ok {
			agree++
		} else {
			mark = "DIFFERS"
			t.Errorf("%s (%s): predicted %s (%s), kernel: %s (%s)", k.name, hexCode(site, fn, k.addr), pred.Strategy, pred.Reason, obs.strategy, obs.detail)
		}
		report = append(report, fmt.Sprintf("%-18s %-22s predicted %-14s %-20s kernel %-14s %s  %s", k.name, hexCode(site, fn, k.addr), pred.Strategy, pred.Reason, orDash(obs.strategy), obs.detail, mark))
	}
	t.Logf("linux-uprobes prediction vs this kernel: %d of %d kinds agree (%d run, %d registration only)\n%s",
		agree, len(kinds), runs, len(kinds)-runs, strings.Join(report, "\n"))
}

func orDash(s plan.Strategy) string {
	if s == "" {
		return "accepted"
	}
	return string(s)
}

// readKinds lists the p_NAME and need_NAME symbols of the fixture.
func readKinds(t *testing.T, path string) []kind {
	t.Helper()
	_, syms := fixture.OpenELF(t, path)
	byName := map[string]*kind{}
	get := func(n string) *kind {
		if byName[n] == nil {
			byName[n] = &kind{name: n}
		}
		return byName[n]
	}
	for _, s := range syms {
		switch {
		case strings.HasPrefix(s.Name, "p_"):
			get(s.Name[2:]).addr = s.Value
		case strings.HasPrefix(s.Name, "need_"):
			get(s.Name[5:]).need = s.Value
		}
	}
	var out []kind
	for _, k := range byName {
		if k.addr == 0 {
			t.Fatalf("kind %s has no p_%s symbol", k.name, k.name)
		}
		out = append(out, *k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	if len(out) < 50 {
		t.Fatalf("only %d kinds in %s", len(out), path)
	}
	return out
}

// siteOf returns the bytes at addr and the analysis of its function.
func siteOf(t *testing.T, f *elfscan.File, addr uint64) ([]byte, *plan.Function) {
	t.Helper()
	code, err := f.Code(addr, 16)
	if err != nil {
		t.Fatal(err)
	}
	fn := f.FuncAt(addr)
	if fn == nil {
		return code, nil
	}
	body, err := f.Code(fn.Addr, fn.End-fn.Addr)
	if err != nil {
		t.Fatal(err)
	}
	return code, plan.AnalyzeX86(fn.Addr, body, decodeAMD)
}

// hexCode renders the instruction bytes at the site (up to 6).
func hexCode(code []byte, fn *plan.Function, addr uint64) string {
	n := min(len(code), 6)
	return fmt.Sprintf("%x", code[:n])
}

// observe starts the fixture, registers a uprobe at file offset off for
// that process, runs the kind when run is set, and reports what the kernel
// did. The probe and the process are always cleaned up.
func observe(t *testing.T, path string, pmu int, off uint64, name string, run bool) observation {
	t.Helper()
	cmd := exec.Command(path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdoutPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if l, err := readLine(lines); err != nil || l != "ready" {
		t.Fatalf("fixture did not start: %q %v", l, err)
	}

	fd, err := openUprobe(pmu, path, off, cmd.Process.Pid)
	if err != nil {
		return observation{plan.Reject, "registration failed: " + err.Error()}
	}
	defer unix.Close(fd)
	if !run {
		return observation{"", "registered, not run"}
	}
	if _, err := io.WriteString(stdin, name+"\n"); err != nil {
		t.Fatal(err)
	}
	l, err := readLine(lines)
	maps := readMaps(cmd.Process.Pid)
	hits := readCount(fd)
	if err != nil || l != "done" {
		stdin.Close()
		werr := cmd.Wait()
		return observation{"crashed", fmt.Sprintf("the process did not finish (%q, %v, %v); hits %d", l, err, werr, hits)}
	}
	if hits == 0 {
		t.Errorf("%s: the probe was never hit", name)
	}
	detail := fmt.Sprintf("%d hits", hits)
	switch {
	case strings.Contains(maps, "[uprobes-trampoline]"):
		if strings.Contains(maps, "[uprobes]") {
			detail += ", [uprobes-trampoline] and [uprobes] mapped"
		} else {
			detail += ", [uprobes-trampoline] mapped"
		}
		return observation{plan.TrampolineNop, detail}
	case strings.Contains(maps, "[uprobes]"):
		return observation{plan.XOL, detail + ", [uprobes] mapped"}
	}
	return observation{plan.Emulate, detail + ", no uprobe page mapped"}
}

func readLine(lines <-chan string) (string, error) {
	select {
	case l, ok := <-lines:
		if !ok {
			return "", io.EOF
		}
		return l, nil
	case <-time.After(20 * time.Second):
		return "", errors.New("no answer from the fixture")
	}
}

func readMaps(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	return string(b)
}

// readCount reads the hit counter of a perf event.
func readCount(fd int) uint64 {
	var buf [8]byte
	if n, err := unix.Read(fd, buf[:]); err != nil || n != 8 {
		return 0
	}
	return *(*uint64)(unsafe.Pointer(&buf[0]))
}

// openUprobe registers a counting uprobe at file offset off of path for
// process pid, through the uprobe PMU. Closing the descriptor removes it.
func openUprobe(pmu int, path string, off uint64, pid int) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	attr := unix.PerfEventAttr{
		Type: uint32(pmu),
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Ext1: uint64(uintptr(unsafe.Pointer(p))),
		Ext2: off,
	}
	fd, err := unix.PerfEventOpen(&attr, pid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	runtime.KeepAlive(p)
	return fd, err
}
