package trampoline

import (
	"errors"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/xol"
)

// SiteKind says how a site is rewritten.
type SiteKind uint8

const (
	// SiteNop: a NOP of 5 bytes or more (nop5, nop10, the -mfentry nop5),
	// possibly after a one-byte nop (the USDT `nop; nop5` and
	// `nop; nop10` forms), replaced by a jump; nothing is displaced.
	SiteNop SiteKind = iota + 1
	// SiteDetour: whole instructions covering at least 5 bytes are
	// replaced by a jump and run, relocated, from the slot.
	SiteDetour
)

func (k SiteKind) String() string {
	switch k {
	case SiteNop:
		return "nop"
	case SiteDetour:
		return "detour"
	}
	return "unknown"
}

// jmpLen is the size of the jmp rel32 written at a site.
const jmpLen = 5

// Site is an x86-64 probe site that can be rewritten into a jump to a
// slot: what is replaced, and what the slot must run.
type Site struct {
	// Addr is the probe address.
	Addr uint64
	Kind SiteKind
	// PatchAddr is where the jump is written: Addr, or Addr+1 for a
	// `nop; nopN` site (the one-byte nop stays), Addr+4 when an endbr64
	// at Addr is kept, or after the first instruction when
	// SiteOptions.KeepFirst keeps it in place (Kept is then its length).
	PatchAddr uint64
	// Kept is the length of the first instruction that SiteOptions.KeepFirst
	// left in place before the jump, 0 when none was (an endbr64 or a
	// one-byte nop kept by default is not counted here).
	Kept int
	// Redo, when set, is that kept instruction, a push of a register
	// kept under SiteOptions.Returns: the slot first takes the stack
	// pointer back where it was before the push (the return address is
	// then at the stack pointer, as at a jump at Addr), and runs the push
	// again before the displaced instructions.
	Redo *decode.X86Inst
	// Len is the number of bytes replaced at PatchAddr (>= 5): the jump,
	// then int3 fill.
	Len int
	// Old holds the Len bytes at PatchAddr before the rewrite.
	Old []byte
	// Insts are the displaced instructions of a detour, at their original
	// addresses, in order; Run of them are reachable and relocated (the
	// rest follow an instruction that never falls through, so only a
	// branch into the replaced bytes could reach them, which the
	// function-wide checks exclude).
	Insts []decode.X86Inst
	Run   int
	// Calls reports that a displaced instruction is a call (always the
	// last one run): a thread inside the callee returns after the
	// replaced bytes, which is safe.
	Calls bool
}

// Resume is the address after the replaced bytes, where the slot goes on
// when the displaced code falls through.
func (s *Site) Resume() uint64 { return s.PatchAddr + uint64(s.Len) }

// Reach lists the addresses the slot must reach with a 32-bit
// displacement: the jump's end and the resume address, and for a detour the
// operands of RIP-relative instructions and the targets of relative
// branches. Pass them to Place.
func (s *Site) Reach() []uint64 {
	out := []uint64{s.PatchAddr, s.Resume()}
	for i := 0; i < s.Run; i++ {
		in := &s.Insts[i]
		if in.RIPRel || in.Branch.Relative() {
			out = append(out, in.Target)
		}
	}
	return out
}

// SiteOptions control AnalyzeX86. A nil *SiteOptions means the zero value.
type SiteOptions struct {
	// Vendor is the CPU vendor whose decoding rules apply (see
	// decode.X86Decoder).
	Vendor decode.Vendor
	// NopOnly refuses detours: only NOP sites are accepted.
	NopOnly bool
	// ReplaceEndbr puts the jump on an endbr64 at the site instead of
	// after it. By default an endbr64 stays (an indirect call or jump to
	// the function must still land on it when indirect branch tracking is
	// enforced) and the jump follows it.
	ReplaceEndbr bool
	// KeepFirst leaves the first instruction at Addr in place and puts
	// the jump after it, when that instruction can run before the
	// probe's handler without changing what the handler sees: it always
	// falls through to the next one (no branch, no trap) and is not a
	// NOP site (with Args and Returns, more is asked). The jump then
	// never covers
	// the byte at Addr, where another tracer's breakpoint goes (a kernel
	// uprobe writes int3 over the first byte of the instruction it
	// probes, and writes the file's byte back when it goes; over a jump
	// that byte would tear it). When the rest is no site, the jump is
	// written at Addr as without the option.
	KeepFirst bool
	// Args says that the slot records the argument registers (an entry
	// event: the registers of ArgRegs): KeepFirst keeps only an
	// instruction that writes none of them.
	Args    bool
	ArgRegs ArgRegs
	// Returns says that the slot arms a return probe or walks the frames
	// above (Handler.Return, Unhijack, Rehijack): it needs the return
	// address at the stack pointer, so KeepFirst keeps only an
	// instruction that writes neither the stack pointer nor memory, or a
	// push of a register, which the slot undoes and runs again (Site.Redo).
	Returns bool
}

