package decode

import (
	"testing"
)

// FuzzDecodeX86 checks the decoder's invariants on arbitrary bytes: no
// panic; a result iff no error; 0 < Len <= 15 and within the input; every
// reported offset inside the instruction; the same result twice; the two
// vendors agree unless the instruction says it is vendor-dependent; and a
// decode of exactly the instruction's bytes gives the same instruction.
func FuzzDecodeX86(f *testing.F) {
	for _, s := range [][]byte{
		{0x90},
		{0xf3, 0x0f, 0x1e, 0xfa},
		{0x0f, 0x1f, 0x44, 0x00, 0x00},
		{0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00},
		{0x66, 0xe8, 0x01, 0x02, 0x03, 0x04},
		{0xc4, 0xe2, 0x7d, 0xf7, 0xc0},
		{0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x05, 0, 0, 0, 0},
		{0x8f, 0xe8, 0x78, 0xa2, 0xc1, 0x10},
		{0xd5, 0x00, 0xa1, 1, 2, 3, 4, 5, 6, 7, 8},
		{0x0f, 0x0f, 0xc1, 0xb4},
		{0x67, 0xa1, 1, 2, 3, 4},
	} {
		f.Add(s, uint64(0x401000))
	}
	f.Fuzz(func(t *testing.T, b []byte, addr uint64) {
		var amd, intel, again X86Inst
		errA := X86Decoder{Vendor: VendorAMD}.Decode(b, addr, &amd)
		errI := X86Decoder{Vendor: VendorIntel}.Decode(b, addr, &intel)
		errB := X86Decoder{Vendor: VendorAMD}.Decode(b, addr, &again)
		if errA != errB || amd != again {
			t.Fatalf("% x: decode is not deterministic", b)
		}
		for _, c := range []struct {
			inst X86Inst
			err  error
		}{{amd, errA}, {intel, errI}} {
			inst, err := c.inst, c.err
			if err != nil {
				if inst != (X86Inst{}) {
					t.Fatalf("% x: error %v with a result", b, err)
				}
				continue
			}
			if inst.Len <= 0 || inst.Len > 15 || inst.Len > len(b) {
				t.Fatalf("% x: length %d", b, inst.Len)
			}
			in := func(off, size int) bool { return size == 0 || off > 0 && off+size <= inst.Len }
			if !in(inst.DispOff, inst.DispSize) || !in(inst.ImmOff, inst.ImmSize) ||
				!in(inst.Imm2Off, inst.Imm2Size) || !in(inst.RelOff, inst.RelSize) {
				t.Fatalf("% x: an offset lies outside the %d-byte instruction: %+v", b, inst.Len, inst)
			}
			if inst.RIPRel && inst.DispSize != 4 {
				t.Fatalf("% x: RIP-relative without a disp32", b)
			}
			var exact X86Inst
			if err := (X86Decoder{Vendor: VendorAMD}).Decode(b[:amd.Len], addr, &exact); err == nil && inst == amd && exact != amd {
				t.Fatalf("% x: decoding the instruction's own bytes differs", b)
			}
		}
		checkLayout(t, b, addr)
		if (errA == nil) != (errI == nil) || amd.Len != intel.Len {
			if !amd.VendorDependent && !intel.VendorDependent &&
				!(errA == ErrTruncated || errI == ErrTruncated || errA == ErrTooLong || errI == ErrTooLong) {
				t.Fatalf("% x: vendors differ (amd %d %v, intel %d %v) without VendorDependent", b, amd.Len, errA, intel.Len, errI)
			}
		}
	})
}
