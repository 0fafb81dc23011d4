package xol_test

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/reason"
	"github.com/probeopt/probeopt/xol"
)

const (
	origAddr = 0x401000
	nearSlot = 0x7f00_0000 // within 2 GiB of origAddr
	farSlot  = 0x7f00_0000_0000
)

// relocate decodes h at origAddr and relocates it to slot.
func relocate(t *testing.T, h string, slot uint64, opts *xol.X86Options) (*decode.X86Inst, *xol.X86Copy) {
	t.Helper()
	inst := decodeX86(t, h)
	c, err := xol.RelocateX86(inst, slot, opts)
	if err != nil {
		t.Fatalf("%s to %#x: %v", h, slot, err)
	}
	return inst, c
}

// decodeCopy decodes the instruction at offset off of the copy.
func decodeCopy(t *testing.T, c *xol.X86Copy, off int) decode.X86Inst {
	t.Helper()
	inst, err := decode.DecodeX86(c.Code[off:], c.Slot+uint64(off))
	if err != nil {
		t.Fatalf("copy % x at +%d: %v", c.Code, off, err)
	}
	return inst
}

// TestRelocateX86Forms checks the form, the layout and the re-decoded
// meaning of the copy of each relocatable kind, near and far.
func TestRelocateX86Forms(t *testing.T) {
	tests := []struct {
		hex     string
		what    string
		slot    uint64
		form    xol.X86Form
		code    string // exact bytes, "" to skip
		boost   bool
		scratch int
	}{
		{"4889f8", "mov %rdi,%rax", nearSlot, xol.X86FormCopy, "4889f8e9fb0f4081", true, -1},
		{"c3", "ret", farSlot, xol.X86FormCopy, "c3ff25000000000110400000000000", true, -1},
		{"ffd0", "call *%rax", farSlot, xol.X86FormCopy, "ffd0cc", false, -1},
		{"9d", "popf", nearSlot, xol.X86FormCopy, "9dcc", false, -1},
		{"488b0510000000", "mov x(%rip),%rax", nearSlot, xol.X86FormDisp, "", true, -1},
		{"488b0510000000", "mov x(%rip),%rax", farSlot, xol.X86FormScratch, "488b8610000000cc", false, decode.RSI},
		{"4d8b0510000000", "mov x(%rip),%r8 (REX.B ignored)", farSlot, xol.X86FormScratch, "4c8b8610000000cc", false, decode.RSI},
		{"488b3510000000", "mov x(%rip),%rsi", farSlot, xol.X86FormScratch, "488bb710000000cc", false, decode.RDI},
		{"c4c17a6f0510000000", "vmovdqu x(%rip),%xmm0 (VEX3 B set)", farSlot, xol.X86FormScratch, "c4e17a6f8610000000cc", false, decode.RSI},
		{"c5fe6f0510000000", "vmovdqu x(%rip),%ymm0 (VEX2)", farSlot, xol.X86FormScratch, "c5fe6f8610000000cc", false, decode.RSI},
		{"6291fe486f0510000000", "vmovdqu64 x(%rip),%zmm0 (EVEX X, B set)", farSlot, xol.X86FormScratch, "62f1fe486f8610000000cc", false, decode.RSI},
		{"c705100000002a000000", "movl $42,x(%rip)", farSlot, xol.X86FormScratch, "c786100000002a000000cc", false, decode.RSI},
		{"ff1510000000", "call *x(%rip)", nearSlot, xol.X86FormDisp, "", false, -1},
		{"eb10", "jmp rel8", nearSlot, xol.X86FormRetarget, "", true, -1},
		{"eb10", "jmp rel8", farSlot, xol.X86FormAbs, "ff25000000001210400000000000", true, -1},
		{"7410", "je rel8", nearSlot, xol.X86FormRetarget, "", true, -1},
		{"0f8410000000", "je rel32", farSlot, xol.X86FormStub, "740eff250000000006104000000000" + "00ff25000000001610400000000000", true, -1},
		{"e210", "loop", nearSlot, xol.X86FormStub, "", true, -1},
		{"67e310", "jecxz", farSlot, xol.X86FormStub, "", true, -1},
		{"e810000000", "call rel32", nearSlot, xol.X86FormRetarget, "", true, -1},
		{"e810000000", "call rel32", farSlot, xol.X86FormStub, "", true, -1},
	}
	for _, tt := range tests {
		inst, c := relocate(t, tt.hex, tt.slot, nil)
		if c.Form != tt.form || c.Boost != tt.boost || c.Scratch != tt.scratch {
			t.Errorf("%s at %#x: %s, want form %s boost %v scratch %d", tt.what, tt.slot, c, tt.form, tt.boost, tt.scratch)
			continue
		}
		if tt.code != "" && hex.EncodeToString(c.Code) != tt.code {
			t.Errorf("%s at %#x: code %x, want %s", tt.what, tt.slot, c.Code, tt.code)
		}
		if c.Orig != origAddr || c.Next != origAddr+uint64(inst.Len) || c.Slot != tt.slot || len(c.Code) > 64 {
			t.Errorf("%s: %s", tt.what, c)
		}
		got := decodeCopy(t, c, 0)
		if got.Len != c.StepLen {
			t.Errorf("%s: the step instruction is %d bytes, StepLen %d", tt.what, got.Len, c.StepLen)
		}
		switch c.Form {
		case xol.X86FormDisp:
			if !got.RIPRel || got.Target != inst.Target {
				t.Errorf("%s: the copy's operand is at %#x, want %#x", tt.what, got.Target, inst.Target)
			}
		case xol.X86FormScratch:
			if c.ScratchValue != c.Next {
				t.Errorf("%s: scratch value %#x, want %#x", tt.what, c.ScratchValue, c.Next)
			}
		case xol.X86FormRetarget:
			if got.Target != inst.Target {
				t.Errorf("%s: the copy branches to %#x, want %#x", tt.what, got.Target, inst.Target)
			}
		}
		// The boost entry decodes, and a boosted copy falls through only
		// to a jump back to Next.
		if c.Boost {
			b := decodeCopy(t, c, c.BoostOff)
			if b.Len == 0 {
				t.Errorf("%s: no instruction at the boost entry", tt.what)
			}
		}
	}
}