// AnalyzeX86 decides how the site at addr is rewritten. code holds the
// bytes at addr as they are in memory, up to the end of the function (a
// detour never displaces bytes past code): at least 5 bytes, 20 or more
// for detours of long instructions.
//
// It checks what depends on the displaced instructions themselves: each
// decodes, can run from another address without a trap (xol), and a call
// or a branch that needs stubs comes last. The checks over the whole
// function — no direct branch lands inside the replaced bytes, no indirect
// jump that could, the instruction boundary at addr — belong to the
// caller (package plan), and a site it has not checked must not be
// rewritten. A refusal is a *SiteError (errors.Is ErrNotSite).
func AnalyzeX86(addr uint64, code []byte, opts *SiteOptions) (*Site, error) {
	var o SiteOptions
	if opts != nil {
		o = *opts
	}
	dec := decode.X86Decoder{Vendor: o.Vendor}
	if s := nopSite(dec, addr, code); s != nil {
		return s, nil
	}
	// endbr64 then a NOP site (gcc -fcf-protection -mfentry).
	if !o.ReplaceEndbr && isEndbr64(code) {
		if s := nopSite(dec, addr+4, code[4:]); s != nil {
			s.Addr = addr
			return s, nil
		}
	}
	if o.KeepFirst && !isEndbr64(code) {
		if s := keptFirstSite(dec, addr, code, o); s != nil {
			return s, nil
		}
	}
	if o.NopOnly {
		return nil, siteErr(addr, RefuseNoDetour, nil, "not a NOP site of 5 bytes or more, and detours are off")
	}
	return detourSite(dec, addr, code, o)
}

// ArgRegs names the six registers an entry event records as the
// arguments of the function (Handler.ArgRegs).
type ArgRegs uint8

const (
	// SysVArgs are rdi, rsi, rdx, rcx, r8 and r9: the integer arguments
	// of the System V calling convention.
	SysVArgs ArgRegs = iota
	// GoArgs are rax, rbx, rcx, rdi, rsi and r8: the first six integer
	// arguments of Go's internal register ABI (ABIInternal), and at a
	// return instruction its first results.
	GoArgs
)

// set returns the registers as the decoder names them.
func (r ArgRegs) set() decode.RegSet {
	if r == GoArgs {
		return decode.RegSet(0).Add(decode.RAX).Add(decode.RBX).Add(decode.RCX).Add(decode.RDI).Add(decode.RSI).Add(decode.R8)
	}
	return decode.RegSet(0).Add(decode.RDI).Add(decode.RSI).Add(decode.RDX).Add(decode.RCX).Add(decode.R8).Add(decode.R9)
}

// keptFirstSite returns the site whose jump follows the first instruction
// of code, kept in place (SiteOptions.KeepFirst), or nil when that
// instruction cannot stay or the code after it is no site (no NOP site,
// with NopOnly).
func keptFirstSite(dec decode.X86Decoder, addr uint64, code []byte, o SiteOptions) *Site {
	var in decode.X86Inst
	if dec.Decode(code, addr, &in) != nil || in.RegsApprox || in.Branch != decode.BranchNone || o.Args && in.Written&o.ArgRegs.set() != 0 {
		return nil
	}
	if _, err := xol.CheckX86(&in); err != nil {
		return nil // a trap, a system call, a privileged instruction...
	}
	redo := false
	if o.Returns && (in.Written.Has(decode.RSP) || in.HasModRM && in.Mod != 3 || in.DispSize > 0) {
		if !isPushReg(&in) {
			return nil
		}
		redo = true
	}
	rest := o
	rest.KeepFirst, rest.ReplaceEndbr = false, true // one instruction kept, no more
	next := code[in.Len:]
	s := nopSite(dec, addr+uint64(in.Len), next)
	if s == nil && o.NopOnly {
		return nil
	}
	if s == nil {
		var err error
		if s, err = detourSite(dec, addr+uint64(in.Len), next, rest); err != nil {
			return nil
		}
	}
	s.Addr, s.Kept = addr, in.Len
	if redo {
		kept := in
		s.Redo = &kept
	}
	return s
}

// isPushReg reports whether in is a push of a 64-bit general-purpose
// register (50+r, with at most a REX.B): it writes the stack pointer and
// the word below it, both undone by adding 8 to the stack pointer.
func isPushReg(in *decode.X86Inst) bool {
	return in.Encoding == decode.EncLegacy && in.Map == decode.Map1Byte && in.Opcode >= 0x50 && in.Opcode <= 0x57 &&
		in.NumPrefixes == 0 && in.REX&^0x41 == 0
}

// nopLen returns the length of the NOP instruction at the start of code
// (decode.X86Inst.IsNop), or 0.
func nopLen(dec decode.X86Decoder, code []byte) int {
	var in decode.X86Inst
	if dec.Decode(code, 0, &in) != nil || !in.IsNop() {
		return 0
	}
	return in.Len
}

