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