// TestRelocateX86Refusals checks that what CheckX86 refuses is refused with
// the same code, and the refusals of its own.
func TestRelocateX86Refusals(t *testing.T) {
	tests := []struct {
		hex, what string
		code      reason.Code
	}{
		{"0f05", "syscall", xol.RefuseSyscall},
		{"cc", "int3", xol.RefuseTrap},
		{"c7f800000000", "xbegin", xol.RefuseRTM},
		{"66e80000", "callw (AMD decoding)", xol.RefuseVendorDependent},
		{"660f840000", "je rel16 (AMD decoding)", xol.RefuseVendorDependent},
		{"66ffd0", "callw *%ax", xol.RefuseVendorDependent},
		{"48ff1d10000000", "lcall *m16:64", xol.RefuseVendorDependent},
		{"0f010510000000", "sgdt x(%rip)", xol.RefuseKernelEmulated},
		{"0f000d10000000", "str x(%rip)", xol.RefuseKernelEmulated},
		{"0f01e0", "smsw %eax", xol.RefuseKernelEmulated},
	}
	for _, tt := range tests {
		inst := decodeX86(t, tt.hex)
		_, err := xol.RelocateX86(inst, farSlot, nil)
		var re *xol.RefusalError
		if !errors.As(err, &re) || re.Code != tt.code || !errors.Is(err, xol.ErrNotRelocatable) {
			t.Errorf("%s: %v, want refusal %s", tt.what, err, tt.code)
		}
		if _, cerr := xol.CheckX86(inst); cerr == nil {
			t.Errorf("%s: CheckX86 accepts what RelocateX86 refuses", tt.what)
		}
	}
	// EVEX with P0 bit 3 (APX's B4) set: no scratch register, so only a
	// recomputed displacement.
	b4 := decodeX86(t, "62f97d48f90510000000")
	if fix, _ := xol.CheckX86(b4); fix.Scratch != -1 {
		t.Errorf("EVEX with B4: scratch %d", fix.Scratch)
	}
	var re *xol.RefusalError
	if _, err := xol.RelocateX86(b4, farSlot, nil); !errors.As(err, &re) || re.Code != xol.RefuseRIPRelNoScratch {
		t.Errorf("EVEX with B4 out of reach: %v", err)
	}
	if c, err := xol.RelocateX86(b4, nearSlot, &xol.X86Options{ForceScratch: true}); err != nil || c.Form != xol.X86FormDisp {
		t.Errorf("EVEX with B4 in reach: %v %v", c, err)
	}
	// A relative branch to a non-canonical address, near the top of the
	// lower half.
	b, _ := hex.DecodeString("e9f0ffff7f")
	inst, err := decode.DecodeX86(b, 0x7fff_ffff_0000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := xol.RelocateX86(&inst, farSlot, nil); !errors.Is(err, xol.ErrNotRelocatable) {
		t.Errorf("jmp to %#x: %v, want a refusal", inst.Target, err)
	}
	// Bad arguments.
	if _, err := xol.RelocateX86(nil, farSlot, nil); !errors.Is(err, xol.ErrX86Inst) {
		t.Errorf("nil instruction: %v", err)
	}
	if _, err := xol.RelocateX86(decodeX86(t, "90"), 1<<56-2, nil); !errors.Is(err, xol.ErrX86Slot) {
		t.Errorf("slot at the end of the address space: %v", err)
	}
}

// mem is a sparse memory for the fixups.
type mem map[uint64]byte

func (m mem) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		v, ok := m[uint64(off)+uint64(i)]
		if !ok {
			return i, errors.New("unmapped")
		}
		p[i] = v
	}
	return len(p), nil
}

