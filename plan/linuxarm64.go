package plan

import (
	"encoding/binary"
	"fmt"
)

// Masks and values of the arm64 instructions Linux classifies by their
// 32-bit word (arch/arm64/kernel/probes/decode-insn.c and
// arch/arm64/lib/insn.c), as (mask, value) pairs.
type a64Form struct{ mask, value uint32 }

func (f a64Form) is(w uint32) bool { return w&f.mask == f.value }

var (
	a64Nop       = a64Form{0xFFFFFFFF, 0xD503201F}
	a64ClassBSys = a64Form{0x1C000000, 0x14000000}
	a64B         = a64Form{0xFC000000, 0x14000000}
	a64BL        = a64Form{0xFC000000, 0x94000000}
	a64CBZ       = a64Form{0x7F000000, 0x34000000}
	a64CBNZ      = a64Form{0x7F000000, 0x35000000}
	a64TBZ       = a64Form{0x7F000000, 0x36000000}
	a64TBNZ      = a64Form{0x7F000000, 0x37000000}
	a64BCond     = a64Form{0xFF000010, 0x54000000}
	a64BR        = a64Form{0xFFFFFC1F, 0xD61F0000}
	a64BLR       = a64Form{0xFFFFFC1F, 0xD63F0000}
	a64RET       = a64Form{0xFFFFFC1F, 0xD65F0000}
	a64RetAuth   = a64Form{0xFFFFFBFF, 0xD65F0BFF}
	a64BRAuth    = a64Form{0xFEFFF800, 0xD61F0800}
	a64BLRAuth   = a64Form{0xFEFFF800, 0xD63F0800}
	a64MSRImm    = a64Form{0xFFF8F01F, 0xD500401F}
	a64MSRReg    = a64Form{0xFFF00000, 0xD5100000}
	a64MRS       = a64Form{0xFFF00000, 0xD5300000}
	a64Exception = a64Form{0xFF000000, 0xD4000000}
	a64ERET      = a64Form{0xFFFFFFFF, 0xD69F03E0}
	a64ERETAuth  = a64Form{0xFFFFFBFF, 0xD69F0BFF}
	a64Hint      = a64Form{0xFFFFF01F, 0xD503201F}
	a64LdrLit    = a64Form{0xBF000000, 0x18000000}
	a64LdrswLit  = a64Form{0xFF000000, 0x98000000}
	a64Adr       = a64Form{0x9F000000, 0x10000000}
	a64Adrp      = a64Form{0x9F000000, 0x90000000}
	a64PrfmLit   = a64Form{0xFF000000, 0xD8000000}
	a64Exclusive = a64Form{0x3F800000, 0x08000000}
	a64FPLdrLit  = a64Form{0x3F000000, 0x1C000000}
	a64BCCond    = a64Form{0xFF000010, 0x54000010}
)

// a64SteppableHint lists the HINT numbers (CRm:op2) Linux single-steps:
// nop, xpaclri, pacia1716, pacib1716, paciaz, paciasp, pacibz, pacibsp and
// every bti.
func a64SteppableHint(w uint32) bool {
	switch n := (w >> 5) & 0x7F; n {
	case 0, 7, 8, 10, 24, 25, 26, 27:
		return true
	default:
		return n&^6 == 32 // bti, bti c, bti j, bti jc
	}
}

func a64IsBranch(w uint32) bool {
	for _, f := range []a64Form{a64B, a64BL, a64CBZ, a64CBNZ, a64TBZ, a64TBNZ, a64RET, a64RetAuth, a64BR, a64BRAuth, a64BLR, a64BLRAuth, a64BCond} {
		if f.is(w) {
			return true
		}
	}
	return false
}

// a64Steppable is Linux's aarch64_insn_is_steppable, with the reason for a
// refusal.
func a64Steppable(w uint32) (bool, Reason, string) {
	if a64ClassBSys.is(w) {
		switch {
		case a64IsBranch(w):
			return false, "", "a branch"
		case a64MSRImm.is(w) || a64MSRReg.is(w):
			return false, ReasonSystem, "msr"
		case a64Exception.is(w):
			return false, ReasonException, "an exception-generating instruction"
		case a64ERET.is(w) || a64ERETAuth.is(w):
			return false, ReasonSystem, "eret"
		case a64MRS.is(w):
			if (w>>5)&0xFFFF == 0xDA11 { // op0:op1:CRn:CRm:op2 of DAIF
				return false, ReasonSystem, "mrs of DAIF"
			}
			return true, "", ""
		case a64Hint.is(w):
			if !a64SteppableHint(w) {
				return false, ReasonHintRejected, "a hint outside the steppable list"
			}
			return true, "", ""
		}
		return true, "", ""
	}
	if a64LdrLit.is(w) || a64LdrswLit.is(w) || a64Adr.is(w) || a64Adrp.is(w) || a64PrfmLit.is(w) {
		return false, ReasonLiteral, "a PC-relative literal or address"
	}
	if a64Exclusive.is(w) {
		return false, ReasonExclusive, "a load/store exclusive"
	}
	return true, "", ""
}

