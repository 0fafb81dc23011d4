package plan

import (
	"errors"
	"fmt"
	"strings"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/xol"
)

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
	if r, ok := trampolineX86(&d, s, o); ok {
		return r
	}

	// One trap: emulation; two: the out-of-line step.
	reason, what := x86EmulationKind(&inst)
	return emulatedOrXOL(&d, inst.Mnemonic, (emulate.X86{Vendor: o.Vendor}).Supported(&inst), reason, what,
		func() (xol.Fixup, error) { return xol.CheckX86(&inst) })
}

// x86EmulationKind names the kind of an emulated x86-64 instruction for
// its decision.
func x86EmulationKind(inst *decode.X86Inst) (Reason, string) {
	switch {
	case isRealNop(inst):
		return ReasonEmulatedNop, "a NOP"
	case inst.Branch != decode.BranchNone && inst.Branch.Relative():
		return ReasonEmulatedBranch, "a direct " + inst.Branch.String()
	case inst.Encoding == decode.EncLegacy && inst.Map == decode.Map1Byte && inst.Opcode >= 0x50 && inst.Opcode <= 0x57:
		return ReasonEmulatedPush, "a push of a register"
	}
	return ReasonEmulated, inst.Mnemonic
}

// emulatedOrXOL finishes the decision of a site that takes a trap:
// emulated when emuErr is nil (reason and what say what kind of
// instruction it is), otherwise stepped out of line as check allows.
func emulatedOrXOL(d *Decision, mnemonic string, emuErr error, reason Reason, what string, check func() (xol.Fixup, error)) Decision {
	if emuErr == nil {
		d.rule("emulate", Pass, "the emulator executes %s exactly", mnemonic)
		return d.finish(Emulate, reason, "%s, emulated (one trap per hit)", what)
	}
	d.rule("emulate", Fail, "%v", emuErr)
	fix, err := check()
	if err != nil {
		d.rule("xol", Fail, "%v", err)
		return refusal(d, err)
	}
	d.rule("xol", Pass, "fixups: %s", fix)
	return xolDecision(d, fix, "emulation is not available for it")
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
	// No trap: a b to a trampoline.
	if r, ok := trampolineARM64(&d, s, o); ok {
		return r
	}
	// One trap: emulation; two: the out-of-line step.
	reason, what := ReasonEmulated, inst.Mnemonic
	switch {
	case decode.NopLen(decode.ARM64, s.Code) == 4:
		reason, what = ReasonEmulatedNop, "a NOP"
	case inst.Branch != decode.BranchNone && inst.Branch.Relative():
		reason, what = ReasonEmulatedBranch, "a direct "+inst.Branch.String()
	}
	return emulatedOrXOL(&d, inst.Mnemonic, emulate.ARM64Supported(&inst), reason, what,
		func() (xol.Fixup, error) { return xol.CheckARM64(&inst) })
}

