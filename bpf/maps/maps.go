package maps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
)

// Errors, as the kernel's: a helper returns the negative errno, the Go API
// the sentinel.
var (
	// ErrKeyNotExist is the kernel's ENOENT: no such key.
	ErrKeyNotExist = errors.New("key does not exist")
	// ErrKeyExist is EEXIST: an update with NoExist of a key present.
	ErrKeyExist = errors.New("key already exists")
	// ErrTooBig is E2BIG: an index beyond max entries, or a full hash.
	ErrTooBig = errors.New("beyond the map's max entries")
	// ErrInvalid is EINVAL: flags the map type does not take, a delete
	// from an array, a key or value of the wrong size.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnsupported means a map type, or a map feature, this package
	// does not hold.
	ErrUnsupported = errors.New("map type not supported")
	// ErrNoSpace means the arena is full.
	ErrNoSpace = errors.New("arena full")
	// ErrNotSupported means this system has no shared arena.
	ErrNotSupported = errors.New("not supported on this system")
)

// The kernel's error numbers, as the helpers return them negated.
const (
	ENOENT = 2
	E2BIG  = 7
	EFAULT = 14
	EEXIST = 17
	EINVAL = 22
	EBUSY  = 16
)

// Update flags, the kernel's.
const (
	UpdateAny     = 0 // BPF_ANY
	UpdateNoExist = 1 // BPF_NOEXIST
	UpdateExist   = 2 // BPF_EXIST
	UpdateLock    = 4 // BPF_F_LOCK (not supported: ErrInvalid)
)

// Descriptor field offsets (see the package documentation).
const (
	DescType       = 0
	DescKeySize    = 4
	DescValueSize  = 8
	DescMaxEntries = 12
	DescStride     = 16
	DescStripes    = 20
	DescData       = 24
	DescLock       = 32
	DescCount      = 36
	DescMask       = 40
	DescStamp      = 48
	DescStripeSize = 56
	DescSize       = 64
)

// Arena is memory shared by the tracer and the process that runs the
// programs. Mem is the tracer's view; Base the address of Mem[0] in the
// executing process (the tracer's own address when the programs run in
// the tracer, as in the tests).
type Arena struct {
	mem  []byte
	base uint64
	used int
	fd   int // the memfd of NewArena, 0 if none
}

// Rebase sets the address the executing process sees the arena at. It is
// refused once a map is allocated (their descriptors hold addresses).
func (a *Arena) Rebase(base uint64) error {
	if a.used != 0 {
		return fmt.Errorf("rebase an arena in use: %w", ErrInvalid)
	}
	a.base = base
	return nil
}

// NewArenaMem makes an arena over mem, which the executing process sees at
// address base. The caller keeps mem alive and mapped while any map of the
// arena is in use.
func NewArenaMem(mem []byte, base uint64) *Arena { return &Arena{mem: mem, base: base} }

// Mem returns the tracer's view of the whole arena.
func (a *Arena) Mem() []byte { return a.mem }

// Base is the address of the arena in the executing process.
func (a *Arena) Base() uint64 { return a.base }

// Len is the size of the arena's memory in bytes: its maps lie in
// [Base, Base+Len).
func (a *Arena) Len() int { return len(a.mem) }

// Used is the number of bytes allocated.
func (a *Arena) Used() int { return a.used }

// alloc returns the offset of n bytes, 64-byte aligned, zeroed.
func (a *Arena) alloc(n int) (int, error) {
	off := (a.used + 63) &^ 63
	if off+n > len(a.mem) || n < 0 {
		return 0, fmt.Errorf("allocate %d bytes at %d of %d: %w", n, off, len(a.mem), ErrNoSpace)
	}
	clear(a.mem[off : off+n])
	a.used = off + n
	return off, nil
}

// Options are the choices of New; nil means defaults.
type Options struct {
	// Stripes is the number of per-thread copies of a per-CPU map: at most
	// that many threads may run programs at once. 0 means 64.
	Stripes int
}

// Map is one map in an arena.
type Map struct {
	name  string
	arena *Arena
	typ   ebpf.MapType
	key   int
	value int
	max   int
	// desc and data are offsets in the arena.
	desc, data int
	stride     int
	stripes    int
	mask       int
	// stripeSize is the bytes from one stripe's copy of a per-CPU
	// array to the next: a whole number of cache lines.
	stripeSize int
}

