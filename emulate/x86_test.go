package emulate

import (
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
)

const testRIP = 0x400000

// parseRegs parses "rax=1 rcx=0x2 rflags=0x246 rip=..." into a state.
func parseRegs(t *testing.T, st *X86State, s string) {
	t.Helper()
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		x, err := strconv.ParseUint(v, 0, 64)
		if !ok || err != nil {
			t.Fatalf("bad register setting %q", kv)
		}
		switch k {
		case "rip":
			st.RIP = x
		case "rflags":
			st.RFLAGS = x
		case "fs":
			st.FSBase = x
		case "gs":
			st.GSBase = x
		default:
			r := -1
			for i := 0; i < 16; i++ {
				if decode.X86RegName(i) == k {
					r = i
				}
			}
			if r < 0 {
				t.Fatalf("unknown register %q", k)
			}
			st.GPR[r] = x
		}
	}
}

// decodeHex decodes an instruction at addr with the default (AMD) rules.
func decodeHex(t testing.TB, s string, addr uint64) *decode.X86Inst {
	t.Helper()
	return decodeVendorHex(t, s, addr, decode.VendorAMD)
}

// decodeVendorHex decodes an instruction at addr with vendor's rules.
func decodeVendorHex(t testing.TB, s string, addr uint64, vendor decode.Vendor) *decode.X86Inst {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q", s)
	}
	inst := new(decode.X86Inst)
	if err := (decode.X86Decoder{Vendor: vendor}).Decode(b, addr, inst); err != nil {
		t.Fatalf("decode %s (%v): %v", s, vendor, err)
	}
	if inst.Len != len(b) {
		t.Fatalf("decode %s (%v): length %d, want %d", s, vendor, inst.Len, len(b))
	}
	return inst
}

// x86Vec is a hand-checked emulation: the instruction, the initial
// registers and quadwords of memory, and the registers, flags and memory
// expected after it. Registers not named in want must not change; flags
// are compared on the status flags the instruction defines.
type x86Vec struct {
	hex   string
	init  string
	mem   map[uint64]uint64
	want  string
	flags uint64 // expected status flags (after masking undefined ones)
	wmem  map[uint64]uint64
}

