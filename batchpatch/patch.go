package batchpatch

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/probeopt/probeopt/proc"
)

// Patch replaces len(Old) bytes at Addr by New.
type Patch struct {
	// Addr is a virtual address for a live process, or what
	// FileOptions.Offset translates (by default, a file offset).
	Addr uint64
	Old  []byte // the bytes expected at Addr now
	New  []byte // the bytes to write; same length as Old
	// Guard lists further address ranges in which no thread may be when
	// the patch is written, such as the displaced instructions of a
	// trampoline that this patch removes. A thread anywhere in [Start,
	// End) blocks the patch.
	Guard []Range
	// Unit groups the patches that must change at once: the patches of a
	// batch with the same non-zero Unit are written in the same pass or
	// not at all (a thread blocking one of them holds back all of them),
	// and a pass that fails takes none of them. Zero makes the patch a
	// unit of its own. A tracer gives, for example, the jump of a detour
	// and the write of its slot one Unit.
	Unit uint64
}

// Range is the address range [Start, End).
type Range struct {
	Start, End uint64
}

// End returns the first address after the patch.
func (p Patch) End() uint64 { return p.Addr + uint64(len(p.New)) }

// Inverse returns the patch that undoes p.
func (p Patch) Inverse() Patch {
	return Patch{Addr: p.Addr, Old: p.New, New: p.Old, Guard: p.Guard, Unit: p.Unit}
}

// strictlyInside reports whether pc lies in (Addr, End).
func (p Patch) strictlyInside(pc uint64) bool { return pc > p.Addr && pc < p.End() }

// guards reports whether pc lies in one of the guard ranges of p.
func (p Patch) guards(pc uint64) bool {
	for _, g := range p.Guard {
		if pc >= g.Start && pc < g.End {
			return true
		}
	}
	return false
}

// Errors of the package.
var (
	// ErrNotSupported means live patching is not available on this
	// platform; it is proc.ErrNotSupported.
	ErrNotSupported = proc.ErrNotSupported
	// ErrEmpty means a patch has no bytes.
	ErrEmpty = errors.New("empty patch")
	// ErrLength means Old and New differ in length.
	ErrLength = errors.New("old and new bytes differ in length")
	// ErrUnsorted means the patches are not sorted by address.
	ErrUnsorted = errors.New("patches not sorted by address")
	// ErrOverlap means two patches overlap.
	ErrOverlap = errors.New("patches overlap")
	// ErrBlocked means a thread stands in the range of a patch and could
	// not be moved out of it: the patch was not written.
	ErrBlocked = errors.New("a thread is inside the patched range")
	// ErrNotInstalled means a Set was asked to remove a patch it does not
	// hold.
	ErrNotInstalled = errors.New("patch not installed")
	// ErrSameFile means ApplyFile was asked to overwrite its source.
	ErrSameFile = errors.New("destination is the source file")
)

// PatchError reports the patch a batch failed on. Index is the position
// of the patch in the batch as given.
type PatchError struct {
	Index int
	Addr  uint64
	Err   error
}

func (e *PatchError) Error() string {
	return fmt.Sprintf("patch %d at %#x: %v", e.Index, e.Addr, e.Err)
}

func (e *PatchError) Unwrap() error { return e.Err }

// MismatchError reports bytes that differ from what was expected: the old
// bytes before writing, or the new bytes when reading back.
type MismatchError struct {
	Addr uint64 // first address of the compared bytes
	Want []byte
	Got  []byte
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("bytes at %#x are % x, want % x", e.Addr, e.Got, e.Want)
}

// BlockedError says why a patch was refused: which thread stood where.
type BlockedError struct {
	Addr   uint64 // the patch
	Tid    int    // the thread in the way
	PC     uint64 // where it stood: its PC, or the PC its system call restarts at
	Reason string // why it could not be moved, in words
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("patch at %#x: thread %d at %#x: %s", e.Addr, e.Tid, e.PC, e.Reason)
}

func (e *BlockedError) Unwrap() error { return ErrBlocked }

// RollbackError reports a failure that could not be fully undone: the
// ranges listed may hold a mix of old and new bytes.
type RollbackError struct {
	Err        error   // the failure that started the rollback
	Unrestored []Range // ranges whose old bytes could not be put back
	RestoreErr error   // why
}

func (e *RollbackError) Error() string {
	return fmt.Sprintf("%v; rollback failed for %d ranges: %v", e.Err, len(e.Unrestored), e.RestoreErr)
}

func (e *RollbackError) Unwrap() []error { return []error{e.Err, e.RestoreErr} }

