package plan

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"math/bits"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
)

// CodeRegion is a run of a file's executable bytes: an executable section,
// or an executable segment when the file has no section headers.
type CodeRegion struct {
	Addr uint64 // virtual address of Code[0]
	Code []byte
}

// FuncRange is a known function of a file, for a branch index: a symbol
// start is where a decode of the code is known to be in step.
type FuncRange struct {
	Name string
	Addr uint64 // virtual address of the first byte
	End  uint64 // the address just past the function
}

// BranchCode is what a branch index reads: the file's executable code and
// its known functions (local ones such as foo.cold included), in any order,
// and what its exception tables say.
type BranchCode struct {
	Regions []CodeRegion
	Funcs   []FuncRange
	// Exceptions are the file's exception tables as elfscan reads them
	// (File.ExceptionTables), nil when it has none: the landing pads
	// they list are targets too, and code whose landing pads could not
	// be read (an FDE with Err set) may hold one anywhere.
	Exceptions *elfscan.ExceptionTables
	// GoResume are the places of a Go binary where the Go runtime may
	// resume a goroutine without running the instruction before
	// (File.GoResumePoints, sorted by address), nil for other files.
	GoResume []elfscan.GoResume
	// DataPointers are the code addresses the file's data holds
	// (File.DataPointers), sorted by To: with the addresses the code
	// itself takes (a RIP-relative lea, an immediate), the places an
	// indirect jump through a loaded pointer may go (TakenIn).
	DataPointers []elfscan.DataPointer
}

// Branch is one direct branch of a file.
type Branch struct {
	From uint64            // address of the branch instruction
	To   uint64            // its target
	Kind decode.BranchKind // jmp, jcc, call, loop, xbegin, cbz, tbz...
	// Func is the name of the known function that holds From, "" when
	// none does (a region without symbols).
	Func string
}

// ErrCodeSpan means the executable regions given to a branch index lie too
// far apart to be indexed (more than 4 GiB from the first to the last).
var ErrCodeSpan = errors.New("executable code spans more than 4 GiB")

// BranchIndex is a file-wide index of direct branch targets: every address
// that a direct jmp, jcc, call, loop, jrcxz, xbegin or jmpabs (arm64: b,
// bl, b.cond, bc.cond, cbz, cbnz, tbz, tbnz) anywhere in the file's
// executable code goes to. A detour needs it besides the probed function's
// own branches: the cold part of a function (foo.cold, a separate symbol in
// another section) jumps back into the hot part, and hand-written or
// tail-merged code may jump a few bytes past a function's entry. A branch
// that lands strictly inside the bytes a detour replaces would run the
// middle of the jump.
//
// The code is decoded once, on the first query (a detour being judged),
// and never if no query comes; a BranchIndex is safe for concurrent use.
//
// x86-64 code is swept linearly, region by region, with two rules for
// staying in step: the sweep restarts at every known function start (as
// objdump does at every symbol, so a function's instructions are the ones
// AnalyzeX86 finds, and an instruction that straddles a function start is
// counted and then left), and a byte that does not decode is stepped over.
// Code between and outside the known functions (padding, the functions of
// a stripped file) is swept the same way, so a branch from code without a
// symbol counts too. A sweep out of step may find targets no real branch
// has; that only makes a decision more conservative.
//
// That is the choice between a plain linear sweep and one decode per known
// function plus a sweep of the gaps between them: the restarts give the
// second's result in one pass, without decoding nested functions twice.
// Measured: the plain sweep finds 9 targets more than this one of
// libLLVM-15's 1.18 million (50 MiB of .text, 35568 .dynsym functions),
// and 3 more of cc1's 484 thousand (20 MiB, 26795), at the same speed;
// with the restarts, the targets of a 2 MiB window of cc1 and of all of
// /usr/bin/ls equal those objdump prints. The regions are swept in
// parallel chunks of about 1 MiB that begin at a function start where one
// lies near; a chunk that begins elsewhere is joined to the sweep of the
// chunk before it afterwards, so the targets are a superset of those of
// one sweep from the region's start.
//
// The index also holds the exception landing pads that .eh_frame and the
// LSDAs list (BranchCode.Exceptions, read by elfscan): the unwinder jumps
// to them through a register, so no branch shows them. Not in the index: other indirect
// jumps (the targets of a function's jump tables are its own, see
// Function.ResolveJumpTables; a function with an indirect jump that is
// not a recovered table is refused a detour on its own), and addresses
// taken by a lea or stored in data.
//
// The targets are kept as a bitmap, one bit per byte from the first region
// to the end of the last (1/8 of the code's size), with a sorted list for
// targets outside it.
type BranchIndex struct {
	arch decode.Arch
	dec  decode.X86Decoder
	load func() (*BranchCode, error)

	once sync.Once
	err  error
	code *BranchCode
	base uint64   // address of bit 0
	bits []uint64 // bit i: a target at base+i
	far  []uint64 // sorted targets outside [base, base+64*len(bits))
	pads []uint64 // sorted landing pads
	// noPads are the FDEs whose landing pads are unknown, by PCBegin.
	noPads []elfscan.FDE
	// goResume are BranchCode.GoResume, sorted by Lo.
	goResume []elfscan.GoResume
	stats    IndexStats
	// taken are the code addresses the code takes and the data holds,
	// sorted by To (TakenIn).
	taken []elfscan.DataPointer
	// unchecked marks NoBranches: the caller vouches that no branch from
	// elsewhere matters, and the rules say that nothing was checked.
	unchecked bool
}

