package xol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/reason"
	"github.com/probeopt/probeopt/internal/x86enc"
)

// Refusal code of the x86-64 relocation, in addition to those of
// CheckX86.
const (
	// RefuseRIPRelNoScratch: the RIP-relative operand lies beyond +-2 GiB
	// of the slot, so the displacement cannot be recomputed, and it cannot
	// be addressed through a scratch register either (Fixup.Scratch is -1:
	// none is known to be free, or the rewrite would change the encoding's
	// validity). A slot nearer the operand works.
	RefuseRIPRelNoScratch reason.Code = "riprel-no-scratch"
)

// Errors of RelocateX86 and of the step methods of X86Copy. Refusals are
// *RefusalError values instead (errors.Is ErrNotRelocatable).
var (
	// ErrX86Inst means the instruction given is not a decoded x86-64
	// instruction (nil, or a length outside 1..15).
	ErrX86Inst = errors.New("not a decoded x86-64 instruction")
	// ErrX86Slot means the copy cannot be placed at the slot address: its
	// bytes would leave the lower canonical half of the address space.
	ErrX86Slot = errors.New("unusable slot address")
	// ErrX86Encode means the relocated instruction did not decode back to
	// the intended form. It reports a defect of the relocator, never of
	// the input.
	ErrX86Encode = errors.New("relocated copy does not decode as intended")
	// ErrX86State means registers given to Enter, Fixup or FixupSignal do
	// not belong to this copy: the instruction pointer is not the original
	// address (Enter), or after the step it is not one the copy can reach
	// (Fixup), or the stack pointer did not move as the instruction moves
	// it.
	ErrX86State = errors.New("registers do not match the out-of-line step")
)

// X86Regs is the part of an x86-64 register file that an out-of-line step
// reads and corrects.
type X86Regs struct {
	// GPR holds the general-purpose registers by decode register number:
	// rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8..r15.
	GPR    [16]uint64
	RIP    uint64
	RFLAGS uint64
}

// X86Memory is the traced program's memory as the fixups need it: at most
// eight bytes at the stack pointer are read and written. Offsets are
// virtual addresses. An *os.File of /proc/PID/mem satisfies it.
type X86Memory interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
}

// X86Options control RelocateX86. A nil *X86Options means the zero value.
type X86Options struct {
	// ForceScratch addresses a RIP-relative operand through the scratch
	// register even when a recomputed displacement would reach it, so
	// that the copy's bytes do not depend on the slot's distance. Such a
	// copy cannot be boosted. When no scratch register is free the
	// displacement is recomputed anyway (if it reaches).
	ForceScratch bool
}

// X86Form says how RelocateX86 turned the instruction into the copy.
type X86Form uint8

const (
	// X86FormCopy: the instruction is copied unchanged; it does not depend
	// on its address.
	X86FormCopy X86Form = iota
	// X86FormDisp: the disp32 of the RIP-relative operand is recomputed
	// for the slot.
	X86FormDisp
	// X86FormScratch: the RIP-relative operand is addressed through the
	// scratch register (ModRM mod=10 with the scratch register as base,
	// the same disp32), which holds the original's next address during
	// the step.
	X86FormScratch
	// X86FormRetarget: a relative jmp, jcc or call re-encoded with a rel32
	// to the original target (rel8 forms are widened).
	X86FormRetarget
	// X86FormStub: a branch to stubs inside the copy: loop/jrcxz (rel8
	// only), a jcc whose target a rel32 from the slot cannot reach, or a
	// call beyond reach that calls a stub jumping to the target.
	X86FormStub
	// X86FormAbs: an unconditional jmp beyond reach, done as an indirect
	// jump through the 64-bit target stored after it.
	X86FormAbs
)

var x86FormNames = [...]string{"copy", "disp", "scratch", "retarget", "stub", "abs"}

// String returns the form's name: "copy", "disp", "scratch", "retarget",
// "stub" or "abs".
func (f X86Form) String() string {
	if int(f) < len(x86FormNames) {
		return x86FormNames[f]
	}
	return "unknown"
}

// X86Outcome says what the engine does after Fixup.
type X86Outcome uint8

const (
	// X86Done: the registers (and the stack word fixed) are now what the
	// original instruction would have left; resume the thread.
	X86Done X86Outcome = iota
	// X86StepAgain: a REP string instruction finished one iteration and
	// the instruction pointer is still on the copy. Single-step again
	// without changing the registers (Fixup left them alone), then call
	// Fixup again with the same before registers.
	X86StepAgain
)

