package x86cpu

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
)

// Errors of the oracle's memory model.
var (
	errEmuUnmapped = errors.New("not mapped")
	errEmuReadOnly = errors.New("not writable")
	// errEmuReserved marks an access to the oracle's own areas; such a
	// case is not run.
	errEmuReserved = errors.New("oracle area")
)

// emuModel is the memory of the child as the emulator sees it: the code
// windows and the read-only page can be read, the read-write window read
// and written, and everything else faults. It records the one write an
// instruction makes instead of applying it.
type emuModel struct {
	img      *EmuImage
	wrote    bool
	wAddr    uint64
	wSize    int
	wVal     uint64
	reserved bool
}

// Access permissions in the model.
const (
	emuPermNone = iota
	emuPermRead
	emuPermWrite
	emuPermReserved
)

// emuVsyscallPage is the legacy vsyscall page, which the child keeps.
const emuVsyscallPage = 0xffff_ffff_ff60_0000

// byteAt returns the byte at a and its permission.
func (m *emuModel) byteAt(a uint64) (byte, int) {
	switch {
	case a >= EmuRWAddr && a < EmuRWAddr+EmuRWSize:
		return m.img.RW[a-EmuRWAddr], emuPermWrite
	case a >= EmuROAddr && a < EmuROAddr+EmuROSize:
		return m.img.RO[a-EmuROAddr], emuPermRead
	case a >= EmuCodeLow && a < EmuCodeLow+EmuCodeSize:
		return m.img.CodeLow[a-EmuCodeLow], emuPermRead
	case a >= EmuCodeHigh && a < EmuCodeHigh+EmuCodeSize:
		return m.img.CodeHigh[a-EmuCodeHigh], emuPermRead
	case a >= emuCtrlAddr && a < emuCtrlLimit, a >= emuVsyscallPage && a < emuVsyscallPage+0x1000:
		return 0, emuPermReserved
	}
	return 0, emuPermNone
}

// Read implements emulate.Memory.
func (m *emuModel) Read(addr uint64, size int) (uint64, error) {
	var v uint64
	for i := 0; i < size; i++ {
		a := addr + uint64(i)
		b, p := m.byteAt(a)
		switch p {
		case emuPermReserved:
			m.reserved = true
			return 0, errEmuReserved
		case emuPermNone:
			return 0, &emulate.Fault{Addr: a, Err: errEmuUnmapped}
		}
		v |= uint64(b) << (8 * i)
	}
	return v, nil
}

// Write implements emulate.Memory: all bytes or none.
func (m *emuModel) Write(addr uint64, size int, val uint64) error {
	if err := m.CheckWrite(addr, size); err != nil {
		return err
	}
	m.wrote, m.wAddr, m.wSize, m.wVal = true, addr, size, val
	return nil
}

// CheckWrite implements emulate.WriteChecker: the fault a write would
// raise, at the first byte that cannot be written.
func (m *emuModel) CheckWrite(addr uint64, size int) error {
	for i := 0; i < size; i++ {
		a := addr + uint64(i)
		switch _, p := m.byteAt(a); p {
		case emuPermReserved:
			m.reserved = true
			return errEmuReserved
		case emuPermNone:
			return &emulate.Fault{Addr: a, Err: errEmuUnmapped}
		case emuPermRead:
			return &emulate.Fault{Addr: a, Err: errEmuReadOnly}
		}
	}
	return nil
}

// writes returns the quadwords of the read-write window the recorded
// write changed, by ascending address.
func (m *emuModel) writes() []EmuMemWord {
	if !m.wrote {
		return nil
	}
	var out []EmuMemWord
	for q := m.wAddr &^ 7; q < m.wAddr+uint64(m.wSize); q += 8 {
		off := q - EmuRWAddr
		old := emuLE64(m.img.RW[off:])
		v := old
		for i := 0; i < 8; i++ {
			a := q + uint64(i)
			if a >= m.wAddr && a < m.wAddr+uint64(m.wSize) {
				v = v&^(0xff<<(8*i)) | (m.wVal>>(8*(a-m.wAddr))&0xff)<<(8*i)
			}
		}
		if v != old {
			out = append(out, EmuMemWord{Addr: q, Val: v})
		}
	}
	return out
}

