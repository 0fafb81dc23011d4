package emulate

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/probeopt/probeopt/decode"
)

// FuzzARM64Step checks the emulator's invariants on any word and state:
// no panic; Supported and Step agree; a failed step changes neither the
// state nor memory; the same step twice gives the same result.
func FuzzARM64Step(f *testing.F) {
	for _, w := range []uint32{0xa9be7bfd, 0x910003fd, 0xd10083ff, 0xab020020, 0x54000081, 0xd63f03c0, 0x9c00080c, 0xa8c153f3, 0x38dffca4, 0xd503233f} {
		f.Add(w, uint64(0x7fff0000), uint64(0x7fff0ff8), uint8(0x60))
	}
	f.Fuzz(func(t *testing.T, w uint32, sp, x uint64, nzcv uint8) {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], w)
		inst, err := decode.DecodeARM64(b[:], testPC)
		if err != nil {
			return
		}
		var s ARM64State
		for i := range s.X {
			s.X[i] = x + uint64(i)*8
		}
		s.SP, s.PC, s.NZCV = sp, testPC, uint64(nzcv)<<24
		s.V[3] = [2]uint64{x, ^x}
		for _, a := range []ARM64{{}, {NoPAuth: true}} {
			mk := func() *a64Flat {
				m := &a64Flat{base: 0x7fff0000, b: make([]byte, 0x2000), rw: 0x1000}
				for i := range m.b {
					m.b[i] = byte(i * 3)
				}
				return m
			}
			m1, m2 := mk(), mk()
			s1, s2 := s, s
			supp := a.Supported(&inst)
			err1 := a.Step(&inst, &s1, m1)
			err2 := a.Step(&inst, &s2, m2)
			if (err1 == nil) != (err2 == nil) || s1 != s2 {
				t.Fatalf("%s: not deterministic", inst.Text())
			}
			if supp != nil && !errors.Is(err1, ErrNotEmulated) {
				t.Fatalf("%s: Supported says %v, Step %v", inst.Text(), supp, err1)
			}
			if err1 != nil {
				var f *Fault
				if !errors.Is(err1, ErrNotEmulated) && !errors.As(err1, &f) {
					t.Fatalf("%s: error %v is neither a refusal nor a fault", inst.Text(), err1)
				}
				if s1 != s {
					t.Fatalf("%s: failed step changed the state", inst.Text())
				}
				ref := mk()
				for k, v := range ref.b {
					if m1.b[k] != v {
						t.Fatalf("%s: failed step changed memory at %#x", inst.Text(), ref.base+uint64(k))
					}
				}
			}
		}
	})
}

// a64Flat is a fast test memory: one area, writable in its first rw
// bytes, readable in all of it.
type a64Flat struct {
	base uint64
	b    []byte
	rw   uint64
}

func (m *a64Flat) Read(a uint64, size int) (uint64, error) {
	var v uint64
	for i := 0; i < size; i++ {
		x := a + uint64(i) - m.base
		if x >= uint64(len(m.b)) {
			return 0, &Fault{Addr: a + uint64(i), Err: errors.New("unmapped")}
		}
		v |= uint64(m.b[x]) << (8 * i)
	}
	return v, nil
}

func (m *a64Flat) Write(a uint64, size int, v uint64) error {
	for i := 0; i < size; i++ {
		if x := a + uint64(i) - m.base; x >= m.rw {
			return &Fault{Addr: a + uint64(i), Err: errors.New("read-only")}
		}
	}
	for i := 0; i < size; i++ {
		m.b[a+uint64(i)-m.base] = byte(v >> (8 * i))
	}
	return nil
}
