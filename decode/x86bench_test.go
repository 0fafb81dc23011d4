package decode

import (
	"debug/elf"
	"os"
	"sync"
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
	"golang.org/x/arch/x86/x86asm"
)

var benchText struct {
	once sync.Once
	data []byte
	addr uint64
	name string
	err  error
}

// loadBenchText returns the .text the decode benchmarks sweep and its
// address: PROBEOPT_BENCH_ELF's when it is set.
func loadBenchText(b *testing.B) ([]byte, uint64) {
	benchText.once.Do(func() {
		path := os.Getenv("PROBEOPT_BENCH_ELF")
		if path == "" {
			// GCC's cc1, a large real x86-64 text; without it the
			// benchmark's own executable.
			path = testenv.CC1Path()
			if path == "" {
				path, _ = os.Executable()
			}
		}
		f, err := elf.Open(path)
		if err != nil {
			benchText.err = err
			return
		}
		defer f.Close()
		s := f.Section(".text")
		if s == nil {
			benchText.err = os.ErrNotExist
			return
		}
		benchText.data, benchText.err = s.Data()
		benchText.addr = s.Addr
		benchText.name = path
	})
	if benchText.err != nil {
		b.Skipf("no text to decode: %v", benchText.err)
	}
	return benchText.data, benchText.addr
}

// BenchmarkX86Decode sweeps a real .text linearly with the decoder: length
// and every attribute, register sets included.
func BenchmarkX86Decode(b *testing.B) {
	text, addr := loadBenchText(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	var d X86Decoder
	var inst X86Inst
	n := 0
	for b.Loop() {
		for i := 0; i < len(text); {
			if err := d.Decode(text[i:], addr+uint64(i), &inst); err != nil {
				i++
				continue
			}
			i += inst.Len
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds()/1e6, "Minsn/s")
}

// BenchmarkX86asmDecode sweeps the same text with golang.org/x/arch's
// x86asm.Decode, for the ratio.
func BenchmarkX86asmDecode(b *testing.B) {
	text, _ := loadBenchText(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for i := 0; i < len(text); {
			inst, err := x86asm.Decode(text[i:], 64)
			if err != nil || inst.Len == 0 {
				i++
				continue
			}
			i += inst.Len
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds()/1e6, "Minsn/s")
}