// EmuEmulatorResult is what the emulator did with a case.
type EmuEmulatorResult struct {
	State  emulate.X86State // the state after the instruction (the initial one if it faulted)
	Err    error            // a *emulate.Fault, or another error when the emulator refused
	Writes []EmuMemWord     // changed quadwords of the read-write window
}

// EmuMismatch is a case on which the emulator and the CPU disagree.
type EmuMismatch struct {
	Case      EmuCase
	ImageSeed uint64        // seed of the memory image the case ran with
	Vendor    decode.Vendor // the CPU's vendor, which the emulator followed
	Text      string        // disassembly
	Reason    string        // what differs
	CPU       EmuCPUResult
	Emu       EmuEmulatorResult
	// Compared is the mask of RFLAGS bits that were compared.
	Compared uint64
}

// emuVerdict is the outcome of checking one case.
type emuVerdict uint8

const (
	emuCompleted emuVerdict = iota // both completed, same state
	emuFaulted                     // both faulted the same way
	emuSkipped                     // the case touched the oracle's areas
	emuNotRun                      // the host could not start the case (EmuCPUResult.NotRun)
	emuMismatched
)

// emuCompareFlags is the part of RFLAGS compared: the status flags and DF.
const emuCompareFlags = emulate.FlagsStatus | emulate.FlagDF

// emulateX86 is how checkEmu runs the emulator: x.Step. It is a variable
// only so that a test can spoil the emulator's answer and check that
// checkEmu reports each kind of disagreement; nothing else changes it.
var emulateX86 = emulate.X86.Step

// checkEmu runs the emulator x on a case and compares it with what the
// CPU did. inst is the decoded case. It returns the verdict and, for a
// mismatch, the report.
func checkEmu(c *EmuCase, inst *decode.X86Inst, img *EmuImage, cpu *EmuCPUResult, x emulate.X86) (emuVerdict, *EmuMismatch) {
	if cpu.NotRun {
		return emuNotRun, nil
	}
	model := emuModel{img: img}
	st := c.Init
	err := emulateX86(x, inst, &st, &model)
	if model.reserved {
		return emuSkipped, nil
	}
	emu := EmuEmulatorResult{State: st, Err: err, Writes: model.writes()}
	mask := emuCompareFlags &^ emulate.X86UndefinedFlags(inst, &c.Init)
	mis := func(format string, args ...any) (emuVerdict, *EmuMismatch) {
		return emuMismatched, &EmuMismatch{
			Case: *c, ImageSeed: img.Seed, Vendor: x.Vendor, Text: inst.Text("intel"),
			Reason: fmt.Sprintf(format, args...), CPU: *cpu, Emu: emu, Compared: mask,
		}
	}
	var f *emulate.Fault
	if err != nil && !errors.As(err, &f) {
		return mis("emulator refused: %v", err)
	}
	if cpu.WritesLost {
		return mis("cpu changed more than %d quadwords", emuMaxDiffs)
	}
	switch {
	case cpu.Signal == emuSigTrap && cpu.Trap == emuTrapDB:
		if f != nil {
			return mis("cpu completed, emulator faulted: %v", f)
		}
		if d := emuStateDiff(&cpu.State, &emu.State, mask); d != "" {
			return mis("final state differs: %s", d)
		}
		if d := emuWritesDiff(cpu.Writes, emu.Writes); d != "" {
			return mis("memory differs: %s", d)
		}
		return emuCompleted, nil
	case cpu.Signal == emuSigSegv || cpu.Signal == emuSigBus:
		if f == nil {
			return mis("cpu faulted (trap %d at %#x), emulator completed", cpu.Trap, cpu.Addr)
		}
		want := map[int]emulate.FaultKind{emuTrapPF: emulate.FaultPage, emuTrapGP: emulate.FaultGP, emuTrapSS: emulate.FaultSS}[cpu.Trap]
		if want != f.Kind {
			return mis("cpu raised trap %d, emulator %v", cpu.Trap, f.Kind)
		}
		if f.Kind == emulate.FaultPage {
			if f.Addr != cpu.Addr {
				return mis("page fault at %#x on the cpu, %#x in the emulator", cpu.Addr, f.Addr)
			}
			if w := cpu.ErrCode&2 != 0; w != (f.Access == emulate.AccessWrite) {
				return mis("page fault on a %s on the cpu, a %v in the emulator", map[bool]string{false: "read", true: "write"}[w], f.Access)
			}
		}
		if d := emuStateDiff(&cpu.State, &c.Init, emuCompareFlags); d != "" {
			return mis("cpu state changed by a faulting instruction: %s", d)
		}
		if d := emuWritesDiff(cpu.Writes, emu.Writes); d != "" {
			return mis("memory differs after the fault: %s", d)
		}
		return emuFaulted, nil
	}
	return mis("unexpected signal %d (trap %d, code %d)", cpu.Signal, cpu.Trap, cpu.Code)
}

