package trampoline

import (
	"fmt"
	"slices"
)

// Mapping is one mapped range of the tracee, as /proc/PID/maps lists it
// (the engine converts proc.Mapping: Start, End, Path).
type Mapping struct {
	Start, End uint64 // [Start, End)
	// Path is the file or the kernel's name ("[heap]", "[stack]",
	// "[vdso]"), "" for anonymous memory.
	Path string
}

// PlaceOptions tune Place. A nil *PlaceOptions means the defaults; a zero
// field means its default.
type PlaceOptions struct {
	// PageSize aligns the result; default 4096.
	PageSize uint64
	// Low and High bound the addresses allowed: [Low, High). Defaults:
	// 64 KiB (above vm.mmap_min_addr) and 0x7FFF_FFFF_0000 (below the top
	// of the 47-bit user address space).
	Low, High uint64
	// HeapRoom is kept free above "[heap]" so that brk can still grow;
	// default 256 MiB.
	HeapRoom uint64
	// StackRoom is kept free below "[stack]" so that the main stack can
	// still grow; default 128 MiB (the least gap Linux itself leaves
	// between the stack and the mmap base).
	StackRoom uint64
	// Guard is kept free between the area and any mapping; default one
	// page.
	Guard uint64
	// Reach is the largest distance allowed between any byte of the area
	// and any address it must reach; default MaxReach (x86-64, rel32).
	// arm64 areas use MaxReachARM64 (b, +-128 MiB).
	Reach uint64
}

// MaxReach is the largest distance Place allows between any byte of the
// area and any address it must reach: 2 GiB less a margin for the
// instruction lengths a 32-bit displacement is counted from.
const MaxReach = 1<<31 - 1<<16

func (o *PlaceOptions) withDefaults() PlaceOptions {
	var r PlaceOptions
	if o != nil {
		r = *o
	}
	if r.PageSize == 0 {
		r.PageSize = 4096
	}
	if r.Low == 0 {
		r.Low = 1 << 16
	}
	if r.High == 0 {
		r.High = 0x7FFF_FFFF_0000
	}
	if r.HeapRoom == 0 {
		r.HeapRoom = 256 << 20
	}
	if r.StackRoom == 0 {
		r.StackRoom = 128 << 20
	}
	if r.Guard == 0 {
		r.Guard = r.PageSize
	}
	if r.Reach == 0 {
		r.Reach = MaxReach
	}
	return r
}

// Place chooses where to map an area of size bytes: a page-aligned
// address, free in maps (with the guard, heap and stack room), such that
// every byte of the area lies within PlaceOptions.Reach (MaxReach, or
// MaxReachARM64 for arm64) of every address in reach (sites, the
// addresses they resume at, RIP-relative operands: see Site.Reach and
// SiteARM64.Reach), as near to them as possible. It is a pure function of its
// arguments; the engine maps the result with MAP_FIXED_NOREPLACE (and
// places again if that fails because the process mapped something
// meanwhile). It returns ErrNoPlace when no free range qualifies, for
// instance when the addresses span more than about 2 GiB (see Clusters).
func Place(maps []Mapping, reach []uint64, size uint64, opts *PlaceOptions) (uint64, error) {
	o := opts.withDefaults()
	if size == 0 || len(reach) == 0 {
		return 0, fmt.Errorf("place %d bytes for %d addresses: %w", size, len(reach), ErrConfig)
	}
	if o.PageSize&(o.PageSize-1) != 0 {
		return 0, fmt.Errorf("page size %d: %w", o.PageSize, ErrConfig)
	}
	size = (size + o.PageSize - 1) &^ (o.PageSize - 1)
	minA, maxA := slices.Min(reach), slices.Max(reach)
	// Every byte b of the area: maxA - Reach <= b and b < minA + Reach.
	lo, hi := o.Low, o.High
	if maxA > o.Reach && maxA-o.Reach > lo {
		lo = maxA - o.Reach
	}
	if minA+o.Reach < hi {
		hi = minA + o.Reach
	}
	if hi <= lo || hi-lo < size {
		return 0, fmt.Errorf("%d bytes within %#x of %#x..%#x: %w", size, o.Reach, minA, maxA, ErrNoPlace)
	}
	center := minA + (maxA-minA)/2
	best, bestDist, found := uint64(0), uint64(0), false
	for _, g := range freeGaps(maps, o) {
		s, t := max(g.Start, lo), min(g.End, hi)
		if t <= s || t-s < size {
			continue
		}
		first := (s + o.PageSize - 1) &^ (o.PageSize - 1)
		last := (t - size) &^ (o.PageSize - 1)
		if first > last {
			continue
		}
		want := center - size/2
		if center < size/2 {
			want = 0
		}
		base := min(max(want&^(o.PageSize-1), first), last)
		mid := base + size/2
		dist := max(mid, center) - min(mid, center)
		if !found || dist < bestDist {
			best, bestDist, found = base, dist, true
		}
	}
	if !found {
		return 0, fmt.Errorf("%d bytes within %#x of %#x..%#x: %w", size, o.Reach, minA, maxA, ErrNoPlace)
	}
	return best, nil
}

// freeGaps returns the free ranges in [Low, High) once the mappings, the
// guards and the heap and stack room are taken out, in address order.
func freeGaps(maps []Mapping, o PlaceOptions) []Range {
	used := make([]Range, 0, len(maps))
	for _, m := range maps {
		if m.End <= m.Start {
			continue
		}
		r := Range{m.Start, m.End}
		switch m.Path {
		case "[heap]":
			r.End = satAdd(r.End, o.HeapRoom)
		case "[stack]":
			r.Start = satSub(r.Start, o.StackRoom)
		}
		r.Start = satSub(r.Start, o.Guard)
		r.End = satAdd(r.End, o.Guard)
		used = append(used, r)
	}
	slices.SortFunc(used, func(a, b Range) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	var out []Range
	at := o.Low
	for _, u := range used {
		if u.Start > at {
			out = append(out, Range{at, min(u.Start, o.High)})
		}
		at = max(at, u.End)
		if at >= o.High {
			break
		}
	}
	if at < o.High {
		out = append(out, Range{at, o.High})
	}
	return out
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

func satSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// Clusters splits addresses into groups that one area can serve each:
// sorted, and no group spanning more than span bytes (1 GiB when span is
// 0, leaving room on both sides for the area; for arm64 pass about half
// of MaxReachARM64). The engine places one area per group (typically one per module, or per group of modules mapped
// near each other).
func Clusters(addrs []uint64, span uint64) [][]uint64 {
	if span == 0 {
		span = 1 << 30
	}
	s := slices.Clone(addrs)
	slices.Sort(s)
	var out [][]uint64
	for i := 0; i < len(s); {
		j := i + 1
		for j < len(s) && s[j]-s[i] <= span {
			j++
		}
		out = append(out, s[i:j:j])
		i = j
	}
	return out
}
