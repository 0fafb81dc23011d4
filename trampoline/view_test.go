package trampoline

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"unsafe"
)

// produce writes one record the way the generated code does.
func produce(mem []byte, d *Data, probe uint32, arg uint64) bool {
	ring := mem[d.ringOff():]
	head := (*uint64)(unsafe.Pointer(&ring[ringHead]))
	tail := (*uint64)(unsafe.Pointer(&ring[ringTail]))
	for {
		h := atomic.LoadUint64(head)
		if h-atomic.LoadUint64(tail) >= uint64(d.RingRecords) {
			atomic.AddUint64((*uint64)(unsafe.Pointer(&ring[ringDropped])), 1)
			return false
		}
		if atomic.CompareAndSwapUint64(head, h, h+1) {
			rec := ring[ringRecords+(h&uint64(d.RingRecords-1))*RecordSize:]
			binary.LittleEndian.PutUint32(rec[recProbe:], probe)
			binary.LittleEndian.PutUint32(rec[recKind:], uint32(EventEntry))
			binary.LittleEndian.PutUint64(rec[recArgs:], arg)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&rec[recCommit])), h+1)
			return true
		}
	}
}

func newTestView(t *testing.T, counters, records int) ([]byte, *Data, *View) {
	t.Helper()
	d, err := NewData(0x7000_0000, counters, records)
	if err != nil {
		t.Fatal(err)
	}
	words := make([]uint64, d.Size()/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), d.Size())
	if err := d.Init(mem); err != nil {
		t.Fatal(err)
	}
	v, err := NewView(mem)
	if err != nil {
		t.Fatal(err)
	}
	return mem, d, v
}

func TestViewRing(t *testing.T) {
	mem, d, v := newTestView(t, 3, 8)
	if v.NumCounters != 3 || v.RingRecords != 8 {
		t.Fatalf("view %d counters %d records", v.NumCounters, v.RingRecords)
	}
	var evs [5]Event
	next := uint64(0)
	for lap := 0; lap < 10; lap++ {
		for i := 0; i < 7; i++ {
			if !produce(mem, d, 1, next+uint64(i)) {
				t.Fatalf("lap %d: record %d dropped", lap, i)
			}
		}
		got := 0
		for got < 7 {
			n := v.Read(evs[:])
			if n == 0 {
				t.Fatalf("lap %d: read stalled at %d", lap, got)
			}
			for _, ev := range evs[:n] {
				if ev.Seq != next || ev.Args[0] != next || ev.Probe != 1 || ev.Kind != EventEntry {
					t.Fatalf("event %+v, want seq %d", ev, next)
				}
				next++
			}
			got += n
		}
	}
	// Full: 8 fit, the rest are dropped.
	for i := 0; i < 12; i++ {
		produce(mem, d, 2, uint64(i))
	}
	if v.Pending() != 8 || v.Dropped() != 4 {
		t.Fatalf("pending %d dropped %d", v.Pending(), v.Dropped())
	}
	// A record reserved but never completed stops Read until skipped.
	var big [16]Event
	if n := v.Read(big[:]); n != 8 {
		t.Fatalf("read %d", n)
	}
	ring := mem[d.ringOff():]
	atomic.AddUint64((*uint64)(unsafe.Pointer(&ring[ringHead])), 1) // reserved, never written
	produce(mem, d, 3, 99)
	if n := v.Read(big[:]); n != 0 {
		t.Fatalf("read past an incomplete record: %d", n)
	}
	if !v.Skip() {
		t.Fatal("skip")
	}
	if n := v.Read(big[:]); n != 1 || big[0].Args[0] != 99 {
		t.Fatalf("after skip: %d %+v", n, big[0])
	}
	if v.Skip() {
		t.Fatal("skip on an empty ring")
	}
	// Counters.
	binary.LittleEndian.PutUint64(mem[d.countersOff()+8:], 42)
	if v.Counter(1) != 42 || v.Counter(3) != 0 || v.Counter(-1) != 0 || v.ResetCounter(1) != 42 || v.Counter(1) != 0 {
		t.Fatal("counters")
	}
	if d.CounterAddr(2) != d.Addr+64+16 || d.RingAddr() != d.Addr+d.ringOff() {
		t.Fatal("addresses")
	}
}