// NoBranches is an index without any branch target or landing pad, for a
// Site whose caller knows that no code outside the function can land in
// the bytes a trampoline replaces (code made by hand, a test), or accepts
// not knowing: a decision then rests on the function's own branches, and
// its rule says that the rest of the file was not checked. A Site
// without an index (Branches nil) takes no trampoline that an index could
// refuse. Use File.Branches for the index of a real file.
var NoBranches = &BranchIndex{load: func() (*BranchCode, error) { return &BranchCode{}, nil }, unchecked: true}

// TargetKind says how control reaches a Target from elsewhere.
type TargetKind uint8

const (
	// TargetBranch: a direct branch lands there.
	TargetBranch TargetKind = iota + 1
	// TargetLandingPad: an exception landing pad, where the unwinder
	// jumps through a register.
	TargetLandingPad
	// TargetUnknownPads: code whose landing pads are not known (its LSDA
	// could not be read): any address in it may be one.
	TargetUnknownPads
)

// Target is an address control may reach without passing the instruction
// before it.
type Target struct {
	Addr uint64
	Kind TargetKind
	// FDE is the code range whose landing pads are unknown, and why, for
	// TargetUnknownPads.
	FDE elfscan.FDE
}

// IndexStats says what building a branch index took.
type IndexStats struct {
	Bytes    int64 // bytes of code in the regions
	Branches int64 // direct branches decoded (a branch met by two sweeps counts twice)
	Skipped  int64 // bytes skipped one at a time because they did not decode
	Chunks   int   // parts swept in parallel
	Joined   int   // chunks that began out of step and were joined to the sweep before them
	Reswept  int   // of those, chunks swept again because the join did not meet their sweep
	// FDEs counts the frame description entries of .eh_frame,
	// LandingPads the distinct landing pads, UnknownPads the FDEs whose
	// landing pads could not be read.
	FDEs, LandingPads, UnknownPads int
}

// IndexX86Branches returns an index of the direct branches of x86-64 code.
// load gives the code; it is called, and the code decoded with dec, on the
// first query, at most once. An error from load is every query's error.
func IndexX86Branches(load func() (*BranchCode, error), dec decode.X86Decoder) *BranchIndex {
	return &BranchIndex{arch: decode.X86_64, dec: dec, load: load}
}

