package decode

import (
	"debug/elf"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// checkLayout compares Layout with the layout of a full Decode of b.
func checkLayout(t testing.TB, b []byte, addr uint64) {
	t.Helper()
	for _, v := range []Vendor{VendorAMD, VendorIntel} {
		d := X86Decoder{Vendor: v}
		var inst X86Inst
		var want, got X86Layout
		errD := d.Decode(b, addr, &inst)
		if errD == nil {
			inst.layout(&want)
		}
		errL := d.Layout(b, addr, &got)
		if errD != errL || got != want {
			t.Fatalf("% x (%s): Layout = %+v, %v; Decode gives %+v, %v", b[:min(len(b), 16)], v, got, errL, want, errD)
		}
	}
}

// TestX86LayoutMatchesDecode checks the fast path of Layout against Decode
// at every byte offset of a real text section (so over instructions and
// over the garbage that starts mid-instruction) and on the vectors.
func TestX86LayoutMatchesDecode(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Skipf("test binary is not ELF: %v", err)
	}
	defer f.Close()
	s := f.Section(".text")
	if s == nil {
		t.Fatal("no .text")
	}
	text, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	n := 1 << 20
	if testing.Short() {
		n = 1 << 16
	}
	if len(text) < n {
		n = len(text)
	}
	for i := 0; i < n; i++ {
		checkLayout(t, text[i:], s.Addr+uint64(i))
	}
	for _, v := range loadVectorBytes(t) {
		padded := append(append([]byte(nil), v...), make([]byte, 16)...)
		checkLayout(t, v, 0x401000)
		checkLayout(t, padded, 0x401000)
	}
}

// BenchmarkX86Layout sweeps the same text as BenchmarkX86Decode with
// Layout: lengths, offsets, branch kinds and targets.
func BenchmarkX86Layout(b *testing.B) {
	text, addr := loadBenchText(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	var d X86Decoder
	var l X86Layout
	n := 0
	for b.Loop() {
		for i := 0; i < len(text); {
			if err := d.Layout(text[i:], addr+uint64(i), &l); err != nil {
				i++
				continue
			}
			i += int(l.Len)
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds()/1e6, "Minsn/s")
}

// loadVectorBytes returns the byte strings of testdata/x86.txt (whatever
// their expectations; Layout must agree with Decode on all of them).
func loadVectorBytes(t testing.TB) [][]byte {
	t.Helper()
	data, err := os.ReadFile("testdata/x86.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		b, err := hex.DecodeString(strings.ReplaceAll(f[0], "|", ""))
		if err != nil {
			t.Fatalf("x86.txt: %q: %v", f[0], err)
		}
		out = append(out, b)
	}
	return out
}

// TestX86HotLayout checks Layout's hot path against Decode on every opcode
// of the one-byte and 0F maps, without and with each REX byte, with every
// ModRM byte (and SIB bytes that give each base form), whatever the hot
// path accepts.
func TestX86HotLayout(t *testing.T) {
	t.Parallel()
	tails := [][]byte{
		{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF, 0x10},
		{0x25, 0xF0, 0xFF, 0xFF, 0x7F, 0x80, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07},
		{0x24, 0xFE, 0x00, 0x00, 0x80, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x0E, 0x0D, 0x0C, 0x0B, 0x0A, 0x09},
	}
	hot, buf := 0, make([]byte, 32)
	for _, esc := range [][]byte{nil, {0x0F}} {
		for rex := 0x3F; rex <= 0x4F; rex++ {
			for op := 0; op < 256; op++ {
				for m := 0; m < 256; m++ {
					for _, tail := range tails {
						b := buf[:0]
						if rex >= 0x40 {
							b = append(b, byte(rex))
						}
						b = append(append(append(b, esc...), byte(op), byte(m)), tail...)
						b = append(b, make([]byte, 32-len(b))...)
						var l X86Layout
						if !hotLayout(b, 0x7fff_fff0_0000, &l) {
							continue
						}
						hot++
						checkLayout(t, b, 0x7fff_fff0_0000)
					}
				}
			}
		}
	}
	if hot < 100_000 {
		t.Errorf("the hot path took only %d of the encodings", hot)
	}
}
