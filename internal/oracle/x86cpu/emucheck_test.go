package x86cpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
)

// spoilEmulator makes checkEmu run the emulator and then hand spoil its
// answer (the state, the model holding the one recorded write, the error)
// until the test ends.
func spoilEmulator(t *testing.T, spoil func(st *emulate.X86State, m *emuModel, err error) error) {
	t.Helper()
	t.Cleanup(func() { emulateX86 = emulate.X86.Step })
	emulateX86 = func(x emulate.X86, inst *decode.X86Inst, st *emulate.X86State, mem emulate.Memory) error {
		err := x.Step(inst, st, mem)
		return spoil(st, mem.(*emuModel), err)
	}
}

// TestEmuCheckerCatches runs cases on the CPU, then checks them against an
// emulator whose answer is spoiled in one way at a time: each spoiled
// answer must be reported with the reason that names what differs, a
// spoiled flag the manuals leave undefined for the instruction must not
// be, and the intact answers must agree.
func TestEmuCheckerCatches(t *testing.T) {
	o := newTestEmuOracle(t)
	x := hostEmulator(t)
	img := NewEmuImage(11)
	mk := func(addr uint64, code string, set func(*emulate.X86State)) EmuCase {
		return newEmuTestCase(t, "checker", addr, code, set)
	}
	cases := []EmuCase{
		// add eax, ebx: every status flag is defined.
		ckAdd: mk(EmuCodeLow, "01d8", func(s *emulate.X86State) {
			s.GPR[decode.RAX] = 0x7fffffff
			s.GPR[decode.RBX] = 1
		}),
		// and eax, ebx: AF is undefined.
		ckAnd: mk(EmuCodeLow+16, "21d8", func(s *emulate.X86State) {
			s.GPR[decode.RAX] = 0xf0f0
			s.GPR[decode.RBX] = 0xff00
		}),
		// mov [rax], ebx in the read-write window.
		ckStore: mk(EmuCodeLow+32, "8918", func(s *emulate.X86State) {
			s.GPR[decode.RAX] = EmuRWAddr + 0x100
			s.GPR[decode.RBX] = 0x11223344
		}),
		// mov rax, [rax] from an unmapped address: a page fault on a read.
		ckLoad: mk(EmuCodeLow+48, "488b00", func(s *emulate.X86State) { s.GPR[decode.RAX] = 0x1234 }),
	}
	insts, out := runEmuOracle(t, o, img, cases, x.Vendor)
	// The intact emulator agrees with the CPU on every case.
	wantVerdict := []emuVerdict{ckAdd: emuCompleted, ckAnd: emuCompleted, ckStore: emuCompleted, ckLoad: emuFaulted}
	for i := range cases {
		if v, m := checkEmu(&cases[i], &insts[i], img, &out[i], x); v != wantVerdict[i] || m != nil {
			t.Fatalf("case %d (%s): verdict %d, want %d; the intact emulator disagrees: %v", i, insts[i].Text("intel"), v, wantVerdict[i], m)
		}
	}
	for _, sp := range emuSpoilers(t, img) {
		t.Run(strings.ReplaceAll(sp.what, " ", "_"), func(t *testing.T) {
			spoilEmulator(t, sp.spoil)
			c := &cases[sp.c]
			v, m := checkEmu(c, &insts[sp.c], img, &out[sp.c], x)
			if sp.reason == "" {
				if v != wantVerdict[sp.c] || m != nil {
					t.Fatalf("%s: reported (verdict %d): %v", insts[sp.c].Text("intel"), v, m)
				}
				return
			}
			if v != emuMismatched || m == nil {
				t.Fatalf("%s: not reported (verdict %d)", insts[sp.c].Text("intel"), v)
			}
			if !strings.Contains(m.Reason, sp.reason) {
				t.Errorf("%s: reason %q, want it to contain %q", insts[sp.c].Text("intel"), m.Reason, sp.reason)
			}
			if s := m.String(); !strings.Contains(s, m.Reason) || !strings.Contains(s, "vector: ") {
				t.Errorf("the report does not give the reason and the vector:\n%s", s)
			}
		})
	}
}

// The cases of TestEmuCheckerCatches, by index.
const (
	ckAdd = iota
	ckAnd
	ckStore
	ckLoad
)

