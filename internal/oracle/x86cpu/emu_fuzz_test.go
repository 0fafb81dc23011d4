package x86cpu

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
)

// emuCaseFromFuzz turns fuzz input into a case. The input is the
// instruction (decoded from the first bytes; what follows its length is
// state), then one control byte, one flags byte and up to sixteen 8-byte
// register values (missing ones are zero). Control bit 0 aims the memory
// operand and the stack pointer at the data windows, as the campaign's
// generator does; bit 1 places the instruction in the high code window.
// It returns false for input that does not start with an emulated
// instruction.
func emuCaseFromFuzz(data []byte, x emulate.X86) (EmuCase, *decode.X86Inst, bool) {
	var c EmuCase
	inst := new(decode.X86Inst)
	n := min(len(data), MaxX86Len)
	addr := uint64(EmuCodeLow + 0x100)
	rest := data
	var ctl, flags byte
	if err := (decode.X86Decoder{Vendor: x.Vendor}).Decode(data[:n], addr, inst); err != nil {
		return c, nil, false
	}
	rest = data[inst.Len:]
	if len(rest) > 0 {
		ctl, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		flags, rest = rest[0], rest[1:]
	}
	if ctl&2 != 0 {
		addr = EmuCodeHigh + 0x100
		if err := (decode.X86Decoder{Vendor: x.Vendor}).Decode(data[:inst.Len], addr, inst); err != nil {
			return c, nil, false
		}
	}
	if x.Supported(inst) != nil {
		return c, nil, false
	}
	b := append([]byte(nil), data[:inst.Len]...)
	c.Class = "fuzz"
	st := &c.Init
	st.RIP = addr
	st.FSBase, st.GSBase = EmuFSBase, EmuGSBase
	// Flags byte bits: CF PF AF ZF SF DF OF.
	for i, f := range []uint64{emulate.FlagCF, emulate.FlagPF, emulate.FlagAF, emulate.FlagZF, emulate.FlagSF, emulate.FlagDF, emulate.FlagOF} {
		if flags&(1<<i) != 0 {
			st.RFLAGS |= f
		}
	}
	st.RFLAGS |= 0x202
	for r := 0; r < 16 && len(rest) > 0; r++ {
		var w [8]byte
		k := copy(w[:], rest)
		rest = rest[k:]
		st.GPR[r] = binary.LittleEndian.Uint64(w[:])
	}
	if ctl&1 != 0 {
		g := &emuGen{r: rand.New(rand.NewPCG(uint64(ctl), uint64(flags)))}
		if inst.Read.Has(decode.RSP) || inst.Written.Has(decode.RSP) {
			st.GPR[decode.RSP] = g.target()
		}
		g.aim(inst, b, st)
		if err := (decode.X86Decoder{}).Decode(b, addr, inst); err != nil {
			return c, nil, false
		}
	}
	c.Bytes = b
	return c, inst, true
}

// emuFuzzInput is the inverse of emuCaseFromFuzz for seeds: a case with
// its registers spelled out (control 0: no aiming).
func emuFuzzInput(c *EmuCase) []byte {
	b := append([]byte(nil), c.Bytes...)
	ctl := byte(0)
	if c.Init.RIP >= EmuCodeHigh {
		ctl = 2
	}
	var flags byte
	for i, f := range []uint64{emulate.FlagCF, emulate.FlagPF, emulate.FlagAF, emulate.FlagZF, emulate.FlagSF, emulate.FlagDF, emulate.FlagOF} {
		if c.Init.RFLAGS&f != 0 {
			flags |= 1 << i
		}
	}
	b = append(b, ctl, flags)
	for _, v := range c.Init.GPR {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// FuzzEmulateX86 runs fuzzed instructions and states on the CPU and on the
// emulator and fails on any disagreement. The seeds are the regression
// vectors and a few hand-picked cases. It needs the CPU oracle (Linux on
// amd64 with ptrace) and skips elsewhere.
func FuzzEmulateX86(f *testing.F) {
	for _, v := range readEmuVectorFile(f) {
		c := v.Case
		if c.Init.RIP >= EmuCodeHigh {
			c.Init.RIP = EmuCodeHigh + 0x100
		} else {
			c.Init.RIP = EmuCodeLow + 0x100
		}
		f.Add(emuFuzzInput(&c))
	}
	for _, s := range []string{
		"90", "50", "c3", "488b00", "d3e0", "480fafc1", "e2fe", "ff24250000000001",
	} {
		b := mustHex(f, s)
		f.Add(append(b, 1, 0x41))
	}
	o := newTestEmuOracle(f)
	x := hostEmulator(f)
	img := NewEmuImage(0x66757a7a)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, inst, ok := emuCaseFromFuzz(data, x)
		if !ok {
			return
		}
		if err := img.Place(&c); err != nil {
			t.Fatal(err)
		}
		if emuTouchesOracle(&c, inst, img) {
			return // it would overwrite the oracle's own records
		}
		out := make([]EmuCPUResult, 1)
		if err := o.Run(img, []EmuCase{c}, out); err != nil {
			t.Fatalf("oracle: %v", err)
		}
		if v, m := checkEmu(&c, inst, img, &out[0], x); v == emuMismatched {
			t.Fatalf("%s", m)
		}
	})
}