// New allocates a map of spec in arena.
func New(arena *Arena, spec *ebpf.MapSpec, opts *Options) (*Map, error) {
	stripes := 64
	if opts != nil && opts.Stripes > 0 {
		stripes = opts.Stripes
	}
	m := &Map{name: spec.Name, arena: arena, typ: spec.Type, key: int(spec.KeySize),
		value: int(spec.ValueSize), max: int(spec.MaxEntries), stripes: 1}
	if m.typ == ebpf.PerfEventArray && m.max == 0 {
		m.max = runtime.NumCPU() // as libbpf sizes it: a buffer per CPU
	}
	if m.max <= 0 {
		return nil, fmt.Errorf("map %s: max entries %d: %w", m.name, m.max, ErrInvalid)
	}
	var size int
	switch m.typ {
	case ebpf.Array, ebpf.PerCPUArray:
		if m.key != 4 || m.value <= 0 {
			return nil, fmt.Errorf("map %s: key size %d, value size %d: %w", m.name, m.key, m.value, ErrInvalid)
		}
		m.stride = (m.value + 7) &^ 7
		m.stripeSize = m.stride * m.max
		if m.typ == ebpf.PerCPUArray {
			m.stripes = stripes
			// Each stripe's copy on cache lines of its own.
			m.stripeSize = (m.stripeSize + 63) &^ 63
		}
		size = m.stripeSize * m.stripes
	case ebpf.Hash, ebpf.LRUHash, ebpf.PerCPUHash:
		if m.key <= 0 || m.value <= 0 {
			return nil, fmt.Errorf("map %s: key size %d, value size %d: %w", m.name, m.key, m.value, ErrInvalid)
		}
		slots := 8
		for slots < 2*m.max {
			slots *= 2
		}
		m.mask = slots - 1
		if m.typ == ebpf.PerCPUHash {
			m.stripes = stripes
		}
		m.stride = hashHeader + (m.key+7)&^7 + (m.value+7)&^7*m.stripes
		size = m.stride * slots
	case ebpf.RingBuf:
		if m.max < 4096 || m.max&(m.max-1) != 0 {
			return nil, fmt.Errorf("map %s: ring size %d is not a power of 2 of at least a page: %w", m.name, m.max, ErrInvalid)
		}
		m.mask = m.max - 1
		size = ringHeader + m.max
	case ebpf.PerfEventArray:
		// One ring for every CPU's events (max entries counts the
		// kernel's per-CPU buffers), in the ring buffer's layout: a
		// record's data is the raw sample, padded as the kernel pads it.
		m.mask = PerfRingSize - 1
		size = ringHeader + PerfRingSize
	default:
		return nil, fmt.Errorf("map %s of type %v: %w", m.name, m.typ, ErrUnsupported)
	}
	d, err := arena.alloc(DescSize)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", m.name, err)
	}
	data, err := arena.alloc(size)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", m.name, err)
	}
	m.desc, m.data = d, data
	b := arena.mem[d:]
	le := binary.LittleEndian
	le.PutUint32(b[DescType:], uint32(m.typ))
	le.PutUint32(b[DescKeySize:], uint32(m.key))
	le.PutUint32(b[DescValueSize:], uint32(m.value))
	le.PutUint32(b[DescMaxEntries:], uint32(m.max))
	le.PutUint32(b[DescStride:], uint32(m.stride))
	le.PutUint32(b[DescStripes:], uint32(m.stripes))
	le.PutUint64(b[DescData:], arena.base+uint64(data))
	le.PutUint32(b[DescMask:], uint32(m.mask))
	le.PutUint64(b[DescStripeSize:], uint64(m.stripeSize))
	return m, nil
}

// Name is the map's name.
func (m *Map) Name() string { return m.name }

// Arena returns the arena the map lies in.
func (m *Map) Arena() *Arena { return m.arena }

// Type is the map's type.
func (m *Map) Type() ebpf.MapType { return m.typ }

// KeySize is the key size in bytes.
func (m *Map) KeySize() int { return m.key }

