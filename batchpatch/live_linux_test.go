//go:build linux && (amd64 || arm64)

package batchpatch

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	fixtures "github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/proc"
)

// nSites is the number of functions of each kind in the fixture.
const nSites = 4096

// patches returns n patches of one kind spread evenly over the sites.
func patches(f *fixture, n int, mk func(*fixture, int) Patch) []Patch {
	ps := make([]Patch, n)
	for j := range ps {
		ps[j] = mk(f, j*(nSites/n))
	}
	return ps
}

// expectText checks that every patch of ps reads as its New bytes (or Old
// when old is set). It reads the covered range in one go.
func expectText(t testing.TB, p *proc.Process, ps []Patch, old bool) {
	t.Helper()
	lo, hi := ps[0].Addr, ps[len(ps)-1].End()
	buf := make([]byte, hi-lo)
	if err := p.ReadMemory(lo, buf); err != nil {
		t.Fatal(err)
	}
	for _, q := range ps {
		want := q.New
		if old {
			want = q.Old
		}
		if got := buf[q.Addr-lo : q.End()-lo]; !bytes.Equal(got, want) {
			t.Fatalf("text at %#x = % x, want % x", q.Addr, got, want)
		}
	}
}

// finish stops the fixture with SIGTERM and checks it reports no wrong
// result and exits with status 0.
func finish(t testing.TB, f *fixture) string {
	t.Helper()
	if bad := f.read64(t, fixtures.SharedBad); bad != 0 {
		t.Errorf("workers saw %d wrong results", bad)
	}
	maps, err := f.p.Maps()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Write && m.Exec {
			t.Errorf("writable and executable mapping: %+v", m)
		}
	}
	if err := unix.Kill(f.p.Pid(), unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	line, err := fixtures.ReadLine(f.out, 60*time.Second)
	if err != nil {
		t.Fatalf("no summary line: %v", err)
	}
	st, err := f.p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Success() {
		t.Errorf("fixture exit status %+v (%s)", st, line)
	}
	return line
}

// commitAll commits the set until nothing is pending (threads can block
// a patch for a pass), at most 50 passes.
func commitAll(t testing.TB, f *fixture, s *Set, opts *Options) (passes, refused int) {
	t.Helper()
	for passes = 0; len(s.Pending()) > 0; passes++ {
		if passes == 50 {
			t.Fatalf("%d patches still pending after 50 passes", len(s.Pending()))
		}
		res, err := s.Commit(f.p, opts)
		if err != nil {
			select {
			case <-f.p.Exited():
				st, _ := f.p.Wait()
				t.Fatalf("commit: %v (exit status %+v)", err, st)
			default:
			}
			t.Fatalf("commit: %v", err)
		}
		refused += len(res.Refused)
	}
	return passes, refused
}

// TestLive4096x100 applies 4,096 two-instruction patches to the text the
// eight workers are running, and reverts them, 100 times; every pass is one
// stop of the world. The workers must never see a result that is neither
// the old nor the new one, and the process must exit cleanly.
func TestLive4096x100(t *testing.T) {
	f := startFixture(t, nil)
	ps := patches(f, nSites, aPatch)
	s := NewSet()
	rounds := 100
	if testing.Short() {
		rounds = 10
	}
	var steps, refused, passes int
	var maxPause time.Duration
	for r := 0; r < rounds; r++ {
		for _, q := range ps {
			if err := s.Add(q); err != nil {
				t.Fatal(err)
			}
		}
		n, ref := commitAll(t, f, s, nil)
		passes, refused = passes+n, refused+ref
		expectText(t, f.p, ps, false)
		for _, q := range ps {
			if err := s.Remove(q.Addr); err != nil {
				t.Fatal(err)
			}
		}
		res, err := s.Commit(f.p, nil)
		if err != nil {
			t.Fatal(err)
		}
		steps += res.Steps
		maxPause = max(maxPause, res.Stop.Pause)
		n, ref = commitAll(t, f, s, nil)
		passes, refused = passes+n+1, refused+ref+len(res.Refused)
		expectText(t, f.p, ps, true)
	}
	if got := len(s.Installed()); got != 0 {
		t.Errorf("%d patches still installed", got)
	}
	line := finish(t, f)
	t.Logf("%d rounds, %d passes, %d threads stepped out of ranges, %d patches deferred, longest pause %v; %s",
		rounds, passes, steps, refused, maxPause, line)
}