// IndexARM64Branches returns an index of the direct branches of arm64 code:
// every 4-byte word from a region's first aligned address on. load is
// called on the first query, at most once.
func IndexARM64Branches(load func() (*BranchCode, error)) *BranchIndex {
	return &BranchIndex{arch: decode.ARM64, load: load}
}

// Arch is the instruction set the index decodes.
func (x *BranchIndex) Arch() decode.Arch { return x.arch }

// Build decodes the code if no query has yet, and returns the error that
// stopped it (from load, or ErrCodeSpan).
func (x *BranchIndex) Build() error {
	x.once.Do(x.build)
	return x.err
}

// TargetIn returns the lowest target in [lo, hi): a direct branch target,
// a landing pad, or the first address there of code whose landing pads are
// unknown. It builds the index on first use; when that fails, it returns
// the error and found is false: the targets are unknown, not absent.
func (x *BranchIndex) TargetIn(lo, hi uint64) (t Target, found bool, err error) {
	if err := x.Build(); err != nil {
		return Target{}, false, err
	}
	if lo >= hi {
		return Target{}, false, nil
	}
	if a, ok := x.branchTargetIn(lo, hi); ok {
		t, found = Target{Addr: a, Kind: TargetBranch}, true
		hi = a
	}
	i, _ := slices.BinarySearch(x.pads, lo)
	if i < len(x.pads) && x.pads[i] < hi {
		t, found = Target{Addr: x.pads[i], Kind: TargetLandingPad}, true
		hi = x.pads[i]
	}
	// Unknown ranges may overlap: look at every one that starts before
	// hi (there are few).
	for _, f := range x.noPads {
		if f.PCBegin >= hi {
			break
		}
		if f.PCEnd > lo {
			a := max(f.PCBegin, lo)
			t, found = Target{Addr: a, Kind: TargetUnknownPads, FDE: f}, true
			hi = a
		}
	}
	return t, found, nil
}

// branchTargetIn returns the lowest direct branch target in [lo, hi).
func (x *BranchIndex) branchTargetIn(lo, hi uint64) (uint64, bool) {
	end := x.base + uint64(len(x.bits))*64
	if lo < x.base {
		if t, ok := x.farIn(lo, min(hi, x.base)); ok {
			return t, true
		}
	}
	if a, b := max(lo, x.base), min(hi, end); a < b {
		for off := a - x.base; off < b-x.base; {
			w := x.bits[off/64] >> (off % 64)
			if w == 0 {
				off = (off/64 + 1) * 64
				continue
			}
			t := off + uint64(bits.TrailingZeros64(w))
			if t < b-x.base {
				return x.base + t, true
			}
			break
		}
	}
	if hi > end {
		if t, ok := x.farIn(max(lo, end), hi); ok {
			return t, true
		}
	}
	return 0, false
}

// GoResumeAt reports whether the Go runtime may resume a goroutine at addr,
// an instruction boundary, and the range that says so
// (BranchCode.GoResume). It builds the index on first use; when that
// fails, it returns the error.
func (x *BranchIndex) GoResumeAt(addr uint64) (elfscan.GoResume, bool, error) {
	if err := x.Build(); err != nil {
		return elfscan.GoResume{}, false, err
	}
	// The last range that starts at or before addr; ranges do not overlap
	// (each lies in one function, and a function's are disjoint).
	i, found := slices.BinarySearchFunc(x.goResume, addr, func(r elfscan.GoResume, a uint64) int { return cmp.Compare(r.Lo, a) })
	if !found {
		i--
	}
	if i >= 0 && addr < x.goResume[i].Hi {
		return x.goResume[i], true, nil
	}
	return elfscan.GoResume{}, false, nil
}

// LandingPads returns the landing pads the exception tables list, sorted
// (nil when the build failed). The slice is shared: do not modify it.
func (x *BranchIndex) LandingPads() []uint64 {
	if x.Build() != nil {
		return nil
	}
	return x.pads
}

