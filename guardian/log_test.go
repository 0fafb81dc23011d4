package guardian

import (
	"bytes"
	"errors"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	b := make([]byte, recordSize)
	in := Record{Addr: 0x401000, Kind: KindTrap, InstLen: 3, Orig: []byte{0x48, 0x89, 0xe5}, New: []byte{0xcc, 0x89, 0xe5}}
	if err := encodeRecord(b, in); err != nil {
		t.Fatal(err)
	}
	out, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Addr != in.Addr || out.Kind != in.Kind || out.InstLen != in.InstLen || !bytes.Equal(out.Orig, in.Orig) || !bytes.Equal(out.New, in.New) {
		t.Fatalf("decoded %+v, encoded %+v", out, in)
	}
	if err := encodeRecord(b, Record{Addr: 1}); err == nil {
		t.Error("a record without bytes was accepted")
	}
	if err := encodeRecord(b, Record{Addr: 1, Orig: make([]byte, MaxOrig+1)}); err == nil {
		t.Error("a record longer than MaxOrig was accepted")
	}
}

// fakeMem is a memory image starting at base.
type fakeMem struct {
	base uint64
	b    []byte
}

func (m *fakeMem) ReadMemory(addr uint64, buf []byte) error {
	if addr < m.base || addr+uint64(len(buf)) > m.base+uint64(len(m.b)) {
		return errors.New("unmapped")
	}
	copy(buf, m.b[addr-m.base:])
	return nil
}

// TestPlan checks which bytes go back: only ranges holding the tracer's
// bytes, the newest record first (a trap site later covered by a jump, a
// jump moved to another slot), and nothing where the program or another
// image put other bytes.
func TestPlan(t *testing.T) {
	//            0x1000: jmp over 5 bytes  0x1005    0x2000: int3  0x3000: other
	m := &fakeMem{base: 0x1000, b: make([]byte, 0x2100)}
	copy(m.b[0x0000:], []byte{0xe9, 2, 0, 0, 0, 0xc3})
	m.b[0x1000] = int3
	m.b[0x2000] = 0x90 // the program wrote a nop over the site
	recs := []Record{
		{Addr: 0x1000, Kind: KindTrap, InstLen: 1, Orig: []byte{0x55}, New: []byte{int3}},
		{Addr: 0x1000, Kind: KindJump, Orig: []byte{0x55, 0x48, 0x89, 0xe5, 0x90}, New: []byte{0xe9, 1, 0, 0, 0}},
		{Addr: 0x1000, Kind: KindJump, Orig: []byte{0x55, 0x48, 0x89, 0xe5, 0x90}, New: []byte{0xe9, 2, 0, 0, 0}},
		{Addr: 0x2000, Kind: KindTrap, InstLen: 2, Orig: []byte{0x31}, New: []byte{int3}},
		{Addr: 0x3000, Kind: KindTrap, InstLen: 2, Orig: []byte{0x31}, New: []byte{int3}},
		{Addr: 0x9000, Kind: KindTrap, InstLen: 2, Orig: []byte{0x31}, New: []byte{int3}},
		{Addr: 0x1100, Kind: KindTrap, InstLen: 3, Orig: []byte{0x48}, New: []byte{int3}},
		{Addr: 0x1200, Kind: KindTrap, InstLen: 1, Orig: []byte{0x53}, New: []byte{int3}},
	}
	m.b[0x100] = 0x48 // removed already: a 3-byte instruction again
	m.b[0x200] = 0x53 // removed already: a 1-byte instruction again
	pl := makePlan(m, recs)
	rs := pl.runs()
	if len(rs) != 2 || rs[0].addr != 0x1000 || !bytes.Equal(rs[0].orig, []byte{0x55, 0x48, 0x89, 0xe5, 0x90}) ||
		rs[1].addr != 0x2000 || !bytes.Equal(rs[1].orig, []byte{0x31}) {
		t.Fatalf("runs = %+v", rs)
	}
	if !pl.traps[0x2000] || !pl.traps[0x1100] || pl.traps[0x1000] || pl.traps[0x1200] || len(pl.traps) != 2 {
		t.Errorf("traps = %v, want 0x2000 (int3 in memory) and 0x1100 (removed, no boundary past it); not 0x1000 (a jump replaced the int3) nor 0x1200 (a boundary past it)", pl.traps)
	}
	if pl.left != 1 {
		t.Errorf("left = %d, want 1 (the nop at 0x3000)", pl.left)
	}
}
