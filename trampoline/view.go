package trampoline

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// EventKind says what an event record reports.
type EventKind uint32

const (
	// EventEntry: the probe site was reached.
	EventEntry EventKind = 1
	// EventReturn: a function with a return probe returned.
	EventReturn EventKind = 2
)

func (k EventKind) String() string {
	switch k {
	case EventEntry:
		return "entry"
	case EventReturn:
		return "return"
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// Event is one decoded event record.
type Event struct {
	Seq   uint64    // sequence number in the ring, from 0
	Probe uint32    // Handler.ID
	Kind  EventKind // entry or return
	// Thread is the thread pointer of the thread that hit the probe (its
	// %fs base, see ThreadPointer); the engine maps it to a thread id.
	Thread uint64
	// TSC is the time stamp counter read at the hit (rdtsc).
	TSC uint64
	// Args are rdi, rsi, rdx, rcx, r8 and r9 at an entry hit (the first
	// six integer arguments at a function entry); zero for a return.
	Args [6]uint64
	// Ret and Ret2 are rax and rdx when the function returned (return
	// events only).
	Ret, Ret2 uint64
	// SP is the stack pointer at the probe site (entry) or the address
	// of the return address the function returned through (return).
	SP uint64
	// IP is the probe address (entry) or the original return address the
	// function returned to (return).
	IP uint64
	// Go is set for an event of a handler with Handler.Go: GoTid is the
	// kernel thread id of the goroutine's m and Goid the goroutine's id
	// (0 where the slot found none, see GoG).
	Go          bool
	GoTid, Goid uint64
}

// View reads a data area through the tracer's own shared mapping of it,
// while the tracee runs. Counter reads are atomic; one goroutine at a time
// may read the ring.
type View struct {
	mem      []byte
	counters []byte
	ring     []byte
	records  uint64
	// NumCounters and RingRecords are read from the header.
	NumCounters int
	RingRecords int
	// The per-thread data plane (threadview.go): the layout, and the lock
	// that keeps counter reads from seeing a retired stripe twice.
	d      Data
	retire sync.RWMutex
}

// NewView returns a View of mem, the tracer's mapping of a data area that
// Data.Init initialized. mem must stay mapped while the View is used, and
// be 8-byte aligned (a mapping is).
func NewView(mem []byte) (*View, error) {
	if len(mem) < dataHeader {
		return nil, fmt.Errorf("%d bytes: %w", len(mem), ErrLayout)
	}
	h := mem[:dataHeader]
	if binary.LittleEndian.Uint64(h) != dataMagic || binary.LittleEndian.Uint32(h[8:]) != dataVersion {
		return nil, fmt.Errorf("no data area header: %w", ErrLayout)
	}
	if uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, fmt.Errorf("memory not 8-byte aligned: %w", ErrLayout)
	}
	d := Data{
		NumCounters:    int(binary.LittleEndian.Uint32(h[16:])),
		RingRecords:    int(binary.LittleEndian.Uint32(h[24:])),
		ThreadSlots:    int(binary.LittleEndian.Uint32(h[48:])),
		ThreadCounters: int(binary.LittleEndian.Uint32(h[52:])),
		ThreadRing:     int(binary.LittleEndian.Uint32(h[56:])),
	}
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("header: %w", ErrLayout)
	}
	if uint64(binary.LittleEndian.Uint32(h[20:])) != d.countersOff() || uint64(binary.LittleEndian.Uint32(h[28:])) != d.ringOff() ||
		binary.LittleEndian.Uint32(h[32:]) != RecordSize {
		return nil, fmt.Errorf("header offsets: %w", ErrLayout)
	}
	if uint64(len(mem)) < d.Size() {
		return nil, fmt.Errorf("%d bytes for an area of %d: %w", len(mem), d.Size(), ErrLayout)
	}
	v := &View{mem: mem, NumCounters: d.NumCounters, RingRecords: d.RingRecords, records: uint64(d.RingRecords), d: d}
	v.counters = mem[d.countersOff() : d.countersOff()+8*uint64(d.NumCounters)]
	if d.RingRecords > 0 {
		v.ring = mem[d.ringOff() : d.ringOff()+ringRecords+uint64(d.RingRecords)*RecordSize]
	}
	return v, nil
}

