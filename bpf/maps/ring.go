package maps

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
)

// A ring buffer is the kernel's record format in one data area of
// max-entries bytes (a power of two) after a 128-byte header: the
// consumer position at +0 (written by the reader only), the producer
// position at +64 and the producers' spin lock at +72. A record is an
// 8-byte header (its length with RingBusy while reserved, RingDiscard
// when discarded) and the data padded to 8 bytes, at the producer position
// modulo the size. The kernel maps the data twice so that a record may
// wrap; here a record that would wrap is preceded by a discarded filler
// up to the end of the area, so every record is contiguous.
const (
	ringHeader   = 128
	RingConsumer = 0
	RingProducer = 64
	RingLock     = 72
	RingData     = ringHeader

	RingBusy    = 1 << 31
	RingDiscard = 1 << 30
	RingHdrSize = 8
)

// PerfRingSize is the size in bytes of a perf event array's ring: one
// ring holds the events of every thread (the kernel has one buffer per
// CPU, and a reader merges them).
const PerfRingSize = 1 << 18

// ErrClosed is returned by Read after Close.
var ErrClosed = errors.New("reader closed")

// ErrDeadline is returned by Read when its deadline passes.
var ErrDeadline = errors.New("deadline exceeded")

// Record is one ring buffer record.
type Record struct {
	RawSample []byte
	// Remaining is the number of bytes left to read after this record.
	Remaining int
}

// Reader reads a ring buffer map, in the style of cilium/ebpf's
// ringbuf.Reader. It is not safe for concurrent use.
type Reader struct {
	m        *Map
	deadline time.Time
	closed   atomic.Bool
	// Poll is how long Read sleeps when the ring is empty.
	Poll time.Duration
}

// NewReader returns a reader of ring buffer m.
func NewReader(m *Map) (*Reader, error) {
	if m.typ != ebpf.RingBuf && m.typ != ebpf.PerfEventArray {
		return nil, fmt.Errorf("map %s of type %v is not a ring buffer or perf event array: %w", m.name, m.typ, ErrInvalid)
	}
	return &Reader{m: m, Poll: 100 * time.Microsecond}, nil
}

// SetDeadline sets the time after which Read returns ErrDeadline; the zero
// time means none.
func (r *Reader) SetDeadline(t time.Time) { r.deadline = t }

// Close makes Read return ErrClosed.
func (r *Reader) Close() error { r.closed.Store(true); return nil }

// Read returns the next record, waiting for one.
func (r *Reader) Read() (Record, error) {
	for {
		if r.closed.Load() {
			return Record{}, ErrClosed
		}
		rec, ok := r.next()
		if ok {
			return rec, nil
		}
		if !r.deadline.IsZero() && time.Now().After(r.deadline) {
			return Record{}, ErrDeadline
		}
		time.Sleep(r.Poll)
	}
}

// next returns the next committed record, skipping discarded ones.
func (r *Reader) next() (Record, bool) {
	m := r.m
	cons := m.word(m.data + RingConsumer)
	prod := m.word(m.data + RingProducer)
	for {
		c := atomic.LoadUint64(cons)
		p := atomic.LoadUint64(prod)
		if c >= p {
			return Record{}, false
		}
		at := m.data + RingData + int(c&uint64(m.mask))
		hdr := atomic.LoadUint32(m.u32(at))
		if hdr&RingBusy != 0 {
			return Record{}, false
		}
		n := int(hdr &^ (RingBusy | RingDiscard))
		next := c + uint64(RingHdrSize+(n+7)&^7)
		var rec Record
		if hdr&RingDiscard == 0 {
			rec.RawSample = append([]byte(nil), m.arena.mem[at+RingHdrSize:at+RingHdrSize+n]...)
			rec.Remaining = int(p - next)
		}
		atomic.StoreUint64(cons, next)
		if hdr&RingDiscard == 0 {
			return rec, true
		}
	}
}

// ringOutput appends a record as a program does (reserve, copy, submit);
// the tests use it to check the reader on the layout alone.
func (m *Map) ringOutput(data []byte) error {
	m.lockAt(m.data + RingLock)
	defer m.unlockAt(m.data + RingLock)
	c := atomic.LoadUint64(m.word(m.data + RingConsumer))
	p := atomic.LoadUint64(m.word(m.data + RingProducer))
	size := uint64(m.max)
	total := uint64(RingHdrSize + (len(data)+7)&^7)
	pad := uint64(0)
	if rest := size - p&uint64(m.mask); rest < total {
		pad = rest
	}
	if p+pad+total-c > size {
		return fmt.Errorf("ring %s: %d bytes: %w", m.name, len(data), ErrTooBig)
	}
	if pad > 0 {
		at := m.data + RingData + int(p&uint64(m.mask))
		atomic.StoreUint32(m.u32(at), uint32(pad-RingHdrSize)|RingDiscard)
		p += pad
	}
	at := m.data + RingData + int(p&uint64(m.mask))
	atomic.StoreUint32(m.u32(at), uint32(len(data))|RingBusy)
	copy(m.arena.mem[at+RingHdrSize:], data)
	atomic.StoreUint64(m.word(m.data+RingProducer), p+total)
	atomic.StoreUint32(m.u32(at), uint32(len(data)))
	return nil
}

func (m *Map) lockAt(off int) {
	for !atomic.CompareAndSwapUint32(m.u32(off), 0, 1) {
	}
}

func (m *Map) unlockAt(off int) { atomic.StoreUint32(m.u32(off), 0) }
