package maps

import (
	"bytes"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/cilium/ebpf"
)

// A hash map (and an LRU or per-CPU hash map) is open addressing over a power of two
// of slots (at least twice max entries), probed linearly from FNV-1a of
// the key; every slot is an 8-byte state word, the key and the value, each
// padded to 8 bytes (a per-CPU hash: Stripes values, one per stripe, each
// padded). The state is HashEmpty, HashDeleted, or for a slot in
// use HashUsed | stamp<<2, the stamp being the map's use counter (the
// descriptor's DescStamp, incremented by every insert, and in an LRU map
// by every update and every lookup of a program) when the slot was last
// used. Writers of the slots (insert, delete) hold the descriptor's spin
// lock; a lookup holds it while it probes. A value is read and written in
// place without the lock, as in the kernel.
//
// A full LRU map evicts, on an insert, the entry with the oldest stamp:
// the least recently used. The kernel's LRU is approximate (per-CPU
// lists and reference bits) and may evict another entry; both keep at
// most max entries and never refuse an insert for want of room.
const (
	hashHeader = 8

	HashEmpty   = 0
	HashUsed    = 1
	HashDeleted = 2
)

// hashInUse reports whether a state word is that of a slot in use.
func hashInUse(state uint64) bool { return state&3 == HashUsed }

// stamp returns the next use stamp's state word; the lock is held.
func (m *Map) stamp() uint64 {
	w := m.word(m.desc + DescStamp)
	n := atomic.AddUint64(w, 1)
	return n<<2 | HashUsed
}

// FNV-1a, 32-bit: the hash of a key, the same in the JIT's helpers.
const (
	FNVOffset = 2166136261
	FNVPrime  = 16777619
)

// HashKey is the hash of key.
func HashKey(key []byte) uint32 {
	h := uint32(FNVOffset)
	for _, b := range key {
		h ^= uint32(b)
		h *= FNVPrime
	}
	return h
}

func (m *Map) lock() {
	l := m.u32(m.desc + DescLock)
	for !atomic.CompareAndSwapUint32(l, 0, 1) {
		runtime.Gosched()
	}
}

func (m *Map) unlock() { atomic.StoreUint32(m.u32(m.desc+DescLock), 0) }

func (m *Map) slotOff(i int) int { return m.data + i*m.stride }

// find returns the slot of key (found), or the slot an insert would take
// (-1 if none), with the lock held.
func (m *Map) find(key []byte) (slot int, found bool) {
	h := int(HashKey(key))
	free := -1
	for n := 0; n <= m.mask; n++ {
		i := (h + n) & m.mask
		off := m.slotOff(i)
		switch atomic.LoadUint64(m.word(off)) {
		case HashEmpty:
			if free < 0 {
				free = i
			}
			return free, false
		case HashDeleted:
			if free < 0 {
				free = i
			}
		default:
			if bytes.Equal(m.arena.mem[off+hashHeader:off+hashHeader+m.key], key) {
				return i, true
			}
		}
	}
	return free, false
}

// valueOff is the offset of slot's value (a per-CPU hash's first
// stripe's: stripe s's follows at s*valueStride).
func (m *Map) valueOff(slot int) int { return m.slotOff(slot) + hashHeader + (m.key+7)&^7 }

// valueStride is a value's size padded to 8 bytes.
func (m *Map) valueStride() int { return (m.value + 7) &^ 7 }

// writeValues stores value in every stripe of slot's values.
func (m *Map) writeValues(slot int, value []byte) {
	for st := 0; st < m.stripes; st++ {
		m.writeValue(m.valueOff(slot)+st*m.valueStride(), value)
	}
}

// readValues reads every stripe of slot's values.
func (m *Map) readValues(slot int) [][]byte {
	out := make([][]byte, m.stripes)
	for st := range out {
		out[st] = m.readValue(m.valueOff(slot) + st*m.valueStride())
	}
	return out
}

func (m *Map) hashLookupPerCPU(key []byte) ([][]byte, error) {
	m.lock()
	defer m.unlock()
	s, ok := m.find(key)
	if !ok {
		return nil, fmt.Errorf("map %s: key %x: %w", m.name, key, ErrKeyNotExist)
	}
	return m.readValues(s), nil
}

func (m *Map) hashLookup(key []byte) ([]byte, error) {
	m.lock()
	defer m.unlock()
	s, ok := m.find(key)
	if !ok {
		return nil, fmt.Errorf("map %s: key %x: %w", m.name, key, ErrKeyNotExist)
	}
	return m.readValue(m.valueOff(s)), nil
}

func (m *Map) hashUpdate(key, value []byte, flags uint64) error {
	m.lock()
	defer m.unlock()
	s, ok := m.find(key)
	switch {
	case ok && flags == UpdateNoExist:
		return fmt.Errorf("map %s: key %x: %w", m.name, key, ErrKeyExist)
	case !ok && flags == UpdateExist:
		return fmt.Errorf("map %s: key %x: %w", m.name, key, ErrKeyNotExist)
	case ok:
		m.writeValues(s, value)
		if m.typ == ebpf.LRUHash {
			atomic.StoreUint64(m.word(m.slotOff(s)), m.stamp())
		}
		return nil
	}
	count := m.u32(m.desc + DescCount)
	if int(atomic.LoadUint32(count)) >= m.max && m.typ == ebpf.LRUHash {
		// Evict the least recently used entry.
		oldest, at := ^uint64(0), -1
		for i := 0; i <= m.mask; i++ {
			if st := atomic.LoadUint64(m.word(m.slotOff(i))); hashInUse(st) && st < oldest {
				oldest, at = st, i
			}
		}
		if at >= 0 {
			atomic.StoreUint64(m.word(m.slotOff(at)), HashDeleted)
			atomic.AddUint32(count, ^uint32(0))
			if s < 0 {
				s = at
			}
		}
	}
	if int(atomic.LoadUint32(count)) >= m.max || s < 0 {
		return fmt.Errorf("map %s: %d entries: %w", m.name, m.max, ErrTooBig)
	}
	off := m.slotOff(s)
	copy(m.arena.mem[off+hashHeader:], key)
	m.writeValues(s, value)
	atomic.StoreUint64(m.word(off), m.stamp())
	atomic.AddUint32(count, 1)
	return nil
}

func (m *Map) hashDelete(key []byte) error {
	m.lock()
	defer m.unlock()
	s, ok := m.find(key)
	if !ok {
		return fmt.Errorf("map %s: key %x: %w", m.name, key, ErrKeyNotExist)
	}
	atomic.StoreUint64(m.word(m.slotOff(s)), HashDeleted)
	atomic.AddUint32(m.u32(m.desc+DescCount), ^uint32(0))
	return nil
}

// hashSlot returns the entry in slot i, if it is in use.
func (m *Map) hashSlot(i int) (Entry, bool) {
	off := m.slotOff(i)
	if !hashInUse(atomic.LoadUint64(m.word(off))) {
		return Entry{}, false
	}
	k := bytes.Clone(m.arena.mem[off+hashHeader : off+hashHeader+m.key])
	if m.typ == ebpf.PerCPUHash {
		return Entry{Key: k, Values: m.readValues(i)}, true
	}
	return Entry{Key: k, Value: m.readValue(m.valueOff(i))}, true
}