// trampolineARM64 decides whether the arm64 site can be rewritten into a b
// to a trampoline (package trampoline): a nop site, or a detour of the one
// instruction the b replaces. trampoline.AnalyzeARM64 judges that
// instruction (with NopOnly when no function is known); the caller has
// already made the function-wide checks, the instruction boundary and the
// load/store-exclusive window. One instruction is displaced, so no branch
// can land inside the replaced bytes: a branch to them meets the b and
// enters the slot as the site's own execution does. The one exception is
// a bti at the probe address, which stays while the b replaces the
// instruction after it: a branch to that instruction would enter the slot
// without passing the probe address, so the function must be known and
// neither it nor the rest of the file (Site.Branches) may have a direct
// branch there. It reports the decision when a trampoline is taken.
//
// The engine (package probe) installs such a trampoline for counting;
// with events or a return probe the site takes its trap fallback.
func trampolineARM64(d *Decision, s *Site, o *Options) (Decision, bool) {
	ts, ok := analyzeTrampoline(d, s, o, "nop", trampoline.AnalyzeARM64)
	if !ok {
		return Decision{}, false
	}
	kept, keptRule := "", ""
	if ts.PatchAddr != s.Addr {
		if s.Func == nil {
			d.rule("trampoline", Fail, "the bti at %#x would stay and the b replace the word at %#x, but no function is known to show that no branch lands there (it would enter the slot without passing the probe address)", s.Addr, ts.PatchAddr)
			return Decision{}, false
		}
		if t, ok := s.Func.BranchTargetIn(s.Addr, ts.Resume()); ok {
			d.rule("trampoline", Fail, "the bti at %#x would stay and the b replace the word at %#x, but a branch of the function lands at %#x: it would enter the slot without passing the probe address", s.Addr, ts.PatchAddr, t)
			return Decision{}, false
		}
		if !foreignBranchRule(d, s, ts.Resume(), []uint64{ts.PatchAddr}, fmt.Sprintf("the word at %#x that the b would replace after the bti at %#x (it would enter the slot without passing the probe address)", ts.PatchAddr, s.Addr)) {
			return Decision{}, false
		}
		kept = fmt.Sprintf(" (the bti at %#x stays)", s.Addr)
		keptRule = fmt.Sprintf(" (the bti at %#x stays, and %s)", s.Addr, noBranchInside(s, "on the word after it"))
	}
	if ts.Kind == trampoline.SiteNop {
		if d.record {
			d.rule("trampoline", Pass, "a nop site: the nop at %#x%s replaced by a b to a slot; it displaces nothing that must run, and as one word no branch can land inside it", ts.PatchAddr, keptRule)
		}
		return d.finish(TrampolineNop, ReasonTrampolineNop, "a nop rewritten into a b to a trampoline (4 bytes at %#x%s), no trap", ts.PatchAddr, kept), true
	}
	if d.record {
		call := ""
		if ts.Calls {
			call = fmt.Sprintf("; a call: the slot sets x30 to %#x, so the callee returns to the original code", ts.Resume())
		}
		d.rule("trampoline", Pass, "a detour: the %s at %#x%s replaced by a b to a slot and run there relocated%s; checked: it runs from the slot without a trap or a scratch register, the boundary and the exclusive window (above); one instruction is displaced, so a branch lands on the b or outside it, never inside the replaced bytes, and no branch-target or indirect-jump check is needed", ts.Inst.Text(), ts.PatchAddr, keptRule, call)
	}
	return d.finish(TrampolineDetour, ReasonTrampolineDetour, "a detour: the %s at %#x%s moved to a trampoline and replaced by a b to it, run there relocated, no trap", ts.Inst.Mnemonic, ts.PatchAddr, kept), true
}