func (x *BranchIndex) farIn(lo, hi uint64) (uint64, bool) {
	i := sort.Search(len(x.far), func(i int) bool { return x.far[i] >= lo })
	if i < len(x.far) && x.far[i] < hi {
		return x.far[i], true
	}
	return 0, false
}

// Len returns the number of distinct direct branch targets (0 when the
// build failed).
func (x *BranchIndex) Len() int {
	if x.Build() != nil {
		return 0
	}
	n := len(x.far)
	for _, w := range x.bits {
		n += bits.OnesCount64(w)
	}
	return n
}

// Targets yields every distinct direct branch target in increasing order
// (nothing when the build failed).
func (x *BranchIndex) Targets() iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		if x.Build() != nil {
			return
		}
		i := 0
		for ; i < len(x.far) && x.far[i] < x.base; i++ {
			if !yield(x.far[i]) {
				return
			}
		}
		for wi, w := range x.bits {
			for w != 0 {
				t := x.base + uint64(wi)*64 + uint64(bits.TrailingZeros64(w))
				w &= w - 1
				if !yield(t) {
					return
				}
			}
		}
		for ; i < len(x.far); i++ {
			if !yield(x.far[i]) {
				return
			}
		}
	}
}

// BranchesTo returns the direct branches whose target is target, in address
// order. It decodes the code again (the index keeps targets, not their
// sources): use it to explain a decision, not in bulk.
func (x *BranchIndex) BranchesTo(target uint64) ([]Branch, error) {
	if err := x.Build(); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var out []Branch
	x.sweep(func() (visitFunc, func()) {
		visit := func(from, to uint64, k decode.BranchKind) {
			if to == target && k != decode.BranchNone {
				mu.Lock()
				out = append(out, Branch{From: from, To: to, Kind: k})
				mu.Unlock()
			}
		}
		return visit, func() {}
	})
	slices.SortFunc(out, func(a, b Branch) int { return cmp.Compare(a.From, b.From) })
	out = slices.CompactFunc(out, func(a, b Branch) bool { return a.From == b.From })
	for i := range out {
		out[i].Func = x.funcAt(out[i].From)
	}
	return out, nil
}

// funcAt names the known function that holds addr: of nested ones, the
// innermost.
func (x *BranchIndex) funcAt(addr uint64) string {
	fs := x.code.Funcs
	i := sort.Search(len(fs), func(i int) bool { return fs[i].Addr > addr })
	for j := i - 1; j >= 0 && j >= i-64; j-- {
		if addr < fs[j].End {
			return fs[j].Name
		}
	}
	return ""
}

// Stats returns what building the index took (zero when it failed).
func (x *BranchIndex) Stats() IndexStats {
	if x.Build() != nil {
		return IndexStats{}
	}
	return x.stats
}