func (o X86Outcome) String() string {
	if o == X86StepAgain {
		return "step-again"
	}
	return "done"
}

// Register-file constants.
const (
	x86FlagTF = 1 << 8
	x86RSP    = decode.RSP
)

// x86Landing maps an address inside the copy, reached after the step, to
// the original address it stands for.
type x86Landing struct {
	off int    // offset in Code
	to  uint64 // original address
}

// X86Copy is an x86-64 instruction relocated to a slot: the bytes to place
// there and how to run them.
//
// Single step. At a hit the thread is stopped with its instruction pointer
// on the original instruction; keep those registers as before. Enter sets
// the instruction pointer to Slot and the scratch register to ScratchValue;
// the engine writes the registers and single-steps the thread (the trap
// flag or PTRACE_SINGLESTEP: exactly one instruction runs, the one at
// Slot). At the step's trap it reads the registers as after and calls
// Fixup, which moves the instruction pointer to where the original would
// have gone, corrects the return address of a call and the trap flag in
// the image pushf stored, restores the scratch register and the trap
// flag, and says whether to step again (a REP string iteration). If
// another signal stops the thread during the step (the instruction
// faulted, or an asynchronous signal arrived before it ran), FixupSignal
// moves the instruction pointer back to the original instruction and
// restores the scratch register, so that the signal is delivered as if it
// had happened there.
//
// Boost. When Boost is set the copy can instead run without a trap: the
// engine sets the instruction pointer to Slot+BoostOff (BoostEnter) and
// resumes the thread; the code at the slot does what the original does and
// jumps on to the original's next instruction or branch target, with no
// fixup. A fault of the relocated instruction leaves the instruction
// pointer on the boost entry (FixupSignal maps it back); any other stop
// inside the copy is harmless, the thread continues in the slot after it.
// A slot must stay mapped while any thread's instruction pointer lies in
// it.
//
// An X86Copy is immutable after RelocateX86 returns: the same copy may
// serve several threads at once; the per-hit state is the before
// registers the engine keeps.
//
// Limits: under a user shadow stack (CET) a stepped call leaves the slot
// address on the shadow stack, so its return would fault; calls must then
// be emulated. x87 instructions record the slot as the last x87
// instruction pointer (FIP), which fxsave and fnstenv can observe.
type X86Copy struct {
	// Orig is the address of the original instruction, Len its length and
	// Next = Orig+Len.
	Orig uint64
	Len  int
	Next uint64
	// Slot is where Code must be placed.
	Slot uint64
	// Code holds the bytes for the slot, at most X86MaxCopy: the
	// relocated instruction (the one a single step executes, StepLen bytes
	// at offset 0), then the stubs and the trailer: a jump to Next after
	// an instruction that may fall through when Boost is set, else int3 (a
	// step that ran past the instruction stops there). The slot must be
	// readable as well as executable (a jump beyond reach loads its target
	// from the slot).
	Code []byte
	// StepLen is the length of the instruction at Slot.
	StepLen int
	// Form says how the instruction was relocated.
	Form X86Form
	// Check is what CheckX86 said about the instruction.
	Check Fixup
	// Scratch is the register (decode register number) that must hold
	// ScratchValue while the copy executes, or -1. Fixup and FixupSignal
	// restore its value from the before registers.
	Scratch      int
	ScratchValue uint64
	// Boost says the copy may run without a trap from Slot+BoostOff (see
	// the type's comment). It is false for copies that use the scratch
	// register, for popf (a trap flag it sets must take effect after the
	// original's next instruction, not after the jump back) and for
	// indirect and far calls (their return address). A direct call has a
	// separate boost entry that pushes Next and jumps to the target.
	Boost    bool
	BoostOff int

	branch   decode.BranchKind
	target   uint64 // target of a relative branch
	landings []x86Landing
	direct   bool // a relative branch's step may land on target itself
	farWidth int  // bytes of the return address of a call (8 near; far: 2 or 4)
	pushfW   int  // bytes pushf stores
}

// The copies are written with package x86enc; the bytes a copy takes
// from the original instruction are appended raw.

// rel32 returns the rel32 that an instruction ending at end needs to reach
// to, and whether it fits.
func rel32(end, to uint64) (int32, bool) {
	d := int64(to - end)
	return int32(d), d == int64(int32(d))
}

// jmp appends a jump to to: jmp rel32 when it reaches, else
// jmp *0(%rip) followed by the 64-bit target.
func jmp(a *x86enc.Asm, to uint64) {
	if x86enc.Reaches(a.PC()+5, to) {
		a.JmpTo(to)
		return
	}
	jmpAbs(a, to)
}

