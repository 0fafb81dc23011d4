package emulate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/probeopt/probeopt/decode"
)

// a64Mem is a sparse test memory: readable and writable pages, the rest
// faults.
type a64Mem struct {
	b        map[uint64]byte
	readable map[uint64]bool // page -> readable
	writable map[uint64]bool
	writes   int
}

func newA64Mem() *a64Mem {
	return &a64Mem{b: map[uint64]byte{}, readable: map[uint64]bool{}, writable: map[uint64]bool{}}
}

// mapPage makes the page holding a readable, and writable if rw.
func (m *a64Mem) mapPage(a uint64, rw bool) {
	m.readable[a>>12] = true
	m.writable[a>>12] = rw
}

func (m *a64Mem) Read(a uint64, size int) (uint64, error) {
	var v uint64
	for i := 0; i < size; i++ {
		x := a + uint64(i)
		if !m.readable[x>>12] {
			return 0, &Fault{Addr: x, Err: errors.New("unmapped")}
		}
		v |= uint64(m.b[x]) << (8 * i)
	}
	return v, nil
}

func (m *a64Mem) Write(a uint64, size int, v uint64) error {
	for i := 0; i < size; i++ {
		if x := a + uint64(i); !m.writable[x>>12] {
			return &Fault{Addr: x, Err: errors.New("read-only")}
		}
	}
	m.writes++
	for i := 0; i < size; i++ {
		m.b[a+uint64(i)] = byte(v >> (8 * i))
	}
	return nil
}

func (m *a64Mem) put64(a, v uint64) {
	for i := 0; i < 8; i++ {
		m.b[a+uint64(i)] = byte(v >> (8 * i))
	}
}

func (m *a64Mem) get64(a uint64) uint64 {
	var v uint64
	for i := 0; i < 8; i++ {
		v |= uint64(m.b[a+uint64(i)]) << (8 * i)
	}
	return v
}

// a64Decode decodes w at pc.
func a64Decode(t *testing.T, w uint32, pc uint64) decode.ARM64Inst {
	t.Helper()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], w)
	inst, err := decode.DecodeARM64(b[:], pc)
	if err != nil {
		t.Fatalf("decode %#08x: %v", w, err)
	}
	return inst
}

const testPC = 0x400000

// a64Case is one emulator test: a word, a change to a zeroed state, and a
// check of the result.
type a64Case struct {
	name  string
	w     uint32
	setup func(s *ARM64State, m *a64Mem)
	check func(s *ARM64State, m *a64Mem) string
}

// stack is the stack pointer of the cases that need one.
const stack = 0x7fff0000