func (m mem) WriteAt(p []byte, off int64) (int, error) {
	for i := range p {
		m[uint64(off)+uint64(i)] = p[i]
	}
	return len(p), nil
}

func (m mem) put64(addr, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	_, _ = m.WriteAt(b[:], int64(addr))
}

func (m mem) get64(addr uint64) uint64 {
	var b [8]byte
	_, _ = m.ReadAt(b[:], int64(addr))
	return binary.LittleEndian.Uint64(b[:])
}

// before returns registers at the original instruction.
func before() xol.X86Regs {
	var r xol.X86Regs
	for i := range r.GPR {
		r.GPR[i] = 0x1000 + uint64(i)
	}
	r.GPR[decode.RSP] = 0x8000
	r.RIP = origAddr
	r.RFLAGS = 0x246
	return r
}

// entered relocates the instruction of hex code h to slot and enters the
// copy from the registers of before(): it returns the instruction, the
// copy, the registers before (b) and after Enter (a).
func entered(t *testing.T, h string, slot uint64) (*decode.X86Inst, *xol.X86Copy, xol.X86Regs, xol.X86Regs) {
	t.Helper()
	inst, c := relocate(t, h, slot, nil)
	b := before()
	a := b
	if err := c.Enter(&a); err != nil {
		t.Fatalf("Enter %s: %v", h, err)
	}
	return inst, c, b, a
}