func TestViewErrors(t *testing.T) {
	mem, _, _ := newTestView(t, 1, 0)
	if _, err := NewView(mem[:10]); !errors.Is(err, ErrLayout) {
		t.Fatal(err)
	}
	bad := append([]byte(nil), mem...)
	bad[0] ^= 1
	if _, err := NewView(bad); !errors.Is(err, ErrLayout) {
		t.Fatal(err)
	}
	if _, err := NewData(0, 1, 3); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
	if _, err := NewThreads(0, 3); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
	d, _ := NewData(0, 1, 0)
	if err := d.Init(make([]byte, 100)); !errors.Is(err, ErrLayout) {
		t.Fatal(err)
	}
	_, _, v := newTestView(t, 1, 0)
	if v.Read(make([]Event, 4)) != 0 || v.Dropped() != 0 || v.Pending() != 0 || v.Skip() {
		t.Fatal("a view without a ring")
	}
}

func TestThreadSlotHash(t *testing.T) {
	th, _ := NewThreads(0, 1024)
	seen := map[int]bool{}
	// Thread pointers of glibc threads: stacks 8 MiB + guard apart.
	for i := uint64(0); i < 64; i++ {
		seen[th.ThreadSlot(0x7f0000000640-i*0x801000)] = true
	}
	if len(seen) < 60 {
		t.Fatalf("64 thread pointers hash to %d slots", len(seen))
	}
	if th.SlotAddr(3) != 3*ThreadSlotSize || th.Size() != 1024*ThreadSlotSize {
		t.Fatal("slot addresses")
	}
	one, _ := NewThreads(0, 1)
	if one.ThreadSlot(12345) != 0 {
		t.Fatal("one slot")
	}
}

// TestViewPeek: a record still being written stops Read; Peek returns the
// complete records behind it without releasing them, and Read returns
// them once the slow record is complete.
func TestViewPeek(t *testing.T) {
	mem, d, v := newTestView(t, 1, 8)
	ring := mem[d.ringOff():]
	head := (*uint64)(unsafe.Pointer(&ring[ringHead]))
	produce(mem, d, 1, 10)
	// A producer reserves record 1 and has not committed it yet.
	slow := atomic.AddUint64(head, 1) - 1
	produce(mem, d, 1, 12)
	produce(mem, d, 1, 13)
	if v.Head() != 4 || v.Pending() != 4 {
		t.Fatalf("head %d, pending %d; want 4 and 4", v.Head(), v.Pending())
	}
	var evs [8]Event
	if n := v.Read(evs[:]); n != 1 || evs[0].Args[0] != 10 {
		t.Fatalf("read %d records (%+v), want record 0 only", n, evs[:n])
	}
	n := v.Peek(evs[:])
	if n != 2 || evs[0].Seq != 2 || evs[0].Args[0] != 12 || evs[1].Seq != 3 || evs[1].Args[0] != 13 {
		t.Fatalf("peek: %+v, want records 2 and 3", evs[:n])
	}
	if v.Pending() != 3 {
		t.Fatalf("peek released records: %d pending, want 3", v.Pending())
	}
	rec := ring[ringRecords+(slow&7)*RecordSize:]
	binary.LittleEndian.PutUint64(rec[recArgs:], 11)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&rec[recCommit])), slow+1)
	if n := v.Read(evs[:]); n != 3 || evs[0].Args[0] != 11 || evs[1].Args[0] != 12 || evs[2].Args[0] != 13 {
		t.Fatalf("read after the commit: %+v", evs[:n])
	}
	if n := v.Peek(evs[:]); n != 0 {
		t.Fatalf("peek of an empty ring: %d", n)
	}
}
