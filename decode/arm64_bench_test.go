package decode

import (
	"encoding/binary"
	"math/rand"
	"testing"

	"golang.org/x/arch/arm64/arm64asm"
)

// arm64BenchBuf is 64 KiB of instruction words: the vector words repeated,
// mixed with random words, so every class appears.
func arm64BenchBuf(b *testing.B) []byte {
	b.Helper()
	var words []uint32
	for _, v := range readARM64Vectors(b) {
		words = append(words, binary.LittleEndian.Uint32(v.bytes))
	}
	r := rand.New(rand.NewSource(1))
	buf := make([]byte, 64<<10)
	for off := 0; off < len(buf); off += 4 {
		w := r.Uint32()
		if len(words) > 0 && off/4%2 == 0 {
			w = words[off/8%len(words)]
		}
		binary.LittleEndian.PutUint32(buf[off:], w)
	}
	return buf
}

func BenchmarkDecodeARM64(b *testing.B) {
	buf := arm64BenchBuf(b)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for b.Loop() {
		for off := 0; off < len(buf); off += 4 {
			_, _ = DecodeARM64(buf[off:], uint64(off))
		}
	}
}

// BenchmarkArm64asmDecode is the same buffer through arm64asm, for scale.
func BenchmarkArm64asmDecode(b *testing.B) {
	buf := arm64BenchBuf(b)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for b.Loop() {
		for off := 0; off < len(buf); off += 4 {
			_, _ = arm64asm.Decode(buf[off:])
		}
	}
}

func BenchmarkARM64Text(b *testing.B) {
	buf := arm64BenchBuf(b)[:4096]
	insts := make([]ARM64Inst, 0, len(buf)/4)
	for off := 0; off < len(buf); off += 4 {
		if inst, err := DecodeARM64(buf[off:], uint64(off)); err == nil {
			insts = append(insts, inst)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		for i := range insts {
			_ = insts[i].Text()
		}
	}
}
