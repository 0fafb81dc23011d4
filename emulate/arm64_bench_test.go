package emulate

import (
	"encoding/binary"
	"testing"

	"github.com/probeopt/probeopt/decode"
)

// BenchmarkARM64Step emulates the instructions of a typical function entry
// and a few of its body, decoded once, on a flat memory.
func BenchmarkARM64Step(b *testing.B) {
	words := []uint32{
		0xa9be7bfd, // stp x29, x30, [sp, #-32]!
		0x910003fd, // mov x29, sp
		0xf9000bf3, // str x19, [sp, #16]
		0xaa0003f3, // mov x19, x0
		0x7100041f, // cmp w0, #1
		0x54000081, // b.ne +16
		0xb0091a28, // adrp x8, ...
		0xd63f03c0, // blr x30
	}
	insts := make([]decode.ARM64Inst, len(words))
	for i, w := range words {
		var buf [4]byte
		binary.LittleEndian.PutUint32(buf[:], w)
		inst, err := decode.DecodeARM64(buf[:], testPC)
		if err != nil {
			b.Fatal(err)
		}
		insts[i] = inst
	}
	m := &a64Flat{base: 0x7fff0000, b: make([]byte, 0x2000), rw: 0x2000}
	var a ARM64
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range insts {
			s := ARM64State{PC: testPC, SP: 0x7fff1000}
			if err := a.Step(&insts[i], &s, m); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(insts)), "ns/inst")
}