// jmpAbs appends jmp *0(%rip) followed by the 64-bit target.
func jmpAbs(a *x86enc.Asm, to uint64) {
	a.JmpMem(x86enc.RIP(a.PC() + 6))
	a.Raw(binary.LittleEndian.AppendUint64(nil, to))
}

// jmpLen returns the length of the jump jmp(to) would append at pc.
func jmpLen(pc, to uint64) int {
	if x86enc.Reaches(pc+5, to) {
		return 5
	}
	return 14
}

// RelocateX86 relocates the instruction inst (decoded at its original
// address inst.Addr) to the slot at address slot, for a single step or a
// boosted run (see X86Copy).
//
// What changes in the copy:
//   - a RIP-relative operand: the disp32 is recomputed when the slot lies
//     within +-2 GiB of the operand; else (or with ForceScratch) ModRM
//     becomes mod=10 with the scratch register CheckX86 chose as base, with
//     the REX/REX2 B bits cleared or the VEX3/XOP/EVEX inverted B and X bits
//     set, and that register holds Next during the step;
//   - jmp and jcc rel8/rel32: re-encoded with a rel32 to the original
//     target; a jcc whose target is beyond reach (or would fall inside the
//     copy) becomes a short jcc over the jump back to a stub that jumps to
//     the target; a jmp beyond reach becomes jmp *0(%rip) with the 64-bit
//     target after it;
//   - loop, loope, loopne, jrcxz (rel8 only, prefixes kept): the same
//     instruction branching to a stub;
//   - call rel32: re-targeted, or a call to a stub jumping to the target;
//     Fixup writes the original return address over the one pushed. Its
//     boost entry pushes Next and jumps to the target instead.
//
// Anything else is copied unchanged: its effects do not depend on its
// address (indirect branches and returns go where the original goes; a
// call's pushed return address is corrected by Fixup).
//
// RelocateX86 refuses what CheckX86 refuses (the same *RefusalError), and
// a RIP-relative operand beyond reach when no scratch register is free
// (RefuseRIPRelNoScratch). ErrX86Inst and ErrX86Slot report bad
// arguments.
func RelocateX86(inst *decode.X86Inst, slot uint64, opts *X86Options) (*X86Copy, error) {
	if inst == nil || inst.Len <= 0 || inst.Len > 15 {
		return nil, ErrX86Inst
	}
	var o X86Options
	if opts != nil {
		o = *opts
	}
	fix, err := CheckX86(inst)
	if err != nil {
		return nil, fmt.Errorf("relocate %#x: %w", inst.Addr, err)
	}
	c := &X86Copy{
		Orig:     inst.Addr,
		Len:      inst.Len,
		Next:     inst.Addr + uint64(inst.Len),
		Slot:     slot,
		Check:    fix,
		Scratch:  -1,
		branch:   inst.Branch,
		farWidth: 8,
	}
	a := x86enc.New(slot)
	switch inst.Branch {
	case decode.BranchJmp:
		err = c.relocJmp(inst, a)
	case decode.BranchJcc:
		err = c.relocJcc(inst, a)
	case decode.BranchLoop:
		err = c.relocLoop(inst, a)
	case decode.BranchCall:
		err = c.relocCall(inst, a)
	default:
		err = c.relocCopy(inst, a, fix, &o)
	}
	if err == nil {
		if _, ferr := a.Finish(); ferr != nil {
			err = fmt.Errorf("%v: %w", ferr, ErrX86Encode)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("relocate %#x: %w", inst.Addr, err)
	}
	c.Code = a.Bytes()
	if len(c.Code) > X86MaxCopy {
		return nil, fmt.Errorf("relocate %#x: a copy of %d bytes: %w", inst.Addr, len(c.Code), ErrX86Encode)
	}
	if end := slot + uint64(len(c.Code)); end < slot || end > x86UserTop {
		return nil, fmt.Errorf("relocate %#x to %#x: %w", inst.Addr, slot, ErrX86Slot)
	}
	if err := c.verify(inst); err != nil {
		return nil, fmt.Errorf("relocate %#x to %#x: %w", inst.Addr, slot, err)
	}
	return c, nil
}

// X86MaxCopy is the largest X86Copy.Code RelocateX86 returns, in bytes:
// a slot of this size holds any copy.
const X86MaxCopy = 64

// x86UserTop is the end of the lower canonical half with 5-level paging;
// a copy must end at or below it.
const x86UserTop = 1 << 56

// relBranchCheck refuses relative branches whose meaning depends on the
// vendor (a 66 prefix: Intel ignores it, AMD truncates the instruction
// pointer to 16 bits). CheckX86 refuses them too; this guards the
// encoding assumptions below.
func relBranchCheck(inst *decode.X86Inst) error {
	if inst.Prefixes&decode.PrefixData != 0 || inst.RelSize == 2 || inst.RelSize == 0 {
		return refuse(RefuseVendorDependent, "a 66 prefix on a near branch: Intel ignores it, AMD truncates the instruction pointer to 16 bits")
	}
	return nil
}

// relocJmp: jmp rel8/rel32.
func (c *X86Copy) relocJmp(inst *decode.X86Inst, a *x86enc.Asm) error {
	if err := relBranchCheck(inst); err != nil {
		return err
	}
	c.target, c.direct, c.Boost = inst.Target, true, true
	jmp(a, inst.Target)
	c.StepLen, c.Form = 5, X86FormRetarget
	if a.Len() > 5 {
		c.StepLen, c.Form = 6, X86FormAbs
	}
	return nil
}

// jccCond returns the condition code of a jcc.
func jccCond(inst *decode.X86Inst) x86enc.Cond { return x86enc.Cond(inst.Opcode & 0xF) }

// relocJcc: jcc rel8/rel32.
func (c *X86Copy) relocJcc(inst *decode.X86Inst, a *x86enc.Asm) error {
	if err := relBranchCheck(inst); err != nil {
		return err
	}
	c.target, c.Boost = inst.Target, true
	cc := jccCond(inst)
	s, t := a.Base(), inst.Target
	// Direct: jcc rel32 to the target, then the jump back. Only when the
	// target cannot be mistaken for an address inside the copy.
	if x86enc.Reaches(s+6, t) {
		end := s + 6 + uint64(jmpLen(s+6, c.Next))
		if t < s || t > end {
			a.JccTo(cc, t)
			c.StepLen, c.Form, c.direct = 6, X86FormRetarget, true
			c.landings = []x86Landing{{6, c.Next}}
			jmp(a, c.Next)
			return nil
		}
	}
	// Stub: jcc rel8 over the jump back to a jump to the target.
	back := jmpLen(s+2, c.Next)
	a.JccShort(cc, s+2+uint64(back))
	jmp(a, c.Next)
	stub := a.Len()
	jmp(a, t)
	c.StepLen, c.Form = 2, X86FormStub
	c.landings = []x86Landing{{2, c.Next}, {stub, t}}
	return nil
}

// relocLoop: loop, loope, loopne, jrcxz (rel8), kept with their prefixes
// (67 selects ecx).
func (c *X86Copy) relocLoop(inst *decode.X86Inst, a *x86enc.Asm) error {
	if err := relBranchCheck(inst); err != nil {
		return err
	}
	if inst.RelSize != 1 || inst.RelOff != inst.Len-1 {
		return fmt.Errorf("loop with a %d-byte displacement at %d: %w", inst.RelSize, inst.RelOff, ErrX86Inst)
	}
	c.target, c.Boost = inst.Target, true
	n := inst.Len
	back := jmpLen(a.Base()+uint64(n), c.Next)
	// The instruction with its prefixes, and a rel8 over the jump back.
	a.Raw(append(inst.Bytes[:n-1:n-1], byte(back)))
	jmp(a, c.Next)
	stub := a.Len()
	jmp(a, inst.Target)
	c.StepLen, c.Form = n, X86FormStub
	c.landings = []x86Landing{{n, c.Next}, {stub, inst.Target}}
	return nil
}

// relocCall: call rel32. The step runs a call to the target (or to a stub
// jumping there); the boost entry pushes Next and jumps.
func (c *X86Copy) relocCall(inst *decode.X86Inst, a *x86enc.Asm) error {
	if err := relBranchCheck(inst); err != nil {
		return err
	}
	c.target = inst.Target
	s, t := a.Base(), inst.Target
	if x86enc.Reaches(s+5, t) {
		a.CallTo(t)
		c.Form, c.direct = X86FormRetarget, true
	} else {
		// call +0: the stub right after the call jumps to the target.
		a.CallTo(s + 5)
		jmpAbs(a, t)
		c.Form = X86FormStub
		c.landings = []x86Landing{{5, t}}
	}
	c.StepLen = 5
	// Boost entry: push the original return address (push imm32
	// sign-extends; a mov fixes the high half when it differs), then jump.
	// The push faults, if at all, before anything changed.
	c.Boost, c.BoostOff = true, a.Len()
	lo, hi := uint32(c.Next), uint32(c.Next>>32)
	a.PushImm32(int32(lo))
	if uint64(int64(int32(lo))) != c.Next {
		a.StoreImm(x86enc.S32, x86enc.At(x86enc.RSP, 4), int32(hi)) // movl $hi, 4(%rsp)
	}
	jmp(a, t)
	return nil
}

// relocCopy: every instruction that is not a relative branch: copied, with
// a RIP-relative operand rewritten.
func (c *X86Copy) relocCopy(inst *decode.X86Inst, a *x86enc.Asm, fix Fixup, o *X86Options) error {
	b := make([]byte, inst.Len)
	copy(b, inst.Bytes[:inst.Len])
	c.Form = X86FormCopy
	if inst.RIPRel {
		if inst.DispSize != 4 || inst.DispOff < 1 || inst.DispOff+4 > inst.Len {
			return fmt.Errorf("RIP-relative operand without a disp32 (offset %d, size %d): %w", inst.DispOff, inst.DispSize, ErrX86Inst)
		}
		d, ok := rel32(a.Base()+uint64(inst.Len), inst.Target)
		switch {
		case ok && (!o.ForceScratch || fix.Scratch < 0):
			binary.LittleEndian.PutUint32(b[inst.DispOff:], uint32(d))
			c.Form = X86FormDisp
		case fix.Scratch >= 0:
			if err := x86ScratchBase(inst, b, fix.Scratch); err != nil {
				return err
			}
			c.Form, c.Scratch, c.ScratchValue = X86FormScratch, fix.Scratch, c.Next
		default:
			return refuse(RefuseRIPRelNoScratch, fmt.Sprintf("its operand at %#x is beyond +-2 GiB of the slot at %#x, and it cannot be addressed through a scratch register (none is known to be free, or the rewrite would make an invalid encoding valid)", inst.Target, a.Base()))
		}
	}
	a.Raw(b)
	c.StepLen = inst.Len
	switch inst.Branch {
	case decode.BranchCallIndirect:
		// The near call pushes 8 bytes in 64-bit mode (a 66 prefix is
		// refused as vendor-dependent).
	case decode.BranchFarCall:
		c.farWidth = inst.OpSize / 8
	}
	if fix.PushfTF {
		c.pushfW = inst.OpSize / 8
	}
	c.Boost = c.Scratch < 0 && !fix.Call && !fix.PopfTF
	if c.Boost {
		jmp(a, c.Next)
	} else {
		a.Int3()
	}
	return nil
}

// x86Prefix1 returns the offset of the first byte after the legacy
// prefixes and REX bytes: the REX2/VEX/EVEX/XOP escape or the opcode.
func x86Prefix1(inst *decode.X86Inst) int {
	i := 0
	for ; i < inst.Len; i++ {
		switch c := inst.Bytes[i]; {
		case c == 0xF0 || c == 0xF2 || c == 0xF3 || c == 0x2E || c == 0x36 || c == 0x3E ||
			c == 0x26 || c == 0x64 || c == 0x65 || c == 0x66 || c == 0x67:
		case c&0xF0 == 0x40:
		default:
			return i
		}
	}
	return i
}

// x86ScratchBase rewrites the RIP-relative operand in b (a copy of inst's
// bytes) to [scratch + disp32]: ModRM mod=10 rm=scratch, and the base
// extension bits cleared so that the scratch register (0-7) is named.
func x86ScratchBase(inst *decode.X86Inst, b []byte, scratch int) error {
	if scratch < 0 || scratch > 7 || scratch == x86RSP {
		// rsp needs a SIB byte, r8-r15 a B bit; the candidates are never
		// these.
		return fmt.Errorf("scratch register %d cannot be a ModRM base: %w", scratch, ErrX86Encode)
	}
	p := x86Prefix1(inst)
	switch inst.Encoding {
	case decode.EncLegacy, decode.Enc3DNow:
		if p > 0 && b[p-1]&0xF0 == 0x40 {
			b[p-1] &^= 0x01 // REX.B
		}
	case decode.EncREX2:
		if p+1 >= inst.Len || b[p] != 0xD5 {
			return fmt.Errorf("REX2 prefix not found: %w", ErrX86Encode)
		}
		b[p+1] &^= 0x11 // B3, B4
	case decode.EncVEX2:
		// No B bit: the base is one of the low eight registers.
	case decode.EncVEX3, decode.EncXOP:
		if p+1 >= inst.Len || b[p] != 0xC4 && b[p] != 0x8F {
			return fmt.Errorf("VEX3/XOP prefix not found: %w", ErrX86Encode)
		}
		b[p+1] |= 0x60 // inverted X and B: no extension
	case decode.EncEVEX:
		if p+1 >= inst.Len || b[p] != 0x62 {
			return fmt.Errorf("EVEX prefix not found: %w", ErrX86Encode)
		}
		b[p+1] |= 0x60  // inverted X and B
		b[p+1] &^= 0x08 // B4 (APX), not inverted
	default:
		return fmt.Errorf("RIP-relative operand in encoding %v: %w", inst.Encoding, ErrX86Encode)
	}
	m := inst.DispOff - 1
	b[m] = 0x80 | b[m]&0x38 | byte(scratch)
	return nil
}

// verify decodes the relocated instruction at the slot and checks that it
// is the instruction intended: same length and opcode, and the operand or
// branch target where it should be.
func (c *X86Copy) verify(inst *decode.X86Inst) error {
	var got decode.X86Inst
	if err := (decode.X86Decoder{}).Decode(c.Code, c.Slot, &got); err != nil {
		return fmt.Errorf("%w: %v", ErrX86Encode, err)
	}
	bad := func(what string) error {
		return fmt.Errorf("%w: %s (% x)", ErrX86Encode, what, c.Code[:got.Len])
	}
	if got.Len != c.StepLen {
		return bad(fmt.Sprintf("length %d, want %d", got.Len, c.StepLen))
	}
	switch c.Form {
	case X86FormCopy, X86FormDisp, X86FormScratch:
		if got.Opcode != inst.Opcode || got.Map != inst.Map || got.Encoding != inst.Encoding || got.Branch != inst.Branch {
			return bad("another opcode")
		}
	}
	switch c.Form {
	case X86FormDisp:
		if !got.RIPRel || got.Target != inst.Target {
			return bad(fmt.Sprintf("operand at %#x, want %#x", got.Target, inst.Target))
		}
	case X86FormScratch:
		if got.RIPRel || got.Mod != 2 || got.HasSIB || int(got.RM) != c.Scratch || got.B || got.B4 || got.Disp != inst.Disp {
			return bad(fmt.Sprintf("operand not [%s+%#x]", decode.X86RegName(c.Scratch), inst.Disp))
		}
	case X86FormRetarget:
		if got.Target != c.target {
			return bad(fmt.Sprintf("target %#x, want %#x", got.Target, c.target))
		}
	case X86FormAbs:
		if got.Branch != decode.BranchJmpIndirect || !got.RIPRel || got.Target != c.Slot+6 ||
			len(c.Code) < 14 || binary.LittleEndian.Uint64(c.Code[6:]) != c.target {
			return bad("not a jump through the stored target")
		}
	case X86FormStub:
		if len(c.landings) == 0 || got.Target != c.Slot+uint64(c.landings[len(c.landings)-1].off) {
			return bad("branch not to its stub")
		}
	}
	return nil
}

// Enter prepares regs, the registers of a thread stopped at the original
// instruction (RIP == Orig), for the single step: RIP = Slot and the
// scratch register = ScratchValue. The engine keeps an unchanged copy of
// regs for Fixup or FixupSignal, and sets the trap flag itself (or uses
// PTRACE_SINGLESTEP).
func (c *X86Copy) Enter(regs *X86Regs) error {
	if regs.RIP != c.Orig {
		return fmt.Errorf("enter the copy of %#x with rip %#x: %w", c.Orig, regs.RIP, ErrX86State)
	}
	regs.RIP = c.Slot
	if c.Scratch >= 0 {
		regs.GPR[c.Scratch] = c.ScratchValue
	}
	return nil
}

// BoostEnter prepares regs (RIP == Orig) for a boosted run: RIP =
// Slot+BoostOff. It fails unless Boost is set.
func (c *X86Copy) BoostEnter(regs *X86Regs) error {
	if !c.Boost {
		return fmt.Errorf("boost the copy of %#x: it cannot run without a trap: %w", c.Orig, ErrX86State)
	}
	if regs.RIP != c.Orig {
		return fmt.Errorf("boost the copy of %#x with rip %#x: %w", c.Orig, regs.RIP, ErrX86State)
	}
	regs.RIP = c.Slot + uint64(c.BoostOff)
	return nil
}

// absolute reports whether the instruction sets the instruction pointer
// from data (returns, indirect and far branches): any value after the step
// is right.
func (c *X86Copy) absolute() bool {
	switch c.branch {
	case decode.BranchJmpIndirect, decode.BranchCallIndirect, decode.BranchRet, decode.BranchRetImm,
		decode.BranchFarJmp, decode.BranchFarCall, decode.BranchFarRet, decode.BranchJmpAbs:
		return true
	}
	return false
}

// stepIP returns where the original would have gone for an instruction
// pointer of after the single step, whether to step again, or an error
// when the copy cannot reach rip in one step.
func (c *X86Copy) stepIP(rip uint64) (uint64, X86Outcome, error) {
	switch {
	case c.absolute():
		return rip, X86Done, nil
	case c.branch.Relative():
		for _, l := range c.landings {
			if rip == c.Slot+uint64(l.off) {
				return l.to, X86Done, nil
			}
		}
		if c.direct && rip == c.target {
			return rip, X86Done, nil
		}
	case rip == c.Slot+uint64(c.StepLen):
		return c.Next, X86Done, nil
	case rip == c.Slot && c.Check.Rep:
		return rip, X86StepAgain, nil
	}
	return 0, X86Done, fmt.Errorf("rip %#x after stepping the copy of %#x at %#x: %w", rip, c.Orig, c.Slot, ErrX86State)
}

// Fixup corrects after, the registers of the thread at the trap of the
// single step of the copy (entered with Enter from before), so that they
// are what the original instruction would have left:
//   - the instruction pointer: Next after an instruction that falls
//     through, the original target of a relative branch (taken or not is
//     told by where the step stopped), unchanged after an indirect branch
//     or return;
//   - a call's return address at the new stack pointer: Next, written
//     through mem (8 bytes; a far call's 2 or 4);
//   - pushf: the trap flag in the stored image becomes before's;
//   - the scratch register gets before's value back;
//   - the trap flag becomes before's, except after popf, which keeps the
//     value it loaded.
//
// The step's trap is the SIGTRAP of the debug exception; an engine should
// not rely on its si_code (TRAP_TRACE), which a virtual machine was seen to
// lose once in a million steps.
//
// mem may be nil unless Check.Call or Check.PushfTF is set. For a REP
// string instruction still on the copy it returns X86StepAgain and changes
// nothing. On error (ErrX86State, or the error of mem) nothing is changed.
func (c *X86Copy) Fixup(before, after *X86Regs, mem X86Memory) (X86Outcome, error) {
	rip, out, err := c.stepIP(after.RIP)
	if err != nil || out == X86StepAgain {
		return out, err
	}
	if c.Check.Call {
		w := c.farWidth
		drop := uint64(w)
		if c.branch == decode.BranchFarCall {
			drop = 2 * uint64(w) // the return address, then cs
		}
		sp := after.GPR[x86RSP]
		if sp != before.GPR[x86RSP]-drop {
			return X86Done, fmt.Errorf("rsp %#x after the call at %#x, want %#x: %w", sp, c.Orig, before.GPR[x86RSP]-drop, ErrX86State)
		}
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], c.Next)
		if err := writeFull(mem, buf[:w], sp); err != nil {
			return X86Done, fmt.Errorf("correct the return address at %#x: %w", sp, err)
		}
	}
	if c.pushfW > 0 {
		sp := after.GPR[x86RSP]
		if sp != before.GPR[x86RSP]-uint64(c.pushfW) {
			return X86Done, fmt.Errorf("rsp %#x after pushf at %#x, want %#x: %w", sp, c.Orig, before.GPR[x86RSP]-uint64(c.pushfW), ErrX86State)
		}
		// TF is bit 0 of the image's second byte.
		var b [1]byte
		if err := readFull(mem, b[:], sp+1); err != nil {
			return X86Done, fmt.Errorf("read the flags pushf stored at %#x: %w", sp, err)
		}
		b[0] = b[0]&^1 | byte(before.RFLAGS>>8&1)
		if err := writeFull(mem, b[:], sp+1); err != nil {
			return X86Done, fmt.Errorf("correct the flags pushf stored at %#x: %w", sp, err)
		}
	}
	after.RIP = rip
	c.restore(before, after)
	return X86Done, nil
}