func word(b []byte, off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

// Counter returns counter i, or 0 when i is out of range: the shared word
// plus, for a counter counted per thread, the word of every stripe.
func (v *View) Counter(i int) uint64 {
	if i < 0 || i >= v.NumCounters {
		return 0
	}
	if !v.d.perThread(i) {
		return atomic.LoadUint64(word(v.counters, 8*uint64(i)))
	}
	v.retire.RLock()
	defer v.retire.RUnlock()
	n := atomic.LoadUint64(word(v.counters, 8*uint64(i)))
	for k := 0; k < v.d.ThreadSlots; k++ {
		n += atomic.LoadUint64(word(v.mem, v.d.stripeOff(k)+stripeData+8*uint64(i)))
	}
	return n
}

// ResetCounter sets the shared word of counter i to zero and returns its
// value before. A counter counted per thread (see Data.SetThreads) keeps
// its stripes' words: only their owners write them.
func (v *View) ResetCounter(i int) uint64 {
	if i < 0 || i >= v.NumCounters {
		return 0
	}
	return atomic.SwapUint64(word(v.counters, 8*uint64(i)), 0)
}

// Dropped returns how many events found the ring full: the shared ring
// and, with per-thread rings, every thread's.
func (v *View) Dropped() uint64 {
	if v.ring == nil {
		return 0
	}
	n := atomic.LoadUint64(word(v.ring, ringDropped))
	if v.d.ThreadRing > 0 {
		v.retire.RLock()
		for k := 0; k < v.d.ThreadSlots; k++ {
			n += atomic.LoadUint64(word(v.mem, v.d.stripeOff(k)+stripeDropped))
		}
		n += atomic.LoadUint64(word(v.mem, v.d.stripesOff()+stripeDropped))
		v.retire.RUnlock()
	}
	return n
}

// Pending returns how many records are reserved but not yet read
// (including those still being written).
func (v *View) Pending() uint64 {
	if v.ring == nil {
		return 0
	}
	return atomic.LoadUint64(word(v.ring, ringHead)) - atomic.LoadUint64(word(v.ring, ringTail))
}

// Head returns the sequence number the next reserved record will get.
func (v *View) Head() uint64 {
	if v.ring == nil {
		return 0
	}
	return atomic.LoadUint64(word(v.ring, ringHead))
}

// Peek copies the complete records among those reserved and not yet read
// into dst, oldest first, skipping those still being written, without
// releasing any: Read returns them later. It is for a reader that must
// look past a record a slow producer holds (the records of a thread about
// to exit, say). Call it from the goroutine that calls Read.
func (v *View) Peek(dst []Event) int {
	if v.ring == nil {
		return 0
	}
	tail := atomic.LoadUint64(word(v.ring, ringTail))
	head := atomic.LoadUint64(word(v.ring, ringHead))
	n := 0
	for seq := tail; seq != head && n < len(dst); seq++ {
		if v.record(seq, &dst[n]) {
			n++
		}
	}
	return n
}

// record copies the record of sequence number seq into ev, if it is
// complete.
func (v *View) record(seq uint64, ev *Event) bool {
	off := ringRecords + (seq&(v.records-1))*RecordSize
	return decodeRecord(v.ring[off:off+RecordSize], seq, ev)
}

// decodeRecord copies rec, the record of sequence number seq, into ev if
// its commit word says it is complete.
func decodeRecord(rec []byte, seq uint64, ev *Event) bool {
	if atomic.LoadUint64(word(rec, recCommit)) != seq+1 {
		return false
	}
	ev.Seq = seq
	ev.Probe = binary.LittleEndian.Uint32(rec[recProbe:])
	ev.Kind = EventKind(binary.LittleEndian.Uint32(rec[recKind:]))
	ev.Go, ev.GoTid, ev.Goid = ev.Kind&kindGoFlag != 0, 0, 0
	if ev.Go {
		ev.Kind &^= kindGoFlag
		ev.GoTid = binary.LittleEndian.Uint64(rec[recGoTid:])
		ev.Goid = binary.LittleEndian.Uint64(rec[recGoid:])
	}
	ev.Thread = binary.LittleEndian.Uint64(rec[recThread:])
	ev.TSC = binary.LittleEndian.Uint64(rec[recTime:])
	for i := range ev.Args {
		ev.Args[i] = binary.LittleEndian.Uint64(rec[recArgs+8*i:])
	}
	ev.Ret, ev.Ret2 = 0, 0
	if ev.Kind == EventReturn {
		ev.Ret = binary.LittleEndian.Uint64(rec[recRet:])
		ev.Ret2 = binary.LittleEndian.Uint64(rec[recRet2:])
	}
	ev.SP = binary.LittleEndian.Uint64(rec[recSP:])
	ev.IP = binary.LittleEndian.Uint64(rec[recIP:])
	return true
}

// Read copies complete records into dst, oldest first, releases their
// space to the producers and returns how many it copied. It stops at the
// first record still being written. It never blocks.
func (v *View) Read(dst []Event) int {
	if v.ring == nil {
		return 0
	}
	tailp := word(v.ring, ringTail)
	tail := atomic.LoadUint64(tailp)
	n := 0
	for n < len(dst) {
		if !v.record(tail, &dst[n]) {
			break
		}
		tail++
		n++
		// Release the record: producers may reuse it from now on.
		atomic.StoreUint64(tailp, tail)
	}
	return n
}

// Skip abandons the record at the read position, which a producer
// reserved but never completed (its thread was killed while writing),
// so that Read can go on. It returns false when there is nothing to
// skip. Call it only when the record has stayed incomplete for a long
// time: a producer that was merely slow would then write a record that
// Read no longer expects, and that record is lost.
func (v *View) Skip() bool {
	if v.ring == nil {
		return false
	}
	tailp := word(v.ring, ringTail)
	tail := atomic.LoadUint64(tailp)
	if atomic.LoadUint64(word(v.ring, ringHead)) == tail {
		return false
	}
	atomic.StoreUint64(tailp, tail+1)
	return true
}
