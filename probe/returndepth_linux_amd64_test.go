//go:build linux && amd64

package probe_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/trampoline"
)

// TestReturnDepth: a recursion of known depth (cx_rec(100): 101 nested
// calls, K times) under an entry probe and a return probe. The calls are
// known by construction and counted by a kernel uprobe; with the default
// depth the return probe counts the outer trampoline.MaxDepth frames of
// each recursion and reports the others as missed, with Options.ReturnDepth
// 127 it counts them all. The kernel's uretprobe count (its own depth
// limit applies) is logged beside.
func TestReturnDepth(t *testing.T) {
	testenv.NeedPtrace(t)
	needKernelUprobes(t)
	prog, lib := coexistFixture(t)
	const n, k = 100, 200
	calls := uint64((n + 1) * k)
	argv := []string{prog, lib, "rec", fmt.Sprint(n), fmt.Sprint(k)}

	f, err := elfscan.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := funcAddr(t, f, "cx_rec")
	off, err := f.TextOffset(addr)
	if err != nil {
		t.Fatal(err)
	}
	kernel := map[bool]uint64{}
	for _, ret := range []bool{false, true} {
		ks := kernelSite{siteKey: siteKey{lib, addr}, symbol: "cx_rec", offset: off, ret: ret}
		out, counts := kernelRun(t, argv, os.Environ(), nil, []kernelSite{ks})
		if !strings.Contains(string(out), "ok") {
			t.Fatalf("untraced run: %q", out)
		}
		kernel[ret] = counts[ks.siteKey]
	}
	if kernel[false] != calls {
		t.Fatalf("the kernel counted %d calls of cx_rec, the program makes %d", kernel[false], calls)
	}
	t.Logf("kernel: %d calls, %d returns (uretprobe)", kernel[false], kernel[true])

	for _, depth := range []int{0, 127} {
		t.Run(fmt.Sprint("depth", depth), func(t *testing.T) {
			r := spawn(t, argv, &probe.Options{ReturnDepth: depth}, nil)
			if _, err := r.tr.Add("libcoexist.so:cx_rec", "libcoexist.so:cx_rec%return"); err != nil {
				t.Fatal(err)
			}
			r.finish(t, time.Minute)
			st := r.tr.Stats()
			entry, ret := st.Probes[0], st.Probes[1]
			armed := uint64(trampoline.MaxDepth)
			if depth > 0 {
				armed = uint64(depth)
			}
			wantRet := min(armed, n+1) * k
			if entry.Hits != calls || ret.Hits != wantRet || ret.Hits+ret.DepthMissed != calls || entry.DepthMissed != 0 {
				t.Errorf("depth %d: entries %d, returns %d, missed %d (entry %d); want %d, %d, %d", depth,
					entry.Hits, ret.Hits, ret.DepthMissed, entry.DepthMissed, calls, wantRet, calls-wantRet)
			}
			t.Logf("depth %d: %d calls, %d returns counted, %d missed", depth, entry.Hits, ret.Hits, ret.DepthMissed)
		})
	}
}