func (x *BranchIndex) build() {
	if x.load == nil {
		x.err = errors.New("branch index: no code")
		return
	}
	code, err := x.load()
	if err != nil {
		x.err = fmt.Errorf("branch index: %w", err)
		return
	}
	if code == nil {
		code = &BranchCode{}
	}
	// Own sorted copies: regions by address, clipped so that none
	// overlaps the one before; functions by address.
	c := &BranchCode{Funcs: slices.Clone(code.Funcs)}
	for _, r := range code.Regions {
		// Code that would run past the top of the address space (it
		// does not exist) is cut, so that no address below wraps.
		if r.Addr > topAddr {
			continue
		}
		if n := topAddr - r.Addr; uint64(len(r.Code)) > n {
			r.Code = r.Code[:n]
		}
		if len(r.Code) > 0 {
			c.Regions = append(c.Regions, r)
		}
	}
	slices.SortFunc(c.Regions, func(a, b CodeRegion) int { return cmp.Compare(a.Addr, b.Addr) })
	for i := 1; i < len(c.Regions); i++ {
		p, r := &c.Regions[i-1], &c.Regions[i]
		if end := p.Addr + uint64(len(p.Code)); end > r.Addr {
			cut := min(end-r.Addr, uint64(len(r.Code)))
			r.Addr += cut
			r.Code = r.Code[cut:]
		}
	}
	c.Regions = slices.DeleteFunc(c.Regions, func(r CodeRegion) bool { return len(r.Code) == 0 })
	slices.SortStableFunc(c.Funcs, func(a, b FuncRange) int { return cmp.Compare(a.Addr, b.Addr) })
	x.code = c
	x.goResume = slices.SortedFunc(slices.Values(code.GoResume), func(a, b elfscan.GoResume) int { return cmp.Compare(a.Lo, b.Lo) })
	if eh := code.Exceptions; eh != nil {
		x.pads = eh.LandingPads
		for _, f := range eh.FDEs {
			if f.Err != nil && f.PCEnd > f.PCBegin {
				x.noPads = append(x.noPads, f)
			}
		}
		slices.SortFunc(x.noPads, func(a, b elfscan.FDE) int { return cmp.Compare(a.PCBegin, b.PCBegin) })
		x.stats.FDEs, x.stats.LandingPads, x.stats.UnknownPads = len(eh.FDEs), len(x.pads), len(x.noPads)
	}
	if len(c.Regions) > 0 {
		x.base = c.Regions[0].Addr &^ 63
		last := c.Regions[len(c.Regions)-1]
		span := last.Addr + uint64(len(last.Code)) - x.base
		if span > 1<<32 {
			x.err = fmt.Errorf("branch index: %#x-%#x: %w", x.base, x.base+span, ErrCodeSpan)
			return
		}
		x.bits = make([]uint64, (span+63)/64)
	}
	end := x.base + uint64(len(x.bits))*64
	var mu sync.Mutex
	x.taken = slices.Clone(code.DataPointers)
	st := x.sweep(func() (visitFunc, func()) {
		var far []uint64
		var taken []elfscan.DataPointer
		visit := func(from, to uint64, k decode.BranchKind) {
			if k == decode.BranchNone {
				// An address the code takes, not a branch.
				if to >= x.base && to < end {
					taken = append(taken, elfscan.DataPointer{At: from, To: to})
				}
				return
			}
			if to >= x.base && to < end {
				off := to - x.base
				w, m := &x.bits[off/64], uint64(1)<<(off%64)
				if atomic.LoadUint64(w)&m == 0 {
					atomic.OrUint64(w, m)
				}
				return
			}
			far = append(far, to)
		}
		finish := func() {
			mu.Lock()
			x.far = append(x.far, far...)
			x.taken = append(x.taken, taken...)
			mu.Unlock()
		}
		return visit, finish
	})
	st.FDEs, st.LandingPads, st.UnknownPads = x.stats.FDEs, x.stats.LandingPads, x.stats.UnknownPads
	x.stats = st
	slices.Sort(x.far)
	x.far = slices.Compact(x.far)
	slices.SortFunc(x.taken, func(a, b elfscan.DataPointer) int {
		if c := cmp.Compare(a.To, b.To); c != 0 {
			return c
		}
		return cmp.Compare(a.At, b.At)
	})
	x.taken = slices.Compact(x.taken)
}

// TakenIn returns the code addresses in [lo, hi) that the file takes, in
// order: those its data holds (BranchCode.DataPointers) and those its
// x86-64 code loads as a RIP-relative address or an immediate, each with
// where it is taken. An indirect jump through a pointer loaded from
// memory goes to one of them (or to an address computed at run time). It
// builds the index on first use; when that fails, it returns the error.
func (x *BranchIndex) TakenIn(lo, hi uint64) ([]elfscan.DataPointer, error) {
	if err := x.Build(); err != nil {
		return nil, err
	}
	i := sort.Search(len(x.taken), func(i int) bool { return x.taken[i].To >= lo })
	j := i
	for j < len(x.taken) && x.taken[j].To < hi {
		j++
	}
	return x.taken[i:j], nil
}