// TestLiveParkedThread parks a thread in a system call whose PC is
// strictly inside the range of parkPatch. The patch must be refused
// (and not written) while it is there, the rest of the batch applied, and
// the patch applied once the thread has left.
func TestLiveParkedThread(t *testing.T) {
	f := startFixture(t, nil, "park")
	parkTid := parked(t, f)
	park := parkPatch(f)
	other := aPatch(f, 7)
	batch := []Patch{other, park}
	Sort(batch)
	// A generous step bound: only the parked thread may block, even on a
	// busy machine.
	slow := &Options{StepTimeout: 100 * time.Millisecond}
	res, err := Apply(f.p, batch, slow)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refused) != 1 || res.Refused[0].Addr != park.Addr || res.Refused[0].Tid != parkTid || res.Refused[0].PC != parkPC(f) {
		t.Fatalf("refused = %v, want the park patch blocked by thread %d at %#x", res.Refused, parkTid, parkPC(f))
	}
	if !strings.Contains(res.Refused[0].Reason, "system call") {
		t.Errorf("reason %q does not name the system call", res.Refused[0].Reason)
	}
	if !errors.Is(res.Err(), ErrBlocked) {
		t.Errorf("Result.Err() = %v", res.Err())
	}
	expectText(t, f.p, []Patch{park}, true)
	expectText(t, f.p, []Patch{other}, false)
	// All or nothing: nothing at all is written.
	if _, err := Apply(f.p, []Patch{aPatch(f, 9), park}, &Options{AllOrNothing: true, StepTimeout: 100 * time.Millisecond}); !errors.Is(err, ErrBlocked) {
		t.Fatalf("all-or-nothing batch: %v, want ErrBlocked", err)
	}
	expectText(t, f.p, []Patch{aPatch(f, 9), park}, true)
	// Wake it: SIGUSR1 ends pause() and the thread leaves the range.
	if err := unix.Tgkill(f.p.Pid(), parkTid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if !fixtures.Eventually(60*time.Second, func() bool { return f.read64(t, fixtures.SharedParked) == 0 }) {
		t.Fatal("park thread did not leave")
	}
	res, err = Apply(f.p, []Patch{park}, slow)
	if err != nil || len(res.Refused) != 0 {
		t.Fatalf("second pass: %v, refused %v", err, res.Refused)
	}
	expectText(t, f.p, []Patch{park}, false)
	finish(t, f)
}

// parked waits until the park thread of a fixture started with "park" is
// blocked in its system call at fx_park_site (its PC is then parkPC), and
// returns its tid.
func parked(t *testing.T, f *fixture) int {
	t.Helper()
	if !fixtures.Eventually(60*time.Second, func() bool {
		return f.read64(t, fixtures.SharedParked) == 1 && f.read32(t, fixtures.SharedParkTid) != 0
	}) {
		t.Fatal("park thread did not park")
	}
	time.Sleep(20 * time.Millisecond) // let it enter pause()
	return int(f.read32(t, fixtures.SharedParkTid))
}

