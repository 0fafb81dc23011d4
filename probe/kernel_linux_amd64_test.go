//go:build linux && amd64

package probe_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/probe/kuprobe"
)

// siteKey names a probe site by file and link-time address.
type siteKey struct {
	module string
	addr   uint64
}

func (k siteKey) String() string { return fmt.Sprintf("%s:%#x", k.module, k.addr) }

// kernelSite is a site to count with a kernel uprobe.
type kernelSite struct {
	siteKey
	symbol string
	offset uint64
	// ret asks for a return probe (uretprobe) at the function entry.
	ret bool
	// perIteration is set for a string instruction with a repeat prefix:
	// the kernel steps it one iteration at a time, each step ending back
	// on its int3, so a kernel uprobe there counts every iteration.
	perIteration bool
}

// needKernelUprobes skips (fails under CI) without root or the uprobe PMU.
func needKernelUprobes(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "kernel uprobes need root (euid %d)", os.Geteuid())
	}
	if _, err := kuprobe.PMUType(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
}

// kernelSites lists the live sites of a traced run that a kernel uprobe can
// count: those the linux-uprobes policy predicts the kernel accepts.
func kernelSites(t *testing.T, st probe.Stats) (sites []kernelSite, skipped []string) {
	t.Helper()
	files := map[string]*elfscan.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	seen := map[siteKey]bool{}
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			k := siteKey{s.Module, s.Addr}
			if seen[k] {
				continue
			}
			seen[k] = true
			f := files[s.Module]
			if f == nil {
				var err error
				if f, err = elfscan.Open(s.Module); err != nil {
					t.Fatal(err)
				}
				files[s.Module] = f
			}
			off, err := f.TextOffset(s.Addr)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			code, err := f.Code(s.Addr, 16)
			if err != nil {
				t.Fatal(err)
			}
			var fn *plan.Function
			if sf := f.FuncAt(s.Addr); sf != nil {
				if body, err := f.Code(sf.Addr, sf.End-sf.Addr); err == nil {
					fn = plan.AnalyzeX86(sf.Addr, body, decode.X86Decoder{})
				}
			}
			d := plan.Decide(plan.LinuxUprobes, &plan.Site{Arch: f.Arch, Addr: s.Addr, Code: code, Func: fn}, nil)
			if d.Strategy == plan.Reject {
				skipped = append(skipped, fmt.Sprintf("%s (%s): the kernel refuses it (%s)", s.Symbol, k, d.Reason))
				continue
			}
			ks := kernelSite{siteKey: k, symbol: s.Symbol, offset: off}
			var inst decode.X86Inst
			if (decode.X86Decoder{}).Decode(code, s.Addr, &inst) == nil && inst.Encoding == decode.EncLegacy && inst.Map == decode.Map1Byte &&
				inst.Prefixes&(decode.PrefixREP|decode.PrefixREPNE) != 0 && (inst.Opcode >= 0xA4 && inst.Opcode <= 0xA7 || inst.Opcode >= 0xAA && inst.Opcode <= 0xAF) {
				ks.perIteration = true
			}
			sites = append(sites, ks)
		}
	}
	sort.Slice(sites, func(i, j int) bool {
		if sites[i].module != sites[j].module {
			return sites[i].module < sites[j].module
		}
		return sites[i].addr < sites[j].addr
	})
	return sites, skipped
}

// kernelRun runs argv untraced by ptrace, with a counting kernel uprobe
// (inherited by threads and children) on every site, opened after the
// program's execve and before its first instruction. It returns the
// program's stdout and the count of every site.
func kernelRun(t *testing.T, argv, env []string, stdin []byte, sites []kernelSite) ([]byte, map[siteKey]uint64) {
	t.Helper()
	type result struct {
		out    []byte
		counts map[siteKey]uint64
		err    error
	}
	done := make(chan result)
	go func() {
		// PTRACE_TRACEME makes the child stop after execve; the detach
		// must come from the thread that started it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var r result
		defer func() { done <- r }()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
		if err := cmd.Start(); err != nil {
			r.err = err
			return
		}
		pid := cmd.Process.Pid
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
			r.err = fmt.Errorf("wait for exec stop: status %#x, %v", ws, err)
			cmd.Process.Kill()
			cmd.Wait()
			return
		}
		count, closeAll, err := openKernelCounters(sites, pid)
		if err != nil {
			r.err = err
			cmd.Process.Kill()
			syscall.PtraceDetach(pid)
			cmd.Wait()
			return
		}
		defer closeAll()
		if err := syscall.PtraceDetach(pid); err != nil {
			r.err = fmt.Errorf("detach: %w", err)
			cmd.Process.Kill()
			cmd.Wait()
			return
		}
		if err := cmd.Wait(); err != nil {
			r.err = fmt.Errorf("%q: %v\n%s", argv, err, errb.String())
			return
		}
		r.out = out.Bytes()
		r.counts, r.err = count()
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.out, r.counts
}