// topAddr bounds the code an index takes: nothing ends past it, so that the
// bitmap's end, rounded up to 64 bytes, does not wrap.
const topAddr = 1<<64 - 1<<12

// chunk is a part of one region that one goroutine sweeps.
type chunk struct {
	region     int
	start, end uint64 // offsets in the region
	// inStep is set when start is the region's start or a function start
	// (or, on arm64, always).
	inStep bool
	// next is the offset where the sweep stopped, at or after end.
	next uint64
	// early marks the instruction starts the chunk's sweep found in its
	// first earlyBytes bytes.
	early [earlyBytes / 64]uint64
}

const (
	// chunkBytes is the size a chunk aims at.
	chunkBytes = 1 << 20
	// earlyBytes is how far into a chunk the sweep of the chunk before it
	// may run before it must meet one of the chunk's instruction starts.
	earlyBytes = 256
)

// visitFunc receives a direct branch found by a sweep.
type visitFunc func(from, to uint64, k decode.BranchKind)

// sweep decodes every region in parallel chunks. Each goroutine calls
// newVisit once for the visitor it reports branches to, and the finish
// function it returned when it has no more to report.
func (x *BranchIndex) sweep(newVisit func() (visit visitFunc, finish func())) IndexStats {
	chunks := x.chunks()
	st := IndexStats{Chunks: len(chunks)}
	for _, r := range x.code.Regions {
		st.Bytes += int64(len(r.Code))
	}
	var next, branches, skipped atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(len(chunks), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			visit, finish := newVisit()
			defer finish()
			var sc sweepCount
			for {
				i := int(next.Add(1) - 1)
				if i >= len(chunks) {
					break
				}
				ch := &chunks[i]
				ch.next, _ = x.sweepRange(ch.region, ch.start, ch.end, visit, &sc, &ch.early, nil)
			}
			branches.Add(sc.branches)
			skipped.Add(sc.skipped)
		}()
	}
	wg.Wait()
	// Join each chunk that began at an arbitrary offset to the sweep of
	// the chunk before it: run that sweep on until it meets one of the
	// instruction starts the chunk's own sweep found early on (from there
	// the two are one sweep), or, failing that, sweep the chunk again from
	// where it arrived.
	visit, finish := newVisit()
	var sc sweepCount
	for i := 1; i < len(chunks); i++ {
		ch, prev := &chunks[i], &chunks[i-1]
		if ch.inStep || ch.region != prev.region {
			continue
		}
		st.Joined++
		if prev.next >= ch.end {
			ch.next = max(ch.next, prev.next)
			continue
		}
		pos, met := x.sweepRange(ch.region, prev.next, min(ch.start+earlyBytes, ch.end), visit, &sc, nil, &meeting{at: ch.start, starts: &ch.early})
		if met {
			continue
		}
		if pos < ch.end {
			st.Reswept++
			ch.next, _ = x.sweepRange(ch.region, pos, ch.end, visit, &sc, nil, nil)
		} else {
			ch.next = pos
		}
	}
	finish()
	st.Branches = branches.Load() + sc.branches
	st.Skipped = skipped.Load() + sc.skipped
	return st
}

// chunks splits the regions into chunks of about chunkBytes, each beginning
// at a function start when one lies in the first half of the next
// chunkBytes.
func (x *BranchIndex) chunks() []chunk {
	var out []chunk
	fs := x.code.Funcs
	for ri, r := range x.code.Regions {
		n := uint64(len(r.Code))
		start := uint64(0)
		for start < n {
			end := min(start+chunkBytes, n)
			if end < n {
				a := r.Addr + end
				i := sort.Search(len(fs), func(i int) bool { return fs[i].Addr >= a })
				if i < len(fs) && fs[i].Addr < a+chunkBytes/2 && fs[i].Addr < r.Addr+n {
					end = fs[i].Addr - r.Addr
				}
			}
			inStep := start == 0 || x.arch == decode.ARM64 || x.isFuncStart(r.Addr+start)
			out = append(out, chunk{region: ri, start: start, end: end, inStep: inStep})
			start = end
		}
	}
	return out
}

