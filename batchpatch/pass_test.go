package batchpatch

import (
	"testing"
	"time"

	"github.com/probeopt/probeopt/proc"
)

// TestUnits checks the grouping of a sorted batch into units: patches of
// one non-zero Unit together, in the order of their first patch, and a
// patch with Unit 0 alone.
func TestUnits(t *testing.T) {
	ps := []Patch{
		{Addr: 0x10, Unit: 7}, {Addr: 0x20}, {Addr: 0x30, Unit: 9},
		{Addr: 0x40, Unit: 7}, {Addr: 0x50}, {Addr: 0x60, Unit: 9},
	}
	us := units(ps)
	want := [][]int{{0, 3}, {1}, {2, 5}, {4}}
	if len(us) != len(want) {
		t.Fatalf("%d units, want %d", len(us), len(want))
	}
	for i, u := range us {
		if len(u.idx) != len(want[i]) {
			t.Fatalf("unit %d = %v, want %v", i, u.idx, want[i])
		}
		for k := range u.idx {
			if u.idx[k] != want[i][k] {
				t.Fatalf("unit %d = %v, want %v", i, u.idx, want[i])
			}
		}
	}
	if n := countUnits(ps); n != 4 {
		t.Errorf("countUnits = %d, want 4", n)
	}
	// A blocked patch holds back its whole unit, and only it.
	blocked := map[int]*BlockedError{3: {Addr: 0x40, Tid: 5, PC: 0x42, Reason: "r"}}
	holdUnits(ps, blocked)
	if len(blocked) != 2 || blocked[0] == nil || blocked[0].Tid != 5 {
		t.Errorf("held = %v, want patches 0 and 3", blocked)
	}
}

// TestPassSizer checks the predictions against the figures fed in: the
// first pass from the default cost, then the median stop and per-patch
// work of the last passes, growth at most 2x, at least a quarter of the
// budget for patches when the stop eats it, and the cap.
func TestPassSizer(t *testing.T) {
	s := newPassSizer(&Options{MaxPause: 2 * time.Millisecond})
	// 1.5 ms target, 375 us assumed stop, 800 ns a patch.
	if n := s.next(); n != 1406 {
		t.Errorf("first pass %d, want 1406", n)
	}
	// A pass of 1,000 patches: stop 300 us, work 500 us (500 ns a patch):
	// (1.5 ms - 300 us) / 500 ns = 2,400, capped at twice 1,000.
	s.measured(1000, proc.StopStats{Stop: 300 * time.Microsecond, Pause: 500 * time.Microsecond, Total: 800 * time.Microsecond})
	if n := s.next(); n != 2000 {
		t.Errorf("second pass %d, want 2000", n)
	}
	// One slow pass (the tracer preempted) does not move the medians of
	// three.
	s.measured(2000, proc.StopStats{Stop: 300 * time.Microsecond, Pause: 1000 * time.Microsecond, Total: 1300 * time.Microsecond})
	s.measured(2000, proc.StopStats{Stop: 5 * time.Millisecond, Pause: 20 * time.Millisecond, Total: 25 * time.Millisecond})
	if n := s.next(); n != 2400 {
		t.Errorf("after a slow pass %d, want 2400", n)
	}
	// Stops longer than the bound leave a quarter of it for patches.
	s = newPassSizer(&Options{MaxPause: 2 * time.Millisecond, MaxPassPatches: 100000})
	s.measured(100, proc.StopStats{Stop: 3 * time.Millisecond, Pause: 100 * time.Microsecond, Total: 3100 * time.Microsecond})
	if n := s.next(); n != 200 {
		t.Errorf("slow stop: %d, want 200 (growth cap)", n)
	}
	s.last = 1 << 20
	if n := s.next(); n != 375 {
		t.Errorf("slow stop: %d, want 375", n)
	}
	// The cap alone.
	s = newPassSizer(&Options{MaxPassPatches: 300})
	if n := s.next(); n != 300 {
		t.Errorf("cap: %d, want 300", n)
	}
}
