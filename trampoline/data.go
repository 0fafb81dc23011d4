package trampoline

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// The shared data area. One per traced process: the engine creates a
// memfd, maps it read-write and shared in the tracee at Data.Addr (for the
// trampolines) and in the tracer (for a View), and calls Data.Init on the
// tracer's mapping before any trampoline runs. Layout (little-endian,
// offsets from the start of the area):
//
//	0    header (64 bytes): magic "PRBOTRMP", version, sizes and offsets
//	64   counters: NumCounters 64-bit words, incremented with lock inc
//	...  ring, 64-byte aligned: head at +0, tail at +64, dropped at +128,
//	     records at +256, RingRecords records of RecordSize bytes each
//	...  with ThreadSlots > 0, the per-thread data plane (threaddata.go):
//	     stripes, 4 KiB aligned, then the per-thread rings
//
// Ring protocol (many producers in the tracee, one consumer in the tracer):
// a producer reserves sequence number s by a compare-and-swap of head from
// s to s+1 while head-tail < RingRecords (else it increments dropped and
// writes nothing), writes record s%RingRecords, and then stores s+1 into
// the record's commit word. The consumer reads record tail when its commit
// word is tail+1, copies it, and stores tail+1 into tail. No lock is taken
// and the tracee never waits for the tracer.
const (
	dataMagic   = 0x504d5254_4f425250 // "PRBOTRMP" little-endian
	dataVersion = 2
	dataHeader  = 64

	ringHead    = 0
	ringTail    = 64
	ringDropped = 128
	ringRecords = 256

	// RecordSize is the size of one event record in bytes.
	RecordSize = 128
	recordLog  = 7
)

// Record field offsets (see Event).
const (
	recCommit = 0
	recProbe  = 8
	recKind   = 12
	recThread = 16
	recTime   = 24
	recArgs   = 32
	recRet    = 80
	recRet2   = 88
	recSP     = 96
	recIP     = 104
	recGoTid  = 112 // with kindGoFlag (gog.go)
	recGoid   = 120
)

// Data describes the shared data area of one traced process: its address
// in the tracee and how many counters and ring records it holds.
type Data struct {
	// Addr is the virtual address of the area in the tracee (page-aligned
	// by the engine's mmap).
	Addr uint64
	// NumCounters is the number of 64-bit counter words.
	NumCounters int
	// RingRecords is the capacity of the event ring in records: a power
	// of two, or 0 for no ring (events cannot be recorded).
	RingRecords int
	// ThreadSlots is the number of per-thread stripes (a power of two),
	// 0 for none: every hit then goes to the shared counters and ring.
	// See threaddata.go. Set the three Thread fields with SetThreads.
	ThreadSlots int
	// ThreadCounters is the number of counters each stripe holds (a power
	// of two, at most NumCounters): counters 0 to ThreadCounters-1 are
	// counted per thread, the others in the shared words only.
	ThreadCounters int
	// ThreadRing is the capacity of each thread's event ring in records
	// (a power of two), 0 for none.
	ThreadRing int
}