// emuSpoiler is one way TestEmuCheckerCatches spoils the emulator's
// answer to case c, and the reason the checker must give ("" when the
// spoiled answer must still agree).
type emuSpoiler struct {
	what   string
	c      int
	spoil  func(st *emulate.X86State, m *emuModel, err error) error
	reason string
}

// emuSpoilers returns the spoilers of TestEmuCheckerCatches for its cases
// in img.
func emuSpoilers(t *testing.T, img *EmuImage) []emuSpoiler {
	fault := func(err error) *emulate.Fault {
		var f *emulate.Fault
		if !errors.As(err, &f) {
			t.Fatalf("the emulator did not fault: %v", err)
		}
		return f
	}
	return []emuSpoiler{
		{"a register", ckAdd, func(st *emulate.X86State, m *emuModel, err error) error {
			st.GPR[decode.RBX] ^= 0x10
			return err
		}, "final state differs: rbx 0x1/0x11"},
		{"rip", ckAdd, func(st *emulate.X86State, m *emuModel, err error) error {
			st.RIP++
			return err
		}, "final state differs: rip 0x100000000002/0x100000000003"},
		{"CF, defined for add", ckAdd, func(st *emulate.X86State, m *emuModel, err error) error {
			st.RFLAGS ^= emulate.FlagCF
			return err
		}, "final state differs: rflags 0x894/0x895 (bits 0x1)"},
		{"AF, defined for add", ckAdd, func(st *emulate.X86State, m *emuModel, err error) error {
			st.RFLAGS ^= emulate.FlagAF
			return err
		}, "(bits 0x10)"},
		{"DF", ckAdd, func(st *emulate.X86State, m *emuModel, err error) error {
			st.RFLAGS ^= emulate.FlagDF
			return err
		}, "(bits 0x400)"},
		{"ZF, defined for and", ckAnd, func(st *emulate.X86State, m *emuModel, err error) error {
			st.RFLAGS ^= emulate.FlagZF
			return err
		}, "(bits 0x40)"},
		{"AF, undefined for and", ckAnd, func(st *emulate.X86State, m *emuModel, err error) error {
			st.RFLAGS ^= emulate.FlagAF
			return err
		}, ""},
		{"a byte written", ckStore, func(st *emulate.X86State, m *emuModel, err error) error {
			m.wVal ^= 0x100
			return err
		}, "memory differs: cpu [0x100000101100]="},
		{"no write", ckStore, func(st *emulate.X86State, m *emuModel, err error) error {
			m.wrote = false
			return err
		}, ", emulator []"},
		{"a fault where the cpu completed", ckAdd, func(st *emulate.X86State, m *emuModel, err error) error {
			return &emulate.Fault{Addr: 0x1234, Size: 4, Access: emulate.AccessRead, Kind: emulate.FaultPage, Err: errEmuUnmapped}
		}, "cpu completed, emulator faulted: page fault: read of 4 bytes at 0x1234"},
		{"completion where the cpu faulted", ckLoad, func(st *emulate.X86State, m *emuModel, err error) error {
			fault(err)
			st.RIP += 3
			return nil
		}, "cpu faulted (trap 14 at 0x1234), emulator completed"},
		{"the fault address", ckLoad, func(st *emulate.X86State, m *emuModel, err error) error {
			fault(err).Addr += 8
			return err
		}, "page fault at 0x1234 on the cpu, 0x123c in the emulator"},
		{"the fault kind", ckLoad, func(st *emulate.X86State, m *emuModel, err error) error {
			fault(err).Kind = emulate.FaultGP
			return err
		}, "cpu raised trap 14, emulator general protection"},
		{"the faulting access", ckLoad, func(st *emulate.X86State, m *emuModel, err error) error {
			fault(err).Access = emulate.AccessWrite
			return err
		}, "page fault on a read on the cpu, a write in the emulator"},
		{"a write before the fault", ckLoad, func(st *emulate.X86State, m *emuModel, err error) error {
			m.wrote, m.wAddr, m.wSize, m.wVal = true, EmuRWAddr, 1, 0xff^uint64(img.RW[0])
			return err
		}, "memory differs after the fault: cpu [], emulator [0x100000101000]="},
	}
}