// a64StepCases are the cases of TestARM64Step: one instruction each, the
// change it starts from and what it must leave.
var a64StepCases = []a64Case{
	{"adds x0, x1, x2 carry+zero", 0xab020020,
		func(s *ARM64State, m *a64Mem) { s.X[1], s.X[2] = 1, ^uint64(0) },
		func(s *ARM64State, m *a64Mem) string {
			return want(s.X[0] == 0 && s.NZCV == NZCVZ|NZCVC, "x0=%#x nzcv=%#x", s.X[0], s.NZCV)
		}},
	{"adds x0, x1, x2 overflow", 0xab020020,
		func(s *ARM64State, m *a64Mem) { s.X[1], s.X[2] = 1<<63-1, 1 },
		func(s *ARM64State, m *a64Mem) string {
			return want(s.X[0] == 1<<63 && s.NZCV == NZCVN|NZCVV, "x0=%#x nzcv=%#x", s.X[0], s.NZCV)
		}},
	{"subs w0, w1, w2 borrow, upper bits ignored", 0x6b020020,
		func(s *ARM64State, m *a64Mem) { s.X[0], s.X[1], s.X[2] = ^uint64(0), 0xffffffff_00000001, 2 },
		func(s *ARM64State, m *a64Mem) string {
			return want(s.X[0] == 0xffffffff && s.NZCV == NZCVN, "x0=%#x nzcv=%#x", s.X[0], s.NZCV)
		}},
	{"cmp w0, #1 equal keeps other pstate bits", 0x7100041f,
		func(s *ARM64State, m *a64Mem) { s.X[0], s.NZCV = 1, 0x3c0 },
		func(s *ARM64State, m *a64Mem) string {
			return want(s.NZCV == 0x3c0|NZCVZ|NZCVC && s.SP == 0, "nzcv=%#x sp=%#x", s.NZCV, s.SP)
		}},
	{"cmn x1, #0xfff, lsl #12", 0xb17ffc3f,
		func(s *ARM64State, m *a64Mem) { s.X[1] = ^uint64(0xfff000) + 1 },
		func(s *ARM64State, m *a64Mem) string {
			return want(s.NZCV == NZCVZ|NZCVC && s.SP == 0, "nzcv=%#x", s.NZCV)
		}},
	{"stp x29, x30, [sp, #-32]!", 0xa9be7bfd,
		func(s *ARM64State, m *a64Mem) {
			s.SP, s.X[29], s.X[30] = stack, 0x1111, 0x2222
			m.mapPage(stack-32, true)
		},
		func(s *ARM64State, m *a64Mem) string {
			return want(s.SP == stack-32 && m.get64(stack-32) == 0x1111 && m.get64(stack-24) == 0x2222, "sp=%#x", s.SP)
		}},
	{"mov x29, sp", 0x910003fd,
		func(s *ARM64State, m *a64Mem) { s.SP = stack },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[29] == stack, "x29=%#x", s.X[29]) }},
	{"sub sp, sp, #0x20", 0xd10083ff,
		func(s *ARM64State, m *a64Mem) { s.SP = stack },
		func(s *ARM64State, m *a64Mem) string { return want(s.SP == stack-0x20, "sp=%#x", s.SP) }},
	{"ldr x0, [sp, #8]", 0xf94007e0,
		func(s *ARM64State, m *a64Mem) { s.SP = stack; m.mapPage(stack, false); m.put64(stack+8, 0xabcdef) },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 0xabcdef, "x0=%#x", s.X[0]) }},
	{"movz x3, #0x1234, lsl #16", 0xd2a24683,
		func(s *ARM64State, m *a64Mem) { s.X[3] = ^uint64(0) },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[3] == 0x12340000, "x3=%#x", s.X[3]) }},
	{"movk x3, #0xbeef, lsl #48", 0xf2f7dde3,
		func(s *ARM64State, m *a64Mem) { s.X[3] = 0x1234_5678_9abc_def0 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[3] == 0xbeef_5678_9abc_def0, "x3=%#x", s.X[3]) }},
	{"movn w4, #0", 0x12800004,
		func(s *ARM64State, m *a64Mem) {},
		func(s *ARM64State, m *a64Mem) string { return want(s.X[4] == 0xffffffff, "x4=%#x", s.X[4]) }},
	{"b.ne taken", 0x54000081,
		func(s *ARM64State, m *a64Mem) {},
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == testPC+16, "pc=%#x", s.PC) }},
	{"b.ne not taken", 0x54000081,
		func(s *ARM64State, m *a64Mem) { s.NZCV = NZCVZ },
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == testPC+4, "pc=%#x", s.PC) }},
	{"bc.eq taken", 0x54000050,
		func(s *ARM64State, m *a64Mem) { s.NZCV = NZCVZ },
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == testPC+8, "pc=%#x", s.PC) }},
	{"b.nv always", 0x5400008f,
		func(s *ARM64State, m *a64Mem) {},
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == testPC+16, "pc=%#x", s.PC) }},
	{"cbz w5 with upper bits set", 0x34000105,
		func(s *ARM64State, m *a64Mem) { s.X[5] = 1 << 32 },
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == testPC+32, "pc=%#x", s.PC) }},
	{"tbnz x6, #63 backwards", 0xb7fffe06,
		func(s *ARM64State, m *a64Mem) { s.X[6] = 1 << 63 },
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == testPC-64, "pc=%#x", s.PC) }},
	{"blr x30 reads the target first", 0xd63f03c0,
		func(s *ARM64State, m *a64Mem) { s.X[30] = 0x500000 },
		func(s *ARM64State, m *a64Mem) string {
			return want(s.PC == 0x500000 && s.X[30] == testPC+4, "pc=%#x x30=%#x", s.PC, s.X[30])
		}},
	{"br to a misaligned address", 0xd61f00e0,
		func(s *ARM64State, m *a64Mem) { s.X[7] = 0x500002 },
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == 0x500002, "pc=%#x", s.PC) }},
	{"ret", 0xd65f03c0,
		func(s *ARM64State, m *a64Mem) { s.X[30] = 0x123454 },
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == 0x123454, "pc=%#x", s.PC) }},
	{"adrp x8", 0xB0091A28,
		func(s *ARM64State, m *a64Mem) {},
		func(s *ARM64State, m *a64Mem) string {
			return want(s.X[8] == testPC+0x12345000, "x8=%#x", s.X[8])
		}},
	{"adr x9, .-4", 0x10ffffe9,
		func(s *ARM64State, m *a64Mem) {},
		func(s *ARM64State, m *a64Mem) string { return want(s.X[9] == testPC-4, "x9=%#x", s.X[9]) }},
	{"ldrsw x11, literal", 0x9800080b,
		func(s *ARM64State, m *a64Mem) { m.mapPage(testPC, false); m.put64(testPC+0x100, 0x80000000) },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[11] == 0xffffffff80000000, "x11=%#x", s.X[11]) }},
	{"ldr q12, literal", 0x9c00080c,
		func(s *ARM64State, m *a64Mem) {
			m.mapPage(testPC, false)
			m.put64(testPC+0x100, 1)
			m.put64(testPC+0x108, 2)
		},
		func(s *ARM64State, m *a64Mem) string { return want(s.V[12] == [2]uint64{1, 2}, "v12=%#x", s.V[12]) }},
	{"add x0, sp, #0 reads sp", 0x910003e0,
		func(s *ARM64State, m *a64Mem) { s.SP = stack },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == stack, "x0=%#x", s.X[0]) }},
	{"orr sp, x0, #1 writes sp", 0xb240001f,
		func(s *ARM64State, m *a64Mem) { s.X[0] = 0x10 },
		func(s *ARM64State, m *a64Mem) string { return want(s.SP == 0x11, "sp=%#x", s.SP) }},
	{"tst x0, #1 writes neither sp nor x31", 0xf240001f,
		func(s *ARM64State, m *a64Mem) { s.X[0], s.SP = 0x8000000000000000, stack },
		func(s *ARM64State, m *a64Mem) string {
			return want(s.SP == stack && s.NZCV == NZCVZ, "sp=%#x nzcv=%#x", s.SP, s.NZCV)
		}},
	{"mov x0, xzr", 0xaa1f03e0,
		func(s *ARM64State, m *a64Mem) { s.X[0], s.SP = 5, 7 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 0, "x0=%#x", s.X[0]) }},
	{"ldp x19, x20, [sp], #16", 0xa8c153f3,
		func(s *ARM64State, m *a64Mem) {
			s.SP = stack
			m.mapPage(stack, false)
			m.put64(stack, 1)
			m.put64(stack+8, 2)
		},
		func(s *ARM64State, m *a64Mem) string {
			return want(s.X[19] == 1 && s.X[20] == 2 && s.SP == stack+16, "x19=%#x x20=%#x sp=%#x", s.X[19], s.X[20], s.SP)
		}},
	{"str w1, [x2, x3, lsl #2]", 0xb8237841,
		func(s *ARM64State, m *a64Mem) {
			s.X[1], s.X[2], s.X[3] = 0xdeadbeefcafe, stack, 3
			m.mapPage(stack, true)
		},
		func(s *ARM64State, m *a64Mem) string {
			return want(m.get64(stack+12) == 0xbeefcafe, "mem=%#x", m.get64(stack+12))
		}},
	{"ldrsb w4, [x5, #-1]!", 0x38dffca4,
		func(s *ARM64State, m *a64Mem) { s.X[5] = stack + 1; m.mapPage(stack, false); m.b[stack] = 0x80 },
		func(s *ARM64State, m *a64Mem) string {
			return want(s.X[4] == 0xffffff80 && s.X[5] == stack, "x4=%#x x5=%#x", s.X[4], s.X[5])
		}},
	{"ldr d1, [x0], #8 zeroes the upper half", 0xfc408401,
		func(s *ARM64State, m *a64Mem) {
			s.X[0], s.V[1] = stack, [2]uint64{9, 9}
			m.mapPage(stack, false)
			m.put64(stack, 7)
		},
		func(s *ARM64State, m *a64Mem) string {
			return want(s.V[1] == [2]uint64{7, 0} && s.X[0] == stack+8, "v1=%#x", s.V[1])
		}},
	{"add x1, x2, w3, sxtw #2", 0x8b23c841,
		func(s *ARM64State, m *a64Mem) { s.X[2], s.X[3] = 100, 0xffffffff }, // w3 = -1
		func(s *ARM64State, m *a64Mem) string { return want(s.X[1] == 96, "x1=%#x", s.X[1]) }},
	{"bic x1, x2, x3, ror #7", 0x8ae31c41,
		func(s *ARM64State, m *a64Mem) { s.X[2], s.X[3] = ^uint64(0), 0x80 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[1] == ^uint64(1), "x1=%#x", s.X[1]) }},
	{"eor w1, w2, #0xff00ff00", 0x52089c41,
		func(s *ARM64State, m *a64Mem) { s.X[2] = 0xffffffff_ffffffff },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[1] == 0x00ff00ff, "x1=%#x", s.X[1]) }},
	{"bti c", 0xd503245f,
		func(s *ARM64State, m *a64Mem) {},
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == testPC+4, "pc=%#x", s.PC) }},
	{"prfm never faults", 0xf9800000,
		func(s *ARM64State, m *a64Mem) {},
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == testPC+4, "pc=%#x", s.PC) }},
	{"ldr xzr, [x0] still loads", 0xf940001f,
		func(s *ARM64State, m *a64Mem) { s.X[0] = stack; m.mapPage(stack, false) },
		func(s *ARM64State, m *a64Mem) string { return want(s.PC == testPC+4, "pc=%#x", s.PC) }},
	{"str xzr, [sp, #-16]! stores zero", 0xf81f0fff,
		func(s *ARM64State, m *a64Mem) { s.SP = stack; m.mapPage(stack-16, true); m.put64(stack-16, 5) },
		func(s *ARM64State, m *a64Mem) string {
			return want(m.get64(stack-16) == 0 && s.SP == stack-16, "mem=%#x sp=%#x", m.get64(stack-16), s.SP)
		}},
	{"lsl w1, w1, #2", 0x531e7421,
		func(s *ARM64State, m *a64Mem) { s.X[1] = 0xffffffff_c0000001 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[1] == 4, "x1=%#x", s.X[1]) }},
	{"asr x1, x1, #1", 0x9341fc21,
		func(s *ARM64State, m *a64Mem) { s.X[1] = 1 << 63 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[1] == 3<<62, "x1=%#x", s.X[1]) }},
	{"sxtw x0, w4", 0x93407c80,
		func(s *ARM64State, m *a64Mem) { s.X[4] = 0x1_8000_0000 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 0xffffffff_80000000, "x0=%#x", s.X[0]) }},
	{"ubfx x2, x3, #8, #4", 0xd3482c62,
		func(s *ARM64State, m *a64Mem) { s.X[3] = 0xabcd },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[2] == 0xb, "x2=%#x", s.X[2]) }},
	{"bfi x2, x3, #60, #4", 0xb3440c62,
		func(s *ARM64State, m *a64Mem) { s.X[2], s.X[3] = 0x0123456789abcdef, 0x5 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[2] == 0x5123456789abcdef, "x2=%#x", s.X[2]) }},
	{"ror x5, x6, #13", 0x93c634c5,
		func(s *ARM64State, m *a64Mem) { s.X[6] = 1 << 13 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[5] == 1, "x5=%#x", s.X[5]) }},
	{"csel w0, w1, wzr, eq", 0x1a9f0020,
		func(s *ARM64State, m *a64Mem) { s.X[1], s.NZCV = 0x1_0000_0007, NZCVZ },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 7, "x0=%#x", s.X[0]) }},
	{"cset w0, ne", 0x1a9f07e0,
		func(s *ARM64State, m *a64Mem) { s.X[0] = 9 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 1, "x0=%#x", s.X[0]) }},
	{"cneg x0, x1, lt", 0xda81a420,
		func(s *ARM64State, m *a64Mem) { s.X[1], s.NZCV = 5, NZCVN },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == ^uint64(4), "x0=%#x", s.X[0]) }},
	{"ccmp x1, #5, #4, ne: condition false", 0xfa451824,
		func(s *ARM64State, m *a64Mem) { s.NZCV = NZCVZ | NZCVC },
		func(s *ARM64State, m *a64Mem) string { return want(s.NZCV == NZCVZ, "nzcv=%#x", s.NZCV) }},
	{"ccmp x1, #5, #4, ne: compare", 0xfa451824,
		func(s *ARM64State, m *a64Mem) { s.X[1] = 5 },
		func(s *ARM64State, m *a64Mem) string { return want(s.NZCV == NZCVZ|NZCVC, "nzcv=%#x", s.NZCV) }},
	{"mul w0, w0, w1", 0x1b017c00,
		func(s *ARM64State, m *a64Mem) { s.X[0], s.X[1] = 0x1_0001_0000, 0x10000 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 0, "x0=%#x", s.X[0]) }},
	{"smulh x0, x1, x2", 0x9b427c20,
		func(s *ARM64State, m *a64Mem) { s.X[1], s.X[2] = ^uint64(0), 1<<63 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 0, "x0=%#x", s.X[0]) }},
	{"umaddl x0, w1, w2, x3", 0x9ba20c20,
		func(s *ARM64State, m *a64Mem) { s.X[1], s.X[2], s.X[3] = 0xffffffff, 0xffffffff, 1 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 0xfffffffe_00000002, "x0=%#x", s.X[0]) }},
	{"sdiv x0, x1, x2 overflow", 0x9ac20c20,
		func(s *ARM64State, m *a64Mem) { s.X[1], s.X[2] = 1<<63, ^uint64(0) },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 1<<63, "x0=%#x", s.X[0]) }},
	{"udiv w0, w1, w2 by zero", 0x1ac20820,
		func(s *ARM64State, m *a64Mem) { s.X[0], s.X[1] = 5, 7 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 0, "x0=%#x", s.X[0]) }},
	{"lsl x0, x1, x2 modulo 64", 0x9ac22020,
		func(s *ARM64State, m *a64Mem) { s.X[1], s.X[2] = 1, 65 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 2, "x0=%#x", s.X[0]) }},
	{"rev x0, x1", 0xdac00c20,
		func(s *ARM64State, m *a64Mem) { s.X[1] = 0x0102030405060708 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 0x0807060504030201, "x0=%#x", s.X[0]) }},
	{"clz w0, w1 of zero", 0x5ac01020,
		func(s *ARM64State, m *a64Mem) { s.X[1] = 1 << 40 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 32, "x0=%#x", s.X[0]) }},
	{"cls x0, x1", 0xdac01420,
		func(s *ARM64State, m *a64Mem) { s.X[1] = 0xfff0000000000000 },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 11, "x0=%#x", s.X[0]) }},
	{"ldr x0, [x1] with a tag ignores the top byte", 0xf9400020,
		func(s *ARM64State, m *a64Mem) { s.X[1] = 0x5a<<56 | stack; m.mapPage(stack, false); m.put64(stack, 3) },
		func(s *ARM64State, m *a64Mem) string { return want(s.X[0] == 3, "x0=%#x", s.X[0]) }},
}

