package plan

import (
	"bytes"
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// The facts below are those of Linux 6.18 (arch/x86/kernel/uprobes.c and
// the kernel instruction decoder), reimplemented from their description.

// linuxRejected is the set of first opcode bytes that Linux's one-byte
// table of good 64-bit instructions leaves out.
var linuxRejected = func() (t [256]bool) {
	for _, op := range []byte{
		0x06, 0x07, 0x0E, 0x16, 0x17, 0x1E, 0x1F, 0x27, 0x2F, 0x37, 0x3F,
		0x60, 0x61, 0x62, 0x6C, 0x6D, 0x6E, 0x6F, 0x82, 0x9A,
		0xCC, 0xCD, 0xCE, 0xCF, 0xD4, 0xD5, 0xD6,
		0xE4, 0xE5, 0xE6, 0xE7, 0xEA, 0xEC, 0xED, 0xEE, 0xEF,
		0xF1, 0xF4, 0xFA, 0xFB,
	} {
		t[op] = true
	}
	return t
}()

// linuxNops are the kernel's canonical 64-bit NOPs (x86_nops), by length.
var linuxNops = [12][]byte{
	1:  {0x90},
	2:  {0x66, 0x90},
	3:  {0x0F, 0x1F, 0x00},
	4:  {0x0F, 0x1F, 0x40, 0x00},
	5:  {0x0F, 0x1F, 0x44, 0x00, 0x00},
	6:  {0x66, 0x0F, 0x1F, 0x44, 0x00, 0x00},
	7:  {0x0F, 0x1F, 0x80, 0x00, 0x00, 0x00, 0x00},
	8:  {0x0F, 0x1F, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00},
	9:  {0x2E, 0x0F, 0x1F, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00},
	10: {0x66, 0x2E, 0x0F, 0x1F, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00},
	11: {0x66, 0x66, 0x2E, 0x0F, 0x1F, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00},
}

// kernelOpcode is how the kernel's decoder reports an instruction's opcode:
// for a legacy instruction the opcode bytes including the 0F escapes; for a
// VEX, EVEX, XOP or REX2 instruction the one opcode byte after the prefix,
// whatever its map.
type kernelOpcode struct {
	op1, op2 byte
	nbytes   int
}

func kernelOpcodeOf(inst *decode.X86Inst) kernelOpcode {
	if inst.Encoding != decode.EncLegacy && inst.Encoding != decode.Enc3DNow {
		return kernelOpcode{op1: inst.Opcode, nbytes: 1}
	}
	switch inst.Map {
	case decode.Map1Byte:
		return kernelOpcode{op1: inst.Opcode, nbytes: 1}
	case decode.Map0F:
		return kernelOpcode{op1: 0x0F, op2: inst.Opcode, nbytes: 2}
	case decode.Map3DNow:
		return kernelOpcode{op1: 0x0F, op2: 0x0F, nbytes: 2}
	}
	return kernelOpcode{op1: 0x0F, op2: 0x38, nbytes: 3}
}

func (k kernelOpcode) String() string {
	switch k.nbytes {
	case 1:
		return fmt.Sprintf("%02x", k.op1)
	case 2:
		return fmt.Sprintf("%02x %02x", k.op1, k.op2)
	}
	return fmt.Sprintf("%02x %02x ..", k.op1, k.op2)
}

// isRealNop reports whether inst is a NOP in fact: 90 without REX.B (not
// xchg), with or without F3 (pause), or 0F 1F /0.
func isRealNop(inst *decode.X86Inst) bool {
	if inst.Encoding != decode.EncLegacy {
		return false
	}
	return inst.Map == decode.Map1Byte && inst.Opcode == 0x90 && !inst.B ||
		inst.Map == decode.Map0F && inst.Opcode == 0x1F && inst.HasModRM && inst.Reg == 0
}

// encodingName names a non-legacy encoding for messages.
func encodingName(inst *decode.X86Inst) string {
	return inst.Encoding.String()
}

func linuxX86(s *Site, o *Options) Decision {
	d := newDecision(LinuxUprobes, o)
	if s.Func != nil {
		if ok, known, start := s.Func.Boundary(s.Addr); known && !ok {
			d.rule("boundary", Warn, "the address is inside the instruction at %#x; Linux does not check boundaries, decodes from the middle and would corrupt that instruction", start)
		}
	}
	var inst decode.X86Inst
	if err := (decode.X86Decoder{Vendor: decode.VendorAMD}).Decode(s.Code, s.Addr, &inst); err != nil {
		d.rule("decode", Fail, "the kernel decoder cannot decode %s: %v", hexBytes(s.Code[:min(len(s.Code), 15)]), err)
		return d.finish(Reject, ReasonUndecodable, "the bytes do not decode as an instruction (%v); registration fails", err)
	}
	d.rule("decode", Pass, "%s: %s", plural(inst.Len, "byte"), hexBytes(inst.Bytes[:inst.Len]))
	k := kernelOpcodeOf(&inst)
	d.rule("opcode", Info, "the kernel sees opcode %s (%s, %s encoding)", k, plural(k.nbytes, "opcode byte"), encodingName(&inst))

	// 1. Legacy prefixes.
	if inst.Prefixes&decode.PrefixLock != 0 {
		d.rule("prefix", Fail, "LOCK prefix")
		return d.finish(Reject, ReasonPrefixLock, "Linux refuses instructions with a LOCK prefix; registration fails")
	}
	if p := inst.Prefixes & (decode.PrefixCS | decode.PrefixDS | decode.PrefixES | decode.PrefixSS); p != 0 {
		d.rule("prefix", Fail, "segment prefix %s", segName(p))
		return d.finish(Reject, ReasonPrefixSegment, "Linux refuses a %s prefix (notrack and the 9-11 byte NOPs carry one); registration fails", segName(p))
	}
	d.rule("prefix", Pass, "no LOCK, CS, DS, ES or SS prefix")

	// 2. Instructions that mask the single-step trap, by opcode byte.
	if k.op1 == 0x1F {
		d.rule("mask-exception", Fail, "opcode byte 1f")
		return d.finish(Reject, ReasonPopSS, "Linux refuses opcode byte 1f (its check for pop %%ss; 1f is pop %%ds) whatever the encoding; registration fails")
	}
	if k.op1 == 0x8E && inst.HasModRM && inst.Reg == 2 {
		d.rule("mask-exception", Fail, "opcode byte 8e with ModRM.reg 2")
		return d.finish(Reject, ReasonMovSS, "Linux refuses opcode byte 8e with ModRM.reg 2 (mov to %%ss) whatever the encoding; registration fails")
	}

	// 3. The one-byte table, looked up with the first opcode byte.
	if linuxRejected[k.op1] {
		d.rule("opcode-table", Fail, "opcode byte %02x is not in the table", k.op1)
		if inst.Encoding != decode.EncLegacy {
			return d.finish(Reject, ReasonVEXOpcodeRejected, "Linux looks the %s opcode byte %02x up in its one-byte table, where %02x is refused; registration fails", encodingName(&inst), k.op1, k.op1)
		}
		return d.finish(Reject, ReasonOpcodeRejected, "Linux does not probe one-byte opcode %02x; registration fails", k.op1)
	}
	if k.op1 == 0x0F {
		d.rule("opcode-table", Pass, "0f is in the one-byte table, so every 0f-escaped instruction is accepted")
	} else {
		d.rule("opcode-table", Pass, "opcode byte %02x is in the table", k.op1)
	}

	// 4. nop5 optimization (decided at registration, done after a hit).
	isNop1 := k.nbytes == 1 && k.op1 == 0x90
	isNopl := k.nbytes == 2 && k.op2 == 0x1F && inst.HasModRM && inst.Reg == 0
	canOpt, pageCross := false, false
	if inst.Len == 5 && (isNop1 || isNopl) {
		ps := o.pageSize()
		if ps-s.Addr%ps < 5 {
			pageCross = true
			d.rule("nop5", Info, "a 5-byte NOP, but it crosses a page boundary: not optimized")
		} else {
			canOpt = true
			d.rule("nop5", Pass, "a 5-byte NOP: after the first hit Linux rewrites it into a call to its trampoline")
		}
	}

	// 5. Emulation: NOP, branch, push. Then the out-of-line step.
	first := linuxFirstHit(&d, &inst, k)
	switch {
	case canOpt:
		d.rule("trampoline", Warn, "the call pushes its return address into the 128-byte red zone below %%rsp: a leaf function that keeps data there is corrupted")
		note := ""
		if !isRealNop(&inst) {
			note = fmt.Sprintf(" %s is not a NOP in fact: it never runs again.", inst.Mnemonic)
		}
		return d.finish(TrampolineNop, ReasonNop5Optimized, "a 5-byte NOP: the first hit is %s, then Linux rewrites the site into a call to the [uprobes-trampoline] page (one syscall per hit, no single step).%s", first.how, note)
	case first.strategy == Reject:
		return d.finish(Reject, first.reason, "%s", first.detail)
	case pageCross:
		return d.finish(first.strategy, ReasonNop5PageCross, "a 5-byte NOP that crosses a page, so Linux does not optimize it: %s", first.how)
	}
	return d.finish(first.strategy, first.reason, "%s", first.detail)
}

// firstHit is what Linux does on a hit of a non-optimized probe.
type firstHit struct {
	strategy Strategy
	reason   Reason
	how      string // "emulated", "single-stepped out of line"
	detail   string
}

func linuxFirstHit(d *Decision, inst *decode.X86Inst, k kernelOpcode) firstHit {
	// NOP: a canonical NOP string, or opcode byte 90 with any prefixes.
	if inst.Len < len(linuxNops) && bytes.Equal(inst.Bytes[:inst.Len], linuxNops[inst.Len]) {
		d.rule("nop", Pass, "one of the kernel's canonical NOPs: emulated as a jump of 0")
		return firstHit{Emulate, ReasonEmulatedNop, "emulated", "a canonical NOP, emulated by skipping it (one trap per hit)"}
	}
	branch := ""
	switch {
	case k.nbytes == 1 && k.op1 == 0x90:
		d.rule("nop", Pass, "opcode byte 90: emulated as a jump of 0")
		if isRealNop(inst) {
			return firstHit{Emulate, ReasonEmulatedNop, "emulated", "opcode 90 with prefixes, emulated as a NOP (one trap per hit)"}
		}
		return firstHit{Emulate, ReasonEmulatedMisread, "emulated", fmt.Sprintf("Linux takes %s (%s) for a NOP by its opcode byte 90 and skips it: the instruction never runs (fixed in 6.19)", inst.Mnemonic, hexBytes(inst.Bytes[:inst.Len]))}
	case k.nbytes == 1 && (k.op1 == 0xEB || k.op1 == 0xE9):
		branch = "jmp"
	case k.nbytes == 1 && k.op1 == 0xE8:
		branch = "call"
	case k.nbytes == 1 && k.op1 >= 0x70 && k.op1 <= 0x7F:
		branch = "jcc"
	case k.nbytes == 2 && k.op2 >= 0x80 && k.op2 <= 0x8F:
		branch = "jcc"
	}
	if branch != "" {
		if inst.Prefixes&decode.PrefixData != 0 {
			d.rule("branch", Fail, "a %s with a 66 prefix", branch)
			return firstHit{strategy: Reject, reason: ReasonBranch66, detail: "Linux refuses a branch with a 66 prefix (Intel and AMD decode it differently); registration fails"}
		}
		d.rule("branch", Pass, "opcode %s: emulated as %s", k, branch)
		real := inst.Encoding == decode.EncLegacy && (branch == "jmp" && inst.Branch == decode.BranchJmp ||
			branch == "call" && inst.Branch == decode.BranchCall || branch == "jcc" && inst.Branch == decode.BranchJcc)
		if real {
			return firstHit{Emulate, ReasonEmulatedBranch, "emulated", fmt.Sprintf("a direct %s, emulated (one trap per hit)", branch)}
		}
		what := "skips it"
		if branch == "call" {
			what = "pushes a return address and skips it, leaving the stack 8 bytes lower"
		} else if branch == "jcc" && inst.ImmSize > 0 {
			what = fmt.Sprintf("skips it, or jumps %d bytes further when the condition holds", int8(inst.Imm))
		}
		return firstHit{Emulate, ReasonEmulatedMisread, "emulated", fmt.Sprintf("Linux takes %s %s (%s) for a %s by its opcode byte %02x and %s: the instruction never runs", encodingName(inst), inst.Mnemonic, hexBytes(inst.Bytes[:inst.Len]), branch, k.op1, what)}
	}
	d.rule("branch", Info, "not a NOP or branch Linux emulates")
	// push: 50-57, one byte, or two with exactly REX 41.
	if k.nbytes == 1 && k.op1 >= 0x50 && k.op1 <= 0x57 {
		if inst.Len == 1 || inst.Len == 2 && inst.Encoding == decode.EncLegacy && inst.REX == 0x41 && inst.NumPrefixes == 0 {
			d.rule("push", Pass, "push of a register: emulated")
			return firstHit{Emulate, ReasonEmulatedPush, "emulated", "a push of a register, emulated (one trap per hit)"}
		}
		d.rule("push", Info, "push with a prefix other than REX 41: not emulated")
	}
	// The out-of-line step, with fixups chosen by the first opcode byte.
	fix, misread := "ip", ""
	switch {
	case k.nbytes == 1 && k.op1 == 0x9D:
		fix = "popf"
	case k.nbytes == 1 && (k.op1 == 0xC3 || k.op1 == 0xCB || k.op1 == 0xC2 || k.op1 == 0xCA || k.op1 == 0xEA):
		fix = "none"
		if inst.Encoding != decode.EncLegacy {
			misread = "a return"
		}
	case k.nbytes == 1 && k.op1 == 0x9A:
		fix = "call"
	case k.nbytes == 1 && k.op1 == 0xFF && inst.HasModRM && (inst.Reg == 2 || inst.Reg == 3):
		fix = "call"
		if inst.Encoding != decode.EncLegacy && inst.Encoding != decode.EncREX2 {
			misread = "an indirect call"
		}
	case k.nbytes == 1 && k.op1 == 0xFF && inst.HasModRM && (inst.Reg == 4 || inst.Reg == 5):
		fix = "none"
		if inst.Encoding != decode.EncLegacy && inst.Encoding != decode.EncREX2 {
			misread = "an indirect jump"
		}
	}
	d.rule("xol", Pass, "single-stepped out of line; fixup: %s", fix)
	if inst.Encoding == decode.EncLegacy && inst.Map == decode.Map0F && inst.Opcode == 0x05 {
		d.rule("syscall", Warn, "SYSCALL clears the trap flag: the single-step trap comes one instruction late")
		return firstHit{XOL, ReasonXOLSyscall, "single-stepped out of line", "single-stepped out of line, but SYSCALL clears the trap flag, so the step ends one instruction late: the bytes after the copy in the XOL slot run too and the fixup is applied to a wrong address (the process usually crashes)"}
	}
	if misread != "" {
		return firstHit{XOL, ReasonXOLMisread, "single-stepped out of line", fmt.Sprintf("Linux takes %s %s for %s by its opcode byte %02x and does not move the instruction pointer back after the step: the process goes on executing the XOL page", encodingName(inst), inst.Mnemonic, misread, k.op1)}
	}
	if inst.RIPRel {
		d.rule("riprel", Pass, "RIP-relative operand: rewritten through %s", linuxScratch(inst))
		return firstHit{XOL, ReasonXOLRIPRel, "single-stepped out of line", fmt.Sprintf("single-stepped out of line with its RIP-relative operand addressed through %s (two traps per hit, about 12 times an emulated hit)", linuxScratch(inst))}
	}
	switch fix {
	case "popf":
		return firstHit{XOL, ReasonXOLPopf, "single-stepped out of line", "popf, single-stepped out of line keeping the trap flag it loads (two traps per hit)"}
	case "none":
		return firstHit{XOL, ReasonXOLNoFixup, "single-stepped out of line", "single-stepped out of line; it sets the instruction pointer itself (two traps per hit)"}
	case "call":
		return firstHit{XOL, ReasonXOLCall, "single-stepped out of line", "single-stepped out of line, then the pushed return address is corrected (two traps per hit)"}
	}
	return firstHit{XOL, ReasonXOL, "single-stepped out of line", "single-stepped out of line, then the instruction pointer is moved back (two traps per hit, about 12 times an emulated hit)"}
}

// linuxScratch names the register Linux uses for a RIP-relative rewrite:
// rsi, else rdi, else rbx, avoiding the low three bits of ModRM.reg and
// VEX.vvvv.
func linuxScratch(inst *decode.X86Inst) string {
	reg := int(inst.Reg)
	v := -1
	if inst.Encoding == decode.EncVEX2 || inst.Encoding == decode.EncVEX3 || inst.Encoding == decode.EncEVEX || inst.Encoding == decode.EncXOP {
		v = int(inst.VVVV) & 7
	}
	switch {
	case reg != 6 && v != 6:
		return "%rsi"
	case reg != 7 && v != 7:
		return "%rdi"
	}
	return "%rbx"
}

func segName(p decode.X86Prefixes) string {
	switch {
	case p&decode.PrefixCS != 0:
		return "CS (2e)"
	case p&decode.PrefixDS != 0:
		return "DS (3e)"
	case p&decode.PrefixES != 0:
		return "ES (26)"
	}
	return "SS (36)"
}