func nopSite(dec decode.X86Decoder, addr uint64, code []byte) *Site {
	n := nopLen(dec, code)
	at := 0
	if n == 1 {
		if m := nopLen(dec, code[1:]); m >= jmpLen {
			at, n = 1, m
		}
	}
	if n < jmpLen {
		return nil
	}
	return &Site{
		Addr:      addr,
		Kind:      SiteNop,
		PatchAddr: addr + uint64(at),
		Len:       n,
		Old:       append([]byte(nil), code[at:at+n]...),
	}
}

// isEndbr64 reports whether code starts with endbr64 (F3 0F 1E FA).
func isEndbr64(code []byte) bool {
	return len(code) >= 4 && code[0] == 0xF3 && code[1] == 0x0F && code[2] == 0x1E && code[3] == 0xFA
}

// fallsThrough reports whether execution can continue after the
// instruction.
func fallsThrough(k decode.BranchKind) bool {
	switch k {
	case decode.BranchJmp, decode.BranchJmpIndirect, decode.BranchRet, decode.BranchRetImm,
		decode.BranchFarJmp, decode.BranchFarRet, decode.BranchJmpAbs, decode.BranchIret:
		return false
	}
	return true
}

func detourSite(dec decode.X86Decoder, addr uint64, code []byte, o SiteOptions) (*Site, error) {
	start := 0
	if !o.ReplaceEndbr && isEndbr64(code) {
		start = 4
	}
	s := &Site{Addr: addr, Kind: SiteDetour, PatchAddr: addr + uint64(start)}
	n := start
	reachable := true
	for n-start < jmpLen {
		if n >= len(code) {
			return nil, siteErr(addr, RefuseShort, nil, "the code ends %d bytes after %#x; the jump needs %d", n-start, s.PatchAddr, jmpLen)
		}
		var in decode.X86Inst
		if err := dec.Decode(code[n:], addr+uint64(n), &in); err != nil {
			if errors.Is(err, decode.ErrTruncated) {
				return nil, siteErr(addr, RefuseShort, err, "the instruction at %#x runs past the end of the code", addr+uint64(n))
			}
			return nil, siteErr(addr, RefuseUndecodable, err, "the instruction at %#x does not decode", addr+uint64(n))
		}
		if reachable {
			if err := checkDetourInst(&in); err != nil {
				return nil, err
			}
			s.Run++
		}
		s.Insts = append(s.Insts, in)
		n += in.Len
		if reachable && !fallsThrough(in.Branch) {
			reachable = false
		}
	}
	// A call, or a branch that needs stubs, must be the last instruction
	// run: its return address (or fall-through) would be inside the
	// replaced bytes otherwise.
	for i := 0; i < s.Run-1; i++ {
		in := &s.Insts[i]
		switch in.Branch {
		case decode.BranchCall, decode.BranchCallIndirect, decode.BranchFarCall, decode.BranchLoop:
			return nil, siteErr(addr, RefuseMidRun, nil, "the %s at %#x is displaced but not last: its return or fall-through would land in the replaced bytes", in.Mnemonic, in.Addr)
		}
	}
	if s.Run > 0 && s.Insts[s.Run-1].Branch == decode.BranchCall {
		s.Calls = true
	}
	s.Len = n - start
	s.Old = append([]byte(nil), code[start:n]...)
	return s, nil
}

// checkDetourInst refuses an instruction that cannot run from the slot
// followed by a jump: what xol refuses, and what it can only step.
func checkDetourInst(in *decode.X86Inst) error {
	fix, err := xol.CheckX86(in)
	if err != nil {
		return siteErr(in.Addr, RefuseNotRelocatable, err, "the %s at %#x cannot run from another address", in.Mnemonic, in.Addr)
	}
	switch {
	case fix.PopfTF:
		return siteErr(in.Addr, RefuseNotBoostable, nil, "popf at %#x: a trap flag it loads must take effect after the original's next instruction", in.Addr)
	case in.Branch == decode.BranchCallIndirect || in.Branch == decode.BranchFarCall:
		return siteErr(in.Addr, RefuseNotBoostable, nil, "the indirect or far call at %#x pushes a return address into the slot", in.Addr)
	case fix.Rep:
		// A REP string instruction runs to completion from the slot (no
		// trap interrupts it).
	}
	// Relocate it for a slot right next to it: a RIP-relative operand or
	// branch target that reaches from there must keep its form (the real
	// slot is placed within reach, see Reach).
	c, err := xol.RelocateX86(in, in.Addr, nil)
	if err != nil {
		var re *xol.RefusalError
		if errors.As(err, &re) {
			return siteErr(in.Addr, RefuseNotRelocatable, err, "the %s at %#x cannot be relocated", in.Mnemonic, in.Addr)
		}
		return siteErr(in.Addr, RefuseNotRelocatable, err, "relocating the %s at %#x failed", in.Mnemonic, in.Addr)
	}
	if !c.Boost || c.Scratch >= 0 {
		return siteErr(in.Addr, RefuseNotBoostable, nil, "the %s at %#x can only be single-stepped out of line (%s)", in.Mnemonic, in.Addr, c.Form)
	}
	return nil
}
