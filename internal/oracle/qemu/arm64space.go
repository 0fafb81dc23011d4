package qemu

import (
	"encoding/binary"
	"errors"
	"sort"

	"github.com/probeopt/probeopt/emulate"
)

// a64Rand is a small deterministic generator (splitmix64).
type a64Rand struct{ s uint64 }

func newA64Rand(seed uint64) *a64Rand { return &a64Rand{s: seed} }

// u64 returns the next 64 random bits.
func (r *a64Rand) u64() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// n returns a number in [0, n).
func (r *a64Rand) n(n int) int { return int(r.u64() % uint64(n)) }

// bits returns k random bits.
func (r *a64Rand) bits(k uint) uint32 { return uint32(r.u64() & (1<<k - 1)) }

// chance returns true with probability 1/n.
func (r *a64Rand) chance(n int) bool { return r.n(n) == 0 }

// fill fills b with random bytes.
func (r *a64Rand) fill(b []byte) {
	for i := 0; i < len(b); i += 8 {
		var q [8]byte
		binary.LittleEndian.PutUint64(q[:], r.u64())
		copy(b[i:], q[:])
	}
}

// a64Mix derives a seed from a seed and an index.
func a64Mix(seed, k uint64) uint64 {
	r := a64Rand{s: seed ^ k*0xD1B54A32D192ED03}
	return r.u64()
}

// errA64Unmapped is the cause of a fault in the model of the oracle's
// address space.
var errA64Unmapped = errors.New("no access")

// arm64Model is the oracle's address space as the emulator sees it for one
// case: the image, the case's code words, and the bytes written so far.
type arm64Model struct {
	img     *ARM64Image
	patches map[uint64]uint32
	written map[uint64]byte
}

func newArm64Model(img *ARM64Image, code []ARM64Patch) *arm64Model {
	m := &arm64Model{img: img, patches: make(map[uint64]uint32, len(code)), written: map[uint64]byte{}}
	for _, p := range code {
		m.patches[p.Addr] = p.Word
	}
	return m
}

// byteAt returns the byte at a and the window's protection (0 when a is
// not in a window).
func (m *arm64Model) byteAt(a uint64) (byte, uint32) {
	w := m.img.window(a)
	if w == nil {
		return 0, 0
	}
	if b, ok := m.written[a]; ok {
		return b, w.prot
	}
	if w.kind == arm64WinCode {
		if p, ok := m.patches[a&^3]; ok {
			return byte(p >> (8 * (a & 3))), w.prot
		}
	}
	return w.content[a-w.addr], w.prot
}

// Read implements emulate.Memory.
func (m *arm64Model) Read(addr uint64, size int) (uint64, error) {
	var v uint64
	for i := 0; i < size; i++ {
		b, prot := m.byteAt(addr + uint64(i))
		if prot&arm64ProtRead == 0 {
			return 0, &emulate.Fault{Addr: addr + uint64(i), Size: size, Err: errA64Unmapped}
		}
		v |= uint64(b) << (8 * i)
	}
	return v, nil
}

// Write implements emulate.Memory: all bytes or none.
func (m *arm64Model) Write(addr uint64, size int, val uint64) error {
	for i := 0; i < size; i++ {
		if _, prot := m.byteAt(addr + uint64(i)); prot&arm64ProtWrite == 0 {
			return &emulate.Fault{Addr: addr + uint64(i), Size: size, Err: errA64Unmapped}
		}
	}
	for i := 0; i < size; i++ {
		m.written[addr+uint64(i)] = byte(val >> (8 * i))
	}
	return nil
}

// writes returns the quadwords of the data windows that differ from the
// image, in address order, as the harness reports them.
func (m *arm64Model) writes() []ARM64MemWord {
	if len(m.written) == 0 {
		return nil
	}
	qs := map[uint64]bool{}
	for a := range m.written {
		qs[a&^7] = true
	}
	var out []ARM64MemWord
	for q := range qs {
		w := m.img.window(q)
		if w == nil || w.kind != arm64WinData {
			continue
		}
		var v uint64
		for i := uint64(0); i < 8; i++ {
			b, _ := m.byteAt(q + i)
			v |= uint64(b) << (8 * i)
		}
		if v != binary.LittleEndian.Uint64(w.content[q-w.addr:]) {
			out = append(out, ARM64MemWord{Addr: q, Val: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// a64Field returns bits hi:lo of w.
func a64Field(w uint32, hi, lo uint) uint32 { return (w >> lo) & (1<<(hi-lo+1) - 1) }
