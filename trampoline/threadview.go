package trampoline

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// Stripe is a claimed stripe of the per-thread data plane.
type Stripe struct {
	Slot int    // the thread slot
	Key  uint64 // the owner's thread pointer
}

// ThreadSlots returns the number of thread slots (0 without the
// per-thread data plane), ThreadCounters the counters each holds and
// ThreadRing the capacity of each thread's ring.
func (v *View) ThreadSlots() int    { return v.d.ThreadSlots }
func (v *View) ThreadCounters() int { return v.d.ThreadCounters }
func (v *View) ThreadRing() int     { return v.d.ThreadRing }

// Stripes returns the stripes that threads hold now, in slot order.
func (v *View) Stripes() []Stripe {
	var out []Stripe
	for k := 0; k < v.d.ThreadSlots; k++ {
		key := atomic.LoadUint64(word(v.mem, v.d.stripeOff(k)+stripeKey))
		if key != 0 && key != TombstoneKey {
			out = append(out, Stripe{Slot: k, Key: key})
		}
	}
	return out
}

func (v *View) stripeWord(slot int, off uint64) *uint64 {
	return word(v.mem, v.d.stripeOff(slot)+off)
}

// ThreadCounter returns counter i of the stripe of thread slot slot (0
// when out of range).
func (v *View) ThreadCounter(slot, i int) uint64 {
	if slot < 0 || slot >= v.d.ThreadSlots || !v.d.perThread(i) {
		return 0
	}
	return atomic.LoadUint64(v.stripeWord(slot, stripeData+8*uint64(i)))
}

// ThreadDropped returns the events the thread of slot slot dropped
// because its ring was full.
func (v *View) ThreadDropped(slot int) uint64 {
	if slot < 0 || slot >= v.d.ThreadSlots {
		return 0
	}
	return atomic.LoadUint64(v.stripeWord(slot, stripeDropped))
}

// DroppedBy returns the events of counter i's site that were dropped:
// those of every thread's ring, of retired threads, and those of threads
// without a stripe that found the shared ring full. 0 for a counter not
// counted per thread (the shared ring counts its drops in Dropped only).
func (v *View) DroppedBy(i int) uint64 {
	if !v.d.perThread(i) {
		return 0
	}
	v.retire.RLock()
	defer v.retire.RUnlock()
	off := stripeData + 8*uint64(v.d.ThreadCounters+i)
	n := atomic.LoadUint64(word(v.mem, v.d.stripesOff()+off))
	for k := 0; k < v.d.ThreadSlots; k++ {
		n += atomic.LoadUint64(v.stripeWord(k, off))
	}
	return n
}

// ThreadPending returns how many records of slot slot's ring are reserved
// and not yet read.
func (v *View) ThreadPending(slot int) uint64 {
	if slot < 0 || slot >= v.d.ThreadSlots || v.d.ThreadRing == 0 {
		return 0
	}
	return atomic.LoadUint64(v.stripeWord(slot, stripeHead)) - atomic.LoadUint64(v.stripeWord(slot, stripeTail))
}

// ReadThread copies the complete records of slot slot's ring into dst,
// oldest first, stopping at the first record still being written, then
// releases their space with one store, and returns how many it copied.
// The events are entry events; Thread is the stripe's owner, IP and SP
// are 0 (the probe id tells the site).
// One goroutine at a time may read a slot's ring; it never blocks.
func (v *View) ReadThread(slot int, dst []Event) int {
	if slot < 0 || slot >= v.d.ThreadSlots || v.d.ThreadRing == 0 {
		return 0
	}
	tailp := v.stripeWord(slot, stripeTail)
	tail := atomic.LoadUint64(tailp)
	head := atomic.LoadUint64(v.stripeWord(slot, stripeHead))
	ring := v.mem[v.d.threadRingsOff()+uint64(slot)*v.d.threadRingSize():]
	key := atomic.LoadUint64(v.stripeWord(slot, stripeKey))
	mask := uint64(v.d.ThreadRing - 1)
	n := 0
	for n < len(dst) && tail != head {
		rec := ring[(tail&mask)*ThreadRecordSize:]
		c := atomic.LoadUint64(word(rec, trecCommit))
		if uint32(c) != uint32(tail+1) {
			break
		}
		// Field by field: a composite literal would be built on the
		// stack and copied, which the drain's profile shows.
		ev := &dst[n]
		ev.Seq, ev.Probe, ev.Kind, ev.Thread = tail, uint32(c>>32), EventEntry, key
		ev.TSC = binary.LittleEndian.Uint64(rec[trecTime:])
		a := rec[trecArgs : trecArgs+48]
		ev.Args[0], ev.Args[1], ev.Args[2] = binary.LittleEndian.Uint64(a[0:]), binary.LittleEndian.Uint64(a[8:]), binary.LittleEndian.Uint64(a[16:])
		ev.Args[3], ev.Args[4], ev.Args[5] = binary.LittleEndian.Uint64(a[24:]), binary.LittleEndian.Uint64(a[32:]), binary.LittleEndian.Uint64(a[40:])
		ev.Ret, ev.Ret2, ev.SP, ev.IP = 0, 0, 0, 0
		ev.Go, ev.GoTid, ev.Goid = false, 0, 0
		tail++
		n++
	}
	if n > 0 {
		atomic.StoreUint64(tailp, tail)
	}
	return n
}

// Retire reclaims the stripe of slot slot, whose owner has exited (the
// caller knows: the thread is stopped on its way out, or gone). Read its
// ring first: records still unread are abandoned and counted dropped.
// Its counters and drops are added to the shared words, its words zeroed
// and its key made TombstoneKey, so that another thread may claim it;
// counter reads never see the counts twice or not at all. It returns the
// number of abandoned records.
func (v *View) Retire(slot int) (uint64, error) {
	if slot < 0 || slot >= v.d.ThreadSlots {
		return 0, fmt.Errorf("thread slot %d of %d: %w", slot, v.d.ThreadSlots, ErrConfig)
	}
	v.retire.Lock()
	defer v.retire.Unlock()
	var lost uint64
	if v.d.ThreadRing > 0 {
		head := atomic.LoadUint64(v.stripeWord(slot, stripeHead))
		tailp := v.stripeWord(slot, stripeTail)
		lost = head - atomic.LoadUint64(tailp)
		atomic.StoreUint64(tailp, head)
		atomic.StoreUint64(v.stripeWord(slot, stripeCTail), head)
	}
	shared := v.d.stripesOff()
	for i := 0; i < v.d.ThreadCounters; i++ {
		if c := atomic.SwapUint64(v.stripeWord(slot, stripeData+8*uint64(i)), 0); c != 0 {
			atomic.AddUint64(word(v.counters, 8*uint64(i)), c)
		}
		off := stripeData + 8*uint64(v.d.ThreadCounters+i)
		if c := atomic.SwapUint64(v.stripeWord(slot, off), 0); c != 0 {
			atomic.AddUint64(word(v.mem, shared+off), c)
		}
	}
	d := atomic.SwapUint64(v.stripeWord(slot, stripeDropped), 0) + lost
	atomic.AddUint64(word(v.mem, shared+stripeDropped), d)
	atomic.StoreUint64(v.stripeWord(slot, stripeKey), TombstoneKey)
	return lost, nil
}