// ValueSize is the value size in bytes.
func (m *Map) ValueSize() int { return m.value }

// MaxEntries is the maximum number of entries (ring buffer: its size in bytes).
func (m *Map) MaxEntries() int { return m.max }

// Stride is the distance in bytes between two values of an array, or two
// entries of a hash.
func (m *Map) Stride() int { return m.stride }

// Stripes is the number of per-thread copies (1 unless per-CPU).
func (m *Map) Stripes() int { return m.stripes }

// StripeSize returns the bytes from one stripe's copy of a per-CPU array
// to the next (a multiple of 64), or the array's size.
func (m *Map) StripeSize() int { return m.stripeSize }

// Desc is the address of the descriptor in the executing process.
func (m *Map) Desc() uint64 { return m.arena.base + uint64(m.desc) }

// Data is the address of the map's data in the executing process.
func (m *Map) Data() uint64 { return m.arena.base + uint64(m.data) }

// word returns the 8-byte word at arena offset off, for atomic access.
func (m *Map) word(off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&m.arena.mem[off]))
}

func (m *Map) u32(off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&m.arena.mem[off]))
}

// readValue copies a value at arena offset off, word by word atomically.
func (m *Map) readValue(off int) []byte {
	out := make([]byte, (m.value+7)&^7)
	for i := 0; i < len(out); i += 8 {
		binary.LittleEndian.PutUint64(out[i:], atomic.LoadUint64(m.word(off+i)))
	}
	return out[:m.value]
}

// writeValue stores v at arena offset off, word by word atomically.
func (m *Map) writeValue(off int, v []byte) {
	var w [8]byte
	for i := 0; i < m.value; i += 8 {
		clear(w[:])
		copy(w[:], v[i:])
		atomic.StoreUint64(m.word(off+i), binary.LittleEndian.Uint64(w[:]))
	}
}

func (m *Map) checkKey(key []byte) error {
	if len(key) != m.key {
		return fmt.Errorf("map %s: key of %d bytes, want %d: %w", m.name, len(key), m.key, ErrInvalid)
	}
	return nil
}

func (m *Map) checkValue(v []byte) error {
	if len(v) != m.value {
		return fmt.Errorf("map %s: value of %d bytes, want %d: %w", m.name, len(v), m.value, ErrInvalid)
	}
	return nil
}

// Lookup returns the value of key: one value, or for a per-CPU map one per
// stripe (PerCPU).
func (m *Map) Lookup(key []byte) ([]byte, error) {
	if m.stripes > 1 {
		return nil, fmt.Errorf("map %s is per-CPU: use LookupPerCPU: %w", m.name, ErrInvalid)
	}
	if err := m.checkKey(key); err != nil {
		return nil, err
	}
	switch m.typ {
	case ebpf.Array:
		i := binary.LittleEndian.Uint32(key)
		if int(i) >= m.max {
			return nil, fmt.Errorf("map %s: key %d: %w", m.name, i, ErrKeyNotExist)
		}
		return m.readValue(m.data + int(i)*m.stride), nil
	case ebpf.Hash, ebpf.LRUHash, ebpf.PerCPUHash:
		return m.hashLookup(key)
	}
	return nil, fmt.Errorf("map %s: lookup in a %v: %w", m.name, m.typ, ErrUnsupported)
}

// LookupPerCPU returns the value of key in every stripe of a per-CPU map.
func (m *Map) LookupPerCPU(key []byte) ([][]byte, error) {
	if err := m.checkKey(key); err != nil {
		return nil, err
	}
	if m.typ == ebpf.PerCPUHash {
		return m.hashLookupPerCPU(key)
	}
	if m.typ != ebpf.PerCPUArray {
		return nil, fmt.Errorf("map %s of type %v is not per-CPU: %w", m.name, m.typ, ErrInvalid)
	}
	i := binary.LittleEndian.Uint32(key)
	if int(i) >= m.max {
		return nil, fmt.Errorf("map %s: key %d: %w", m.name, i, ErrKeyNotExist)
	}
	out := make([][]byte, m.stripes)
	for s := range out {
		out[s] = m.readValue(m.data + s*m.stripeSize + int(i)*m.stride)
	}
	return out, nil
}

