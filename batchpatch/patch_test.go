package batchpatch

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/proc"
)

func TestValidate(t *testing.T) {
	p := func(addr uint64, old, new string) Patch { return Patch{Addr: addr, Old: []byte(old), New: []byte(new)} }
	for _, tc := range []struct {
		ps   []Patch
		want error
		at   int
	}{
		{[]Patch{p(0, "ab", "cd"), p(2, "e", "f")}, nil, 0},
		{[]Patch{p(0, "", "")}, ErrEmpty, 0},
		{[]Patch{p(0, "ab", "c")}, ErrLength, 0},
		{[]Patch{p(8, "ab", "cd"), p(0, "e", "f")}, ErrUnsorted, 1},
		{[]Patch{p(0, "abc", "def"), p(2, "e", "f")}, ErrOverlap, 1},
		{[]Patch{p(^uint64(0), "ab", "cd")}, ErrOverlap, 0},
	} {
		err := Validate(tc.ps)
		if !errors.Is(err, tc.want) {
			t.Errorf("%v: err = %v, want %v", tc.ps, err, tc.want)
			continue
		}
		var pe *PatchError
		if tc.want != nil && (!errors.As(err, &pe) || pe.Index != tc.at) {
			t.Errorf("%v: err = %v, want patch %d", tc.ps, err, tc.at)
		}
	}
}

// fakeMem is memory in a map of pages, with optional failures.
type fakeMem struct {
	base   uint64
	data   []byte
	writes int
}

func (m *fakeMem) ReadMemory(addr uint64, buf []byte) error {
	if addr < m.base || addr+uint64(len(buf)) > m.base+uint64(len(m.data)) {
		return errors.New("unmapped")
	}
	copy(buf, m.data[addr-m.base:])
	return nil
}

func (m *fakeMem) WriteMemory(addr uint64, data []byte) error {
	if addr < m.base || addr+uint64(len(data)) > m.base+uint64(len(m.data)) {
		return errors.New("unmapped")
	}
	m.writes++
	copy(m.data[addr-m.base:], data)
	return nil
}

// sites builds a memory of n 16-byte slots and one 5-byte patch per slot;
// every 256th patch crosses a page boundary.
func sites(n int) (*fakeMem, []Patch) {
	m := &fakeMem{base: 0x400000, data: make([]byte, 16*n+pageSize)}
	for i := range m.data {
		m.data[i] = byte(i * 7)
	}
	var ps []Patch
	for i := 0; i < n; i++ {
		a := m.base + 16*uint64(i) + 13 // slot 255 crosses into the next page
		old := append([]byte(nil), m.data[a-m.base:a-m.base+5]...)
		ps = append(ps, Patch{Addr: a, Old: old, New: []byte{0xe9, byte(i), 1, 2, 3}})
	}
	return m, ps
}

