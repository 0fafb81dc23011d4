package trampoline

import (
	"fmt"
	"math/bits"
)

// The per-thread data plane. With Data.ThreadSlots > 0 the data area also
// holds one stripe per thread and one event ring per thread, so that a hit
// writes only cache lines that no other thread writes: no lock prefix, no
// line bouncing between CPUs, a hit rate that grows with the threads.
//
// Layout, after the shared ring, 4 KiB aligned (offsets from the start of
// the region; S is the stripe size, a power of two of at least
// 256+16*ThreadCounters bytes):
//
//	0        the shared stripe: its drops words count, per counter, the
//	         events of threads without a stripe that found the shared ring
//	         full (locked increments); its other words are unused
//	S*(1+i)  the stripe of thread slot i, for i < ThreadSlots
//	S*(1+ThreadSlots)
//	         the per-thread rings: ThreadRing records of ThreadRecordSize
//	         bytes for each slot, slot i at i*ThreadRing*ThreadRecordSize
//
// A per-thread record is one cache line and holds only what the hit
// alone knows; the thread is the stripe's owner and the probe address
// follows from the probe id, so the reader fills them in (View.ReadThread):
//
//	+0   commit: the low 32 bits of the sequence number plus one, in the
//	     low half; the probe id (Handler.ID) in the high half; written
//	     last, with one store
//	+8   the time stamp counter at the hit (rdtsc; arm64: cntvct_el0)
//	+16  rdi rsi rdx rcx r8 r9 (arm64: x0-x5)
//
// Only entry events go to the per-thread rings; return events stay in the
// shared ring. Return counts go to the stripes as entry counts do: the
// return trampoline looks the thread's stripe up when the entry's counter
// is a per-thread one (returnCount in x86slot.go).
//
// A stripe (each group on a cache line of its own):
//
//	+0    key: the thread pointer of the owner, 0 for a free stripe,
//	      TombstoneKey for one the tracer reclaimed (claimable again)
//	+64   head: the next sequence number of the thread's ring (written
//	      by the owner only)
//	+72   cached tail: the owner's copy of tail, refreshed when the ring
//	      looks full (a stale value is never above tail: it only makes
//	      the owner look again)
//	+80   dropped: the events the owner dropped, all counters together
//	+128  tail: the next record the tracer reads (written by the tracer)
//	+256  counters: ThreadCounters words, incremented by the owner with a
//	      plain inc (arm64: a ldxr/stxr pair without barriers, see
//	      arm64thread.go)
//	+256+8*ThreadCounters
//	      drops: ThreadCounters words, the events of each counter's site
//	      that found the thread's ring full
//
// Finding the stripe. The slot hashes the thread pointer (the %fs base;
// tpidr_el0 on arm64)
// like the thread table of the return probes (Threads.ThreadSlot) and
// compares the key of the stripe it lands on: the hit path is one
// multiplication, a shift and a compare. Otherwise (cold code) it looks
// along the table for its key until a free stripe (a key can only lie
// past the stripes that were taken when it was claimed, and a taken
// stripe never becomes free again, only a tombstone), then claims the
// first free or reclaimed stripe with a locked compare-and-swap from 0 or
// TombstoneKey to its key. A thread without a thread pointer, or that
// finds no stripe, counts in the shared counter (lock inc) and records in
// the shared ring: nothing is lost, only slower.
//
// Counting. Counter i of a hit by the owner of stripe k is stripe k's
// word i; the count of counter i is the shared word plus every stripe's
// word (View.Counter). A thread that exited is reclaimed by the tracer
// while it is stopped on its way out (View.Retire): its counters and
// drops are added to the shared words, its stripe zeroed and its key set
// to TombstoneKey, under the View's lock so that no reader sees the
// counts twice.
//
// Per-thread ring protocol (one producer, the owner thread and its
// signal handlers; one consumer, the tracer): the owner reserves sequence
// number s by a compare-and-swap of head from s to s+1 without a lock
// prefix (an instruction is atomic with respect to the signal handlers of
// its own thread, and no other thread writes head) while s - cached tail
// < ThreadRing; otherwise it refreshes the cached tail from tail and, if
// the ring is still full, increments its drops word for the counter and
// writes nothing. It writes record s%ThreadRing and publishes it by
// storing s+1 into the record's commit word. A signal handler that
// interrupts the owner between the reservation and the commit reserves
// s+1 and commits first; the tracer reads in sequence order and waits
// for s. The tracer reads every complete record from tail on and then
// stores the new tail once per batch (View.ReadThread).
//
// A forked child that the tracer follows gets a new data area over the
// inherited one (the engine's job), so its threads claim stripes of their
// own; a vfork child runs on its parent's stripe while the parent's
// thread waits, which is one writer at a time.
//
// The layout is also the place for other per-thread data the tracer
// shares with the tracee (map stripes of per-thread maps): a stripe is
// found from the thread pointer in the same few instructions, and its
// layout can grow past the drops words.
const (
	stripeKey     = 0
	stripeHead    = 64
	stripeCTail   = 72
	stripeDropped = 80
	stripeTail    = 128
	stripeData    = 256
	maxThreadRing = 1 << 20

	// ThreadRecordSize is the size of one record of a per-thread ring.
	ThreadRecordSize = 64
	threadRecordLog  = 6
	trecCommit       = 0
	trecTime         = 8
	trecArgs         = 16
)