// emuStateDiff describes how two states differ in the registers, RIP and the
// flags under mask, or returns "".
func emuStateDiff(a, b *emulate.X86State, mask uint64) string {
	var d []string
	for r := range a.GPR {
		if a.GPR[r] != b.GPR[r] {
			d = append(d, fmt.Sprintf("%s %#x/%#x", decode.X86RegName(r), a.GPR[r], b.GPR[r]))
		}
	}
	if a.RIP != b.RIP {
		d = append(d, fmt.Sprintf("rip %#x/%#x", a.RIP, b.RIP))
	}
	if x := (a.RFLAGS ^ b.RFLAGS) & mask; x != 0 {
		d = append(d, fmt.Sprintf("rflags %#x/%#x (bits %#x)", a.RFLAGS&mask, b.RFLAGS&mask, x))
	}
	return strings.Join(d, ", ")
}

// emuWritesDiff compares the changed quadwords of the CPU and the emulator.
func emuWritesDiff(cpu, emu []EmuMemWord) string {
	c := append([]EmuMemWord(nil), cpu...)
	e := append([]EmuMemWord(nil), emu...)
	emuSortWords(c)
	emuSortWords(e)
	if len(c) == len(e) {
		same := true
		for i := range c {
			if c[i] != e[i] {
				same = false
			}
		}
		if same {
			return ""
		}
	}
	return fmt.Sprintf("cpu %s, emulator %s", emuWordsText(c), emuWordsText(e))
}

// emuWordsText renders memory words.
func emuWordsText(w []EmuMemWord) string {
	if len(w) == 0 {
		return "[]"
	}
	s := make([]string, len(w))
	for i, x := range w {
		s[i] = fmt.Sprintf("[%#x]=%#x", x.Addr, x.Val)
	}
	return strings.Join(s, " ")
}

// String renders the mismatch for a person: the instruction, the reason,
// the initial state and both final states.
func (m *EmuMismatch) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mismatch: %s  %s  (class %s)\n  %s\n", hex.EncodeToString(m.Case.Bytes), m.Text, m.Case.Class, m.Reason)
	fmt.Fprintf(&b, "  initial (image seed %#x):\n%s\n", m.ImageSeed, emuIndent(m.Case.Init.String()))
	fmt.Fprintf(&b, "  cpu: signal %d trap %d err %#x addr %#x, writes %s\n%s\n", m.CPU.Signal, m.CPU.Trap, m.CPU.ErrCode, m.CPU.Addr, emuWordsText(m.CPU.Writes), emuIndent(m.CPU.State.String()))
	res := "completed"
	if m.Emu.Err != nil {
		res = m.Emu.Err.Error()
	}
	fmt.Fprintf(&b, "  emulator: %s, writes %s\n%s\n", res, emuWordsText(m.Emu.Writes), emuIndent(m.Emu.State.String()))
	fmt.Fprintf(&b, "  flags compared: %#x\n", m.Compared)
	fmt.Fprintf(&b, "  vector: %s", m.Vector())
	return b.String()
}

// emuIndent indents every line by four spaces.
func emuIndent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