// Validate checks a batch on its own: every patch non-empty with Old and
// New of equal length, sorted by address, no two overlapping. It does not
// read the target.
func Validate(ps []Patch) error {
	for i, p := range ps {
		if len(p.New) == 0 {
			return &PatchError{Index: i, Addr: p.Addr, Err: ErrEmpty}
		}
		if len(p.Old) != len(p.New) {
			return &PatchError{Index: i, Addr: p.Addr, Err: ErrLength}
		}
		if p.End() < p.Addr {
			return &PatchError{Index: i, Addr: p.Addr, Err: fmt.Errorf("range wraps around: %w", ErrOverlap)}
		}
		if i > 0 {
			prev := ps[i-1]
			if p.Addr < prev.Addr {
				return &PatchError{Index: i, Addr: p.Addr, Err: ErrUnsorted}
			}
			if p.Addr < prev.End() {
				return &PatchError{Index: i, Addr: p.Addr, Err: fmt.Errorf("%w: previous patch %#x-%#x", ErrOverlap, prev.Addr, prev.End())}
			}
		}
	}
	return nil
}

// Sort sorts patches by address, in place.
func Sort(ps []Patch) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Addr < ps[j].Addr })
}

// Memory is what a batch is applied to: a live process (proc.World, or
// proc.Process) or a file image.
type Memory interface {
	ReadMemory(addr uint64, buf []byte) error
	WriteMemory(addr uint64, data []byte) error
}

// pageSize is the granularity of coalesced writes.
const pageSize = 4096

// span is one coalesced write: [start, start+len(cur)) within one page.
type span struct {
	start   uint64
	cur     []byte // bytes there now
	buf     []byte // bytes to write
	patches []int  // indexes into the batch
}

// coalesce groups the patches (sorted, validated) selected by use into
// per-page spans. A patch that crosses a page boundary is split between
// the spans of its pages.
func coalesce(ps []Patch, use func(i int) bool) []*span {
	var out []*span
	var cur *span
	var end uint64 // of cur
	grow := func() {
		if cur != nil {
			cur.cur = make([]byte, end-cur.start)
		}
	}
	for i := range ps {
		if use != nil && !use(i) {
			continue
		}
		addr, pend := ps[i].Addr, ps[i].End()
		for a := addr; a < pend; {
			page := a &^ (pageSize - 1)
			e := min(pend, page+pageSize)
			if cur == nil || cur.start&^(pageSize-1) != page {
				grow()
				cur = &span{start: a}
				end = a
				out = append(out, cur)
			}
			end = max(end, e)
			if n := len(cur.patches); n == 0 || cur.patches[n-1] != i {
				cur.patches = append(cur.patches, i)
			}
			a = e
		}
	}
	grow()
	return out
}

// readSpans fills cur of every span from mem.
func readSpans(mem Memory, spans []*span) error {
	for _, s := range spans {
		if err := mem.ReadMemory(s.start, s.cur); err != nil {
			return err
		}
	}
	return nil
}

// checkOld compares the old bytes of every patch of the spans with what
// the spans read; it returns the index of the first mismatch and its
// error.
func checkOld(ps []Patch, spans []*span) (int, error) {
	for _, s := range spans {
		for _, i := range s.patches {
			p := ps[i]
			lo := max(p.Addr, s.start)
			hi := min(p.End(), s.start+uint64(len(s.cur)))
			got := s.cur[lo-s.start : hi-s.start]
			want := p.Old[lo-p.Addr : hi-p.Addr]
			if !bytes.Equal(got, want) {
				return i, &MismatchError{Addr: lo, Want: append([]byte(nil), want...), Got: append([]byte(nil), got...)}
			}
		}
	}
	return -1, nil
}

// narrow returns the spans of the patches use selects, their current
// bytes taken from spans (which read every patch of ps): no page is read
// again.
func narrow(ps []Patch, spans []*span, use func(i int) bool) []*span {
	out := coalesce(ps, use)
	k := 0
	for _, s := range out {
		page := s.start &^ (pageSize - 1)
		for spans[k].start&^(pageSize-1) != page {
			k++
		}
		o := spans[k]
		copy(s.cur, o.cur[s.start-o.start:])
	}
	return out
}

// fill computes the bytes each span must hold: what is there, with the new
// bytes of its patches on top.
func fill(ps []Patch, spans []*span) {
	for _, s := range spans {
		s.buf = append(s.buf[:0], s.cur...)
		for _, i := range s.patches {
			p := ps[i]
			lo := max(p.Addr, s.start)
			hi := min(p.End(), s.start+uint64(len(s.cur)))
			copy(s.buf[lo-s.start:hi-s.start], p.New[lo-p.Addr:hi-p.Addr])
		}
	}
}

// txStats counts what a transaction wrote.
type txStats struct {
	writes int           // coalesced writes (one per page touched)
	bytes  int           // bytes written
	write  time.Duration // spent writing
	back   time.Duration // spent reading back and comparing
}

