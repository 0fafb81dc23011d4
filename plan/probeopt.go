package plan

import (
	"errors"
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/xol"
)

// Capabilities that do not exist yet. When the trampoline package can
// generate them, plan asks it instead of these constants; the checks below
// already run so that explain shows what a trampoline would meet.
const (
	haveTrampolineNop    = false
	haveTrampolineDetour = false
)

// detourLen is the size of the jmp rel32 a detour writes.
const detourLen = 5

func probeoptX86(s *Site, o *Options) Decision {
	d := newDecision(Probeopt, o)
	var inst decode.X86Inst
	if err := (decode.X86Decoder{Vendor: o.Vendor}).Decode(s.Code, s.Addr, &inst); err != nil {
		d.rule("decode", Fail, "%s: %v", hexBytes(s.Code[:min(len(s.Code), 15)]), err)
		return d.finish(Reject, ReasonUndecodable, "the bytes do not decode as an instruction (%v)", err)
	}
	d.rule("decode", Pass, "%s: %s (%s)", plural(inst.Len, "byte"), hexBytes(inst.Bytes[:inst.Len]), inst.Mnemonic)
	if r, ok := boundaryRule(&d, s); !ok {
		return r
	}

	// No-trap strategies first: they are the cheapest per hit.
	nopLen := x86NopRun(s.Code)
	if nopLen == 5 || nopLen == 10 || nopLen == 6 || nopLen == 11 {
		d.rule("trampoline-nop", Fail, "a %d-byte NOP site a jump to a trampoline could replace, but probeopt has no trampoline generator yet", nopLen)
	} else {
		d.rule("trampoline-nop", Info, "not a nop5 or nop10 site")
	}
	if msg, ok := detourX86(s, o); ok {
		d.rule("trampoline-detour", Fail, "the function-wide checks pass (%s), but probeopt has no trampoline generator yet", msg)
	} else {
		d.rule("trampoline-detour", Fail, "%s", msg)
	}

	// One trap: emulation.
	if err := emulate.X86Supported(&inst); err == nil {
		d.rule("emulate", Pass, "the emulator executes %s exactly", inst.Mnemonic)
		switch {
		case isRealNop(&inst):
			return d.finish(Emulate, ReasonEmulatedNop, "a NOP, emulated (one trap per hit)")
		case inst.Branch != decode.BranchNone && inst.Branch.Relative():
			return d.finish(Emulate, ReasonEmulatedBranch, "a direct %s, emulated (one trap per hit)", inst.Branch)
		case inst.Encoding == decode.EncLegacy && inst.Map == decode.Map1Byte && inst.Opcode >= 0x50 && inst.Opcode <= 0x57:
			return d.finish(Emulate, ReasonEmulatedPush, "a push of a register, emulated (one trap per hit)")
		}
		return d.finish(Emulate, ReasonEmulated, "%s, emulated (one trap per hit)", inst.Mnemonic)
	} else {
		d.rule("emulate", Fail, "%v", err)
	}

	// Two traps: the out-of-line step.
	fix, err := xol.CheckX86(&inst)
	if err != nil {
		d.rule("xol", Fail, "%v", err)
		return refusal(&d, err)
	}
	d.rule("xol", Pass, "fixups: %s", fix)
	return xolDecision(&d, fix, "emulation is not available for it")
}