// Update stores value under key with the kernel's flags (UpdateAny,
// UpdateNoExist, UpdateExist). For a per-CPU map it stores value in every
// stripe.
func (m *Map) Update(key, value []byte, flags uint64) error {
	if err := m.checkKey(key); err != nil {
		return err
	}
	if err := m.checkValue(value); err != nil {
		return err
	}
	if flags > UpdateExist {
		return fmt.Errorf("map %s: flags %#x: %w", m.name, flags, ErrInvalid)
	}
	switch m.typ {
	case ebpf.Array, ebpf.PerCPUArray:
		i := binary.LittleEndian.Uint32(key)
		if int(i) >= m.max {
			return fmt.Errorf("map %s: key %d: %w", m.name, i, ErrTooBig)
		}
		if flags == UpdateNoExist {
			return fmt.Errorf("map %s: key %d: %w", m.name, i, ErrKeyExist)
		}
		for s := 0; s < m.stripes; s++ {
			m.writeValue(m.data+s*m.stripeSize+int(i)*m.stride, value)
		}
		return nil
	case ebpf.Hash, ebpf.LRUHash, ebpf.PerCPUHash:
		return m.hashUpdate(key, value, flags)
	}
	return fmt.Errorf("map %s: update of a %v: %w", m.name, m.typ, ErrUnsupported)
}

// Delete removes key: ErrKeyNotExist when absent; ErrInvalid for an array.
func (m *Map) Delete(key []byte) error {
	if err := m.checkKey(key); err != nil {
		return err
	}
	switch m.typ {
	case ebpf.Hash, ebpf.LRUHash, ebpf.PerCPUHash:
		return m.hashDelete(key)
	case ebpf.Array, ebpf.PerCPUArray:
		return fmt.Errorf("map %s: delete from an array: %w", m.name, ErrInvalid)
	}
	return fmt.Errorf("map %s: delete from a %v: %w", m.name, m.typ, ErrUnsupported)
}

// Entry is one key and its value, or values for a per-CPU map.
type Entry struct {
	Key    []byte
	Value  []byte
	Values [][]byte
}

// Entries returns every entry: an array's in index order, a hash's in
// slot order.
func (m *Map) Entries() ([]Entry, error) {
	var out []Entry
	it := m.Iterate()
	for it.Next() {
		out = append(out, it.Entry())
	}
	return out, it.Err()
}

// Iterator walks a map's entries, in the style of ebpf.MapIterator.
type Iterator struct {
	m   *Map
	i   int
	cur Entry
	err error
}

// Iterate returns an iterator over the map.
func (m *Map) Iterate() *Iterator { return &Iterator{m: m} }

// Next advances to the next entry; false at the end or on an error.
func (it *Iterator) Next() bool {
	m := it.m
	switch m.typ {
	case ebpf.Array, ebpf.PerCPUArray:
		if it.i >= m.max {
			return false
		}
		k := binary.LittleEndian.AppendUint32(nil, uint32(it.i))
		it.i++
		if m.typ == ebpf.PerCPUArray {
			vs, err := m.LookupPerCPU(k)
			it.cur, it.err = Entry{Key: k, Values: vs}, err
		} else {
			v, err := m.Lookup(k)
			it.cur, it.err = Entry{Key: k, Value: v}, err
		}
		return it.err == nil
	case ebpf.Hash, ebpf.LRUHash, ebpf.PerCPUHash:
		for it.i <= m.mask {
			e, ok := m.hashSlot(it.i)
			it.i++
			if ok {
				it.cur = e
				return true
			}
		}
		return false
	}
	it.err = fmt.Errorf("map %s: iterate a %v: %w", m.name, m.typ, ErrUnsupported)
	return false
}

// Entry returns the current entry.
func (it *Iterator) Entry() Entry { return it.cur }

// Err returns the error that ended the iteration, if any.
func (it *Iterator) Err() error { return it.err }

// Alloc reserves n zeroed bytes, 64-byte aligned, for other users of the
// arena (the JIT's runtime area): their offset in Mem and their address in
// the executing process.
func (a *Arena) Alloc(n int) (off int, addr uint64, err error) {
	off, err = a.alloc(n)
	if err != nil {
		return 0, 0, err
	}
	return off, a.base + uint64(off), nil
}
