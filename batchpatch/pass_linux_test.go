//go:build linux && amd64

package batchpatch

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	fixtures "github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/proc"
)

// pairs returns, for each of the fixture's sites, the A patch and the B
// patch of the same function number as one unit: two patches 64 KiB
// apart that must change at once.
func pairs(f *fixture) []Patch {
	ps := make([]Patch, 0, 2*nSites)
	for i := 0; i < nSites; i++ {
		a, b := aPatch(f, i), bPatch(f, i)
		a.Unit, b.Unit = uint64(i+1), uint64(i+1)
		ps = append(ps, a, b)
	}
	Sort(ps)
	return ps
}

// region reads both patch areas of the fixture.
func region(t testing.TB, f *fixture) []byte {
	t.Helper()
	buf := make([]byte, 2*16*nSites)
	if err := f.p.ReadMemory(f.A, buf[:16*nSites]); err != nil {
		t.Fatal(err)
	}
	if err := f.p.ReadMemory(f.B, buf[16*nSites:]); err != nil {
		t.Fatal(err)
	}
	return buf
}

// unitState reads a unit's patches and says whether all are old (0), all
// new (1) or mixed (-1).
func unitState(buf []byte, f *fixture, i int) int {
	a, b := aPatch(f, i), bPatch(f, i)
	ga := buf[16*i : 16*i+5]
	gb := buf[16*nSites+16*i : 16*nSites+16*i+5]
	switch {
	case bytes.Equal(ga, a.Old) && bytes.Equal(gb, b.Old):
		return 0
	case bytes.Equal(ga, a.New) && bytes.Equal(gb, b.New):
		return 1
	}
	return -1
}