// unpark wakes the park thread with SIGUSR1 and waits until it has left
// fx_park_call for good.
func unpark(t *testing.T, f *fixture, tid int) {
	t.Helper()
	if err := unix.Tgkill(f.p.Pid(), tid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if !fixtures.Eventually(60*time.Second, func() bool { return f.read64(t, fixtures.SharedParked) == 0 }) {
		t.Fatal("park thread did not leave")
	}
}

// expectRefused checks that res refused exactly the patches of want (by
// address), each blocked by thread tid at the given PC, for a system call.
func expectRefused(t *testing.T, res *Result, tid int, want map[uint64]uint64) {
	t.Helper()
	got := map[uint64]bool{}
	for _, b := range res.Refused {
		got[b.Addr] = true
		pc, ok := want[b.Addr]
		if !ok || b.Tid != tid || b.PC != pc || !strings.Contains(b.Reason, "system call") {
			t.Errorf("refusal %v; want thread %d at %#x, in a system call", b, tid, pc)
		}
	}
	for addr := range want {
		if !got[addr] {
			t.Errorf("patch at %#x was not refused: refused %v", addr, res.Refused)
		}
	}
}

// TestLiveParkedThreadInSharedGuard parks a thread in a system call whose
// PC lies in the guard of two patches (as the shared call gate of return
// probes lies in the guard of every one of their removals). Neither patch
// may be written while the thread is there; both are once it has left.
func TestLiveParkedThreadInSharedGuard(t *testing.T) {
	f := startFixture(t, nil, "park")
	tid := parked(t, f)
	gate := []Range{parkGate(f)}
	g1, g2, free := aPatch(f, 3), aPatch(f, 11), aPatch(f, 20)
	g1.Guard, g2.Guard = gate, gate
	batch := []Patch{g1, g2, free}
	slow := &Options{StepTimeout: 100 * time.Millisecond}
	res, err := Apply(f.p, batch, slow)
	if err != nil {
		t.Fatal(err)
	}
	expectRefused(t, res, tid, map[uint64]uint64{g1.Addr: parkPC(f), g2.Addr: parkPC(f)})
	expectText(t, f.p, []Patch{g1}, true)
	expectText(t, f.p, []Patch{g2}, true)
	expectText(t, f.p, []Patch{free}, false)
	unpark(t, f, tid)
	res, err = Apply(f.p, []Patch{g1, g2}, slow)
	if err != nil || len(res.Refused) != 0 {
		t.Fatalf("after the thread left: %v, refused %v", err, res.Refused)
	}
	expectText(t, f.p, batch, false)
	finish(t, f)
}

// TestLivePauseCountsSteps checks that the pause a pass reports includes
// the time spent stepping a thread while the others stay stopped: the
// parked thread's step times out after 50 ms, and the refresh that
// follows must not restart the clock.
func TestLivePauseCountsSteps(t *testing.T) {
	f := startFixture(t, nil, "park")
	tid := parked(t, f)
	park := parkPatch(f)
	const timeout = 50 * time.Millisecond
	res, err := Apply(f.p, []Patch{aPatch(f, 7), park}, &Options{StepTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps < 1 || len(res.Refused) != 1 {
		t.Fatalf("steps %d, refused %v: want the parked thread stepped and its patch refused", res.Steps, res.Refused)
	}
	if res.Stop.Pause < timeout || res.Stop.Total != res.Stop.Stop+res.Stop.Pause {
		t.Errorf("stop %+v: the pause leaves out the %v the parked thread was stepped", res.Stop, timeout)
	}
	unpark(t, f, tid)
	finish(t, f)
}

// exitingWorld makes a thread leave with exit(2) the first time the pass
// lists the threads, after the listing: the pass goes on with a thread
// that stood in a range and is now on its way out.
type exitingWorld struct {
	*proc.World
	victim int    // the thread that exits
	site   uint64 // a syscall instruction for it to run
	done   bool
	err    error // why the thread could not be made to exit
}

func (w *exitingWorld) Threads() ([]proc.ThreadInfo, error) {
	ths, err := w.World.Threads()
	if err != nil || w.done {
		return ths, err
	}
	w.done = true
	r, err := w.World.Regs(w.victim)
	if err != nil {
		w.err = err
		return ths, nil
	}
	r.SetPC(w.site)
	setSyscall(&r, unix.SYS_EXIT, 0)
	if err := w.World.SetRegs(w.victim, &r); err != nil {
		w.err = err
		return ths, nil
	}
	w.err = w.World.Step(w.victim, time.Second)
	return ths, nil
}

// TestLiveThreadExitsDuringPass makes the parked thread exit after the
// pass has stopped the world and listed the threads, before it writes.
// The pass must not panic and must leave every patch either written or
// with its old bytes in place. A thread on its way out runs no user code
// again, so the pass should not even refuse the patch it stood in.
func TestLiveThreadExitsDuringPass(t *testing.T) {
	f := startFixture(t, nil, "park")
	tid := parked(t, f)
	park := parkPatch(f)
	batch := append(patches(f, 256, aPatch), park)
	w := &exitingWorld{victim: tid, site: f.Park}
	var res *Result
	_, err := f.p.Stopped(func(pw *proc.World) error {
		w.World = pw
		var err error
		res, err = ApplyStopped(w, batch, &Options{StepTimeout: 100 * time.Millisecond})
		return err
	})
	if w.err != nil {
		t.Fatalf("make thread %d exit: %v", tid, w.err)
	}
	if err != nil {
		if errors.Is(err, proc.ErrExited) {
			t.Fatalf("the process died: %v", err)
		}
		t.Logf("pass failed cleanly: %v", err)
		expectText(t, f.p, batch, true)
	} else {
		written := map[uint64]bool{}
		for _, q := range res.Applied {
			written[q.Addr] = true
		}
		for _, q := range batch {
			expectText(t, f.p, []Patch{q}, !written[q.Addr])
		}
		if len(res.Refused) != 0 {
			t.Errorf("refused %v: the thread in the way had exited", res.Refused)
		}
	}
	if !fixtures.Eventually(60*time.Second, func() bool {
		tids, _ := f.p.Threads()
		for _, x := range tids {
			if x == tid {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("thread %d did not exit", tid)
	}
	var left []Patch
	for _, q := range batch {
		b := make([]byte, len(q.Old))
		if err := f.p.ReadMemory(q.Addr, b); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(b, q.Old) {
			left = append(left, q)
		}
	}
	if len(left) > 0 {
		if res, err := Apply(f.p, left, nil); err != nil || len(res.Refused) != 0 {
			t.Fatalf("after the thread exited: %v, refused %v", err, res.Refused)
		}
	}
	expectText(t, f.p, batch, false)
	finish(t, f)
}

// TestLiveRollback makes the write of the third page of a 4,096-patch batch
// fail after writing half of it, and then the read-back of the last patch
// of the sixth page disagree: each time the text must be byte-identical to
// what it was, and the error must name the patch that failed (the first
// of the page whose write failed; the one whose bytes read back wrong).
func TestLiveRollback(t *testing.T) {
	f := startFixture(t, nil)
	ps := patches(f, nSites, aPatch)
	region := make([]byte, 16*nSites)
	if err := f.p.ReadMemory(f.A, region); err != nil {
		t.Fatal(err)
	}
	torn := &Options{hooks: &testHooks{write: func(mem Memory, n int, addr uint64, data []byte) (bool, error) {
		if n != 2 {
			return false, nil
		}
		// Half the page goes in, then the write fails.
		if err := mem.WriteMemory(addr, data[:len(data)/2]); err != nil {
			return true, err
		}
		return true, errors.New("injected write failure")
	}}}
	corrupt := &Options{hooks: &testHooks{write: func(mem Memory, n int, addr uint64, data []byte) (bool, error) {
		if n != 5 {
			return false, nil
		}
		bad := append([]byte(nil), data...)
		bad[len(bad)-1] ^= 0xff
		return true, mem.WriteMemory(addr, bad)
	}}}
	// 256 patches per page: the third page starts with patch 512, the
	// sixth ends with patch 1535.
	for _, tc := range []struct {
		name  string
		opts  *Options
		index int
	}{{"torn write", torn, 512}, {"bad read-back", corrupt, 1535}} {
		res, err := Apply(f.p, ps, tc.opts)
		var pe *PatchError
		if !errors.As(err, &pe) {
			t.Fatalf("%s: err = %v (result %+v), want a *PatchError", tc.name, err, res)
		}
		if pe.Index != tc.index || pe.Addr != ps[tc.index].Addr {
			t.Errorf("%s: error names patch %d at %#x, want %d at %#x", tc.name, pe.Index, pe.Addr, tc.index, ps[tc.index].Addr)
		}
		if tc.name == "bad read-back" {
			var me *MismatchError
			if !errors.As(err, &me) || me.Addr != ps[tc.index].Addr {
				t.Errorf("%s: err = %v, want a *MismatchError at %#x", tc.name, err, ps[tc.index].Addr)
			}
		}
		after := make([]byte, len(region))
		if err := f.p.ReadMemory(f.A, after); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(region, after) {
			t.Fatalf("%s: text differs after rollback", tc.name)
		}
		t.Logf("%s: %v", tc.name, err)
	}
	// A wrong old byte: nothing is written, the patch is named.
	bad := patches(f, 16, aPatch)
	bad[9].Old = bytes.Repeat([]byte{1}, len(bad[9].Old))
	_, err := Apply(f.p, bad, nil)
	var pe *PatchError
	var me *MismatchError
	if !errors.As(err, &pe) || pe.Index != 9 || !errors.As(err, &me) {
		t.Fatalf("mismatched old bytes: %v", err)
	}
	expectText(t, f.p, patches(f, 16, aPatch), true)
	finish(t, f)
}

// TestLiveSignalsDuringPause sends a signal to each stopped thread and
// checks none is handled during the pause and every one after it. Each
// thread gets exactly one: two identical standard signals pending for the
// same target merge into one by design, so only distinct targets can be
// counted exactly.
func TestLiveSignalsDuringPause(t *testing.T) {
	f := startFixture(t, nil)
	if !fixtures.Eventually(60*time.Second, func() bool {
		for w := 0; w < 8; w++ {
			if f.read32(t, fixtures.SharedWorkerTd+4*uint64(w)) == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("workers did not start")
	}
	var tids []int
	for w := 0; w < 8; w++ {
		tids = append(tids, int(f.read32(t, fixtures.SharedWorkerTd+4*uint64(w))))
	}
	ps := patches(f, 256, aPatch)
	_, err := f.p.Stopped(func(w *proc.World) error {
		for _, tid := range tids {
			if err := unix.Tgkill(f.p.Pid(), tid, unix.SIGUSR2); err != nil {
				return fmt.Errorf("tgkill %d %d: %w", f.p.Pid(), tid, err)
			}
		}
		res, err := ApplyStopped(w, ps, &Options{StepTimeout: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		if len(res.Refused) != 0 {
			return res.Err()
		}
		time.Sleep(20 * time.Millisecond)
		var b [8]byte
		if err := w.ReadMemory(f.Shared+fixtures.SharedSig2, b[:]); err != nil {
			return err
		}
		if b != [8]byte{} {
			t.Errorf("a signal was handled during the pause")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !fixtures.Eventually(60*time.Second, func() bool { return f.read64(t, fixtures.SharedSig2) == int64(len(tids)) }) {
		t.Fatalf("SIGUSR2 handled %d times after the pause, want %d", f.read64(t, fixtures.SharedSig2), len(tids))
	}
	expectText(t, f.p, ps, false)
	finish(t, f)
}

// TestLiveForkRace commits batches while a thread forks in a loop. Every
// child must hold either all old or all new text, never a mix, and with
// enough children both kinds must show up.
func TestLiveForkRace(t *testing.T) {
	f := startFixture(t, &proc.Options{FollowForks: true}, "fork")
	ps := patches(f, nSites, aPatch)
	var mu sync.Mutex
	var children, oldText, newText int
	var fails []string
	buf := make([]byte, 16*nSites)
	wait := watchForks(f, func(child *proc.Process) {
		err := child.ReadMemory(f.A, buf)
		nOld, nNew := 0, 0
		for _, q := range ps {
			off := q.Addr - f.A
			switch {
			case bytes.Equal(buf[off:off+uint64(len(q.Old))], q.Old):
				nOld++
			case bytes.Equal(buf[off:off+uint64(len(q.New))], q.New):
				nNew++
			}
		}
		mu.Lock()
		defer mu.Unlock()
		children++
		switch {
		case err != nil:
			fails = append(fails, err.Error())
		case nOld == len(ps):
			oldText++
		case nNew == len(ps):
			newText++
		default:
			fails = append(fails, "child with a mix of old and new text")
		}
	})
	s := NewSet()
	deadline := time.Now().Add(3 * time.Second)
	for r := 0; time.Now().Before(deadline) || r < 10; r++ {
		for _, q := range ps {
			if r%2 == 0 {
				_ = s.Add(q)
			} else {
				_ = s.Remove(q.Addr)
			}
		}
		// All or nothing: a pass that left patches for a later one
		// would let a child fork between the two and hold a mix. A pass
		// a thread blocks writes nothing and is tried again.
		for try := 0; len(s.Pending()) > 0; try++ {
			if try == 200 {
				t.Fatalf("%d patches still pending after 200 passes", len(s.Pending()))
			}
			if _, err := s.Commit(f.p, &Options{AllOrNothing: true}); err != nil && !errors.Is(err, ErrBlocked) {
				t.Fatalf("commit: %v", err)
			}
		}
	}
	// Children keep coming (and are killed) until the fixture exits.
	finish(t, f)
	wait()
	mu.Lock()
	defer mu.Unlock()
	if len(fails) > 0 {
		t.Fatalf("%d bad children: %v", len(fails), fails[:min(len(fails), 5)])
	}
	if children == 0 {
		t.Fatal("no child was forked")
	}
	// The text flips between all old and all new at every pass, and the
	// process runs between passes, so a fair number of children must have
	// seen both. With a handful, all of them may have forked in the same
	// state.
	if children >= 20 && (oldText == 0 || newText == 0) {
		t.Errorf("%d children: %d with old text, %d with new; want both", children, oldText, newText)
	}
	t.Logf("%d children: %d with old text, %d with new", children, oldText, newText)
}

// TestLiveStopFree applies 4,096 single-instruction patches with the
// int3-first protocol while the workers run, and reverts them, 10 times;
// some worker must have been caught on an int3 meanwhile.
func TestLiveStopFree(t *testing.T) {
	if err := stopFreeSupported(); err != nil {
		t.Skipf("%v (TestStopFreeRefused checks the refusal)", err)
	}
	f := startFixture(t, nil)
	ps := patches(f, nSites, bPatch)
	inv := make([]Patch, len(ps))
	for i, q := range ps {
		inv[i] = q.Inverse()
	}
	held := 0
	for r := 0; r < 10; r++ {
		res, err := StopFree(f.p, ps, nil)
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		held += res.Held
		expectText(t, f.p, ps, false)
		if res, err = StopFree(f.p, inv, nil); err != nil {
			t.Fatalf("round %d revert: %v", r, err)
		}
		held += res.Held
		expectText(t, f.p, ps, true)
	}
	finish(t, f)
	// The workers call every site in a loop: over 20 passes some must
	// have run into an int3, or the test did not exercise the protocol.
	if held == 0 {
		t.Errorf("no thread was caught on an int3 in 20 passes")
	}
	t.Logf("%d traps held", held)
}

// TestSetCancel checks that a removal and re-addition between two passes
// writes nothing.
func TestSetCancel(t *testing.T) {
	f := startFixture(t, nil)
	s := NewSet()
	ps := patches(f, 64, aPatch)
	for _, q := range ps {
		_ = s.Add(q)
	}
	commitAll(t, f, s, nil)
	for _, q := range ps {
		if err := s.Remove(q.Addr); err != nil {
			t.Fatal(err)
		}
		if err := s.Add(q); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.Pending()); n != 0 {
		t.Fatalf("%d changes pending after remove+add", n)
	}
	res, err := s.Commit(f.p, nil)
	if err != nil || res.Writes != 0 || res.Stop.Total != 0 {
		t.Fatalf("commit after remove+add: %+v %v", res, err)
	}
	expectText(t, f.p, ps, false)
	finish(t, f)
}

// watchForks calls check on every child the fixture forks, stopped as
// the fork left it, then kills the child, until the fixture exits. The
// returned function waits for the watcher to end.
func watchForks(f *fixture, check func(child *proc.Process)) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-f.p.Exited():
				return
			case ev := <-f.p.Events():
				if ev.Kind != proc.EventFork || ev.Child == nil {
					continue
				}
				check(ev.Child)
				_ = ev.Child.Kill()
			}
		}
	}()
	return wg.Wait
}