var x86Vecs = []x86Vec{
	// NOPs and endbr: only rip moves, memory operands are not touched.
	{hex: "90", want: "rip=0x400001"},
	{hex: "66 2e 0f 1f 84 00 00 00 00 00", init: "rax=0x8000000000000000", want: "rip=0x40000a"},
	{hex: "0f 1f 44 00 00", want: "rip=0x400005"},
	{hex: "f3 90", want: "rip=0x400002"},
	{hex: "48 90", want: "rip=0x400002"},
	{hex: "f3 0f 1e fa", want: "rip=0x400004"},
	{hex: "f3 0f 1e fb", want: "rip=0x400004"},
	// push, pop.
	{hex: "50", init: "rax=0x1122334455667788 rsp=0x11000", want: "rsp=0x10ff8 rip=0x400001", wmem: map[uint64]uint64{0x10ff8: 0x1122334455667788}},
	{hex: "54", init: "rsp=0x11000", want: "rsp=0x10ff8 rip=0x400001", wmem: map[uint64]uint64{0x10ff8: 0x11000}},
	{hex: "41 57", init: "r15=7 rsp=0x11000", want: "rsp=0x10ff8 rip=0x400002", wmem: map[uint64]uint64{0x10ff8: 7}},
	{hex: "66 50", init: "rax=0xabcd rsp=0x11000", mem: map[uint64]uint64{0x10ff8: 0x1111111111111111}, want: "rsp=0x10ffe rip=0x400002", wmem: map[uint64]uint64{0x10ff8: 0xabcd111111111111}},
	{hex: "6a 80", init: "rsp=0x11000", want: "rsp=0x10ff8 rip=0x400002", wmem: map[uint64]uint64{0x10ff8: 0xffffffffffffff80}},
	{hex: "68 00 00 00 80", init: "rsp=0x11000", want: "rsp=0x10ff8 rip=0x400005", wmem: map[uint64]uint64{0x10ff8: 0xffffffff80000000}},
	{hex: "ff 30", init: "rax=0x10100 rsp=0x11000", mem: map[uint64]uint64{0x10100: 42}, want: "rsp=0x10ff8 rip=0x400002", wmem: map[uint64]uint64{0x10ff8: 42}},
	{hex: "5b", init: "rsp=0x10ff8", mem: map[uint64]uint64{0x10ff8: 99}, want: "rbx=99 rsp=0x11000 rip=0x400001"},
	{hex: "5c", init: "rsp=0x10ff8", mem: map[uint64]uint64{0x10ff8: 0x12345}, want: "rsp=0x12345 rip=0x400001"},
	{hex: "66 5b", init: "rbx=0xffffffffffffffff rsp=0x10ff8", mem: map[uint64]uint64{0x10ff8: 0x1234}, want: "rbx=0xffffffffffff1234 rsp=0x10ffa rip=0x400002"},
	// pop [rsp]: the address is computed after rsp moves.
	{hex: "8f 04 24", init: "rsp=0x10ff0", mem: map[uint64]uint64{0x10ff0: 5}, want: "rsp=0x10ff8 rip=0x400003", wmem: map[uint64]uint64{0x10ff8: 5}},
	// mov: sizes, high bytes, zero extension.
	{hex: "89 d8", init: "rax=0xffffffff00000000 rbx=0x123456789", want: "rax=0x23456789 rip=0x400002"},
	{hex: "88 dc", init: "rax=0x1111 rbx=0x22", want: "rax=0x2211 rip=0x400002"},
	{hex: "40 88 dc", init: "rsp=0x1111 rbx=0x22", want: "rsp=0x1122 rip=0x400003"},
	{hex: "66 89 d8", init: "rax=0xffffffffffffffff rbx=0x1234", want: "rax=0xffffffffffff1234 rip=0x400003"},
	{hex: "48 b8 88 77 66 55 44 33 22 11", want: "rax=0x1122334455667788 rip=0x40000a"},
	{hex: "b8 ff ff ff ff", init: "rax=0x1234567812345678", want: "rax=0xffffffff rip=0x400005"},
	{hex: "b4 7f", init: "rax=0x1234", want: "rax=0x7f34 rip=0x400002"},
	{hex: "48 c7 c0 ff ff ff ff", want: "rax=0xffffffffffffffff rip=0x400007"},
	{hex: "c6 00 ab", init: "rax=0x10010", want: "rip=0x400003", wmem: map[uint64]uint64{0x10010: 0xab}},
	{hex: "48 8b 05 f9 ff 00 00", init: "rip=0x10000", mem: map[uint64]uint64{0x20000: 0x55}, want: "rax=0x55 rip=0x10007"},
	{hex: "64 48 8b 04 25 28 00 00 00", init: "fs=0x10100", mem: map[uint64]uint64{0x10128: 0xfeed}, want: "rax=0xfeed rip=0x400009"},
	{hex: "48 a1 00 00 02 00 00 00 00 00", mem: map[uint64]uint64{0x20000: 0x77}, want: "rax=0x77 rip=0x40000a"},
	{hex: "a2 10 00 01 00 00 00 00 00", init: "rax=0x99", want: "rip=0x400009", wmem: map[uint64]uint64{0x10010: 0x99}},
	// movzx, movsx, movsxd.
	{hex: "0f b6 cc", init: "rax=0xab00 rcx=0xffffffffffffffff", want: "rcx=0xab rip=0x400003"},
	{hex: "48 0f be c0", init: "rax=0x80", want: "rax=0xffffffffffffff80 rip=0x400004"},
	{hex: "0f bf c0", init: "rax=0x8000", want: "rax=0xffff8000 rip=0x400003"},
	{hex: "66 0f b6 c0", init: "rax=0xffffffffffffff80", want: "rax=0xffffffffffff0080 rip=0x400004"},
	{hex: "48 63 c1", init: "rcx=0x80000000", want: "rax=0xffffffff80000000 rip=0x400003"},
	{hex: "63 c1", init: "rax=0xffffffffffffffff rcx=0xffffffff80000000", want: "rax=0x80000000 rip=0x400002"},
	// lea.
	{hex: "48 8d 05 10 00 00 00", want: "rax=0x400017 rip=0x400007"},
	{hex: "67 8d 44 8b 08", init: "rbx=0xffffffff rcx=1", want: "rax=0xb rip=0x400005"},
	{hex: "66 8d 04 0b", init: "rax=0xffffffffffffffff rbx=0x12345 rcx=0x10000", want: "rax=0xffffffffffff2345 rip=0x400004"},
	{hex: "64 48 8d 00", init: "rax=5 fs=0x1000", want: "rax=5 rip=0x400004"},
	// add, adc, sub, sbb, cmp, and, or, xor, test.
	{hex: "04 7f", init: "rax=1", want: "rax=0x80 rip=0x400002", flags: FlagAF | FlagSF | FlagOF},
	{hex: "29 c0", init: "rax=0xffffffffffffffff rflags=0x8d7", want: "rax=0 rip=0x400002", flags: FlagZF | FlagPF},
	{hex: "48 39 d8", init: "rax=0 rbx=1", want: "rip=0x400003", flags: FlagCF | FlagSF | FlagPF | FlagAF},
	{hex: "83 d0 00", init: "rax=0xffffffffffffffff rflags=0x203", want: "rax=0 rip=0x400003", flags: FlagCF | FlagZF | FlagPF | FlagAF},
	{hex: "18 c0", init: "rax=0x1234 rflags=0x203", want: "rax=0x12ff rip=0x400002", flags: FlagCF | FlagSF | FlagPF | FlagAF},
	{hex: "48 01 d8", init: "rax=0x8000000000000000 rbx=0x8000000000000000", want: "rax=0 rip=0x400003", flags: FlagCF | FlagZF | FlagPF | FlagOF},
	{hex: "66 05 01 00", init: "rax=0xffffffff7fff", want: "rax=0xffffffff8000 rip=0x400004", flags: FlagSF | FlagOF | FlagAF | FlagPF},
	{hex: "21 d8", init: "rax=0xffffffffffffffff rbx=0xf0 rflags=0x8c3", want: "rax=0xf0 rip=0x400002", flags: FlagPF},
	{hex: "48 83 f0 ff", init: "rax=0", want: "rax=0xffffffffffffffff rip=0x400004", flags: FlagSF | FlagPF},
	{hex: "a8 80", init: "rax=0x80", want: "rip=0x400002", flags: FlagSF},
	{hex: "48 85 c0", init: "rax=0", want: "rip=0x400003", flags: FlagZF | FlagPF},
	{hex: "80 38 05", init: "rax=0x10000", mem: map[uint64]uint64{0x10000: 5}, want: "rip=0x400003", flags: FlagZF | FlagPF},
	{hex: "01 18", init: "rax=0x10000 rbx=1", mem: map[uint64]uint64{0x10000: 0x1_ffffffff}, want: "rip=0x400002", flags: FlagCF | FlagZF | FlagPF | FlagAF, wmem: map[uint64]uint64{0x10000: 0x1_00000000}},
	// inc, dec, neg, not: inc and dec keep CF.
	{hex: "fe 00", init: "rax=0x10000 rflags=0x203", mem: map[uint64]uint64{0x10000: 0x7f}, want: "rip=0x400002", flags: FlagCF | FlagOF | FlagSF | FlagAF, wmem: map[uint64]uint64{0x10000: 0x80}},
	{hex: "ff c9", init: "rcx=0xffffffff00000000", want: "rcx=0xffffffff rip=0x400002", flags: FlagSF | FlagPF | FlagAF},
	{hex: "f7 d8", init: "rax=0x80000000", want: "rax=0x80000000 rip=0x400002", flags: FlagCF | FlagOF | FlagSF | FlagPF},
	{hex: "f6 d8", init: "rax=0", want: "rip=0x400002", flags: FlagZF | FlagPF},
	{hex: "48 f7 d0", init: "rax=0xff rflags=0x8d7", want: "rax=0xffffffffffffff00 rip=0x400003", flags: FlagsStatus},
	// shifts and rotates.
	{hex: "d1 e0", init: "rax=0x80000001", want: "rax=2 rip=0x400002", flags: FlagCF | FlagOF},
	{hex: "d2 e8", init: "rax=0x81 rcx=1", want: "rax=0x40 rip=0x400002", flags: FlagCF | FlagOF},
	{hex: "d2 f8", init: "rax=0x80 rcx=7", want: "rax=0xff rip=0x400002", flags: FlagSF | FlagPF},
	{hex: "d2 f8", init: "rax=0x80 rcx=20", want: "rax=0xff rip=0x400002", flags: FlagCF | FlagSF | FlagPF},
	{hex: "d0 c0", init: "rax=0x80", want: "rax=1 rip=0x400002", flags: FlagCF | FlagOF},
	{hex: "c1 c8 08", init: "rax=0x12345678", want: "rax=0x78123456 rip=0x400003"},
	{hex: "c1 e0 00", init: "rax=0xffffffff00000001 rflags=0x8d7", want: "rax=1 rip=0x400003", flags: FlagsStatus},
	{hex: "48 d3 e0", init: "rax=1 rcx=0x43", want: "rax=8 rip=0x400003"},
	{hex: "66 c1 e8 10", init: "rax=0xffff", want: "rax=0 rip=0x400004", flags: FlagZF | FlagPF},
	{hex: "d0 c8", init: "rax=0x01", want: "rax=0x80 rip=0x400002", flags: FlagCF | FlagOF},
	// imul.
	{hex: "0f af c3", init: "rax=0x10000 rbx=0x10000", want: "rax=0 rip=0x400003", flags: FlagCF | FlagOF},
	{hex: "48 6b c3 ff", init: "rbx=0x8000000000000000", want: "rax=0x8000000000000000 rip=0x400004", flags: FlagCF | FlagOF},
	{hex: "66 6b c3 02", init: "rax=0xffffffff rbx=0x4000", want: "rax=0xffff8000 rip=0x400004", flags: FlagCF | FlagOF},
	{hex: "48 69 c3 fe ff ff ff", init: "rbx=3", want: "rax=0xfffffffffffffffa rip=0x400007"},
	{hex: "48 0f af c3", init: "rax=0xffffffffffffffff rbx=0xffffffffffffffff", want: "rax=1 rip=0x400004"},
	// xchg.
	{hex: "48 91", init: "rax=1 rcx=2", want: "rax=2 rcx=1 rip=0x400002"},
	{hex: "49 90", init: "rax=1 r8=2", want: "rax=2 r8=1 rip=0x400002"},
	{hex: "87 c0", init: "rax=0xffffffff00000001", want: "rax=1 rip=0x400002"},
	{hex: "86 18", init: "rax=0x10000 rbx=0x1122", mem: map[uint64]uint64{0x10000: 0x33}, want: "rbx=0x1133 rip=0x400002", wmem: map[uint64]uint64{0x10000: 0x22}},
	// cmov, setcc.
	{hex: "0f 44 c3", init: "rax=0xffffffff12345678 rbx=9", want: "rax=0x12345678 rip=0x400003"},
	{hex: "0f 44 c3", init: "rax=0xffffffff12345678 rbx=9 rflags=0x246", want: "rax=9 rip=0x400003", flags: FlagZF | FlagPF},
	{hex: "66 0f 45 c3", init: "rax=0xffffffff12345678 rbx=9", want: "rax=0xffffffff12340009 rip=0x400004"},
	{hex: "0f 9f c0", init: "rax=0x1234", want: "rax=0x1201 rip=0x400003"},
	{hex: "0f 9c c0", init: "rax=0x1234 rflags=0xa82", want: "rax=0x1200 rip=0x400003", flags: FlagSF | FlagOF},
	{hex: "0f 92 00", init: "rax=0x10000 rflags=0x203", want: "rip=0x400003", flags: FlagCF, wmem: map[uint64]uint64{0x10000: 1}},
	// sign extensions.
	{hex: "48 98", init: "rax=0x80000000", want: "rax=0xffffffff80000000 rip=0x400002"},
	{hex: "98", init: "rax=0xffffffff00008000", want: "rax=0xffff8000 rip=0x400001"},
	{hex: "66 98", init: "rax=0x80", want: "rax=0xff80 rip=0x400002"},
	{hex: "48 99", init: "rax=0xffffffffffffffff", want: "rdx=0xffffffffffffffff rip=0x400002"},
	{hex: "99", init: "rax=0x80000000 rdx=0x1234567812345678", want: "rdx=0xffffffff rip=0x400001"},
	{hex: "66 99", init: "rax=0x7fff rdx=0xffffffffffffffff", want: "rdx=0xffffffffffff0000 rip=0x400002"},
	// Relative branches.
	{hex: "eb fe", want: "rip=0x400000"},
	{hex: "e9 fb ff ff ff", want: "rip=0x400000"},
	{hex: "75 10", init: "rflags=0x202", want: "rip=0x400012"},
	{hex: "75 10", init: "rflags=0x242", want: "rip=0x400002", flags: FlagZF},
	{hex: "0f 8f 00 01 00 00", init: "rflags=0xa82", want: "rip=0x400106", flags: FlagSF | FlagOF},
	{hex: "e8 00 00 00 00", init: "rsp=0x11000", want: "rsp=0x10ff8 rip=0x400005", wmem: map[uint64]uint64{0x10ff8: 0x400005}},
	{hex: "f2 e8 10 00 00 00", init: "rsp=0x11000", want: "rsp=0x10ff8 rip=0x400016", wmem: map[uint64]uint64{0x10ff8: 0x400006}},
	{hex: "67 e8 10 00 00 00", init: "rsp=0x11000", want: "rsp=0x10ff8 rip=0x400016", wmem: map[uint64]uint64{0x10ff8: 0x400006}},
	// Indirect branches.
	{hex: "ff d0", init: "rax=0x123456 rsp=0x11000", want: "rsp=0x10ff8 rip=0x123456", wmem: map[uint64]uint64{0x10ff8: 0x400002}},
	{hex: "ff e0", init: "rax=0x123456", want: "rip=0x123456"},
	{hex: "ff 20", init: "rax=0x10010", mem: map[uint64]uint64{0x10010: 0x777}, want: "rip=0x777"},
	{hex: "ff 15 fa ff 00 00", init: "rip=0x10000 rsp=0x11000", mem: map[uint64]uint64{0x20000: 0x888}, want: "rsp=0x10ff8 rip=0x888", wmem: map[uint64]uint64{0x10ff8: 0x10006}},
	{hex: "ff 14 24", init: "rsp=0x11000", mem: map[uint64]uint64{0x11000: 0x999}, want: "rsp=0x10ff8 rip=0x999", wmem: map[uint64]uint64{0x10ff8: 0x400003}},
	// ret, leave.
	{hex: "c3", init: "rsp=0x10ff8", mem: map[uint64]uint64{0x10ff8: 0x401000}, want: "rsp=0x11000 rip=0x401000"},
	{hex: "f3 c3", init: "rsp=0x10ff8", mem: map[uint64]uint64{0x10ff8: 0x401000}, want: "rsp=0x11000 rip=0x401000"},
	{hex: "c2 10 00", init: "rsp=0x10ff8", mem: map[uint64]uint64{0x10ff8: 0x401000}, want: "rsp=0x11010 rip=0x401000"},
	{hex: "c9", init: "rbp=0x10f00 rsp=0x10800", mem: map[uint64]uint64{0x10f00: 0x11100}, want: "rsp=0x10f08 rbp=0x11100 rip=0x400001"},
	{hex: "66 c9", init: "rbp=0x10f00 rsp=0x10800", mem: map[uint64]uint64{0x10f00: 0xabcd}, want: "rsp=0x10f02 rbp=0x1abcd rip=0x400002"},
	// loop, jrcxz.
	{hex: "e2 fe", init: "rcx=2", want: "rcx=1 rip=0x400000"},
	{hex: "e2 fe", init: "rcx=1", want: "rcx=0 rip=0x400002"},
	{hex: "67 e2 fe", init: "rcx=0x100000001", want: "rcx=0 rip=0x400003"},
	{hex: "e1 fe", init: "rcx=5 rflags=0x202", want: "rcx=4 rip=0x400002"},
	{hex: "e0 fe", init: "rcx=5 rflags=0x202", want: "rcx=4 rip=0x400000"},
	{hex: "e3 10", init: "rcx=0", want: "rip=0x400012"},
	{hex: "67 e3 10", init: "rcx=0x100000000", want: "rip=0x400013"},
	{hex: "e3 10", init: "rcx=0x100000000", want: "rip=0x400002"},
}