func TestTransactCoalescesPerPage(t *testing.T) {
	m, ps := sites(1024) // 16 KiB: 4 pages, patches crossing 3 boundaries
	before := append([]byte(nil), m.data...)
	st, err := transact(m, ps, nil, identity(len(ps)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.writes != 5 || m.writes != 5 {
		t.Errorf("writes = %d (%d), want one per page touched (5)", st.writes, m.writes)
	}
	for _, q := range ps {
		got := make([]byte, 5)
		_ = m.ReadMemory(q.Addr, got)
		if !bytes.Equal(got, q.New) {
			t.Fatalf("patch at %#x: % x", q.Addr, got)
		}
	}
	// Bytes between patches are untouched.
	for i := range before {
		a := m.base + uint64(i)
		inPatch := false
		for _, q := range ps {
			if a >= q.Addr && a < q.End() {
				inPatch = true
				break
			}
		}
		if !inPatch && m.data[i] != before[i] {
			t.Fatalf("byte %#x changed", a)
		}
	}
}

func TestTransactOldMismatchWritesNothing(t *testing.T) {
	m, ps := sites(64)
	ps[40].Old = []byte{9, 9, 9, 9, 9}
	before := append([]byte(nil), m.data...)
	_, err := transact(m, ps, nil, identity(len(ps)), nil)
	var pe *PatchError
	var me *MismatchError
	if !errors.As(err, &pe) || pe.Index != 40 || !errors.As(err, &me) || me.Addr != ps[40].Addr {
		t.Fatalf("err = %v", err)
	}
	if m.writes != 0 || !bytes.Equal(before, m.data) {
		t.Errorf("memory written despite the mismatch")
	}
}

func TestTransactRollback(t *testing.T) {
	for _, failAt := range []int{0, 1, 3} {
		m, ps := sites(1024)
		before := append([]byte(nil), m.data...)
		hooks := &testHooks{write: func(mem Memory, n int, addr uint64, data []byte) (bool, error) {
			if n != failAt {
				return false, nil
			}
			_ = mem.WriteMemory(addr, data[:len(data)/3])
			return true, errors.New("injected")
		}}
		_, err := transact(m, ps, nil, identity(len(ps)), hooks)
		var pe *PatchError
		if !errors.As(err, &pe) {
			t.Fatalf("fail at %d: err = %v", failAt, err)
		}
		// A page whose write fails is named by its first patch: 255
		// crosses into page 1, 767 into page 3.
		if want := map[int]int{0: 0, 1: 255, 3: 767}[failAt]; pe.Index != want || pe.Addr != ps[want].Addr {
			t.Errorf("fail at %d: error names patch %d at %#x, want %d", failAt, pe.Index, pe.Addr, want)
		}
		if !bytes.Equal(before, m.data) {
			t.Fatalf("fail at %d: memory differs after rollback", failAt)
		}
	}
	// A read-back that differs in one patch of a page names that patch,
	// not the first of the page; every page is restored.
	for _, bad := range []int{300, 511, 256} {
		m, ps := sites(1024)
		before := append([]byte(nil), m.data...)
		at := ps[bad].Addr + 2
		hooks := &testHooks{write: func(mem Memory, n int, addr uint64, data []byte) (bool, error) {
			if at < addr || at >= addr+uint64(len(data)) {
				return false, nil
			}
			data = append([]byte(nil), data...)
			data[at-addr] ^= 0xff
			return true, mem.WriteMemory(addr, data)
		}}
		_, err := transact(m, ps, nil, identity(len(ps)), hooks)
		var pe *PatchError
		var me *MismatchError
		if !errors.As(err, &pe) || !errors.As(err, &me) {
			t.Fatalf("bad read-back of patch %d: err = %v", bad, err)
		}
		if pe.Index != bad || pe.Addr != ps[bad].Addr || me.Addr != ps[bad].Addr {
			t.Errorf("bad read-back of patch %d: error names patch %d at %#x (mismatch at %#x)", bad, pe.Index, pe.Addr, me.Addr)
		}
		if !bytes.Equal(before, m.data) {
			t.Fatalf("bad read-back of patch %d: memory differs after rollback", bad)
		}
	}
}

func TestBlock(t *testing.T) {
	ps := []Patch{
		{Addr: 100, Old: make([]byte, 5), New: make([]byte, 5)},
		{Addr: 200, Old: make([]byte, 5), New: make([]byte, 5), Guard: []Range{{0x9000, 0x9010}}},
	}
	for _, tc := range []struct {
		pc   uint64
		want int
	}{{100, -1}, {101, 0}, {102, 0}, {104, 0}, {105, -1}, {199, -1}, {203, 1}, {0x9000, 1}, {0x900f, 1}, {0x9010, -1}} {
		if got := block(ps, tc.pc); got != tc.want {
			t.Errorf("block(%d) = %d, want %d", tc.pc, got, tc.want)
		}
	}
	th := []proc.ThreadInfo{
		{Tid: 1, PC: 100},
		{Tid: 2, PC: 300, RestartPC: 102},
		{Tid: 3, PC: 103, Exiting: true},
	}
	b := blockers(ps, th)
	if len(b) != 1 || len(b[2]) != 1 || b[2][0] != (hit{0, 102}) {
		t.Errorf("blockers = %v", b)
	}
	// One thread, many patches: its PC in a guard two patches share and in
	// the range of a third, its restart PC in a fourth.
	ps = []Patch{
		{Addr: 100, Old: make([]byte, 5), New: make([]byte, 5)},
		{Addr: 200, Old: make([]byte, 5), New: make([]byte, 5), Guard: []Range{{0x9000, 0x9010}}},
		{Addr: 0x9008, Old: make([]byte, 5), New: make([]byte, 5)},
		{Addr: 0xa000, Old: make([]byte, 5), New: make([]byte, 5), Guard: []Range{{0x9000, 0x9010}}},
		{Addr: 0xb000, Old: make([]byte, 5), New: make([]byte, 5)},
	}
	b = blockers(ps, []proc.ThreadInfo{{Tid: 7, PC: 0x900a, RestartPC: 102}})
	want := []hit{{1, 0x900a}, {2, 0x900a}, {3, 0x900a}, {0, 102}}
	if len(b) != 1 || len(b[7]) != len(want) {
		t.Fatalf("blockers = %v, want thread 7 blocking %v", b, want)
	}
	for i := range want {
		if b[7][i] != want[i] {
			t.Errorf("blockers[7] = %v, want %v", b[7], want)
			break
		}
	}
}

// fakeWorld is a World whose threads move one instruction per step.
type fakeWorld struct {
	*fakeMem
	threads []proc.ThreadInfo
	stepTo  map[int][]uint64 // PCs a thread reaches step after step
	timeout map[int]bool     // threads whose step never ends
	steps   int
}

func (w *fakeWorld) Threads() ([]proc.ThreadInfo, error) { return w.threads, nil }
func (w *fakeWorld) Refresh() error                      { return nil }
func (w *fakeWorld) Step(tid int, _ time.Duration) error {
	w.steps++
	if w.timeout[tid] {
		return &proc.ThreadError{Tid: tid, Op: "step", Err: proc.ErrStepTimeout}
	}
	for i := range w.threads {
		if w.threads[i].Tid == tid && len(w.stepTo[tid]) > 0 {
			w.threads[i].PC = w.stepTo[tid][0]
			w.stepTo[tid] = w.stepTo[tid][1:]
		}
	}
	return nil
}

func TestApplyStoppedStepsAndRefuses(t *testing.T) {
	m, ps := sites(8)
	w := &fakeWorld{
		fakeMem: m,
		threads: []proc.ThreadInfo{
			{Tid: 10, PC: ps[1].Addr + 2},                     // leaves after two steps
			{Tid: 11, PC: ps[3].Addr + 1, InSyscall: true},    // blocked in the kernel
			{Tid: 12, PC: ps[5].Addr},                         // at the start: fine
			{Tid: 13, PC: ps[6].Addr + 4, Parked: true},       // parked in vfork
			{Tid: 14, PC: ps[7].Addr + 3, RestartPC: 0x10000}, // cannot leave in 3 steps
		},
		stepTo: map[int][]uint64{
			10: {ps[1].Addr + 3, ps[1].Addr + 5},
			14: {ps[7].Addr + 3, ps[7].Addr + 3, ps[7].Addr + 3, ps[7].Addr + 3},
		},
		timeout: map[int]bool{11: true},
	}
	res, err := ApplyStopped(w, ps, &Options{MaxSteps: 3})
	if err != nil {
		t.Fatal(err)
	}
	var refused []uint64
	for _, b := range res.Refused {
		refused = append(refused, b.Addr)
		if !errors.Is(b, ErrBlocked) || b.Reason == "" {
			t.Errorf("refusal %v", b)
		}
	}
	want := []uint64{ps[3].Addr, ps[6].Addr, ps[7].Addr}
	if len(refused) != 3 || refused[0] != want[0] || refused[1] != want[1] || refused[2] != want[2] {
		t.Fatalf("refused %#x, want %#x", refused, want)
	}
	if !strings.Contains(res.Refused[0].Reason, "system call") || !strings.Contains(res.Refused[1].Reason, "vfork") {
		t.Errorf("reasons: %q, %q", res.Refused[0].Reason, res.Refused[1].Reason)
	}
	if len(res.Applied) != 5 {
		t.Errorf("applied %d, want 5", len(res.Applied))
	}
	for i, q := range ps {
		got := make([]byte, 5)
		_ = m.ReadMemory(q.Addr, got)
		written := bytes.Equal(got, q.New)
		if wantWritten := i != 3 && i != 6 && i != 7; written != wantWritten {
			t.Errorf("patch %d written = %v", i, written)
		}
	}
}

// TestApplyStoppedRefusesEveryBlockedPatch checks that a thread that
// cannot be moved holds back every patch it blocks, not only the first: a
// guard shared by several removals (as every return-probe trampoline's
// removal guards the shared call gate), and a PC and a restart PC in two
// different ranges.
func TestApplyStoppedRefusesEveryBlockedPatch(t *testing.T) {
	m, ps := sites(8)
	pc := ps[1].Addr + 2 // strictly inside patch 1
	gate := []Range{{pc - 1, pc + 1}}
	ps[4].Guard, ps[6].Guard = gate, gate
	w := &fakeWorld{fakeMem: m,
		threads: []proc.ThreadInfo{
			{Tid: 10, PC: pc, InSyscall: true},
			{Tid: 11, PC: ps[3].Addr + 1, RestartPC: ps[2].Addr + 3, InSyscall: true},
		},
		timeout: map[int]bool{10: true, 11: true},
	}
	res, err := ApplyStopped(w, ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]proc.ThreadInfo{
		ps[1].Addr: {Tid: 10, PC: pc},
		ps[4].Addr: {Tid: 10, PC: pc},
		ps[6].Addr: {Tid: 10, PC: pc},
		ps[2].Addr: {Tid: 11, PC: ps[2].Addr + 3},
		ps[3].Addr: {Tid: 11, PC: ps[3].Addr + 1},
	}
	if len(res.Refused) != len(want) {
		t.Errorf("refused %v, want %d patches", res.Refused, len(want))
	}
	for _, b := range res.Refused {
		th, ok := want[b.Addr]
		if !ok || b.Tid != th.Tid || b.PC != th.PC || !strings.Contains(b.Reason, "system call") {
			t.Errorf("refusal %v, want thread %d at %#x", b, th.Tid, th.PC)
		}
	}
	for i, q := range ps {
		got := make([]byte, 5)
		_ = m.ReadMemory(q.Addr, got)
		_, blocked := want[q.Addr]
		if written := bytes.Equal(got, q.New); written == blocked {
			t.Errorf("patch %d written = %v, blocked = %v", i, written, blocked)
		}
	}
	if len(res.Applied) != len(ps)-len(want) {
		t.Errorf("applied %d, want %d", len(res.Applied), len(ps)-len(want))
	}
}

func TestSet(t *testing.T) {
	a := Patch{Addr: 0x100, Old: []byte{1, 2}, New: []byte{3, 4}}
	b := Patch{Addr: 0x101, Old: []byte{2}, New: []byte{9}}
	s := NewSet()
	if err := s.Add(a); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(b); !errors.Is(err, ErrOverlap) {
		t.Errorf("overlapping add: %v", err)
	}
	if err := s.Remove(0x100); err != nil || len(s.Pending()) != 0 {
		t.Errorf("remove of a pending add: %v, pending %v", err, s.Pending())
	}
	if err := s.Remove(0x100); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("remove of nothing: %v", err)
	}
	_ = s.Add(a)
	s.done(s.Pending())
	if len(s.Installed()) != 1 {
		t.Fatal("not installed")
	}
	_ = s.Remove(0x100)
	if p := s.Pending(); len(p) != 1 || !bytes.Equal(p[0].New, a.Old) {
		t.Errorf("pending removal = %v", p)
	}
	_ = s.Add(a)
	if p := s.Pending(); len(p) != 0 {
		t.Errorf("remove+add left %v pending", p)
	}
}

func TestApplyFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "in.bin")
	orig := []byte("0123456789abcdef")
	if err := os.WriteFile(src, orig, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "out.bin")
	ps := []Patch{{Addr: 0x1002, Old: []byte("23"), New: []byte("XY")}, {Addr: 0x100e, Old: []byte("ef"), New: []byte("ZZ")}}
	opts := &FileOptions{Offset: func(a uint64) (int64, error) { return int64(a - 0x1000), nil }}
	if err := ApplyFile(src, dst, ps, opts); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	if string(got) != "01XY456789abcdZZ" {
		t.Errorf("patched = %q", got)
	}
	if b, _ := os.ReadFile(src); !bytes.Equal(b, orig) {
		t.Errorf("source changed: %q", b)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", st.Mode())
	}
	ps[1].Old = []byte("xx")
	var me *MismatchError
	if err := ApplyFile(src, filepath.Join(dir, "bad.bin"), ps, opts); !errors.As(err, &me) {
		t.Errorf("mismatch: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.bin")); err == nil {
		t.Errorf("a failed patch left a file")
	}
	if err := ApplyFile(src, src, nil, nil); !errors.Is(err, ErrSameFile) {
		t.Errorf("in place: %v", err)
	}
	if err := ApplyFile(src, dst, []Patch{{Addr: 15, Old: []byte("fg"), New: []byte("12")}}, nil); err == nil {
		t.Errorf("patch past the end accepted")
	}
}