// SetThreads enables the per-thread data plane: slots stripes of
// counters counters each, and a ring of ring records per thread (0 for
// none). Each must be a power of two (slots at most 2^16, counters at
// most NumCounters and 2^16, ring at most 2^20).
func (d *Data) SetThreads(slots, counters, ring int) error {
	d.ThreadSlots, d.ThreadCounters, d.ThreadRing = slots, counters, ring
	return d.validateThreads()
}

func (d *Data) validateThreads() error {
	if d.ThreadSlots == 0 && d.ThreadCounters == 0 && d.ThreadRing == 0 {
		return nil
	}
	pow2 := func(v, max int) bool { return v > 0 && v <= max && v&(v-1) == 0 }
	if !pow2(d.ThreadSlots, 1<<16) {
		return fmt.Errorf("%d thread slots (want a power of two up to 2^16): %w", d.ThreadSlots, ErrConfig)
	}
	if !pow2(d.ThreadCounters, 1<<16) || d.ThreadCounters > d.NumCounters {
		return fmt.Errorf("%d counters per thread for %d counters (want a power of two up to both): %w", d.ThreadCounters, d.NumCounters, ErrConfig)
	}
	if uint64(1+d.ThreadSlots)*d.stripeSize() > 1<<31 {
		return fmt.Errorf("%d stripes of %d bytes exceed 2 GiB: %w", d.ThreadSlots, d.stripeSize(), ErrConfig)
	}
	if d.ThreadRing != 0 && !pow2(d.ThreadRing, maxThreadRing) {
		return fmt.Errorf("per-thread ring of %d records (want 0 or a power of two up to 2^20): %w", d.ThreadRing, ErrConfig)
	}
	return nil
}

// stripeSize is S, the size of one stripe in bytes.
func (d *Data) stripeSize() uint64 {
	n := uint64(stripeData + 16*d.ThreadCounters)
	return 1 << bits.Len64(n-1)
}

func (d *Data) stripeLog() int { return bits.TrailingZeros64(d.stripeSize()) }

// threadRingSize is the size of one thread's ring in bytes.
func (d *Data) threadRingSize() uint64 { return uint64(d.ThreadRing) * ThreadRecordSize }

// stripesOff is the offset of the shared stripe.
func (d *Data) stripesOff() uint64 { return (d.ringEnd() + 4095) &^ 4095 }

// stripeOff is the offset of thread slot i's stripe.
func (d *Data) stripeOff(i int) uint64 { return d.stripesOff() + uint64(1+i)*d.stripeSize() }

// threadRingsOff is the offset of slot 0's ring.
func (d *Data) threadRingsOff() uint64 {
	return d.stripesOff() + uint64(1+d.ThreadSlots)*d.stripeSize()
}

// threadSlotBits is log2 of ThreadSlots.
func (d *Data) threadSlotBits() int { return bits.TrailingZeros(uint(d.ThreadSlots)) }

// ThreadSlot returns the stripe a lookup of thread pointer key starts at.
func (d *Data) ThreadSlot(key uint64) int {
	if d.ThreadSlots <= 1 {
		return 0
	}
	return int((key * threadHashMul) >> (64 - uint(d.threadSlotBits())))
}

// perThread reports whether counter i is counted per thread.
func (d *Data) perThread(i int) bool { return d.ThreadSlots > 0 && i >= 0 && i < d.ThreadCounters }