// testHooks let tests make a write fail or corrupt it; nil in production.
type testHooks struct {
	write func(mem Memory, n int, addr uint64, data []byte) (handled bool, err error)
	// paused, when set, replaces the clock of a bounded pass (how long
	// the world has been stopped).
	paused func() time.Duration
}

// writeSpans writes every span, reads it back and compares; on any
// failure it restores every span already (even partly) written, checks
// the restore, and returns the error for the patch that failed: the one
// whose bytes read back wrong, or the first of a page whose write or read
// failed.
func writeSpans(mem Memory, ps []Patch, index []int, spans []*span, hooks *testHooks) (txStats, error) {
	var st txStats
	written := 0
	fail := func(pi int, err error) (txStats, error) {
		perr := error(&PatchError{Index: index[pi], Addr: ps[pi].Addr, Err: err})
		if rerr := rollback(mem, spans[:written]); rerr != nil {
			rerr.Err = perr
			return st, rerr
		}
		return st, perr
	}
	t0 := time.Now()
	for si, s := range spans {
		written = si + 1 // count it even if the write fails half-way
		var err error
		handled := false
		if hooks != nil && hooks.write != nil {
			handled, err = hooks.write(mem, st.writes, s.start, s.buf)
		}
		if !handled {
			err = mem.WriteMemory(s.start, s.buf)
		}
		if err != nil {
			return fail(s.patches[0], fmt.Errorf("write %d bytes at %#x: %w", len(s.buf), s.start, err))
		}
		st.writes++
		st.bytes += len(s.buf)
	}
	t1 := time.Now()
	st.write = t1.Sub(t0)
	back := make([]byte, 0, pageSize)
	for _, s := range spans {
		back = back[:len(s.buf)]
		if err := mem.ReadMemory(s.start, back); err != nil {
			st.back = time.Since(t1)
			return fail(s.patches[0], fmt.Errorf("read back %#x: %w", s.start, err))
		}
		if pi, err := s.compare(ps, s.buf, back); err != nil {
			st.back = time.Since(t1)
			return fail(pi, err)
		}
	}
	st.back = time.Since(t1)
	return st, nil
}

// compare checks the bytes read back from span s against want. On a
// difference it returns the first patch of the span whose bytes differ
// and the mismatch over that patch's bytes in the span (or, when only
// bytes between patches differ, the first patch and the whole span).
func (s *span) compare(ps []Patch, want, got []byte) (int, error) {
	if bytes.Equal(want, got) {
		return -1, nil
	}
	for _, i := range s.patches {
		p := ps[i]
		lo := max(p.Addr, s.start)
		hi := min(p.End(), s.start+uint64(len(want)))
		w, g := want[lo-s.start:hi-s.start], got[lo-s.start:hi-s.start]
		if !bytes.Equal(w, g) {
			return i, &MismatchError{Addr: lo, Want: append([]byte(nil), w...), Got: append([]byte(nil), g...)}
		}
	}
	return s.patches[0], &MismatchError{Addr: s.start, Want: append([]byte(nil), want...), Got: append([]byte(nil), got...)}
}

// rollback writes back the old bytes of spans and verifies them.
func rollback(mem Memory, spans []*span) *RollbackError {
	var bad []Range
	var errs []error
	back := make([]byte, 0, pageSize)
	for i := len(spans) - 1; i >= 0; i-- {
		s := spans[i]
		err := mem.WriteMemory(s.start, s.cur)
		if err == nil {
			back = back[:len(s.cur)]
			err = mem.ReadMemory(s.start, back)
			if err == nil && !bytes.Equal(back, s.cur) {
				err = &MismatchError{Addr: s.start, Want: s.cur, Got: append([]byte(nil), back...)}
			}
		}
		if err != nil {
			bad = append(bad, Range{s.start, s.start + uint64(len(s.cur))})
			errs = append(errs, err)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &RollbackError{Unrestored: bad, RestoreErr: errors.Join(errs...)}
}

// transact applies a validated batch to mem as one transaction: read,
// compare the old bytes, write coalesced, read back, roll back on failure.
// use selects the patches to apply (nil: all); index maps a batch position
// to the caller's numbering.
func transact(mem Memory, ps []Patch, use func(i int) bool, index []int, hooks *testHooks) (txStats, error) {
	spans := coalesce(ps, use)
	if err := readSpans(mem, spans); err != nil {
		return txStats{}, fmt.Errorf("read text: %w", err)
	}
	if i, err := checkOld(ps, spans); err != nil {
		return txStats{}, &PatchError{Index: index[i], Addr: ps[i].Addr, Err: err}
	}
	fill(ps, spans)
	return writeSpans(mem, ps, index, spans, hooks)
}

// identity returns 0..n-1.
func identity(n int) []int {
	ix := make([]int, n)
	for i := range ix {
		ix[i] = i
	}
	return ix
}