// TestARM64Step runs each case of a64StepCases from a zeroed state at
// testPC: the instruction must be supported, execute without error and
// leave the state its check expects.
func TestARM64Step(t *testing.T) {
	for _, c := range a64StepCases {
		t.Run(c.name, func(t *testing.T) {
			inst := a64Decode(t, c.w, testPC)
			if err := ARM64Supported(&inst); err != nil {
				t.Fatalf("ARM64Supported: %v", err)
			}
			var s ARM64State
			s.PC = testPC
			m := newA64Mem()
			c.setup(&s, m)
			if err := EmulateARM64(&inst, &s, m); err != nil {
				t.Fatalf("%s: %v", inst.Text(), err)
			}
			if msg := c.check(&s, m); msg != "" {
				t.Errorf("%s: %s", inst.Text(), msg)
			}
		})
	}
}

func want(ok bool, format string, args ...any) string {
	if ok {
		return ""
	}
	return "got " + fmt.Sprintf(format, args...)
}

// TestARM64PAC: the PAC instructions are refused unless the CPU lacks
// PAuth, where the hint-space ones are NOPs.
func TestARM64PAC(t *testing.T) {
	for _, w := range []uint32{0xd503233f, 0xd50323bf, 0xd50320ff, 0xd65f0bff} {
		inst := a64Decode(t, w, testPC)
		if err := ARM64Supported(&inst); !errors.Is(err, ErrNotEmulated) {
			t.Errorf("%s: ARM64Supported = %v, want ErrNotEmulated", inst.Text(), err)
		}
		err := ARM64{NoPAuth: true}.Supported(&inst)
		hint := inst.Class == decode.ARM64ClassHint
		if hint != (err == nil) {
			t.Errorf("%s: NoPAuth Supported = %v", inst.Text(), err)
		}
		if hint {
			s := ARM64State{PC: testPC, X: [31]uint64{30: 0xabc}}
			if err := (ARM64{NoPAuth: true}).Step(&inst, &s, newA64Mem()); err != nil || s.PC != testPC+4 || s.X[30] != 0xabc {
				t.Errorf("%s: %v pc=%#x x30=%#x", inst.Text(), err, s.PC, s.X[30])
			}
		}
	}
}