// analyzeTrampoline asks analyze (trampoline.AnalyzeX86 or AnalyzeARM64)
// whether the site's replaced instructions can take a trampoline, given
// the code from the site to the end of its function (the site's own bytes
// when no function is known, and then only a nop site qualifies: nop is
// how the refusal names one). ok is false when trampolines are not wanted
// or the analysis refused; the rule says why.
func analyzeTrampoline[T any](d *Decision, s *Site, o *Options, nop string, analyze func(uint64, []byte, *trampoline.SiteOptions) (T, error)) (ts T, ok bool) {
	if o.NoTrampolines {
		d.rule("trampoline", Info, "trampolines not wanted: only trap strategies are considered")
		return ts, false
	}
	code := s.Code
	if s.Func != nil {
		if off := s.Addr - s.Func.Addr; s.Addr >= s.Func.Addr && off < uint64(len(s.Func.Code)) {
			code = s.Func.Code[off:]
		}
	}
	ts, err := analyze(s.Addr, code, &trampoline.SiteOptions{Vendor: o.Vendor, NopOnly: s.Func == nil})
	if err != nil {
		var se *trampoline.SiteError
		msg := err.Error()
		if errors.As(err, &se) {
			msg = se.Reason
		}
		if s.Func == nil {
			msg += fmt.Sprintf(" (no function is known, so only a %s site could take a trampoline)", nop)
		}
		d.rule("trampoline", Fail, "%s", msg)
		return ts, false
	}
	return ts, true
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

// refusal turns an xol refusal into a rejection that carries xol's code as
// its reason (ReasonSyscall is xol.RefuseSyscall, and so on).
func refusal(d *Decision, err error) Decision {
	var re *xol.RefusalError
	if !errors.As(err, &re) {
		return d.finish(Reject, ReasonUndecodable, "%v", err)
	}
	return d.finish(Reject, re.Code, "it cannot be emulated, and %s", re.Reason)
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

// trampolineX86 decides whether the site can be rewritten into a jump to
// a trampoline (package trampoline): a NOP site, or a detour of the whole
// instructions that cover the jump. trampoline.AnalyzeX86 judges the
// replaced instructions themselves; the checks over the whole function and
// file are made here: no direct branch of the function, nor of the file
// (Site.Branches), lands strictly inside the replaced bytes (a branch to
// their first byte meets the jump), and, for a detour, the function has no
// indirect jump (a jump table could land inside them). It reports the
// decision when a trampoline is taken.
func trampolineX86(d *Decision, s *Site, o *Options) (Decision, bool) {
	if o.KeepFirst && !o.NoTrampolines && s.Func != nil {
		// The first instruction kept, if the longer span passes the
		// function-wide checks; else the jump at the address.
		keep := func(addr uint64, code []byte, so *trampoline.SiteOptions) (*trampoline.Site, error) {
			ko := *so
			ko.KeepFirst = true
			return trampoline.AnalyzeX86(addr, code, &ko)
		}
		kd := *d
		kd.Rules = append([]Rule(nil), d.Rules...)
		if ts, ok := analyzeTrampoline(&kd, s, o, "NOP", keep); ok && ts.Kept > 0 {
			if dec, ok := trampolineX86Site(&kd, s, o, ts); ok {
				dec.Kept = ts.Kept
				return dec, true
			}
		}
	}
	ts, ok := analyzeTrampoline(d, s, o, "NOP", trampoline.AnalyzeX86)
	if !ok {
		return Decision{}, false
	}
	return trampolineX86Site(d, s, o, ts)
}

// trampolineX86Site applies the function-wide checks to the trampoline
// site ts that trampoline.AnalyzeX86 made of s.
func trampolineX86Site(d *Decision, s *Site, o *Options, ts *trampoline.Site) (Decision, bool) {
	replaced := fmt.Sprintf("%s replaced at %#x", plural(ts.Len, "byte"), ts.PatchAddr)
	if ts.Kept > 0 {
		replaced += fmt.Sprintf(" (the %d-byte first instruction kept in place before the jump)", ts.Kept)
	}
	if s.Func != nil {
		// From the probe address on: when an endbr64 stays, a branch to
		// the jump after it would run the probe without passing the
		// probe address.
		if t, ok := s.Func.BranchTargetIn(s.Addr, ts.PatchAddr+uint64(ts.Len)); ok {
			d.rule("trampoline", Fail, "a branch of the function lands at %#x, inside the %s", t, replaced)
			return Decision{}, false
		}
		if t, jt, ok := s.Func.TableTargetIn(s.Addr, ts.PatchAddr+uint64(ts.Len)); ok {
			d.rule("trampoline", Fail, "an entry of the jump table at %#x (of the jmp at %#x) leads to %#x, inside the %s", jt.Table, jt.Jump, t, replaced)
			return Decision{}, false
		}
	}
	if !foreignBranchRule(d, s, ts.PatchAddr+uint64(ts.Len), x86Boundaries(s.Addr, ts), "the "+replaced) {
		return Decision{}, false
	}
	if ts.Kind == trampoline.SiteNop {
		d.rule("trampoline", Pass, "a NOP site: %s by a jump to a slot", replaced)
		return d.finish(TrampolineNop, ReasonTrampolineNop, "a NOP site rewritten into a jump to a trampoline: %s, no trap", replaced), true
	}
	if !o.TrustIndirectJumps && !s.PLT && !indirectJumpRule(d, s, ts) {
		return Decision{}, false
	}
	what := fmt.Sprintf("%s moved to the slot", plural(ts.Run, "instruction"))
	if ts.Calls {
		what += ", the last a call"
	}
	jumps := "the function has no indirect jump"
	switch {
	case s.PLT && s.Func.IndirectJumps > 0:
		jumps = "the stub's indirect jump leaves for another function (a PLT stub)"
	case s.Func.IndirectJumps > 0 && o.TrustIndirectJumps:
		jumps = "the function's indirect jumps are known to leave it"
	case s.Func.IndirectJumps > 0:
		jumps = tablesText(s.Func)
	}
	d.rule("trampoline", Pass, "a detour: %s, %s; %s and %s", replaced, what, noBranchInside(s, "inside them"), jumps)
	return d.finish(TrampolineDetour, ReasonTrampolineDetour, "a detour: %s by a jump to a trampoline, %s and run there, no trap", replaced, what), true
}

// indirectJumpRule reports false, with a failed rule, when the function
// has an indirect jump that is not a recovered jump table (it could land
// anywhere, inside the detour too), or a recovered table whose bound check
// and dispatch another part of the file branches into (the recovery saw
// one path to the jump only).
func indirectJumpRule(d *Decision, s *Site, ts *trampoline.Site) bool {
	fn := s.Func
	un := fn.UnresolvedJumps()
	pointers := 0
	for _, u := range un {
		if u.Pointer {
			pointers++
			continue
		}
		d.rule("trampoline", Fail, "a detour would displace %s, but %d of the function's %s %s not a jump table the plan recovers (%s), which could land inside them: the jmp at %#x is %s",
			plural(ts.Run, "instruction"), len(un), plural(fn.IndirectJumps, "indirect jump"), isAre(len(un)), tablesCount(fn), u.Addr, u.Why)
		return false
	}
	checked := s.Branches != nil && !s.Branches.unchecked
	if pointers > 0 && !checked {
		d.rule("trampoline", Fail, "a detour would displace %s, but the function has %s through pointers loaded from memory, and without the file's index of the code addresses it takes (plan.File) nothing shows that none goes inside the function", plural(ts.Run, "instruction"), plural(pointers, "jump"))
		return false
	}
	if pointers > 0 {
		// A pointer holds a code address the program took: none may lie
		// inside the function after its entry, but for the entries of
		// its own tables of addresses.
		end := fn.Addr + uint64(len(fn.Code))
		taken, err := s.Branches.TakenIn(fn.Addr+1, end)
		if err != nil {
			d.rule("trampoline", Fail, "the code addresses the file takes are not known (%v): a jump through a pointer could go inside the function", err)
			return false
		}
		for _, p := range taken {
			if !fn.inAbsTable(p.At) {
				d.rule("trampoline", Fail, "a detour would displace %s, and the function has %s through pointers loaded from memory; the file takes the address %#x inside the function (at %#x), where such a jump could go", plural(ts.Run, "instruction"), plural(pointers, "jump"), p.To, p.At)
				return false
			}
		}
	}
	if !checked {
		return true
	}
	for _, jt := range fn.JumpTables() {
		t, found, err := s.Branches.TargetIn(jt.Start+1, jt.Jump+1)
		if err != nil || found {
			d.rule("trampoline", Fail, "code elsewhere in the file may enter the code that computes the target of the jmp at %#x (%#x-%#x) at %#x, so its jump table is not trusted", jt.Jump, jt.Start, jt.Jump, t.Addr)
			return false
		}
	}
	return true
}

// tablesText says, for a passed rule, what the function's indirect jumps
// are.
func tablesText(fn *Function) string {
	var parts []string
	if n := len(fn.JumpTables()); n > 0 {
		targets := 0
		for _, jt := range fn.JumpTables() {
			targets += len(jt.Targets)
		}
		parts = append(parts, fmt.Sprintf("%s recovered from the file, none of whose %s lands inside them", plural(n, "jump table"), plural(targets, "target")))
	}
	if n := len(fn.UnresolvedJumps()); n > 0 {
		parts = append(parts, fmt.Sprintf("%s through pointers loaded from memory, while the file takes no code address inside the function after its entry", plural(n, "jump")))
	}
	return fmt.Sprintf("the function's %s: %s", plural(fn.IndirectJumps, "indirect jump"), strings.Join(parts, "; "))
}

// tablesCount says how many jump tables were recovered.
func tablesCount(fn *Function) string {
	n := len(fn.JumpTables())
	if n == 0 {
		return "none recovered"
	}
	return fmt.Sprintf("%s recovered", plural(n, "table"))
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// x86Boundaries returns the instruction boundaries after the probe address
// addr inside the bytes a trampoline replaces: where the jump is written
// when a prefix instruction stays, and each displaced instruction.
func x86Boundaries(addr uint64, ts *trampoline.Site) []uint64 {
	var out []uint64
	if ts.PatchAddr > addr {
		out = append(out, ts.PatchAddr)
	}
	for i := range ts.Insts {
		if a := ts.Insts[i].Addr; a > addr && a != ts.PatchAddr {
			out = append(out, a)
		}
	}
	return out
}

// foreignBranchRule applies the file's branch index (Site.Branches) to the
// bytes from just after the probe address to end, which the trampoline
// replaces; what names them for the rule. It reports false, with a failed
// rule, when a direct branch from anywhere in the file lands there, when
// the Go runtime may resume a goroutine at one of the instruction
// boundaries inside them (inside), when the index could not be built, or
// when no index was given (the branches are then unknown). NoBranches
// passes: the rule of the decision says what was not checked.
func foreignBranchRule(d *Decision, s *Site, end uint64, inside []uint64, what string) bool {
	if s.Branches == nil {
		d.rule("trampoline", Fail, "the file's branch targets and landing pads are not known (no branch index was given; see plan.File, or plan.NoBranches to rest on the function's own branches): one could lie inside %s", what)
		return false
	}
	t, found, err := s.Branches.TargetIn(s.Addr+1, end)
	switch {
	case err != nil:
		d.rule("trampoline", Fail, "the file's branch targets are not known (%v): one could lie inside %s", err, what)
		return false
	case !found:
		return goResumeRule(d, s, inside, what)
	}
	if d.record {
		switch t.Kind {
		case TargetLandingPad:
			d.rule("trampoline", Fail, "an exception landing pad (the unwinder jumps there) lies at %#x, inside %s", t.Addr, what)
		case TargetUnknownPads:
			d.rule("trampoline", Fail, "the landing pads of the code at %#x-%#x are not known (%v): one could lie inside %s", t.FDE.PCBegin, t.FDE.PCEnd, t.FDE.Err, what)
		default:
			d.rule("trampoline", Fail, "%s, inside %s", branchesText(s.Branches, t.Addr), what)
		}
	}
	return false
}

// goResumeRule reports false, with a failed rule, when the Go runtime may
// resume a goroutine at one of the instruction boundaries inside the
// replaced bytes (BranchCode.GoResume): it would run the middle of the
// jump.
func goResumeRule(d *Decision, s *Site, inside []uint64, what string) bool {
	for _, a := range inside {
		r, found, err := s.Branches.GoResumeAt(a)
		switch {
		case err != nil:
			d.rule("trampoline", Fail, "where the Go runtime resumes goroutines is not known (%v): it could be inside %s", err, what)
			return false
		case !found:
			continue
		}
		if d.record {
			d.rule("trampoline", Fail, "the Go runtime may resume a goroutine at %#x, inside %s: %s", a, what, goResumeText(r))
		}
		return false
	}
	return true
}

// goResumeText says why the Go runtime may resume a goroutine in r.
func goResumeText(r elfscan.GoResume) string {
	switch r.Kind {
	case elfscan.GoAsyncPoint:
		return fmt.Sprintf("an asynchronous preemption point of %s (its unsafe-point table marks %#x-%#x safe)", r.Func, r.Lo, r.Hi)
	case elfscan.GoRestart:
		return fmt.Sprintf("the start of a restartable sequence of %s", r.Func)
	case elfscan.GoDeferReturn:
		return fmt.Sprintf("the deferreturn call of %s, where a recovered panic resumes it", r.Func)
	case elfscan.GoRuntimeEntry:
		return fmt.Sprintf("%s is runtime assembly with a special role, entered at computed addresses (a goroutine returns to goexit+1)", r.Func)
	}
	return fmt.Sprintf("the function table of %s is older than Go 1.18 and is not read: any instruction may be one", r.Func)
}

// branchesText says which branches land at target: "a jmp at 0x401136
// (in foo.cold) lands at 0x401124". It decodes the file's code again, so
// it is only asked for when rules are recorded.
func branchesText(x *BranchIndex, target uint64) string {
	brs, err := x.BranchesTo(target)
	if err != nil || len(brs) == 0 {
		return fmt.Sprintf("a direct branch lands at %#x", target)
	}
	b := brs[0]
	where := "in no known function"
	if b.Func != "" {
		where = "in " + b.Func
	}
	kind := b.Kind.String()
	if in := isaOf(x.Arch()); in != nil {
		kind = in.branchName(b.Kind)
	}
	if len(brs) == 1 {
		return fmt.Sprintf("a %s at %#x (%s) lands at %#x", kind, b.From, where, target)
	}
	return fmt.Sprintf("%d direct branches land at %#x, the first a %s at %#x (%s)", len(brs), target, kind, b.From, where)
}

// noBranchInside is the passed branch check of a trampoline rule: where
// says where no branch lands ("inside them").
func noBranchInside(s *Site, where string) string {
	if s.Branches == nil || s.Branches.unchecked {
		return fmt.Sprintf("no branch of the function lands %s (branches from elsewhere in the file were not checked: the branch index was plan.NoBranches)", where)
	}
	return fmt.Sprintf("no direct branch or landing pad in the file lands %s", where)
}