// The kernel counts entry probes through one BPF uprobe-multi link per
// file, registered and removed as a batch, and return probes through one
// perf event per site (perf_event_open with the uprobe PMU, counting mode,
// inherited by threads and children). Perf events are not used for entry
// probes: closing one costs the kernel a grace period (about 0.1 s here),
// and with an inherited uprobe event every clone of the process fails
// with EFAULT (a Go program dies in newosproc). The uprobe PMU's event_init
// copies the file's path from attr.uprobe_path, a pointer into the memory
// of the process that opened the event, and copying an inherited event to
// a new thread runs event_init again, in the process that clones.

// openKernelCounters registers a counting kernel uprobe on every site for
// process pid.
func openKernelCounters(sites []kernelSite, pid int) (count func() (map[siteKey]uint64, error), closeAll func(), err error) {
	ret := false
	for _, s := range sites {
		ret = ret || s.ret
	}
	if ret {
		counters := make([]*kuprobe.Counter, 0, len(sites))
		closeAll = func() {
			for _, c := range counters {
				c.Close()
			}
		}
		for _, s := range sites {
			c, err := kuprobe.Open(s.module, s.offset, pid, &kuprobe.Options{Inherit: true, Return: s.ret})
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("%s (%s): %w", s.symbol, s.siteKey, err)
			}
			counters = append(counters, c)
		}
		return func() (map[siteKey]uint64, error) {
			m := map[siteKey]uint64{}
			for i, c := range counters {
				n, err := c.Count()
				if err != nil {
					return nil, err
				}
				m[sites[i].siteKey] = n
			}
			return m, nil
		}, closeAll, nil
	}
	byModule := map[string][]kernelSite{}
	var order []string
	for _, s := range sites {
		if byModule[s.module] == nil {
			order = append(order, s.module)
		}
		byModule[s.module] = append(byModule[s.module], s)
	}
	var multis []*kuprobe.Multi
	closeAll = func() {
		for _, m := range multis {
			m.Close()
		}
	}
	for _, mod := range order {
		offs := make([]uint64, len(byModule[mod]))
		for i, s := range byModule[mod] {
			offs[i] = s.offset
		}
		m, err := kuprobe.OpenMulti(mod, offs, pid)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		multis = append(multis, m)
	}
	return func() (map[siteKey]uint64, error) {
		out := map[siteKey]uint64{}
		for i, m := range multis {
			c, err := m.Counts()
			if err != nil {
				return nil, err
			}
			for j, s := range byModule[order[i]] {
				out[s.siteKey] = c[j]
			}
		}
		return out, nil
	}, closeAll, nil
}

// compareWithKernel checks the hits of every site of a traced run against
// the kernel's count of the same site in a twin run, and returns a report.
//
// slack, when not 0, is the relative difference a site may show without
// failing the test (it is logged): for a program whose call counts are not
// the same from one run to the next (see TestPythonAgainstKernel).
func compareWithKernel(t *testing.T, st probe.Stats, sites []kernelSite, kernel map[siteKey]uint64, slack float64) string {
	t.Helper()
	ours := map[siteKey]uint64{}
	syms := map[siteKey]string{}
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			k := siteKey{s.Module, s.Addr}
			ours[k] += s.Hits
			syms[k] = s.Symbol
		}
	}
	var b strings.Builder
	var total, ktotal uint64
	hit, differ, near := 0, 0, 0
	for _, s := range sites {
		o, k := ours[s.siteKey], kernel[s.siteKey]
		total += o
		ktotal += k
		if k > 0 {
			hit++
		}
		switch {
		case s.perIteration:
			// One hit per execution here, one per iteration there.
			fmt.Fprintf(&b, "%s (%s, a repeated string instruction): %d executions traced, the kernel counts %d iterations\n", s.symbol, s.siteKey, o, k)
			if o > k || (o > 0) != (k > 0) {
				differ++
				t.Errorf("%s (%s): %d hits traced, kernel uprobe %d iterations", s.symbol, s.siteKey, o, k)
			}
		case o != k && o > 0 && k > 0 && float64(max(o, k)-min(o, k)) <= slack*float64(k):
			near++
			fmt.Fprintf(&b, "%s (%s): %d hits traced, kernel uprobe %d (within %.1f%%)\n", s.symbol, s.siteKey, o, k, 100*slack)
		case o != k:
			differ++
			t.Errorf("%s (%s): %d hits traced, kernel uprobe %d", s.symbol, s.siteKey, o, k)
		}
	}
	fmt.Fprintf(&b, "%d sites compared, %d hit; hits: probeopt %d, kernel %d; %d differ, %d within the slack", len(sites), hit, total, ktotal, differ, near)
	return b.String()
}

// topSites lists the most hit sites, for the log.
func topSites(st probe.Stats, kernel map[siteKey]uint64, n int) string {
	type row struct {
		sym     string
		k       siteKey
		o, kern uint64
		strat   plan.Strategy
	}
	var rows []row
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			k := siteKey{s.Module, s.Addr}
			rows = append(rows, row{s.Symbol, k, s.Hits, kernel[k], s.Strategy})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].o > rows[j].o })
	var b strings.Builder
	for i, r := range rows {
		if i == n || r.o == 0 {
			break
		}
		fmt.Fprintf(&b, "  %-28s %-8s probeopt %9d  kernel %9d\n", r.sym, r.strat, r.o, r.kern)
	}
	return b.String()
}