// TestARM64Refusals: the state-dependent refusals and the faults leave
// the state and memory unchanged.
func TestARM64Refusals(t *testing.T) {
	type tc struct {
		name  string
		w     uint32
		setup func(s *ARM64State, m *a64Mem)
		fault bool // a *Fault, else ErrNotEmulated
	}
	for _, c := range []tc{
		{"sp misaligned", 0xa9be7bfd, func(s *ARM64State, m *a64Mem) { s.SP = stack + 8; m.mapPage(stack, true) }, false},
		{"tagged branch", 0xd61f00e0, func(s *ARM64State, m *a64Mem) { s.X[7] = 1<<56 | 0x400000 }, false},
		{"stp across a read-only page is undone", 0xa9be7bfd, func(s *ARM64State, m *a64Mem) {
			s.SP = stack + 16
			m.mapPage(stack-4096, false)
			m.mapPage(stack, true)
		}, true},
		{"load from the kernel half", 0xf9400020, func(s *ARM64State, m *a64Mem) { s.X[1] = 0x0080_0000_0000_1000 }, true},
		{"ldp whose second load faults", 0xa9405033, func(s *ARM64State, m *a64Mem) { s.X[1] = stack + 4096 - 8; m.mapPage(stack, false) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			inst := a64Decode(t, c.w, testPC)
			s := ARM64State{PC: testPC, X: [31]uint64{19: 1, 20: 2, 29: 3, 30: 4}}
			m := newA64Mem()
			c.setup(&s, m)
			before := s
			snapshot := map[uint64]byte{}
			for k, v := range m.b {
				snapshot[k] = v
			}
			err := EmulateARM64(&inst, &s, m)
			var f *Fault
			switch {
			case c.fault && !errors.As(err, &f):
				t.Fatalf("%s: %v, want a *Fault", inst.Text(), err)
			case !c.fault && !errors.Is(err, ErrNotEmulated):
				t.Fatalf("%s: %v, want ErrNotEmulated", inst.Text(), err)
			}
			if s != before {
				t.Errorf("state changed:\n%s", s.String())
			}
			if len(m.b) != len(snapshot) {
				t.Errorf("memory changed")
			}
			for k, v := range snapshot {
				if m.b[k] != v {
					t.Errorf("memory at %#x changed", k)
				}
			}
		})
	}
}