func probeoptARM64(s *Site, o *Options) Decision {
	d := newDecision(Probeopt, o)
	if s.Addr%4 != 0 {
		d.rule("alignment", Fail, "%#x is not a multiple of 4", s.Addr)
		return d.finish(Reject, ReasonMisaligned, "an arm64 instruction starts at a multiple of 4")
	}
	inst, err := decode.DecodeARM64(s.Code, s.Addr)
	if err != nil {
		d.rule("decode", Fail, "%v", err)
		return d.finish(Reject, ReasonUndecodable, "the word does not decode as an instruction (%v)", err)
	}
	if d.record {
		d.rule("decode", Pass, "%08x (%s)", inst.Word, inst.Text())
	}
	if r, ok := boundaryRule(&d, s); !ok {
		return r
	}
	if s.Func != nil {
		if load, in := s.Func.exclusiveWindow(s.Addr); in {
			d.rule("exclusive-window", Fail, "inside the load/store-exclusive sequence that starts at %#x", load)
			return d.finish(Reject, ReasonExclusiveWindow, "inside a load/store-exclusive sequence (from %#x): any trap clears the exclusive monitor and the store-exclusive would fail every time", load)
		}
		d.rule("exclusive-window", Pass, "not inside a load/store-exclusive sequence")
	}
	d.rule("trampoline-nop", Fail, "probeopt has no arm64 trampoline generator yet")
	d.rule("trampoline-detour", Fail, "probeopt has no arm64 trampoline generator yet")
	// One trap: emulation.
	if err := emulate.ARM64Supported(&inst); err == nil {
		d.rule("emulate", Pass, "the emulator executes %s exactly", inst.Mnemonic)
		switch {
		case inst.Word == 0xD503201F:
			return d.finish(Emulate, ReasonEmulatedNop, "a NOP, emulated (one trap per hit)")
		case inst.Branch != decode.BranchNone && inst.Branch.Relative():
			return d.finish(Emulate, ReasonEmulatedBranch, "a direct %s, emulated (one trap per hit)", inst.Branch)
		}
		return d.finish(Emulate, ReasonEmulated, "%s, emulated (one trap per hit)", inst.Mnemonic)
	} else {
		d.rule("emulate", Fail, "%v", err)
	}
	fix, err := xol.CheckARM64(&inst)
	if err != nil {
		d.rule("xol", Fail, "%v", err)
		return refusal(&d, err)
	}
	d.rule("xol", Pass, "fixups: %s", fix)
	return xolDecision(&d, fix, "emulation is not available for it")
}

// boundaryRule applies the instruction-boundary check; ok is false when it
// decided (a rejection).
func boundaryRule(d *Decision, s *Site) (Decision, bool) {
	if s.Func == nil {
		if s.USDT {
			d.rule("boundary", Pass, "no function holds the address, but the USDT note marks an instruction start")
			return Decision{}, true
		}
		d.rule("boundary", Fail, "no function holds the address")
		return d.finish(Reject, ReasonNoFunction, "no function symbol holds this address, so its instruction boundary cannot be checked"), false
	}
	ok, known, start := s.Func.Boundary(s.Addr)
	switch {
	case ok:
		d.rule("boundary", Pass, "an instruction starts here when the function is decoded from %#x", s.Func.Addr)
		return Decision{}, true
	case known:
		d.rule("boundary", Fail, "inside the instruction at %#x", start)
		return d.finish(Reject, ReasonMidInstruction, "the address is inside the instruction that starts at %#x (decoding from the function start at %#x)", start, s.Func.Addr), false
	}
	if s.Func.Err != nil {
		d.rule("boundary", Fail, "the sweep of the function stopped at %#x: %v", s.Func.Addr+uint64(s.Func.Decoded), s.Func.Err)
		return d.finish(Reject, ReasonBoundaryUnknown, "the function does not decode up to this address (stopped at %#x: %v), so the instruction boundary is unknown", s.Func.Addr+uint64(s.Func.Decoded), s.Func.Err), false
	}
	d.rule("boundary", Fail, "the address is outside the function at %#x", s.Func.Addr)
	return d.finish(Reject, ReasonNoFunction, "the address is outside the function it was given with"), false
}

// refusal turns an xol refusal into a rejection.
func refusal(d *Decision, err error) Decision {
	var re *xol.RefusalError
	if !errors.As(err, &re) {
		return d.finish(Reject, ReasonUndecodable, "%v", err)
	}
	r := map[string]Reason{
		xol.RefuseSyscall:    ReasonSyscall,
		xol.RefuseTrap:       ReasonTrap,
		xol.RefusePrivileged: ReasonPrivileged,
		xol.RefuseTrapShadow: ReasonTrapShadow,
		xol.RefuseRTM:        ReasonRTM,
		xol.RefuseAddr32RIP:  ReasonRIPAddr32,
		xol.RefuseExclusive:  ReasonExclusive,
	}[re.Code]
	if r == "" {
		r = Reason(re.Code)
	}
	return d.finish(Reject, r, "it cannot be emulated, and %s", re.Reason)
}

