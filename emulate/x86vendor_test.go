package emulate

import (
	"errors"
	"testing"

	"github.com/probeopt/probeopt/decode"
)

// vendorOutcome is what one vendor's CPU does with a case: it completes
// with the registers in regs, or raises kind at addr for an access acc;
// wmem is the memory written (also by a faulting instruction).
type vendorOutcome struct {
	kind    FaultKind // 0: the instruction completes
	addr    uint64
	acc     Access
	regs    string
	wmem    map[uint64]uint64
	refused bool // ErrNotEmulated
}

// vendorCase is one instruction and state on which Intel and AMD CPUs
// differ (or might), and what each does.
type vendorCase struct {
	name    string
	hex     string
	rip     uint64 // 0: testRIP
	init    string
	plain   bool // a Memory without CheckWrite
	amd     vendorOutcome
	intel   vendorOutcome
	initMem map[uint64]uint64
}

// nonCanonical is the lowest non-canonical address with 48-bit virtual
// addresses.
const nonCanonical = 0x800000000000

// x86VendorCases are the cases of TestX86VendorDifferences.
var x86VendorCases = []vendorCase{
	{
		name: "call through a register to a non-canonical target", hex: "ff d0", init: "rax=0x800000000000 rsp=0x11000",
		amd:   vendorOutcome{kind: FaultGP, addr: nonCanonical, acc: AccessFetch},
		intel: vendorOutcome{kind: FaultGP, addr: nonCanonical, acc: AccessFetch, wmem: map[uint64]uint64{0x10ff8: testRIP + 2}},
	},
	{
		name: "call rel32 to a non-canonical target", hex: "e8 00 10 00 00", rip: 0x7ffffffff000, init: "rsp=0x11000",
		amd:   vendorOutcome{kind: FaultGP, addr: nonCanonical + 5, acc: AccessFetch},
		intel: vendorOutcome{kind: FaultGP, addr: nonCanonical + 5, acc: AccessFetch, wmem: map[uint64]uint64{0x10ff8: 0x7ffffffff005}},
	},
	{
		name: "call to a non-canonical target with a read-only stack: the push faults first", hex: "ff d0", init: "rax=0x800000000000 rsp=0x20008",
		amd:   vendorOutcome{kind: FaultPage, addr: 0x20000, acc: AccessWrite},
		intel: vendorOutcome{kind: FaultPage, addr: 0x20000, acc: AccessWrite},
	},
	{
		name: "the same without CheckWrite: AMD cannot tell that the push would fault", hex: "ff d0", init: "rax=0x800000000000 rsp=0x20008", plain: true,
		amd:   vendorOutcome{kind: FaultGP, addr: nonCanonical, acc: AccessFetch},
		intel: vendorOutcome{kind: FaultPage, addr: 0x20000, acc: AccessWrite},
	},
	{
		name: "call to a non-canonical target with a non-canonical stack", hex: "ff d0", init: "rax=0x800000000000 rsp=0x800000000008",
		amd:   vendorOutcome{kind: FaultSS, addr: nonCanonical, acc: AccessWrite},
		intel: vendorOutcome{kind: FaultSS, addr: nonCanonical, acc: AccessWrite},
	},
	{
		name: "fs operand whose offset is not canonical and whose linear address is", hex: "64 48 8b 00", init: "rax=0xffff7ffffffffff8 fs=0x100000",
		amd:   vendorOutcome{kind: FaultGP, addr: 0xffff7ffffffffff8, acc: AccessRead},
		intel: vendorOutcome{kind: FaultPage, addr: 0xffff8000000ffff8, acc: AccessRead},
	},
	{
		name: "gs store whose offset is not canonical", hex: "65 48 89 00", init: "rax=0xffff7ffffffffff8 gs=0x100000",
		amd:   vendorOutcome{kind: FaultGP, addr: 0xffff7ffffffffff8, acc: AccessWrite},
		intel: vendorOutcome{kind: FaultPage, addr: 0xffff8000000ffff8, acc: AccessWrite},
	},
	{
		name: "fs operand based on rbp: #GP, not #SS", hex: "64 48 8b 45 00", init: "rbp=0xffff7ffffffffff8 fs=0x100000",
		amd:   vendorOutcome{kind: FaultGP, addr: 0xffff7ffffffffff8, acc: AccessRead},
		intel: vendorOutcome{kind: FaultPage, addr: 0xffff8000000ffff8, acc: AccessRead},
	},
	{
		name: "fs operand with a canonical offset", hex: "64 48 8b 00", init: "rax=0xfff8 fs=0x10000",
		amd:     vendorOutcome{regs: "rax=0x1122334455667788 fs=0x10000"},
		intel:   vendorOutcome{regs: "rax=0x1122334455667788 fs=0x10000"},
		initMem: map[uint64]uint64{0x1fff8: 0x1122334455667788},
	},
	{
		name: "movsxd with 66 reads 32 bits on AMD, 16 on Intel", hex: "66 63 08", init: "rax=0x11ffe rcx=0x1111222233334444",
		amd:     vendorOutcome{kind: FaultPage, addr: 0x12000, acc: AccessRead},
		intel:   vendorOutcome{regs: "rax=0x11ffe rcx=0x111122223333abcd"},
		initMem: map[uint64]uint64{0x11ff8: 0xabcd000000000000},
	},
	{
		name: "movsxd with 66 writes the low 16 bits of the source on both", hex: "66 63 08", init: "rax=0x10100 rcx=0x1111222233334444",
		amd:     vendorOutcome{regs: "rax=0x10100 rcx=0x1111222233338888"},
		intel:   vendorOutcome{regs: "rax=0x10100 rcx=0x1111222233338888"},
		initMem: map[uint64]uint64{0x10100: 0x5555666677778888},
	},
	{
		name: "ret with 66: AMD pops 16 bits, Intel ignores the prefix", hex: "66 c3", init: "rsp=0x10ff8",
		amd: vendorOutcome{refused: true}, intel: vendorOutcome{refused: true},
	},
	{
		name: "jmp rel8 with 66: AMD truncates rip to 16 bits, Intel ignores the prefix", hex: "66 eb 00", init: "rsp=0x11000",
		amd: vendorOutcome{refused: true}, intel: vendorOutcome{refused: true},
	},
}

