package batchpatch

import (
	"slices"
	"testing"
	"time"
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
// first pass from the calibrated page cost, then the median fixed part
// and cost per page of the last passes, growth at most 2x from what the
// previous pass was given, at least a quarter of the budget for pages
// when the fixed part eats it, and the cap.
func TestPassSizer(t *testing.T) {
	s := newPassSizer(&Options{MaxPause: 2 * time.Millisecond})
	s.page0 = 50 * time.Microsecond
	// 1.5 ms target, 375 us assumed fixed part, 50 us a page.
	if n := s.pages(); n != 22 {
		t.Errorf("first pass %d pages, want 22", n)
	}
	// A pass of 20 pages: fixed part 300 us (stop 200, check 50, resume
	// 50), pages 400 us (20 us a page): (1.5 ms - 300 us) / 20 us = 60,
	// capped at twice the 20 pages it was given.
	pass := func(pages int, stop, check, resume, read, write, back time.Duration) PassStats {
		return PassStats{Pages: pages, Pause: stop + check + resume + read + write + back,
			Stop: stop, Check: check, Resume: resume, Read: read, Write: write, ReadBack: back}
	}
	us := time.Microsecond
	s.measured(20, pass(20, 200*us, 50*us, 50*us, 200*us, 150*us, 50*us))
	if n := s.pages(); n != 40 {
		t.Errorf("second pass %d pages, want 40", n)
	}
	// One slow pass (the tracer preempted) does not move the medians of
	// three; a pass its clock closed after 1 page grows from the 40 it
	// was given.
	s.measured(40, pass(40, 200*us, 50*us, 50*us, 400*us, 300*us, 100*us))
	s.measured(40, pass(1, 5000*us, 50*us, 50*us, 20000*us, 10*us, 10*us))
	if n := s.pages(); n != 60 {
		t.Errorf("after a slow pass %d pages, want 60", n)
	}
	// Fixed parts longer than the bound leave a quarter of it for pages.
	s = newPassSizer(&Options{MaxPause: 2 * time.Millisecond})
	s.measured(100, pass(100, 3000*us, 0, 0, 1000*us, 0, 0))
	if n := s.pages(); n != 37 {
		t.Errorf("slow stop: %d, want 37 (375 us at 10 us a page)", n)
	}
	// The cut: what the clock leaves after the resume, at the measured
	// write and read back per page.
	c := s.cut(2 * time.Millisecond)
	if c.bound != 1800*us || c.resume != 0 || c.perPage != 0 {
		t.Errorf("cut %+v, want bound 1.8 ms, resume 0, write 0 a page", c)
	}
	// The cap alone.
	s = newPassSizer(&Options{MaxPassPatches: 300})
	if n := s.patches(); n != 300 {
		t.Errorf("cap: %d, want 300", n)
	}
	if n := s.pages(); n != 1<<30 {
		t.Errorf("cap: %d pages, want no limit", n)
	}
}

// clockWorld is a World whose clock says how long it has been stopped.
type clockWorld struct {
	World
	paused time.Duration
}

func (w clockWorld) Paused() time.Duration { return w.paused }

// TestPassCut checks which units a pass's clock leaves for the next pass:
// whole units, in the order they were taken, the first always kept, the
// ones a thread holds back not counted.
func TestPassCut(t *testing.T) {
	us := time.Microsecond
	// Units: {0 (page 0), 3 (page 3)}, {1 (page 1)}, {2 (page 2)}, {4 (page 4)}.
	ps := []Patch{{Addr: 0x10, Old: []byte{1}, New: []byte{2}}, {Addr: 0x1010, Old: []byte{1}, New: []byte{2}},
		{Addr: 0x2010, Old: []byte{1}, New: []byte{2}}, {Addr: 0x3010, Old: []byte{1}, New: []byte{2}},
		{Addr: 0x4010, Old: []byte{1}, New: []byte{2}}}
	units := [][]int{{0, 3}, {1}, {2}, {4}}
	c := &passCut{bound: 1000 * us, resume: 200 * us, perPage: 100 * us, units: units}
	// 500 us stopped: 300 us left, three pages: the first unit (two
	// pages) and the second (one).
	late := c.late(clockWorld{paused: 500 * us}, ps, nil, 0)
	if late.n != 2 || !late.has(2) || !late.has(4) {
		t.Errorf("late = %v, want patches 2 and 4", late)
	}
	// Past the bound: only the first unit.
	late = c.late(clockWorld{paused: 2000 * us}, ps, nil, 0)
	if late.n != 3 || late.has(0) || late.has(3) {
		t.Errorf("late = %v, want all but the first unit", late)
	}
	// A unit a thread holds back takes no room and is not deferred.
	blocked := map[int]*BlockedError{0: {Addr: 0x10}, 3: {Addr: 0x3010}}
	late = c.late(clockWorld{paused: 500 * us}, ps, blocked, 0)
	if late.n != 0 {
		t.Errorf("late = %v, want none (three pages fit)", late)
	}
	// Before any pass measured the write: three reads a page, and a
	// resume as long as the stop so far.
	c = &passCut{bound: 1000 * us, units: units}
	late = c.late(clockWorld{paused: 300 * us}, ps, nil, 50*us)
	if late.n != 3 || late.has(0) || late.has(3) {
		t.Errorf("late = %v, want all but the first unit (400 us left, 150 us a page)", late)
	}
	// A World without a clock: nothing is cut.
	if late := c.late(nil, ps, nil, 50*us); late.at != nil {
		t.Errorf("late without a clock = %v", late)
	}
	// The pages counted before the stop give what the walk gives.
	for _, paused := range []time.Duration{0, 100 * us, 300 * us, 500 * us, 700 * us, 2000 * us} {
		for _, c := range []*passCut{{bound: 1000 * us, resume: 200 * us, perPage: 100 * us, units: units}, {bound: 1000 * us, units: units}} {
			walked := c.late(clockWorld{paused: paused}, ps, nil, 50*us)
			c.count(ps)
			counted := c.late(clockWorld{paused: paused}, ps, nil, 50*us)
			if walked.n != counted.n || !slices.Equal(walked.at, counted.at) {
				t.Errorf("paused %v: counted %v, walked %v", paused, counted, walked)
			}
		}
	}
}

// countingMem is memory that records the addresses read, and sleeps a
// little in each read so that a timed read is never zero.
type countingMem struct {
	fakeMem
	reads []uint64
}

func (m *countingMem) ReadMemory(addr uint64, buf []byte) error {
	m.reads = append(m.reads, addr)
	time.Sleep(10 * time.Microsecond)
	return m.fakeMem.ReadMemory(addr, buf)
}

// TestCalibrate checks the first pass's calibration: whole pages of the
// queue's first units, each read once, at most calibrationPages of them,
// a cost of firstPageFactor reads a page; 0 when nothing can be read.
func TestCalibrate(t *testing.T) {
	fm, ps := sites(4096) // 256 slots a page: 17 pages
	m := &countingMem{fakeMem: *fm}
	c := calibrate(m, ps, units(ps))
	if len(m.reads) != calibrationPages {
		t.Fatalf("%d pages read, want %d", len(m.reads), calibrationPages)
	}
	seen := map[uint64]bool{}
	for _, a := range m.reads {
		if a%pageSize != 0 || seen[a] || a < m.base || a >= m.base+uint64(calibrationPages+1)*pageSize {
			t.Errorf("read at %#x: not a new page among the first units'", a)
		}
		seen[a] = true
	}
	if least := time.Duration(firstPageFactor * float64(10*time.Microsecond)); c < least {
		t.Errorf("page cost %v, want at least %v (%v reads of at least 10 us)", c, least, firstPageFactor)
	}
	bad := &countingMem{fakeMem: fakeMem{base: 1 << 40}}
	if c := calibrate(bad, ps, units(ps)); c != 0 {
		t.Errorf("unreadable memory: page cost %v, want 0", c)
	}
}