// xolDecision builds the decision for an out-of-line step.
func xolDecision(d *Decision, f xol.Fixup, why string) Decision {
	extra := ""
	if f.PushfTF {
		extra += "; the trap flag is cleared in the pushed flags"
	}
	if f.PopfTF {
		extra += "; the trap flag popf loads is kept"
	}
	if f.Rep {
		extra += "; the step repeats until the string instruction completes"
	}
	switch {
	case f.PCRel != xol.PCRelNone:
		return d.finish(XOL, ReasonXOLPCRel, "executed out of line as a rewritten copy (PC-relative %s)%s; %s", f.PCRel, extra, why)
	case f.RIPRel && f.Scratch >= 0:
		return d.finish(XOL, ReasonXOLRIPRel, "single-stepped out of line with its RIP-relative operand addressed through %%%s%s; %s", decode.X86RegName(f.Scratch), extra, why)
	case f.RIPRel:
		return d.finish(XOL, ReasonXOLRIPRel, "single-stepped out of line with its RIP-relative displacement recomputed (the slot must lie within 2 GiB of the operand)%s; %s", extra, why)
	case f.Call:
		return d.finish(XOL, ReasonXOLCall, "single-stepped out of line, then the return address is corrected%s; %s", extra, why)
	case !f.IP:
		return d.finish(XOL, ReasonXOLNoFixup, "single-stepped out of line; it sets the instruction pointer itself%s; %s", extra, why)
	}
	return d.finish(XOL, ReasonXOL, "single-stepped out of line, then the instruction pointer is moved back%s; %s", extra, why)
}

// x86NopRun returns the length of the NOP site at the start of code: a
// NOP, or a one-byte nop followed by a NOP (the USDT nop; nop5 form), or 0.
func x86NopRun(code []byte) int {
	n := nopLen(code)
	if n == 1 {
		if m := nopLen(code[1:]); m == 5 || m == 10 {
			return 1 + m
		}
	}
	return n
}

func nopLen(code []byte) int {
	var inst decode.X86Inst
	if (decode.X86Decoder{}).Decode(code, 0, &inst) != nil || !isRealNop(&inst) || inst.Prefixes&decode.PrefixREP != 0 {
		return 0
	}
	return inst.Len
}

// detourX86 runs the function-wide checks a detour needs at the site: the
// instructions displaced by a 5-byte jump all decode inside the function
// and can run from elsewhere, no direct branch of the function lands
// inside them, the function has no indirect jump (a jump table could land
// inside them), and in a live process none but the last is a call or
// system call. It returns a description and whether every check passed.
func detourX86(s *Site, o *Options) (string, bool) {
	fn := s.Func
	if fn == nil {
		return "no function: the function-wide checks cannot run", false
	}
	start := s.Addr - fn.Addr
	if start >= uint64(len(fn.Code)) {
		return "outside the function", false
	}
	code := fn.Code[start:]
	var inst decode.X86Inst
	n := 0
	var calls []string
	count := 0
	for n < detourLen {
		if n >= len(code) {
			return fmt.Sprintf("the function ends %d bytes after the site; a detour needs %d", n, detourLen), false
		}
		if err := (decode.X86Decoder{Vendor: o.Vendor}).Decode(code[n:], s.Addr+uint64(n), &inst); err != nil {
			return fmt.Sprintf("the instruction at %#x does not decode: %v", s.Addr+uint64(n), err), false
		}
		if _, err := xol.CheckX86(&inst); err != nil {
			return fmt.Sprintf("the instruction at %#x cannot be moved: %v", s.Addr+uint64(n), err), false
		}
		if inst.Branch == decode.BranchCall || inst.Branch == decode.BranchCallIndirect || inst.Branch == decode.BranchSyscall {
			calls = append(calls, fmt.Sprintf("%#x", s.Addr+uint64(n)))
		}
		n += inst.Len
		count++
	}
	if n > len(code) {
		return fmt.Sprintf("the displaced instructions run past the function end"), false
	}
	if t, ok := fn.BranchTargetIn(s.Addr, s.Addr+uint64(n)); ok {
		return fmt.Sprintf("a branch of the function lands at %#x, inside the %d displaced bytes", t, n), false
	}
	if fn.IndirectJumps > 0 {
		return fmt.Sprintf("the function has %d indirect jump(s) (a jump table could land inside the displaced bytes)", fn.IndirectJumps), false
	}
	if o.Live && len(calls) > 0 && (len(calls) > 1 || calls[0] != fmt.Sprintf("%#x", s.Addr+uint64(n)-uint64(inst.Len))) {
		return fmt.Sprintf("a call at %s is displaced but not last: a thread inside it would return into the replaced bytes", calls[0]), false
	}
	return fmt.Sprintf("%s, %d bytes displaced", plural(count, "instruction"), n), true
}