// restore gives the scratch register and (but after popf) the trap flag
// their values of before.
func (c *X86Copy) restore(before, after *X86Regs) {
	if c.Scratch >= 0 {
		after.GPR[c.Scratch] = before.GPR[c.Scratch]
	}
	if !c.Check.PopfTF {
		after.RFLAGS = after.RFLAGS&^x86FlagTF | before.RFLAGS&x86FlagTF
	}
}

// FixupSignal handles a stop by a signal other than the step's trap while
// the thread runs the copy (after Enter or BoostEnter from before). When
// the relocated instruction has not completed (the instruction pointer is
// on the step or boost entry: it faulted, or the signal came first), it
// moves the instruction pointer back to Orig, restores the scratch
// register and the trap flag, and returns true: the signal is then
// delivered as if it had happened at the original instruction, which runs
// again after the handler. Otherwise it changes nothing and returns false:
// the instruction completed (during a boost the thread may simply go on in
// the slot; during a step the engine waits for the step's trap and calls
// Fixup).
//
// A call that faults after storing its return address (a target that is
// not canonical raises #GP once the return address is written below the
// stack pointer, which the fault leaves unchanged) leaves the copy's
// return address there; FixupSignal replaces it with Next through mem
// when it finds it, as the original would have left. mem may be nil unless
// Check.Call is set; an error comes only from writing it, and then the
// registers are unchanged.
func (c *X86Copy) FixupSignal(before, after *X86Regs, mem X86Memory) (bool, error) {
	if after.RIP != c.Slot && (!c.Boost || after.RIP != c.Slot+uint64(c.BoostOff)) {
		return false, nil
	}
	if c.Check.Call && after.RIP == c.Slot && mem != nil {
		w := uint64(c.farWidth)
		at := after.GPR[x86RSP] - w
		if c.branch == decode.BranchFarCall {
			at -= w
		}
		var buf, want [8]byte
		binary.LittleEndian.PutUint64(want[:], c.Slot+uint64(c.StepLen))
		if readFull(mem, buf[:w], at) == nil && bytes.Equal(buf[:w], want[:w]) {
			binary.LittleEndian.PutUint64(buf[:], c.Next)
			if err := writeFull(mem, buf[:w], at); err != nil {
				return false, fmt.Errorf("correct the return address at %#x: %w", at, err)
			}
		}
	}
	after.RIP = c.Orig
	if c.Scratch >= 0 {
		after.GPR[c.Scratch] = before.GPR[c.Scratch]
	}
	after.RFLAGS = after.RFLAGS&^x86FlagTF | before.RFLAGS&x86FlagTF
	return true, nil
}

