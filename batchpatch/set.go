package batchpatch

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/probeopt/probeopt/proc"
)

// Set holds the patches installed in one target and the changes staged for
// its next pass. Additions and removals are batched: Commit applies all of
// them in one stop-the-world pass. Staging a removal of a patch whose
// addition is still pending (or the reverse) cancels both, so a patch
// removed and re-added between two passes touches no text — the lesson of
// the kernel's delayed kprobe unoptimization. A Set is not safe for
// concurrent use.
type Set struct {
	installed map[uint64]Patch
	adds      map[uint64]Patch
	removes   map[uint64]Patch
	maxLen    int // longest patch ever added
}

// NewSet returns an empty Set.
func NewSet() *Set {
	return &Set{installed: map[uint64]Patch{}, adds: map[uint64]Patch{}, removes: map[uint64]Patch{}}
}

// Add stages p for installation. Adding a patch whose removal is pending
// cancels the removal when the bytes are the same.
func (s *Set) Add(p Patch) error {
	if len(p.New) == 0 {
		return &PatchError{Index: -1, Addr: p.Addr, Err: ErrEmpty}
	}
	if len(p.Old) != len(p.New) {
		return &PatchError{Index: -1, Addr: p.Addr, Err: ErrLength}
	}
	if r, ok := s.removes[p.Addr]; ok && bytes.Equal(r.Old, p.Old) && bytes.Equal(r.New, p.New) {
		delete(s.removes, p.Addr)
		return nil
	}
	if q, ok := s.installed[p.Addr]; ok && bytes.Equal(q.Old, p.Old) && bytes.Equal(q.New, p.New) {
		if _, pending := s.removes[p.Addr]; !pending {
			return nil // already there
		}
	}
	// A patch overlapping p starts less than maxLen bytes before p's end
	// and ends after p's start: look those addresses up.
	maxLen := uint64(max(s.maxLen, len(p.New)))
	lo := uint64(0)
	if p.Addr >= maxLen {
		lo = p.Addr - maxLen + 1
	}
	for a := lo; a < p.End(); a++ {
		for _, m := range []map[uint64]Patch{s.installed, s.adds} {
			if q, ok := m[a]; ok && p.Addr < q.End() && q.Addr < p.End() {
				return &PatchError{Index: -1, Addr: p.Addr, Err: fmt.Errorf("%w: %#x-%#x", ErrOverlap, q.Addr, q.End())}
			}
		}
	}
	s.adds[p.Addr] = p
	s.maxLen = max(s.maxLen, len(p.New))
	return nil
}

// Remove stages the removal of the patch at addr. Removing a patch whose
// addition is still pending just forgets it.
func (s *Set) Remove(addr uint64) error {
	if _, ok := s.adds[addr]; ok {
		delete(s.adds, addr)
		return nil
	}
	q, ok := s.installed[addr]
	if !ok {
		return &PatchError{Index: -1, Addr: addr, Err: ErrNotInstalled}
	}
	s.removes[addr] = q
	return nil
}

// Installed returns the patches in place, sorted by address.
func (s *Set) Installed() []Patch { return sorted(s.installed) }

// Pending returns the batch the next Commit applies, sorted by address:
// staged additions as given, staged removals as their inverses.
func (s *Set) Pending() []Patch {
	out := sorted(s.adds)
	for _, q := range s.removes {
		out = append(out, q.Inverse())
	}
	Sort(out)
	return out
}

func sorted(m map[uint64]Patch) []Patch {
	out := make([]Patch, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// done records the patches of a pass that were written.
func (s *Set) done(applied []Patch) {
	for _, p := range applied {
		if _, ok := s.adds[p.Addr]; ok {
			s.installed[p.Addr] = s.adds[p.Addr]
			delete(s.adds, p.Addr)
			continue
		}
		if _, ok := s.removes[p.Addr]; ok {
			delete(s.installed, p.Addr)
			delete(s.removes, p.Addr)
		}
	}
}

// Commit applies the pending changes to the live process in one pass,
// or in several under Options.MaxPause or Options.MaxPassPatches (see
// Apply): removals are batched like additions, so removing many patches
// costs passes, not one stop each. Changes blocked by a thread stay
// pending for the next Commit; a failed pass changes nothing of its own,
// and the passes before it stay installed (Installed lists them). With
// nothing pending it does not stop the process.
func (s *Set) Commit(p *proc.Process, opts *Options) (*Result, error) {
	batch := s.Pending()
	if len(batch) == 0 {
		return &Result{}, nil
	}
	res, err := Apply(p, batch, opts)
	if res != nil {
		s.done(res.Applied)
	}
	return res, err
}

// CommitStopped is Commit for a world that is already stopped.
func (s *Set) CommitStopped(w World, opts *Options) (*Result, error) {
	batch := s.Pending()
	if len(batch) == 0 {
		return &Result{}, nil
	}
	res, err := ApplyStopped(w, batch, opts)
	if err == nil && res != nil {
		s.done(res.Applied)
	}
	return res, err
}