// TestPassesSameTextAsOnePass applies 4,096 two-patch units in passes of
// at most 300 patches, while the eight workers run, and checks the text
// read back equals the text one pass writes; every pass holds whole
// units, and the inverse batch in passes restores the original bytes.
func TestPassesSameTextAsOnePass(t *testing.T) {
	f := startFixture(t, nil)
	ps := pairs(f)
	orig := region(t, f)
	var passes [][]Patch
	opts := &Options{MaxPassPatches: 301, OnPass: func(st PassStats, applied []Patch) {
		if st.Patches != len(applied) {
			t.Errorf("pass of %d patches reports %d", len(applied), st.Patches)
		}
		passes = append(passes, applied)
	}}
	res, err := Apply(f.p, ps, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != len(ps) || len(res.Refused) != 0 {
		t.Fatalf("applied %d, refused %d of %d", len(res.Applied), len(res.Refused), len(ps))
	}
	if want := (len(ps) + 299) / 300; len(res.Passes) != want || len(passes) != want {
		t.Errorf("%d passes (%d reported live), want %d", len(res.Passes), len(passes), want)
	}
	inPass := map[uint64]int{}
	for k, applied := range passes {
		if len(applied) > 301 {
			t.Errorf("pass %d has %d patches", k, len(applied))
		}
		for _, q := range applied {
			if j, ok := inPass[q.Unit]; ok && j != k {
				t.Errorf("unit %d split between passes %d and %d", q.Unit, j, k)
			}
			inPass[q.Unit] = k
		}
	}
	split := region(t, f)
	if _, err := Apply(f.p, inverse(ps), &Options{MaxPassPatches: 512}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(region(t, f), orig) {
		t.Fatal("the inverse batch in passes did not restore the text")
	}
	one, err := Apply(f.p, ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Passes) != 1 {
		t.Errorf("unbounded: %d passes", len(one.Passes))
	}
	if !bytes.Equal(region(t, f), split) {
		t.Fatal("the text after the passes differs from the text after one pass")
	}
	t.Logf("%d passes, longest pause %v; one pass %v", len(res.Passes), res.LongestPause(), one.LongestPause())
	finish(t, f)
}

// TestPassClockDefers applies 48 two-page units under a 10 ms bound
// with a clock that says each pass has already been stopped 9.5 ms once
// its threads are checked: each pass writes its first unit only and
// leaves the others (whole) for the next, so the batch takes one pass per
// unit, and the text equals the one pass's. The phases of each pass add
// up to its pause.
func TestPassClockDefers(t *testing.T) {
	f := startFixture(t, nil)
	var ps []Patch
	for _, q := range pairs(f) {
		if q.Unit <= 48 {
			ps = append(ps, q)
		}
	}
	orig := region(t, f)
	var passes [][]Patch
	opts := &Options{MaxPause: 10 * time.Millisecond, PassGap: -1, OnPass: func(_ PassStats, applied []Patch) {
		passes = append(passes, applied)
	}, hooks: &testHooks{paused: func() time.Duration { return 9500 * time.Microsecond }}}
	res, err := Apply(f.p, ps, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != len(ps) || len(res.Refused) != 0 {
		t.Fatalf("applied %d, refused %d of %d", len(res.Applied), len(res.Refused), len(ps))
	}
	if len(passes) != 48 || len(res.Passes) != 48 {
		t.Fatalf("%d passes (%d reported live), want 48: one unit each", len(res.Passes), len(passes))
	}
	deferred := 0
	for k, st := range res.Passes {
		if len(passes[k]) != 2 || passes[k][0].Unit != passes[k][1].Unit {
			t.Errorf("pass %d wrote %v, want one whole unit", k, passes[k])
		}
		deferred += st.Deferred
		if sum := st.Stop + st.Read + st.Check + st.Write + st.ReadBack + st.Other + st.Resume; sum != st.Pause {
			t.Errorf("pass %d: phases add up to %v, pause %v", k, sum, st.Pause)
		}
	}
	if deferred == 0 {
		t.Error("no pass deferred a unit")
	}
	split := region(t, f)
	if _, err := Apply(f.p, inverse(ps), nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(region(t, f), orig) {
		t.Fatal("the inverse batch did not restore the text")
	}
	if _, err := Apply(f.p, ps, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(region(t, f), split) {
		t.Fatal("the text after the deferred passes differs from the text after one pass")
	}
	t.Logf("%d passes, %d units deferred, longest pause %v", len(res.Passes), deferred, res.LongestPause())
	finish(t, f)
}

func inverse(ps []Patch) []Patch {
	inv := make([]Patch, len(ps))
	for i, q := range ps {
		inv[i] = q.Inverse()
	}
	return inv
}

// TestPassFailureRollsBackItsOwn makes the third pass's second page write
// fail half-way: that pass is rolled back, the first two stay written
// (and every unit whole), the error names a patch of the third pass, and
// reverting what was applied then detaching leaves the text equal to the
// file.
func TestPassFailureRollsBackItsOwn(t *testing.T) {
	f := startFixture(t, nil)
	ps := pairs(f)
	orig := region(t, f)
	pass := 0
	opts := &Options{MaxPassPatches: 1000, hooks: &testHooks{write: func(mem Memory, n int, addr uint64, data []byte) (bool, error) {
		if n == 0 {
			pass++
		}
		if pass != 3 || n != 1 {
			return false, nil
		}
		if err := mem.WriteMemory(addr, data[:len(data)/2]); err != nil {
			return true, err
		}
		return true, errors.New("injected write failure")
	}}}
	res, err := Apply(f.p, ps, opts)
	var pe *PatchError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a *PatchError", err)
	}
	if len(res.Passes) != 3 || len(res.Applied) != 2000 {
		t.Fatalf("%d passes, %d applied; want 3 and 2000", len(res.Passes), len(res.Applied))
	}
	if pe.Index < 0 || pe.Index >= len(ps) || ps[pe.Index].Addr != pe.Addr {
		t.Fatalf("error names patch %d at %#x, not a patch of the batch", pe.Index, pe.Addr)
	}
	applied := map[uint64]bool{}
	for _, q := range res.Applied {
		applied[q.Addr] = true
	}
	if applied[pe.Addr] {
		t.Errorf("the failed patch %#x is listed as applied", pe.Addr)
	}
	buf := region(t, f)
	nNew := 0
	for i := 0; i < nSites; i++ {
		st := unitState(buf, f, i)
		if st < 0 {
			t.Fatalf("unit %d is torn", i)
		}
		if want := applied[aPatch(f, i).Addr]; (st == 1) != want {
			t.Fatalf("unit %d: new=%v, applied=%v", i, st == 1, want)
		}
		nNew += st
	}
	if nNew != 1000 {
		t.Errorf("%d units new, want 1000", nNew)
	}
	t.Logf("failed pass: %v", err)
	// Detach after the partial install: revert what went in (in passes),
	// then the text must be the file's.
	if _, err := Apply(f.p, inverse(res.Applied), &Options{MaxPause: DefaultMaxPause}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(region(t, f), orig) {
		t.Fatal("text differs from the original after the revert")
	}
	if bad := f.read64(t, fixtures.SharedBad); bad != 0 {
		t.Errorf("workers saw %d wrong results", bad)
	}
	if err := f.p.Detach(); err != nil {
		t.Fatal(err)
	}
	testenv.TextEqualsFile(t, f.Pid, buildFixture(t))
	if err := unix.Kill(f.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// TestPassUnitHeldBack parks a thread inside the park site and puts that
// site in one unit with an A patch: neither is written, in any pass, and
// the rest of the batch is.
func TestPassUnitHeldBack(t *testing.T) {
	f := startFixture(t, nil, "park")
	tid := parked(t, f)
	park := Patch{Addr: f.Park, Old: []byte{0x0f, 0x05, 0x90, 0x90, 0x90}, New: []byte{0x0f, 0x05, 0x0f, 0x1f, 0x00}, Unit: 7}
	ps := patches(f, 1024, aPatch)
	ps[100].Unit = 7
	ps = append(ps, park)
	Sort(ps)
	res, err := Apply(f.p, ps, &Options{MaxPassPatches: 128, PassGap: -1, StepTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refused) != 2 {
		t.Fatalf("refused %d patches (%v), want the 2 of the unit", len(res.Refused), res.Err())
	}
	for _, b := range res.Refused {
		if b.Addr != f.Park && b.Addr != aPatch(f, 100*(nSites/1024)).Addr {
			t.Errorf("refused %#x, not a patch of the held unit", b.Addr)
		}
		if b.Tid != tid {
			t.Errorf("refused %#x for thread %d, want %d", b.Addr, b.Tid, tid)
		}
	}
	want := append([]Patch(nil), ps...)
	var rest []Patch
	for _, q := range want {
		if q.Unit != 7 {
			rest = append(rest, q)
		}
	}
	expectText(t, f.p, rest, false)
	expectText(t, f.p, []Patch{aPatch(f, 100*(nSites/1024))}, true)
	expectText(t, f.p, []Patch{park}, true)
	unpark(t, f, tid)
	finish(t, f)
}

// TestSetRemovalsInPasses installs 4,096 patches through a Set in
// bounded passes and removes them the same way: removals cost passes, and
// the Set tracks what each pass installed. A pass may hold back a patch a
// thread stands in (it goes in a later pass): at least 4 passes, none of
// more than 1,024 patches.
func TestSetRemovalsInPasses(t *testing.T) {
	f := startFixture(t, nil)
	ps := patches(f, nSites, aPatch)
	s := NewSet()
	for _, q := range ps {
		if err := s.Add(q); err != nil {
			t.Fatal(err)
		}
	}
	opts := &Options{MaxPassPatches: 1024}
	res, err := s.Commit(f.p, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkPasses := func(what string, res *Result, installed int) {
		t.Helper()
		for i, p := range res.Passes {
			if p.Patches > opts.MaxPassPatches {
				t.Errorf("%s: pass %d wrote %d patches", what, i, p.Patches)
			}
		}
		if len(res.Passes) < 4 || len(s.Installed()) != installed || len(s.Pending()) != 0 {
			t.Fatalf("%s: %d passes, %d installed, %d pending", what, len(res.Passes), len(s.Installed()), len(s.Pending()))
		}
	}
	checkPasses("install", res, nSites)
	expectText(t, f.p, ps, false)
	for _, q := range ps {
		if err := s.Remove(q.Addr); err != nil {
			t.Fatal(err)
		}
	}
	res, err = s.Commit(f.p, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkPasses("removal", res, 0)
	expectText(t, f.p, ps, true)
	finish(t, f)
}

// TestPassesForkConsistent installs and removes 4,096 two-patch units
// in passes of 256 patches while a thread forks in a loop: every child
// must hold each unit whole (both patches old or both new), and some
// child must have forked between two passes of one install, with some
// units new and others old.
func TestPassesForkConsistent(t *testing.T) {
	f := startFixture(t, &proc.Options{FollowForks: true}, "fork")
	ps := pairs(f)
	var mu sync.Mutex
	var children, partial int
	var fails []string
	buf := make([]byte, 2*16*nSites)
	wait := watchForks(f, func(child *proc.Process) {
		err := child.ReadMemory(f.A, buf[:16*nSites])
		if err == nil {
			err = child.ReadMemory(f.B, buf[16*nSites:])
		}
		torn, n := 0, 0
		for i := 0; i < nSites && err == nil; i++ {
			switch unitState(buf, f, i) {
			case -1:
				torn++
			case 1:
				n++
			}
		}
		mu.Lock()
		defer mu.Unlock()
		children++
		switch {
		case err != nil:
			fails = append(fails, err.Error())
		case torn > 0:
			fails = append(fails, "child with torn units")
		case n > 0 && n < nSites:
			partial++
		}
	})
	opts := &Options{MaxPassPatches: 256, PassGap: 2 * time.Millisecond}
	deadline := time.Now().Add(2 * time.Second)
	for r := 0; time.Now().Before(deadline) || r < 2; r++ {
		batch := ps
		if r%2 == 1 {
			batch = inverse(ps)
		}
		res, err := Apply(f.p, batch, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Refused) > 0 {
			t.Fatal(res.Err())
		}
	}
	if r := region(t, f); unitState(r, f, 0) == 1 {
		if _, err := Apply(f.p, inverse(ps), opts); err != nil {
			t.Fatal(err)
		}
	}
	finish(t, f)
	wait()
	mu.Lock()
	defer mu.Unlock()
	if len(fails) > 0 {
		t.Fatalf("%d bad children of %d: %v", len(fails), children, fails[:min(len(fails), 5)])
	}
	if children < 5 {
		t.Fatalf("only %d children forked", children)
	}
	if partial == 0 {
		t.Errorf("%d children, none forked between two passes of an install", children)
	}
	t.Logf("%d children, %d with a partial install", children, partial)
}
