package emulate

import "fmt"

// testRegion is a stretch of test memory.
type testRegion struct {
	base     uint64
	data     []byte
	writable bool
}

// testMem is a small memory for tests and benchmarks: a few regions, all
// else unmapped. It reports the first byte it cannot access as a *Fault.
type testMem struct {
	regions []testRegion
	writes  int
}

var errTestUnmapped = fmt.Errorf("unmapped")

// find returns the region and offset of a.
func (m *testMem) find(a uint64) (*testRegion, uint64) {
	for i := range m.regions {
		r := &m.regions[i]
		if a >= r.base && a-r.base < uint64(len(r.data)) {
			return r, a - r.base
		}
	}
	return nil, 0
}

func (m *testMem) Read(addr uint64, size int) (uint64, error) {
	var v uint64
	for i := 0; i < size; i++ {
		r, off := m.find(addr + uint64(i))
		if r == nil {
			return 0, &Fault{Addr: addr + uint64(i), Err: errTestUnmapped}
		}
		v |= uint64(r.data[off]) << (8 * i)
	}
	return v, nil
}

func (m *testMem) Write(addr uint64, size int, val uint64) error {
	for i := 0; i < size; i++ {
		r, _ := m.find(addr + uint64(i))
		if r == nil || !r.writable {
			return &Fault{Addr: addr + uint64(i), Err: errTestUnmapped}
		}
	}
	for i := 0; i < size; i++ {
		r, off := m.find(addr + uint64(i))
		r.data[off] = byte(val >> (8 * i))
	}
	m.writes++
	return nil
}

// poke stores a quadword whatever the permissions, mapping a new region
// when a is not mapped.
func (m *testMem) poke(a, q uint64) {
	for i := 0; i < 8; i++ {
		r, off := m.find(a + uint64(i))
		if r == nil {
			m.regions = append(m.regions, testRegion{base: a + uint64(i), data: make([]byte, 8-i)})
			r, off = &m.regions[len(m.regions)-1], 0
		}
		r.data[off] = byte(q >> (8 * i))
	}
}

// q reads a quadword of test memory (0 if unmapped).
func (m *testMem) q(a uint64) uint64 {
	v, _ := m.Read(a, 8)
	return v
}

// newTestMem returns memory with a read-write stack/data area at
// 0x10000-0x12000 and a read-only page at 0x20000.
func newTestMem() *testMem {
	return &testMem{regions: []testRegion{
		{base: 0x10000, data: make([]byte, 0x2000), writable: true},
		{base: 0x20000, data: make([]byte, 0x1000)},
	}}
}

// checkedMem is testMem with CheckWrite.
type checkedMem struct{ *testMem }

func (m checkedMem) CheckWrite(addr uint64, size int) error {
	for i := 0; i < size; i++ {
		r, _ := m.find(addr + uint64(i))
		if r == nil || !r.writable {
			return &Fault{Addr: addr + uint64(i), Err: errTestUnmapped}
		}
	}
	return nil
}
