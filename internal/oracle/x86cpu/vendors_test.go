package x86cpu

import (
	"testing"

	"github.com/probeopt/probeopt/decode"
)

// x86VendorLength is one encoding on which Intel and AMD CPUs give the
// length oracle different answers, with the evidence for each answer.
type x86VendorLength struct {
	name       string
	hex        string
	amd, intel CPULength
	evidence   string
}

// want returns the answer of vendor's CPU.
func (v *x86VendorLength) want(vendor decode.Vendor) CPULength {
	if vendor == decode.VendorIntel {
		return v.intel
	}
	return v.amd
}

// x86VendorLengths is the one table the oracles' tests take their
// vendor-dependent length expectations from. (The emulator's differences
// are listed in package emulate's documentation and tested there; the
// decoder's follow decode.Vendor.)
var x86VendorLengths = []x86VendorLength{
	{
		name: "data16 call", hex: "66 e8 01 02 03 04",
		amd: CPULength{4, CPUAccepted}, intel: CPULength{6, CPUAccepted},
		evidence: "AMD: 66 makes the displacement 16 bits; Intel ignores 66 on a near branch (the oracle on an AMD EPYC and on an Intel Xeon)",
	},
	{
		name: "data16 jmp", hex: "66 e9 01 02 03 04",
		amd: CPULength{4, CPUAccepted}, intel: CPULength{6, CPUAccepted},
		evidence: "as for call (the oracle on an AMD EPYC; Intel SDM: near jmp operand size is 64 bits in 64-bit mode)",
	},
	{
		name: "data16 jcc", hex: "66 0f 84 01 02 03 04",
		amd: CPULength{5, CPUAccepted}, intel: CPULength{7, CPUAccepted},
		evidence: "as for call (the oracle on an AMD EPYC; Intel SDM: jcc operand size is 64 bits in 64-bit mode)",
	},
	{
		name: "ud1 and its ModRM", hex: "0f b9 c0",
		amd: CPULength{2, CPUUndefined}, intel: CPULength{3, CPUUndefined},
		evidence: "Intel fetches ud1's ModRM before raising #UD, AMD raises #UD after the opcode (the oracle on both)",
	},
	{
		name: "sysenter in 64-bit mode", hex: "0f 34",
		amd: CPULength{2, CPUUndefined}, intel: CPULength{2, CPUAccepted},
		evidence: "AMD: #UD in long mode; Intel executes it (the oracle on both)",
	},
}

// x86VendorLengthNamed returns the table's entry called name.
func x86VendorLengthNamed(name string) *x86VendorLength {
	for i := range x86VendorLengths {
		if x86VendorLengths[i].name == name {
			return &x86VendorLengths[i]
		}
	}
	panic("fuzz: no vendor length entry " + name)
}

// TestVendorLengthsDecoder checks the decoder with each vendor's rules
// against the table: an encoding the vendor's CPU accepts decodes to the
// CPU's length and is flagged vendor-dependent.
func TestVendorLengthsDecoder(t *testing.T) {
	for _, v := range x86VendorLengths {
		for _, vendor := range []decode.Vendor{decode.VendorAMD, decode.VendorIntel} {
			w := v.want(vendor)
			if w.Result != CPUAccepted {
				continue
			}
			var inst decode.X86Inst
			b := append(mustHex(t, v.hex), make([]byte, 8)...)
			if err := (decode.X86Decoder{Vendor: vendor}).Decode(b, 0x401000, &inst); err != nil {
				t.Errorf("%s (%v): %v", v.name, vendor, err)
				continue
			}
			if inst.Len != w.N {
				t.Errorf("%s (%v): decoder length %d, the cpu's %d", v.name, vendor, inst.Len, w.N)
			}
			if !inst.VendorDependent && v.amd != v.intel && v.amd.Result == v.intel.Result {
				t.Errorf("%s (%v): not flagged vendor-dependent", v.name, vendor)
			}
		}
	}
}