// TestX86Vectors runs the hand-checked vectors.
func TestX86Vectors(t *testing.T) {
	for _, v := range x86Vecs {
		t.Run(strings.ReplaceAll(v.hex, " ", ""), func(t *testing.T) {
			var st X86State
			st.RIP = testRIP
			st.RFLAGS = 0x202
			parseRegs(t, &st, v.init)
			inst := decodeHex(t, v.hex, st.RIP)
			mem := newTestMem()
			for a, q := range v.mem {
				mem.poke(a, q)
			}
			mem.writes = 0
			want := st
			parseRegs(t, &want, v.want)
			undef := X86UndefinedFlags(inst, &st)
			if err := X86Supported(inst); err != nil {
				t.Fatalf("X86Supported: %v", err)
			}
			if err := EmulateX86(inst, &st, mem); err != nil {
				t.Fatalf("%s: %v", inst.Text("intel"), err)
			}
			if st.GPR != want.GPR || st.RIP != want.RIP || st.FSBase != want.FSBase {
				t.Errorf("%s:\ngot  %v\nwant %v", inst.Text("intel"), &st, &want)
			}
			if st.RFLAGS&^FlagsStatus != want.RFLAGS&^FlagsStatus {
				t.Errorf("%s: non-status flags changed: %#x -> %#x", inst.Text("intel"), want.RFLAGS, st.RFLAGS)
			}
			if got := st.RFLAGS & FlagsStatus &^ undef; got != v.flags&^undef {
				t.Errorf("%s: status flags %#x, want %#x (undefined %#x)", inst.Text("intel"), got, v.flags&^undef, undef)
			}
			checkMemWrites(t, inst.Text("intel"), mem, v.wmem)
		})
	}
}

