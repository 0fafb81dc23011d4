//go:build linux && (amd64 || arm64)

package probe_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

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
			pl, err := kuprobe.Place(f, s.Addr)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			if pl.Refused != "" {
				skipped = append(skipped, fmt.Sprintf("%s (%s): the kernel refuses it (%s)", s.Symbol, k, pl.Refused))
				continue
			}
			ks := kernelSite{siteKey: k, symbol: s.Symbol, offset: pl.Offset, perIteration: pl.PerIteration}
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

// kernelRun runs argv untraced by ptrace, with a counting kernel uprobe on
// every site (kuprobe.Run), and returns the program's stdout and the count
// of every site.
func kernelRun(t *testing.T, argv, env []string, stdin []byte, sites []kernelSite) ([]byte, map[siteKey]uint64) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	ks := make([]kuprobe.Site, len(sites))
	for i, s := range sites {
		ks[i] = kuprobe.Site{Path: s.module, Offset: s.offset, Return: s.ret}
	}
	counts, err := kuprobe.Run(cmd, ks)
	if err != nil {
		t.Fatalf("%q under kernel uprobes: %v\n%s", argv, err, errb.String())
	}
	m := make(map[siteKey]uint64, len(sites))
	for i, s := range sites {
		m[s.siteKey] = counts[i]
	}
	return out.Bytes(), m
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