// TestFixupX86 plays the CPU's part by hand: the state after one step of
// the copy, then Fixup.
func TestFixupX86(t *testing.T) {
	const tf = 0x100
	t.Run("riprel scratch", func(t *testing.T) {
		_, c := relocate(t, "488b0510000000", farSlot, nil)
		b := before()
		a := b
		if err := c.Enter(&a); err != nil || a.RIP != farSlot || a.GPR[decode.RSI] != origAddr+7 {
			t.Fatalf("Enter: %v, %+v", err, a)
		}
		a.RIP = farSlot + uint64(c.StepLen)
		a.GPR[decode.RAX] = 42
		a.RFLAGS |= tf
		out, err := c.Fixup(&b, &a, nil)
		if err != nil || out != xol.X86Done || a.RIP != origAddr+7 || a.GPR[decode.RSI] != b.GPR[decode.RSI] || a.GPR[decode.RAX] != 42 || a.RFLAGS != b.RFLAGS {
			t.Errorf("Fixup: %v %v, %+v", out, err, a)
		}
	})
	t.Run("jcc stub", func(t *testing.T) {
		inst, c := relocate(t, "0f8410000000", farSlot, nil)
		for _, taken := range []bool{false, true} {
			b := before()
			a := b
			if err := c.Enter(&a); err != nil {
				t.Fatal(err)
			}
			a.RIP = farSlot + 2
			want := c.Next
			if taken {
				a.RIP = farSlot + 2 + uint64(c.Code[1])
				want = inst.Target
			}
			if out, err := c.Fixup(&b, &a, nil); err != nil || out != xol.X86Done || a.RIP != want {
				t.Errorf("taken %v: rip %#x, want %#x (%v)", taken, a.RIP, want, err)
			}
		}
	})
	t.Run("call", func(t *testing.T) {
		for _, slot := range []uint64{nearSlot, farSlot} {
			inst, c, b, a := entered(t, "e810000000", slot)
			m := mem{}
			a.GPR[decode.RSP] -= 8
			m.put64(a.GPR[decode.RSP], slot+5)
			a.RIP = inst.Target
			if c.Form == xol.X86FormStub {
				a.RIP = slot + 5
			}
			if out, err := c.Fixup(&b, &a, m); err != nil || out != xol.X86Done || a.RIP != inst.Target || m.get64(a.GPR[decode.RSP]) != c.Next {
				t.Errorf("slot %#x: rip %#x, return address %#x (%v)", slot, a.RIP, m.get64(a.GPR[decode.RSP]), err)
			}
		}
	})
	t.Run("pushf", func(t *testing.T) {
		_, c, b, a := entered(t, "9c", nearSlot)
		m := mem{}
		a.GPR[decode.RSP] -= 8
		m.put64(a.GPR[decode.RSP], b.RFLAGS|tf)
		a.RIP = nearSlot + 1
		a.RFLAGS |= tf
		if _, err := c.Fixup(&b, &a, m); err != nil || m.get64(a.GPR[decode.RSP]) != b.RFLAGS || a.RFLAGS&tf != 0 {
			t.Errorf("image %#x, rflags %#x (%v)", m.get64(a.GPR[decode.RSP]), a.RFLAGS, err)
		}
	})
	t.Run("popf", func(t *testing.T) {
		_, c, b, a := entered(t, "9d", nearSlot)
		a.RIP = nearSlot + 1
		a.RFLAGS = 0x346 // popf loaded TF: kept
		if _, err := c.Fixup(&b, &a, nil); err != nil || a.RFLAGS != 0x346 || a.RIP != origAddr+1 {
			t.Errorf("rflags %#x rip %#x (%v)", a.RFLAGS, a.RIP, err)
		}
	})
	t.Run("rep", func(t *testing.T) {
		_, c, b, a := entered(t, "f3a4", nearSlot)
		a.GPR[decode.RCX]--
		saved := a
		if out, err := c.Fixup(&b, &a, nil); err != nil || out != xol.X86StepAgain || a != saved {
			t.Errorf("between iterations: %v %v", out, err)
		}
		a.RIP = nearSlot + 2
		if out, err := c.Fixup(&b, &a, nil); err != nil || out != xol.X86Done || a.RIP != origAddr+2 {
			t.Errorf("done: %v %v rip %#x", out, err, a.RIP)
		}
	})
	t.Run("unexpected", func(t *testing.T) {
		_, c, b, a := entered(t, "4889f8", nearSlot)
		a.RIP = nearSlot + 1
		saved := a
		if _, err := c.Fixup(&b, &a, nil); !errors.Is(err, xol.ErrX86State) || a != saved {
			t.Errorf("rip inside the instruction: %v", err)
		}
		if err := c.Enter(&a); !errors.Is(err, xol.ErrX86State) {
			t.Errorf("Enter away from the original: %v", err)
		}
		_, nb := relocate(t, "ffd0", nearSlot, nil)
		r := before()
		if err := nb.BoostEnter(&r); !errors.Is(err, xol.ErrX86State) {
			t.Errorf("BoostEnter of call *%%rax: %v", err)
		}
	})
	t.Run("signal", func(t *testing.T) {
		// call *x(%rip) through rsi faults after pushing its return
		// address (a target that is not canonical).
		_, c, b, a := entered(t, "ff1510000000", farSlot)
		m := mem{}
		m.put64(b.GPR[decode.RSP]-8, farSlot+6)
		ok, err := c.FixupSignal(&b, &a, m)
		if !ok || err != nil || a != b || m.get64(b.GPR[decode.RSP]-8) != c.Next {
			t.Errorf("fault at the entry: %v %v, %+v, stack %#x", ok, err, a, m.get64(b.GPR[decode.RSP]-8))
		}
		a.RIP = farSlot + 3
		if ok, _ := c.FixupSignal(&b, &a, m); ok {
			t.Error("a signal inside the instruction was mapped")
		}
		if o, ok := c.OrigIP(farSlot); !ok || o != origAddr {
			t.Errorf("OrigIP(slot) = %#x, %v", o, ok)
		}
	})
}

// TestRelocateAgreesWithCheck relocates the instructions of the decoder's
// test vectors near and far: RelocateX86 refuses exactly what CheckX86
// refuses, except an operand out of reach without a free register.
func TestRelocateAgreesWithCheck(t *testing.T) {
	n := 0
	for _, h := range agreementSample {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		inst, err := decode.DecodeX86(b, origAddr)
		if err != nil {
			continue
		}
		fix, cerr := xol.CheckX86(&inst)
		for _, slot := range []uint64{nearSlot, farSlot, origAddr + 0x40} {
			c, err := xol.RelocateX86(&inst, slot, nil)
			var re *xol.RefusalError
			switch {
			case cerr != nil && err == nil:
				t.Errorf("% x: CheckX86 refuses (%v), RelocateX86 relocates", b, cerr)
			case cerr == nil && err != nil && !(errors.As(err, &re) && re.Code == xol.RefuseRIPRelNoScratch && fix.Scratch < 0):
				t.Errorf("% x at %#x: CheckX86 accepts (%s), RelocateX86: %v", b, slot, fix, err)
			case err == nil:
				n++
				if c.Check != fix {
					t.Errorf("% x: Check %s, CheckX86 %s", b, c.Check, fix)
				}
			}
		}
	}
	if n < 40 {
		t.Errorf("only %d relocations", n)
	}
}

