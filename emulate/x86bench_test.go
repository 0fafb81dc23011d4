package emulate

import (
	"encoding/binary"
	"testing"
)

// benchMem is one flat read-write area, the cheapest Memory there is, so
// that the benchmarks measure the emulator.
type benchMem struct {
	base uint64
	data []byte
}

func (m *benchMem) Read(addr uint64, size int) (uint64, error) {
	off := addr - m.base
	if off >= uint64(len(m.data)) || uint64(len(m.data))-off < uint64(size) {
		return 0, &Fault{Addr: addr, Err: errTestUnmapped}
	}
	b := m.data[off:]
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.LittleEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.LittleEndian.Uint32(b)), nil
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (m *benchMem) Write(addr uint64, size int, val uint64) error {
	off := addr - m.base
	if off >= uint64(len(m.data)) || uint64(len(m.data))-off < uint64(size) {
		return &Fault{Addr: addr, Err: errTestUnmapped}
	}
	b := m.data[off:]
	switch size {
	case 1:
		b[0] = byte(val)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(val))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(val))
	default:
		binary.LittleEndian.PutUint64(b, val)
	}
	return nil
}

// x86Bench lists one instruction per class, as it might sit at a probe
// site; memory operands and the stack point into benchMem.
var x86Bench = []struct {
	class, hex string
}{
	{"nop", "0f 1f 44 00 00"},
	{"endbr64", "f3 0f 1e fa"},
	{"push-reg", "55"},
	{"push-mem", "ff 37"},
	{"push-imm", "6a 01"},
	{"pop-reg", "5d"},
	{"pop-mem", "8f 07"},
	{"mov-reg", "48 89 e5"},
	{"mov-imm", "b8 01 00 00 00"},
	{"mov-load", "48 8b 47 08"},
	{"mov-store", "48 89 47 08"},
	{"mov-fs", "64 48 8b 04 25 28 00 00 00"},
	{"mov-high8", "88 c4"},
	{"movzx", "0f b6 07"},
	{"movsx", "48 0f be 07"},
	{"movsxd", "48 63 c7"},
	{"lea-rip", "48 8d 05 00 01 00 00"},
	{"lea-sib", "48 8d 44 8f 08"},
	{"alu-reg", "48 29 d8"},
	{"alu-imm", "48 83 ec 28"},
	{"alu-rmw", "01 07"},
	{"cmp-mem", "83 3f 00"},
	{"test", "48 85 ff"},
	{"inc", "ff c0"},
	{"neg", "f7 d8"},
	{"shift-imm", "c1 e8 05"},
	{"shift-cl", "48 d3 e0"},
	{"shift-1", "48 d1 e0"},
	{"rotate-imm", "48 c1 c0 05"},
	{"rotate-cl", "d3 c8"},
	{"imul", "48 0f af c3"},
	{"imul3", "48 6b c3 0a"},
	{"xchg", "48 87 d8"},
	{"cmov", "48 0f 44 c3"},
	{"setcc", "0f 94 c0"},
	{"cdqe", "48 98"},
	{"cdq", "99"},
	{"cqo", "48 99"},
	{"jcc", "74 10"},
	{"jrcxz", "e3 10"},
	{"jmp-rel32", "e9 00 01 00 00"},
	{"call-rel32", "e8 00 01 00 00"},
	{"call-reg", "ff d0"},
	{"call-riprel", "ff 15 00 01 00 00"},
	{"jmp-mem", "ff 27"},
	{"ret", "c3"},
	{"ret-imm16", "c2 08 00"},
	{"leave", "c9"},
	{"loop", "e2 fe"},
}

// BenchmarkEmulateX86 measures ns per emulated instruction for each
// class: one EmulateX86 call on a fresh copy of the same state.
func BenchmarkEmulateX86(b *testing.B) {
	const base = 0x10000
	mem := &benchMem{base: base, data: make([]byte, 0x4000)}
	for i := 0; i+8 <= len(mem.data); i += 8 {
		binary.LittleEndian.PutUint64(mem.data[i:], base+0x100) // canonical targets
	}
	var init X86State
	for i := range init.GPR {
		init.GPR[i] = base + 0x1000 + uint64(i)*0x10
	}
	init.GPR[1] = 5 // rcx: shift and loop count
	init.GPR[4] = base + 0x2000
	init.GPR[5] = base + 0x2800
	init.RIP = base + 0x3000
	init.RFLAGS = 0x246
	init.FSBase = base
	for _, c := range x86Bench {
		inst := decodeHex(b, c.hex, init.RIP)
		st := init
		if err := EmulateX86(inst, &st, mem); err != nil {
			b.Fatalf("%s: %v", c.class, err)
		}
		b.Run(c.class, func(b *testing.B) {
			for b.Loop() {
				st := init
				if err := EmulateX86(inst, &st, mem); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkX86Supported measures the query the planner makes per site, for
// an emulated instruction and a refused one.
func BenchmarkX86Supported(b *testing.B) {
	for _, c := range []struct{ name, hex string }{{"emulated", "48 89 e5"}, {"refused", "0f 05"}} {
		inst := decodeHex(b, c.hex, 0x1000)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_ = X86Supported(inst)
			}
		})
	}
}
