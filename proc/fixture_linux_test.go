//go:build linux && amd64

package proc

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	fixtures "github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// buildFixture compiles testdata/patchfixture with gcc (once per set of
// sources and flags, see fixtures.Build).
func buildFixture(t testing.TB) string {
	t.Helper()
	return fixtures.Build(t, fixtures.PatchFixture)
}

// fixture is a running patchfixture.
type fixture struct {
	p      *Process
	A, B   uint64 // fx_a_base, fx_b_base
	Shared uint64 // address of struct shared
	Park   uint64 // fx_park_site
	out    *bufio.Reader
	outF   *os.File
}

// startFixture spawns the fixture with the given arguments, reads its
// address line and returns it stopped (Spawn's state) after that line.
func startFixture(t *testing.T, opts *Options, args ...string) *fixture {
	t.Helper()
	testenv.NeedPtrace(t)
	path := buildFixture(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	so := &SpawnOptions{Stdout: w}
	if opts != nil {
		so.Options = *opts
	}
	p, err := Spawn(append([]string{path}, args...), so)
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("spawn: %v", err)
	}
	f := &fixture{p: p, out: bufio.NewReader(r), outF: r}
	t.Cleanup(func() {
		_ = p.Kill()
		r.Close()
	})
	if err := p.Resume(); err != nil {
		t.Fatalf("resume: %v", err)
	}
	line, err := readLine(f.out, 10*time.Second)
	if err != nil {
		t.Fatalf("read fixture line: %v", err)
	}
	var n, pid int
	if _, err := fmt.Sscanf(line, "fixture a=%v b=%v n=%d shared=%v park=%v pid=%d", &f.A, &f.B, &n, &f.Shared, &f.Park, &pid); err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	return f
}

// readLine reads one line with a deadline.
func readLine(r *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	c := make(chan res, 1)
	go func() {
		s, err := r.ReadString('\n')
		c <- res{strings.TrimSpace(s), err}
	}()
	select {
	case x := <-c:
		return x.s, x.err
	case <-time.After(d):
		return "", fmt.Errorf("no line within %v", d)
	}
}

// sharedField offsets in struct shared (see main.c).
const (
	offCalls    = 0
	offBad      = 8 * 8
	offSig1     = offBad + 8
	offSig2     = offSig1 + 8
	offForks    = offSig2 + 8
	offParked   = offForks + 8
	offStop     = offParked + 8
	offUnpark   = offStop + 4
	offParkTid  = offUnpark + 4
	offWorkerTd = offParkTid + 4
)

func (f *fixture) read64(t *testing.T, off uint64) int64 {
	t.Helper()
	var b [8]byte
	if err := f.p.ReadMemory(f.Shared+off, b[:]); err != nil {
		t.Fatalf("read shared+%d: %v", off, err)
	}
	return int64(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56)
}

func (f *fixture) read32(t *testing.T, off uint64) int32 {
	t.Helper()
	var b [4]byte
	if err := f.p.ReadMemory(f.Shared+off, b[:]); err != nil {
		t.Fatalf("read shared+%d: %v", off, err)
	}
	return int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return cond()
}