// TestX86Faults checks that faults carry the address, access and kind, and
// leave the state and memory unchanged. (The faults that differ between
// Intel and AMD are in TestX86VendorDifferences.)
func TestX86Faults(t *testing.T) {
	type fvec struct {
		hex    string
		init   string
		addr   uint64
		acc    Access
		kind   FaultKind
		reason string
	}
	vecs := []fvec{
		{hex: "48 8b 00", init: "rax=0x1234", addr: 0x1234, acc: AccessRead, kind: FaultPage},
		{hex: "48 8b 00", init: "rax=0x11ffc", addr: 0x12000, acc: AccessRead, kind: FaultPage},
		{hex: "88 00", init: "rax=0x20008", addr: 0x20008, acc: AccessWrite, kind: FaultPage},
		{hex: "01 18", init: "rax=0x30000", addr: 0x30000, acc: AccessWrite, kind: FaultPage, reason: "read-modify-write reads as a write"},
		{hex: "48 8b 00", init: "rax=0x800000000000", addr: 0x800000000000, acc: AccessRead, kind: FaultGP},
		{hex: "48 8b 00", init: "rax=0x7ffffffffffc", addr: 0x7ffffffffffc, acc: AccessRead, kind: FaultGP, reason: "the last byte is not canonical"},
		{hex: "48 8b 45 00", init: "rbp=0x800000000000", addr: 0x800000000000, acc: AccessRead, kind: FaultSS},
		{hex: "64 48 8b 45 00", init: "rbp=0x800000000000", addr: 0x800000000000, acc: AccessRead, kind: FaultGP},
		{hex: "2e 48 8b 45 00", init: "rbp=0x800000000000", addr: 0x800000000000, acc: AccessRead, kind: FaultSS, reason: "cs prefix ignored"},
		{hex: "50", init: "rsp=0x800000000008", addr: 0x800000000000, acc: AccessWrite, kind: FaultSS},
		{hex: "50", init: "rsp=0x20008", addr: 0x20000, acc: AccessWrite, kind: FaultPage},
		{hex: "ff e0", init: "rax=0x800000000000", addr: 0x800000000000, acc: AccessFetch, kind: FaultGP},
		{hex: "c3", init: "rsp=0x10ff8", addr: 0x8000000000000000, acc: AccessFetch, kind: FaultGP},
		{hex: "8f 00", init: "rsp=0x10ff8 rax=0x20000", addr: 0x20000, acc: AccessWrite, kind: FaultPage, reason: "pop to read-only memory keeps rsp"},
		{hex: "c9", init: "rbp=0x5000", addr: 0x5000, acc: AccessRead, kind: FaultPage},
	}
	for _, v := range vecs {
		t.Run(strings.ReplaceAll(v.hex, " ", ""), func(t *testing.T) {
			var st X86State
			st.RIP, st.RFLAGS = testRIP, 0x246
			parseRegs(t, &st, v.init)
			mem := newTestMem()
			mem.poke(0x10ff8, 0x8000000000000000)
			before := st
			inst := decodeHex(t, v.hex, st.RIP)
			err := EmulateX86(inst, &st, mem)
			var f *Fault
			if !errors.As(err, &f) {
				t.Fatalf("%s: %v, want a *Fault (%s)", inst.Text("intel"), err, v.reason)
			}
			if f.Addr != v.addr || f.Access != v.acc || f.Kind != v.kind {
				t.Errorf("%s: fault %v at %#x (%v), want %v at %#x (%v); %s", inst.Text("intel"), f.Kind, f.Addr, f.Access, v.kind, v.addr, v.acc, v.reason)
			}
			if st != before {
				t.Errorf("%s: state changed by a fault:\n%v\nwas\n%v", inst.Text("intel"), &st, &before)
			}
			if mem.writes != 0 {
				t.Errorf("%s: memory written by a faulting instruction", inst.Text("intel"))
			}
			if f.Kind != FaultPage && !errors.Is(err, ErrNonCanonical) {
				t.Errorf("%s: %v does not wrap ErrNonCanonical", inst.Text("intel"), err)
			}
			if f.Kind == FaultPage && !errors.Is(err, errTestUnmapped) {
				t.Errorf("%s: %v does not wrap the memory's error", inst.Text("intel"), err)
			}
		})
	}
}