// TestARM64Unpredictable: the constrained-unpredictable and unallocated
// forms are refused, their well-defined neighbours are not.
func TestARM64Unpredictable(t *testing.T) {
	for _, w := range []uint32{
		0xf8408420, // ldr x0, [x1], #8
		0xa9c10420, // ldp x0, x1, [x1, #16]! is refused, but not this: ldp x0, x1, [x1, #16]!
		0xa9410400, // ldp x0, x1, [x0, #16]: no writeback
		0x29400422, // ldp w2, w1, [x1]
	} {
		inst := a64Decode(t, w, testPC)
		err := ARM64Supported(&inst)
		if w == 0xa9c10420 {
			if !errors.Is(err, ErrNotEmulated) {
				t.Errorf("%#08x %s: %v, want ErrNotEmulated", w, inst.Text(), err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%#08x %s: %v", w, inst.Text(), err)
		}
	}
	for _, w := range []uint32{
		0xf8408400, // ldr x0, [x0], #8: writeback into the data register
		0xf8008400, // str x0, [x0], #8
		0xa9c10400, // ldp x0, x1, [x0, #16]!
		0x29400421, // ldp w1, w1, [x1]
		0x12c00000, // movn w0, #0, lsl #32: unallocated
		0x8bc00000, // add with shift type 3: unallocated
		0xb240fc00, // orr x0, x0, #<all ones>: reserved
		0x69000000, // stgp: memory tagging
		0xc85f7c20, // ldxr x0, [x1]
		0xf8a08020, // swp: atomic
		0xd4000001, // svc #0
		0xd503209f, // sev
	} {
		inst := a64Decode(t, w, testPC)
		if err := ARM64Supported(&inst); !errors.Is(err, ErrNotEmulated) {
			t.Errorf("%#08x %s: %v, want ErrNotEmulated", w, inst.Text(), err)
		}
	}
}

// TestARM64DecodeBitMasks checks the bitmask immediates against a direct
// construction for every element size, rotation and run length.
func TestARM64DecodeBitMasks(t *testing.T) {
	for _, width := range []int{32, 64} {
		for n := uint32(0); n < 2; n++ {
			for immr := uint32(0); immr < 64; immr++ {
				for imms := uint32(0); imms < 64; imms++ {
					got, ok := a64DecodeBitMasks(n, imms, immr, width)
					wantV, wantOK := refBitMask(n, imms, immr, width)
					if ok != wantOK || got != wantV {
						t.Fatalf("N=%d immr=%d imms=%d width %d: %#x,%v want %#x,%v", n, immr, imms, width, got, ok, wantV, wantOK)
					}
				}
			}
		}
	}
}

// refBitMask builds a bitmask immediate bit by bit.
func refBitMask(n, imms, immr uint32, width int) (uint64, bool) {
	var esize uint32
	switch {
	case n == 1:
		esize = 64
	case imms&0x20 == 0:
		esize = 32
	case imms&0x10 == 0:
		esize = 16
	case imms&0x8 == 0:
		esize = 8
	case imms&0x4 == 0:
		esize = 4
	case imms&0x2 == 0:
		esize = 2
	default:
		return 0, false
	}
	s, r := imms&(esize-1), immr&(esize-1)
	if s == esize-1 || int(esize) > width {
		return 0, false
	}
	var elem [64]bool
	for i := uint32(0); i <= s; i++ {
		elem[(i+esize-r)%esize] = true
	}
	var v uint64
	for i := 0; i < width; i++ {
		if elem[uint32(i)%esize] {
			v |= 1 << uint(i)
		}
	}
	return v, true
}