func linuxARM64(s *Site, o *Options) Decision {
	d := newDecision(LinuxUprobes, o)
	if s.Addr%4 != 0 {
		d.rule("alignment", Fail, "%#x is not a multiple of 4", s.Addr)
		return d.finish(Reject, ReasonMisaligned, "Linux refuses an arm64 probe at an address that is not a multiple of 4")
	}
	if len(s.Code) < 4 {
		d.rule("decode", Fail, "fewer than 4 bytes")
		return d.finish(Reject, ReasonUndecodable, "there is no instruction word at the address")
	}
	w := binary.LittleEndian.Uint32(s.Code)
	d.rule("decode", Info, "word %08x", w)
	window := uint64(0)
	inWindow := false
	if s.Func != nil {
		window, inWindow = s.Func.exclusiveWindow(s.Addr)
	}
	livelock := func(dd Decision) Decision {
		if inWindow && dd.Strategy != Reject {
			dd.rule("exclusive-window", Warn, "inside the load/store-exclusive sequence that starts at %#x; Linux does not check", window)
			dd.Reason = ReasonExclusiveLivelock
			dd.Detail = fmt.Sprintf("Linux accepts this probe inside the load/store-exclusive sequence from %#x (%s), but the trap clears the exclusive monitor: the store-exclusive fails every time and the loop never ends", window, dd.Detail)
		}
		return dd
	}
	if a64Nop.is(w) {
		d.rule("nop", Pass, "nop: simulated (6.13+)")
		return livelock(d.finish(Emulate, ReasonEmulatedNop, "nop, simulated by skipping it (one trap per hit)"))
	}
	ok, why, what := a64Steppable(w)
	if ok {
		d.rule("steppable", Pass, "single-stepped out of line")
		if a64BCCond.is(w) || a64FPLdrLit.is(w) {
			d.rule("pc-relative", Warn, "PC-relative, but outside the masks Linux checks")
			return livelock(d.finish(XOL, ReasonXOLPCRelGap, "this PC-relative instruction (bc.cond or an FP/SIMD literal load) escapes Linux's masks and is single-stepped from the slot, where it computes a wrong address"))
		}
		return livelock(d.finish(XOL, ReasonXOL, "single-stepped out of line from the XOL page, then pc = address + 4 (two traps per hit)"))
	}
	d.rule("steppable", Info, "not steppable: %s", what)
	switch {
	case a64BCond.is(w), a64CBZ.is(w), a64CBNZ.is(w), a64TBZ.is(w), a64TBNZ.is(w), a64B.is(w), a64BL.is(w),
		a64BR.is(w), a64BLR.is(w), a64RET.is(w):
		d.rule("simulate", Pass, "a branch Linux simulates")
		return livelock(d.finish(Emulate, ReasonEmulatedBranch, "a branch, simulated (one trap per hit)"))
	case a64Adr.is(w) || a64Adrp.is(w):
		d.rule("simulate", Pass, "adr/adrp, simulated")
		return livelock(d.finish(Emulate, ReasonEmulatedAdr, "adr or adrp, simulated (one trap per hit)"))
	}
	d.rule("simulate", Fail, "no simulator")
	switch {
	case a64RetAuth.is(w) || a64BRAuth.is(w) || a64BLRAuth.is(w):
		return d.finish(Reject, ReasonPACBranch, "a pointer-authenticated branch: Linux neither steps nor simulates it; registration fails")
	case why == ReasonLiteral:
		return d.finish(Reject, ReasonLiteral, "a literal load: uprobes stopped simulating it in 6.12 and cannot step it; registration fails")
	case why == "":
		why = ReasonSystem
	}
	return d.finish(Reject, why, "%s: Linux refuses it; registration fails", what)
}