// TestX86NotEmulated lists instructions the emulator must refuse.
func TestX86NotEmulated(t *testing.T) {
	for _, h := range []string{
		"f0 01 18",          // lock add
		"f3 48 a5",          // rep movsq
		"48 a5",             // movsq
		"f2 01 d8",          // repne add: the prefix has no defined meaning
		"f3 0f b6 c0",       // F3 movzx
		"0f 05",             // syscall
		"cc",                // int3
		"d1 d0",             // rcl
		"d1 f0",             // the /6 alias of shl
		"f7 c8 00 00 00 00", // the /1 alias of test
		"f7 f1",             // div
		"f7 e1",             // mul
		"f7 e9",             // one-operand imul
		"9c",                // pushf
		"9d",                // popf
		"0f a2",             // cpuid
		"0f 31",             // rdtsc
		"c8 10 00 00",       // enter
		"8c c0",             // mov from a segment register
		"64 65 48 8b 00",    // fs and gs together
		"c5 f8 77",          // vzeroupper
		"0f bc c0",          // bsf
		"0f 18 00",          // prefetch
		"0f 0d 08",          // prefetchw
		"f2 0f 1f 00",       // F2 on a nop
		"f3 0f 1e c8",       // rdssp
		"f3 41 90",          // pause with REX.B
		"f2 90",             // F2 90
		"66 0f 1f 00",       // accepted: see below
	} {
		if h == "66 0f 1f 00" {
			continue
		}
		inst := decodeHex(t, h, testRIP)
		if err := X86Supported(inst); !errors.Is(err, ErrNotEmulated) {
			t.Errorf("%s (%s): X86Supported = %v, want ErrNotEmulated", h, inst.Text("intel"), err)
		}
		var st X86State
		if err := EmulateX86(inst, &st, newTestMem()); !errors.Is(err, ErrNotEmulated) {
			t.Errorf("%s: EmulateX86 = %v, want ErrNotEmulated", h, err)
		}
	}
	// With the AMD rules a 66 prefix on a near branch changes its length;
	// either way the emulator refuses it.
	for _, v := range []decode.Vendor{decode.VendorAMD, decode.VendorIntel} {
		for _, h := range []string{"66 e8 00 00", "66 c3", "66 ff d0", "66 eb 00", "66 e2 00"} {
			b, _ := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
			var inst decode.X86Inst
			if err := (decode.X86Decoder{Vendor: v}).Decode(b, testRIP, &inst); err != nil {
				continue
			}
			if err := X86Supported(&inst); !errors.Is(err, ErrNotEmulated) {
				t.Errorf("%v %s: X86Supported = %v, want ErrNotEmulated", v, h, err)
			}
		}
	}
}