// NewData validates and returns a data area description.
func NewData(addr uint64, counters, ringRecords int) (*Data, error) {
	d := &Data{Addr: addr, NumCounters: counters, RingRecords: ringRecords}
	if err := d.validate(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Data) validate() error {
	if d == nil {
		return fmt.Errorf("no data area: %w", ErrConfig)
	}
	if d.NumCounters < 0 || d.NumCounters > 1<<24 {
		return fmt.Errorf("%d counters: %w", d.NumCounters, ErrConfig)
	}
	if d.RingRecords < 0 || d.RingRecords > 1<<24 || d.RingRecords&(d.RingRecords-1) != 0 {
		return fmt.Errorf("ring of %d records (want 0 or a power of two up to 2^24): %w", d.RingRecords, ErrConfig)
	}
	return d.validateThreads()
}

func (d *Data) countersOff() uint64 { return dataHeader }

func (d *Data) ringOff() uint64 {
	return (d.countersOff() + 8*uint64(d.NumCounters) + 63) &^ 63
}

// Size returns the size of the area in bytes, rounded up to 4 KiB pages.
func (d *Data) Size() uint64 {
	end := d.ringEnd()
	if d.ThreadSlots > 0 {
		end = d.threadRingsOff() + uint64(d.ThreadSlots)*d.threadRingSize()
	}
	return (end + 4095) &^ 4095
}

// ringEnd is the offset just past the shared ring.
func (d *Data) ringEnd() uint64 {
	end := d.ringOff()
	if d.RingRecords > 0 {
		end += ringRecords + uint64(d.RingRecords)*RecordSize
	}
	return end
}

// CounterAddr returns the tracee address of counter i.
func (d *Data) CounterAddr(i int) uint64 { return d.Addr + d.countersOff() + 8*uint64(i) }

// RingAddr returns the tracee address of the ring header, or 0 without a
// ring.
func (d *Data) RingAddr() uint64 {
	if d.RingRecords == 0 {
		return 0
	}
	return d.Addr + d.ringOff()
}

// Init writes the header into mem, the tracer's view of the area (at least
// Size bytes, zero-filled as a new memfd is). It must run before any
// trampoline that uses the area; the trampolines themselves never read the
// header.
func (d *Data) Init(mem []byte) error {
	if err := d.validate(); err != nil {
		return err
	}
	if uint64(len(mem)) < d.Size() {
		return fmt.Errorf("%d bytes for an area of %d: %w", len(mem), d.Size(), ErrLayout)
	}
	h := mem[:dataHeader]
	binary.LittleEndian.PutUint64(h[0:], dataMagic)
	binary.LittleEndian.PutUint32(h[8:], dataVersion)
	binary.LittleEndian.PutUint32(h[12:], dataHeader)
	binary.LittleEndian.PutUint32(h[16:], uint32(d.NumCounters))
	binary.LittleEndian.PutUint32(h[20:], uint32(d.countersOff()))
	binary.LittleEndian.PutUint32(h[24:], uint32(d.RingRecords))
	binary.LittleEndian.PutUint32(h[28:], uint32(d.ringOff()))
	binary.LittleEndian.PutUint32(h[32:], RecordSize)
	binary.LittleEndian.PutUint64(h[40:], d.Addr)
	binary.LittleEndian.PutUint32(h[48:], uint32(d.ThreadSlots))
	binary.LittleEndian.PutUint32(h[52:], uint32(d.ThreadCounters))
	binary.LittleEndian.PutUint32(h[56:], uint32(d.ThreadRing))
	return nil
}

// The thread table for return probes. One per traced process: the engine
// maps it private and anonymous (zero-filled; a forked child gets its own
// copy, as it gets its own stack) at Threads.Addr. It holds Slots slots of
// ThreadSlotSize bytes (Threads.SlotSize with another Threads.Depth),
// found by hashing the thread pointer (see ThreadPointer) with open
// addressing:
//
//	+0   key: the thread pointer, 0 for a free slot, TombstoneKey for a
//	     slot the tracer reclaimed (skipped by lookups, never reused)
//	+8   state: low 32 bits the depth in bytes (entries*32), high 32
//	     bits a generation that every push increments (a pop keeps the
//	     generation it read, see below)
//	+16  missed: return probes not armed because the stack was full
//	+32  MaxDepth (Threads.MaxDepth) entries of 32 bytes: original return address, stack
//	     pointer at entry (where the return address lies), probe id
//	     (32 bits), flags (32 bits; bit 0: record an event), address of
//	     the return counter or 0
//
// Only the owning thread changes its slot after claiming it (a
// compare-and-swap on the key), and every change is one store or one
// compare-and-swap, so that a signal handler that itself enters or leaves
// probed functions leaves the stack consistent:
//
//   - a push reads the state, writes its entry at the depth it read
//     (after dropping dead entries), and publishes it by a
//     compare-and-swap (not locked: only the thread itself writes) from
//     the state it read to (generation+1, new depth);
//   - a pop (the return trampoline) reads the generation and stores
//     (that generation, new depth) with one 64-bit store. A 32-bit store
//     of the depth would keep the generation without reading it, but the
//     next push's 64-bit load of the state cannot be forwarded from a
//     narrower store and waits for it to reach the cache.
//
// Why that is safe. Signal handlers nest: one that interrupts the thread
// runs to completion before the thread goes on, and it can only pop
// entries it pushed itself (its frames are new), so the first state
// change of a handler is a push. A pop's store therefore discards only
// entries that handlers pushed above the depth and popped again, and it
// moves the generation back at most to the value it read. A push must
// fail if a handler pushed between its read and its compare-and-swap (the
// handler may have overwritten the new entry). By induction over the
// nesting, every state a handler writes in that window has a generation
// above the one the push read: its first change is a push from a state
// with at least that generation, and its pops store generations read
// after that push. So the state cannot be back to the value read, and the
// compare-and-swap fails. The generation is not monotonic (a pop may set
// it back), and only guards pushes.
const (
	// ThreadSlotSize is the size of one thread's slot in bytes when
	// Threads.Depth is 0.
	ThreadSlotSize = 2048
	// MaxDepth is the number of return probes one thread can have armed
	// at once when Threads.Depth is 0; deeper entries are counted as
	// missed and not armed.
	MaxDepth = (ThreadSlotSize - threadEntries) / threadEntrySize
	// MaxThreadDepth is the largest Threads.Depth.
	MaxThreadDepth = 1<<15/threadEntrySize - 1
	// TombstoneKey marks a reclaimed slot.
	TombstoneKey = 1

	threadKey       = 0
	threadState     = 8
	threadMissed    = 16
	threadEntries   = 32
	threadEntrySize = 32
	entRet          = 0
	entSP           = 8
	entProbe        = 16
	entFlags        = 20
	entCounter      = 24

	entFlagEvent = 1
)

// Threads describes the thread table of one traced process.
type Threads struct {
	// Addr is the virtual address of the table in the tracee.
	Addr uint64
	// Slots is the number of thread slots, a power of two.
	Slots int
	// Depth is the number of return probes one thread can have armed at
	// once, rounded up so that a slot (32 bytes, then 32 per entry) is a
	// power of two: 63, 127, 255... up to MaxThreadDepth (1023). 0 means
	// MaxDepth (63).
	Depth int
}

// SlotSize returns the size of one thread's slot in bytes.
func (t *Threads) SlotSize() uint64 {
	if t.Depth <= 0 {
		return ThreadSlotSize
	}
	size := uint64(64)
	for size < threadEntries+uint64(t.Depth)*threadEntrySize {
		size *= 2
	}
	return size
}

// MaxDepth returns the number of return probes one thread can have armed
// at once: Depth rounded up to fill a slot.
func (t *Threads) MaxDepth() int { return int(t.SlotSize()-threadEntries) / threadEntrySize }

// NewThreads validates and returns a thread table description.
func NewThreads(addr uint64, slots int) (*Threads, error) {
	t := &Threads{Addr: addr, Slots: slots}
	if err := t.validate(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Threads) validate() error {
	if t == nil {
		return fmt.Errorf("no thread table: %w", ErrConfig)
	}
	if t.Slots <= 0 || t.Slots > 1<<20 || t.Slots&(t.Slots-1) != 0 {
		return fmt.Errorf("thread table of %d slots (want a power of two up to 2^20): %w", t.Slots, ErrConfig)
	}
	if t.Depth < 0 || t.Depth > MaxThreadDepth {
		return fmt.Errorf("return-probe depth %d (want 0 to %d): %w", t.Depth, MaxThreadDepth, ErrConfig)
	}
	if uint64(t.Slots)*t.SlotSize() > 1<<31 {
		return fmt.Errorf("thread table of %d slots of %d bytes: over 2 GiB: %w", t.Slots, t.SlotSize(), ErrConfig)
	}
	return nil
}

func (t *Threads) bits() int { return bits.TrailingZeros(uint(t.Slots)) }

// Size returns the size of the table in bytes (a multiple of 4 KiB).
func (t *Threads) Size() uint64 { return (uint64(t.Slots)*t.SlotSize() + 4095) &^ 4095 }

// SlotAddr returns the tracee address of thread slot i. The engine
// reclaims the slot of a thread that has exited by writing TombstoneKey at
// this address while the process is stopped (lookups then skip the slot;
// it is not reused).
func (t *Threads) SlotAddr(i int) uint64 { return t.Addr + uint64(i)*t.SlotSize() }

// threadHashMul is the multiplier of the slot hash (Fibonacci hashing of
// the thread pointer: 2^64 divided by the golden ratio, made odd).
const threadHashMul = 0x9E3779B97F4A7C15

// ThreadSlot returns the slot index where a lookup of key starts.
func (t *Threads) ThreadSlot(key uint64) int {
	if t.Slots == 1 {
		return 0
	}
	return int((key * threadHashMul) >> (64 - uint(t.bits())))
}

// ThreadStack is one thread's slot as read from the table.
type ThreadStack struct {
	Slot    int
	Key     uint64 // thread pointer
	Gen     uint32
	Missed  uint64
	Entries []ReturnEntry // outermost first
}

// ReturnEntry is one armed return probe.
type ReturnEntry struct {
	Ret     uint64 // original return address
	SP      uint64 // where the return address lies on the stack
	Probe   uint32
	Event   bool
	Counter uint64 // tracee address of the return counter, 0 for none
}

// ReadThreads decodes a copy of the thread table (Size bytes read from the
// tracee) into the claimed slots.
func (t *Threads) ReadThreads(mem []byte) ([]ThreadStack, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	size := int(t.SlotSize())
	if len(mem) < t.Slots*size {
		return nil, fmt.Errorf("%d bytes for a table of %d slots: %w", len(mem), t.Slots, ErrLayout)
	}
	var out []ThreadStack
	for i := 0; i < t.Slots; i++ {
		s := mem[i*size : (i+1)*size]
		key := binary.LittleEndian.Uint64(s[threadKey:])
		if key == 0 || key == TombstoneKey {
			continue
		}
		state := binary.LittleEndian.Uint64(s[threadState:])
		ts := ThreadStack{Slot: i, Key: key, Gen: uint32(state >> 32), Missed: binary.LittleEndian.Uint64(s[threadMissed:])}
		depth := int(uint32(state)) / threadEntrySize
		if depth > t.MaxDepth() {
			return nil, fmt.Errorf("thread slot %d: depth %d: %w", i, depth, ErrLayout)
		}
		for j := 0; j < depth; j++ {
			e := s[threadEntries+j*threadEntrySize:]
			ts.Entries = append(ts.Entries, ReturnEntry{
				Ret:     binary.LittleEndian.Uint64(e[entRet:]),
				SP:      binary.LittleEndian.Uint64(e[entSP:]),
				Probe:   binary.LittleEndian.Uint32(e[entProbe:]),
				Event:   binary.LittleEndian.Uint32(e[entFlags:])&entFlagEvent != 0,
				Counter: binary.LittleEndian.Uint64(e[entCounter:]),
			})
		}
		out = append(out, ts)
	}
	return out, nil
}