// TestX86VendorDifferences checks the emulator on each place where Intel
// and AMD CPUs differ (the table of the package documentation), for both
// vendors. The expected outcomes are what the CPUs did with the same
// instructions and states (the regression vectors of package fuzz, tagged
// with the vendor they were found on) and what the manuals say.
func TestX86VendorDifferences(t *testing.T) {
	for _, v := range x86VendorCases {
		for _, vendor := range []decode.Vendor{decode.VendorAMD, decode.VendorIntel} {
			t.Run(v.name+"/"+vendor.String(), func(t *testing.T) { checkVendorCase(t, &v, vendor) })
		}
	}
}

// checkVendorCase runs case v with the emulator of vendor and checks the
// outcome that vendor's CPU has.
func checkVendorCase(t *testing.T, v *vendorCase, vendor decode.Vendor) {
	want := v.amd
	if vendor == decode.VendorIntel {
		want = v.intel
	}
	var st X86State
	st.RIP, st.RFLAGS = testRIP, 0x246
	if v.rip != 0 {
		st.RIP = v.rip
	}
	parseRegs(t, &st, v.init)
	tm := newTestMem()
	for a, q := range v.initMem {
		tm.poke(a, q)
	}
	var mem Memory = checkedMem{tm}
	if v.plain {
		mem = tm
	}
	inst := decodeVendorHex(t, v.hex, st.RIP, vendor)
	x := X86{Vendor: vendor}
	before := st
	err := x.Step(inst, &st, mem)
	if want.refused {
		if !errors.Is(err, ErrNotEmulated) || !errors.Is(x.Supported(inst), ErrNotEmulated) {
			t.Fatalf("%s: Step %v, Supported %v; want both to refuse", inst.Text("intel"), err, x.Supported(inst))
		}
		return
	}
	if err := x.Supported(inst); err != nil {
		t.Fatalf("%s: Supported: %v", inst.Text("intel"), err)
	}
	if want.kind == 0 {
		if err != nil {
			t.Fatalf("%s: %v, want completion", inst.Text("intel"), err)
		}
		exp := before
		parseRegs(t, &exp, want.regs)
		exp.RIP = before.RIP + uint64(inst.Len)
		if st != exp {
			t.Errorf("%s: state\n%v\nwant\n%v", inst.Text("intel"), &st, &exp)
		}
	} else {
		var f *Fault
		if !errors.As(err, &f) {
			t.Fatalf("%s: %v, want a fault", inst.Text("intel"), err)
		}
		if f.Kind != want.kind || f.Addr != want.addr || f.Access != want.acc {
			t.Errorf("%s: %v at %#x (%v), want %v at %#x (%v)", inst.Text("intel"), f.Kind, f.Addr, f.Access, want.kind, want.addr, want.acc)
		}
		if st != before {
			t.Errorf("%s: state changed by a fault", inst.Text("intel"))
		}
	}
	for a, q := range want.wmem {
		if got := tm.q(a); got != q {
			t.Errorf("%s: memory [%#x] = %#x, want %#x", inst.Text("intel"), a, got, q)
		}
	}
	if want.wmem == nil && tm.writes != 0 {
		t.Errorf("%s: %d memory writes, want none", inst.Text("intel"), tm.writes)
	}
}

// TestX86DefaultVendor checks that the zero X86, EmulateX86 and
// X86Supported follow AMD, as the decoder's zero value does.
func TestX86DefaultVendor(t *testing.T) {
	inst := decodeVendorHex(t, "ff d0", testRIP, decode.VendorAMD)
	for name, step := range map[string]func(*X86State, Memory) error{
		"X86{}":      func(st *X86State, m Memory) error { return X86{}.Step(inst, st, m) },
		"EmulateX86": func(st *X86State, m Memory) error { return EmulateX86(inst, st, m) },
	} {
		var st X86State
		st.RIP = testRIP
		parseRegs(t, &st, "rax=0x800000000000 rsp=0x11000")
		tm := newTestMem()
		if err := step(&st, checkedMem{tm}); err == nil || tm.writes != 0 {
			t.Errorf("%s: %v with %d writes; want #GP and no write (AMD)", name, err, tm.writes)
		}
	}
}