var agreementSample = []string{
	"90", "55", "4889e5", "c3", "c20800", "e800000000", "e9fbffffff", "ebfe", "7400", "0f8500000000",
	"e2fe", "e3fe", "67e3fe", "ffd0", "ff2425a0104000", "ff1510000000", "ff2510000000", "ff3510000000",
	"8f0510000000", "488b0510000000", "488d0510000000", "c5fe6f0510000000", "c4e27d580510000000",
	"62f1fe486f0510000000", "f3a4", "f348ab", "9c", "9d", "0fa2", "0f05", "cc", "0f0b", "f0480107",
	"0fc70d10000000", "480fc70d10000000", "dd0510000000", "d93d10000000", "0fae0510000000",
	"660f3a610510000000ab", "c4e2f2f70510000000", "c4e248f20510000000", "8c0510000000",
	"2e3e64658b0510000000", "41ff1510000000", "cb", "48ca0800", "ff1d10000000", "66ff2d10000000",
}

// FuzzRelocateX86 checks invariants of the relocation of any decodable
// bytes to any slot: no panic; a copy iff no error; a refusal only where
// CheckX86 refuses (or no scratch register is free for an operand out of
// reach); a copy whose step instruction decodes at the slot to StepLen
// bytes, at most 64 bytes in all, and whose fixups bring a fall-through
// step back to Next.
func FuzzRelocateX86(f *testing.F) {
	for _, h := range agreementSample {
		b, _ := hex.DecodeString(h)
		f.Add(b, uint64(farSlot))
		f.Add(b, uint64(nearSlot))
	}
	f.Fuzz(func(t *testing.T, b []byte, slot uint64) {
		inst, err := decode.DecodeX86(b, origAddr)
		if err != nil {
			return
		}
		fix, cerr := xol.CheckX86(&inst)
		c, err := xol.RelocateX86(&inst, slot, nil)
		if (c == nil) == (err == nil) {
			t.Fatalf("% x: copy %v, error %v", b, c, err)
		}
		if err != nil {
			var re *xol.RefusalError
			switch {
			case errors.Is(err, xol.ErrX86Slot):
			case !errors.As(err, &re):
				t.Fatalf("% x at %#x: %v", b, slot, err)
			case cerr == nil && !(re.Code == xol.RefuseRIPRelNoScratch && fix.Scratch < 0):
				t.Fatalf("% x at %#x: CheckX86 accepts (%s), RelocateX86: %v", b, slot, fix, err)
			}
			return
		}
		if cerr != nil {
			t.Fatalf("% x: CheckX86 refuses (%v), RelocateX86 relocates", b, cerr)
		}
		if len(c.Code) > xol.X86MaxCopy || c.StepLen <= 0 || c.StepLen > len(c.Code) {
			t.Fatalf("% x: %s, step %d bytes", b, c, c.StepLen)
		}
		got, err := decode.DecodeX86(c.Code, c.Slot)
		if err != nil || got.Len != c.StepLen {
			t.Fatalf("% x: copy % x decodes to %d bytes (%v), StepLen %d", b, c.Code, got.Len, err, c.StepLen)
		}
		if c.Form == xol.X86FormDisp && got.Target != inst.Target {
			t.Fatalf("% x: operand at %#x, want %#x", b, got.Target, inst.Target)
		}
		r := before()
		a := r
		if err := c.Enter(&a); err != nil {
			t.Fatal(err)
		}
		if inst.Branch == decode.BranchNone && !fix.PushfTF && !fix.Call {
			a.RIP = c.Slot + uint64(c.StepLen)
			if out, err := c.Fixup(&r, &a, nil); err != nil || out != xol.X86Done || a.RIP != c.Next {
				t.Fatalf("% x: fall-through step: %v %v rip %#x", b, out, err, a.RIP)
			}
			for i := range a.GPR {
				if a.GPR[i] != r.GPR[i] {
					t.Fatalf("% x: %s changed by Fixup", b, decode.X86RegName(i))
				}
			}
		}
	})
}