// TestX86SupportedMatchesStep checks on random bytes that Step refuses an
// instruction exactly when X86Supported does, and never panics.
func TestX86SupportedMatchesStep(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var b [15]byte
	n, ok := 0, 0
	mem := newTestMem()
	for n < 200000 {
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		var inst decode.X86Inst
		if (decode.X86Decoder{}).Decode(b[:], testRIP, &inst) != nil {
			continue
		}
		n++
		var st X86State
		for i := range st.GPR {
			st.GPR[i] = r.Uint64() >> uint(r.IntN(64))
		}
		st.RIP, st.RFLAGS = testRIP, 0x202|r.Uint64()&0x8d5
		sup := X86Supported(&inst)
		err := EmulateX86(&inst, &st, mem)
		if (sup != nil) != errors.Is(err, ErrNotEmulated) {
			t.Fatalf("% x (%s): X86Supported %v, EmulateX86 %v", b[:inst.Len], inst.Text("intel"), sup, err)
		}
		if sup == nil {
			ok++
		}
	}
	t.Logf("%d of %d random instructions emulated", ok, n)
}

// TestX86WriteChecker checks a read-modify-write operand that starts on a
// read-only page and ends on a missing one: with a WriteChecker the fault
// is on the read-only byte, as on the CPU; without one, on the missing
// page (the documented difference).
func TestX86WriteChecker(t *testing.T) {
	inst := decodeHex(t, "d1 20", testRIP) // shl dword ptr [rax], 1
	for _, c := range []struct {
		mem  Memory
		want uint64
	}{
		{checkedMem{newTestMem()}, 0x20ffe},
		{newTestMem(), 0x21000},
	} {
		var st X86State
		st.RIP, st.RFLAGS = testRIP, 0x202
		st.GPR[decode.RAX] = 0x20ffe
		err := EmulateX86(inst, &st, c.mem)
		var f *Fault
		if !errors.As(err, &f) || f.Addr != c.want || f.Access != AccessWrite || f.Kind != FaultPage {
			t.Errorf("%T: %v, want a write fault at %#x", c.mem, err, c.want)
		}
	}
	// A writable operand is still read and written normally.
	mem := checkedMem{newTestMem()}
	mem.poke(0x10000, 3)
	var st X86State
	st.RIP, st.RFLAGS = testRIP, 0x202
	st.GPR[decode.RAX] = 0x10000
	if err := EmulateX86(inst, &st, mem); err != nil || mem.q(0x10000) != 6 {
		t.Errorf("shl [rax], 1 on writable memory: %v, value %#x", err, mem.q(0x10000))
	}
}

// checkMemWrites checks the quadwords wmem says the instruction text
// wrote to m, and that it wrote nothing when wmem is nil.
func checkMemWrites(t *testing.T, text string, m *testMem, wmem map[uint64]uint64) {
	t.Helper()
	for a, q := range wmem {
		if got := m.q(a); got != q {
			t.Errorf("%s: memory [%#x] = %#x, want %#x", text, a, got, q)
		}
	}
	if wmem == nil && m.writes != 0 {
		t.Errorf("%s: %d memory writes, want none", text, m.writes)
	}
}
