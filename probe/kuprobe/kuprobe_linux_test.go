//go:build linux && amd64

package kuprobe_test

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe/kuprobe"
)

//go:noinline
func counted(x int) int { return x*3 + 1 }

//go:noinline
func countedToo(x int) int { return x*5 + 2 }

// offsetOf returns the file offset of a function of this test binary.
func offsetOf(t *testing.T, exe, name string) uint64 {
	t.Helper()
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sites, err := f.Resolve(elfscan.Spec{Kind: elfscan.SpecFunc, Symbol: name, Text: name})
	if err != nil || len(sites) != 1 {
		t.Fatalf("%s: %v %v", name, sites, err)
	}
	return sites[0].Offset
}

func needUprobes(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "kernel uprobes need root")
	}
	if _, err := kuprobe.PMUType(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
}

// TestCounterAndMulti counts calls of two functions of this process with a
// perf counter and with a uprobe-multi link.
func TestCounterAndMulti(t *testing.T) {
	needUprobes(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	off1 := offsetOf(t, exe, "github.com/probeopt/probeopt/probe/kuprobe_test.counted")
	off2 := offsetOf(t, exe, "github.com/probeopt/probeopt/probe/kuprobe_test.countedToo")
	// A perf event counts the thread it is opened for.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := kuprobe.Open(exe, off1, unix.Gettid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := kuprobe.OpenMulti(exe, []uint64{off1, off2}, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sum := 0
	for i := 0; i < 100; i++ {
		sum += counted(i)
		if i%2 == 0 {
			sum += countedToo(i)
		}
	}
	if n, err := c.Count(); err != nil || n != 100 {
		t.Errorf("perf counter: %d, %v; want 100", n, err)
	}
	counts, err := m.Counts()
	if err != nil || len(counts) != 2 || counts[0] != 100 || counts[1] != 50 {
		t.Errorf("multi: %v, %v; want [100 50]", counts, err)
	}
	t.Log(sum)
}

func TestOpenErrors(t *testing.T) {
	needUprobes(t)
	if _, err := kuprobe.Open("/no/such/file", 0, os.Getpid(), nil); err == nil {
		t.Error("a probe on a missing file opened")
	}
	if _, err := kuprobe.OpenMulti("/no/such/file", nil, os.Getpid()); err == nil {
		t.Error("a multi probe without offsets opened")
	}
}