// OrigIP maps an instruction pointer inside the copy to the original
// address it stands for: the entries to Orig, the points after the
// relocated instruction to Next or to the branch target. ok is false for
// any other address.
func (c *X86Copy) OrigIP(rip uint64) (uint64, bool) {
	if rip == c.Slot || c.Boost && rip == c.Slot+uint64(c.BoostOff) {
		return c.Orig, true
	}
	for _, l := range c.landings {
		if rip == c.Slot+uint64(l.off) {
			return l.to, true
		}
	}
	if !c.branch.Relative() && !c.absolute() && rip == c.Slot+uint64(c.StepLen) {
		return c.Next, true
	}
	return 0, false
}

// String describes the copy: "copy of 0x401000 (7 bytes) at 0x7f0000
// (disp, 12 bytes, boost)".
func (c *X86Copy) String() string {
	s := fmt.Sprintf("copy of %#x (%d bytes) at %#x (%s, %d bytes", c.Orig, c.Len, c.Slot, c.Form, len(c.Code))
	if c.Scratch >= 0 {
		s += fmt.Sprintf(", %%%s = %#x", decode.X86RegName(c.Scratch), c.ScratchValue)
	}
	if c.Boost {
		s += fmt.Sprintf(", boost at +%d", c.BoostOff)
	}
	return s + ")"
}

// readFull and writeFull access all of p at addr or fail.
func readFull(mem X86Memory, p []byte, addr uint64) error { return accessFull(mem, p, addr, false) }

func writeFull(mem X86Memory, p []byte, addr uint64) error { return accessFull(mem, p, addr, true) }

// accessFull reads (or writes) all of p at addr or fails.
func accessFull(mem X86Memory, p []byte, addr uint64, write bool) error {
	if mem == nil {
		return fmt.Errorf("no memory given: %w", ErrX86State)
	}
	access, what := mem.ReadAt, "read"
	if write {
		access, what = mem.WriteAt, "write"
	}
	n, err := access(p, int64(addr))
	if n == len(p) {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("short %s of %d bytes", what, n)
	}
	return err
}