func (x *BranchIndex) isFuncStart(addr uint64) bool {
	fs := x.code.Funcs
	i := sort.Search(len(fs), func(i int) bool { return fs[i].Addr >= addr })
	return i < len(fs) && fs[i].Addr == addr
}

// sweepCount counts what a goroutine's sweeps met.
type sweepCount struct{ branches, skipped int64 }

// meeting is where a sweep joining a chunk stops: at the first instruction
// start that the chunk's sweep (from offset at) also found.
type meeting struct {
	at     uint64
	starts *[earlyBytes / 64]uint64
}

// sweepRange sweeps region ri from offset start until an instruction
// starts at or after end, and returns that offset. The sweep restarts at
// every function start that an instruction covers or reaches, and steps
// over a byte that does not decode. mark, if set, receives the instruction
// starts in [start, start+earlyBytes). With meet set the sweep stops at an
// instruction start meet has, and met reports that it did.
func (x *BranchIndex) sweepRange(ri int, start, end uint64, visit visitFunc, sc *sweepCount, mark *[earlyBytes / 64]uint64, meet *meeting) (next uint64, met bool) {
	r := &x.code.Regions[ri]
	code := r.Code
	fs := x.code.Funcs
	// fi is the first function after pos.
	fi := sort.Search(len(fs), func(i int) bool { return fs[i].Addr > r.Addr+start })
	pos := start
	if x.arch == decode.ARM64 {
		pos = (r.Addr+pos+3)&^3 - r.Addr
	}
	var l decode.X86Layout
	for pos < end {
		if mark != nil && pos-start < earlyBytes {
			off := pos - start
			mark[off/64] |= 1 << (off % 64)
		}
		if meet != nil && pos >= meet.at && pos-meet.at < earlyBytes {
			if off := pos - meet.at; meet.starts[off/64]&(1<<(off%64)) != 0 {
				return pos, true
			}
		}
		addr := r.Addr + pos
		var n uint64
		if x.arch == decode.ARM64 {
			n = pos + 4
			if n > uint64(len(code)) {
				pos = uint64(len(code))
				break
			}
			w := uint32(code[pos]) | uint32(code[pos+1])<<8 | uint32(code[pos+2])<<16 | uint32(code[pos+3])<<24
			// Only the branch, exception and system group (op0 101x)
			// holds direct branches: decode nothing else.
			if w>>26&7 == 5 {
				if inst, err := decode.DecodeARM64(code[pos:], addr); err == nil && inst.PCRel && inst.Branch.Relative() {
					sc.branches++
					visit(addr, inst.Target, inst.Branch)
				}
			}
		} else if err := x.dec.Layout(code[pos:], addr, &l); err != nil {
			sc.skipped++
			n = pos + 1
		} else {
			if l.Branch.Relative() || l.Branch == decode.BranchJmpAbs {
				sc.branches++
				visit(addr, l.Target, l.Branch)
			} else if l.RIPRel {
				visit(addr, l.Target, decode.BranchNone)
			}
			// A branch's displacement is no immediate.
			if (l.ImmSize == 4 || l.ImmSize == 8) && l.Branch == decode.BranchNone && l.RelSize == 0 {
				var v uint64
				if int(l.ImmOff)+int(l.ImmSize) <= len(code)-int(pos) {
					b := code[pos+uint64(l.ImmOff):]
					v = uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
					if l.ImmSize == 8 {
						v |= uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
					}
				}
				if v != 0 {
					visit(addr, v, decode.BranchNone)
				}
			}
			n = pos + uint64(l.Len)
		}
		for fi < len(fs) && fs[fi].Addr <= addr {
			fi++
		}
		if fi < len(fs) && fs[fi].Addr < r.Addr+n {
			n = fs[fi].Addr - r.Addr
		}
		pos = n
	}
	return pos, false
}
