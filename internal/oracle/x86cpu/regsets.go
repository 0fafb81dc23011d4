package x86cpu

import (
	"fmt"
	"math/big"
	"math/rand/v2"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
)

// The register-set check runs arbitrary decoded instructions in the
// emulator oracle's child (EmuOracle) to see which general-purpose
// registers they really read and write. Unlike the emulator's cases, these
// instructions are not modelled, so two things are decided here from the
// decoded fields alone: which instructions must not run at all
// (regsetExclusion), and which register values a case may start from so
// that no address the instruction can form reaches the harness's own
// memory (regsetValueRanges, checked by regsetReachesOracle).

// regsetExclusion returns why inst must not run in the oracle's child, or
// "" when it may. Privileged instructions may run: they fault.
func regsetExclusion(inst *decode.X86Inst) string {
	switch inst.Branch {
	case decode.BranchSyscall:
		return "syscall/sysenter: a system call with random arguments"
	case decode.BranchInt:
		return "int n/int3/int1/hlt/ud: a trap or interrupt instruction, whose signal could be taken for the single-step trap"
	case decode.BranchFarJmp, decode.BranchFarCall, decode.BranchFarRet, decode.BranchIret:
		return "far branch or interrupt return: loads CS and SS"
	case decode.BranchXbegin:
		return "xbegin: the single-step trap aborts the transaction and control resumes at the fallback address"
	}
	mem := inst.HasModRM && inst.Mod != 3
	reg := inst.Reg
	switch inst.Encoding {
	case decode.EncLegacy, decode.EncREX2:
		switch inst.Map {
		case decode.Map1Byte:
			switch {
			case inst.Opcode == 0x8e:
				return "mov to a segment register: loads a selector (mov ss also holds the single-step trap back)"
			case inst.Opcode == 0xd9 && mem && (reg == 4 || reg == 5), inst.Opcode == 0xdd && mem && reg == 4:
				return "fldenv/fldcw/frstor: loads the x87 control word, whose exception masks outlive the case"
			}
		case decode.Map0F:
			switch {
			case inst.Opcode == 0x00 && (reg == 0 || reg == 1), inst.Opcode == 0x01 && (mem && (reg == 0 || reg == 1) || reg == 4):
				return "sldt/str/sgdt/sidt/smsw: the kernel emulates them (UMIP) and returns without the single-step trap, so the bytes after the instruction run too"
			case inst.Opcode == 0xa1 || inst.Opcode == 0xa9:
				return "pop fs/gs: loads a selector, which resets the segment base the cases use"
			case inst.Opcode == 0xb2 || inst.Opcode == 0xb4 || inst.Opcode == 0xb5:
				return "lss/lfs/lgs: loads a segment register"
			case inst.Opcode == 0xae && mem && (reg == 1 || reg == 2 || reg == 5):
				return "fxrstor/ldmxcsr/xrstor: loads the FPU and SSE state and its exception masks, which outlive the case"
			case inst.Opcode == 0xae && !mem && inst.MandPrefix == 0xf3 && (reg == 2 || reg == 3):
				return "wrfsbase/wrgsbase: changes the segment bases the cases use"
			case inst.Opcode == 0xae && !mem && reg == 6 && inst.MandPrefix != 0:
				return "umonitor/umwait/tpause: arms or waits on an address monitor"
			case inst.Opcode == 0xc7 && mem && reg == 3:
				return "xrstors: loads the extended state"
			case inst.Opcode == 0xc7 && !mem && reg == 6 && inst.MandPrefix == 0xf3:
				return "senduipi: sends a user interrupt"
			case inst.Opcode == 0x01 && inst.ModRM == 0xef:
				return "wrpkru/stui: changes the protection keys or the user-interrupt flag"
			case inst.Opcode == 0x01 && inst.ModRM == 0xd7:
				return "enclu: enters or leaves an enclave"
			case inst.Opcode == 0x01 && inst.MandPrefix == 0xf3 && (inst.ModRM == 0xec || inst.ModRM == 0xee):
				return "uiret/clui: returns from a user interrupt or changes the user-interrupt flag"
			}
		case decode.Map0F38:
			if inst.Opcode == 0xf8 && (inst.MandPrefix == 0xf2 || inst.MandPrefix == 0xf3) {
				return "enqcmd/enqcmds: submits work to a device"
			}
		}
	case decode.EncVEX2, decode.EncVEX3:
		switch {
		case inst.Map == decode.Map0F && inst.Opcode == 0xae && mem && reg == 2:
			return "vldmxcsr: loads the SSE exception masks, which outlive the case"
		case inst.Map == decode.Map0F38 && (inst.Opcode >= 0x48 && inst.Opcode <= 0x4b || inst.Opcode >= 0x5c && inst.Opcode <= 0x5f || inst.Opcode >= 0x6b && inst.Opcode <= 0x6f):
			return "ldtilecfg/tile*: AMX tile configuration and tile operations"
		}
	case decode.EncEVEX:
		if inst.Map == decode.Map0F38 && (inst.Opcode == 0xa1 || inst.Opcode == 0xa3) {
			return "scatter with quadword indices: its addresses come from vector registers, which no case controls"
		}
	}
	return ""
}

// Register values are drawn from these ranges, and memory operands are
// aimed (regsetGen.aim) with values that stay in them.
const (
	// regsetHighLo and regsetHighHi bound an unmapped area far from every
	// mapping of the child (the code windows at EmuCodeLow and
	// EmuCodeHigh, the data pages at EmuROAddr, the control area at
	// emuCtrlAddr): an address register holding such a value faults, at an
	// address that tells which value was used. It lies above the control
	// area, since sums of a lower area with the window pointers and the
	// segment bases would cover the control area.
	regsetHighLo = 0x6000_0000_0000
	regsetHighHi = 0x6400_0000_0000 // exclusive
	// regsetSmall bounds the small values, and the negative ones below
	// zero: counts, selectors, 32-bit numbers, and the aimed bases and
	// indices of FS- and GS-relative operands.
	regsetSmall = 1 << 33
	// regsetWinLo and regsetWinHi bound the pointers into the code window
	// at EmuCodeLow, the read-only page and the read-write window, and the
	// bases aimed at them across a 32-bit displacement.
	regsetWinLo = EmuCodeLow - 1<<32
	regsetWinHi = EmuRWAddr + EmuRWSize + 1<<32
	// regsetDispMax bounds what an instruction adds to its registers: a
	// sign-extended 32-bit displacement, plus the size of the largest
	// access (xsave, enter's frame, a 64-byte store).
	regsetDispMax = 1<<31 + 1<<17
)

// regsetRange is an inclusive range of register values (or of RIP).
type regsetRange struct {
	name   string
	lo, hi uint64
}

// regsetValueRanges lists every value a case's registers may hold: the
// ranges regsetGen draws from, the aimed indices (a window pointer shifted
// right by the scale), and the fixed edge values.
var regsetValueRanges = func() []regsetRange {
	r := []regsetRange{
		{"high", regsetHighLo, regsetHighHi - 1},
		{"small", 0, regsetSmall},
		{"negative", ^uint64(regsetSmall) + 1, ^uint64(0)},
		{"window", regsetWinLo, regsetWinHi},
		{"window/2", regsetWinLo >> 1, regsetWinHi >> 1},
		{"window/4", regsetWinLo >> 2, regsetWinHi >> 2},
		{"window/8", regsetWinLo >> 3, regsetWinHi >> 3},
	}
	for _, v := range emuEdgeValues {
		r = append(r, regsetRange{fmt.Sprintf("edge %#x", v), v, v})
	}
	return r
}()

// regsetValueOK reports whether v lies in one of regsetValueRanges.
func regsetValueOK(v uint64) bool {
	for _, r := range regsetValueRanges {
		if v >= r.lo && v <= r.hi {
			return true
		}
	}
	return false
}

// regsetReachesOracle checks that no address an instruction can form from
// registers holding values in ranges (regsetValueRanges) reaches the
// harness's memory, whichever registers the CPU takes as base and index
// (the decoder under test may be wrong about them): for every base and
// index drawn from ranges (or none, or RIP in a code window), every scale,
// segment base (none, FS, GS) and displacement up to regsetDispMax, with
// 64- and 32-bit addressing, the address range must miss the control area
// and the signal stack. It returns the first combination that does not, or
// "".
func regsetReachesOracle(ranges []regsetRange) string {
	none := regsetRange{"none", 0, 0}
	rips := []regsetRange{{"rip low", EmuCodeLow, EmuCodeLow + EmuCodeSize}, {"rip high", EmuCodeHigh, EmuCodeHigh + EmuCodeSize}}
	bases := append(append([]regsetRange{none}, ranges...), rips...)
	indices := append([]regsetRange{none}, ranges...)
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	u := func(v uint64) *big.Int { return new(big.Int).SetUint64(v) }
	// hits reports whether [lo, hi], taken modulo 2^64, meets the area.
	hits := func(lo, hi *big.Int) bool {
		k := new(big.Int).Div(lo, two64)
		kEnd := new(big.Int).Div(hi, two64)
		for ; k.Cmp(kEnd) <= 0; k.Add(k, big.NewInt(1)) {
			off := new(big.Int).Mul(k, two64)
			aLo := new(big.Int).Add(off, u(emuCtrlAddr))
			aHi := new(big.Int).Add(off, u(emuCtrlLimit-1))
			if lo.Cmp(aHi) <= 0 && hi.Cmp(aLo) >= 0 {
				return true
			}
		}
		return false
	}
	disp := big.NewInt(regsetDispMax)
	for _, seg := range []uint64{0, EmuFSBase, EmuGSBase} {
		// 32-bit addressing: an address below 4 GiB plus the segment base.
		if hits(u(seg), new(big.Int).Add(u(seg), u(1<<32))) {
			return fmt.Sprintf("32-bit address with segment base %#x", seg)
		}
		for _, b := range bases {
			for _, x := range indices {
				if x.name != "none" && (b.name == "rip low" || b.name == "rip high") {
					continue
				}
				for _, s := range []int64{1, 2, 4, 8} {
					lo := new(big.Int).Add(u(seg), u(b.lo))
					lo.Add(lo, new(big.Int).Mul(u(x.lo), big.NewInt(s)))
					lo.Sub(lo, disp)
					hi := new(big.Int).Add(u(seg), u(b.hi))
					hi.Add(hi, new(big.Int).Mul(u(x.hi), big.NewInt(s)))
					hi.Add(hi, disp)
					if hits(lo, hi) {
						return fmt.Sprintf("segment base %#x + base %s + index %s * %d", seg, b.name, x.name, s)
					}
				}
			}
		}
	}
	return ""
}

// regsetGen draws the register states of the register-set check. It is
// deterministic for a seed and not safe for concurrent use.
type regsetGen struct {
	r *rand.Rand
	// canonicalRSP makes every stack pointer canonical, for a host that
	// cannot start a case with another (EmuOracle.EntersNoncanonicalRSP).
	canonicalRSP bool
}

// newRegsetGen returns a generator seeded with seed.
func newRegsetGen(seed uint64) *regsetGen {
	return &regsetGen{r: rand.New(rand.NewPCG(seed, 0x7265677365747321))}
}

// value returns a register value: mostly unmapped addresses far from
// every mapping, small and 32-bit numbers, and pointers into the windows.
func (g *regsetGen) value() uint64 {
	r := g.r
	switch n := r.IntN(24); {
	case n < 8:
		return (regsetHighLo + r.Uint64N(regsetHighHi-regsetHighLo)) &^ uint64(r.IntN(2)*7)
	case n < 11:
		return uint64(r.IntN(0x100))
	case n < 13:
		return uint64(r.Uint32())
	case n < 14:
		return -uint64(1 + r.IntN(0x100))
	case n < 15:
		return emuEdgeValues[r.IntN(len(emuEdgeValues))]
	case n < 20:
		return EmuRWAddr + r.Uint64N(EmuRWSize)&^uint64(r.IntN(2)*7)
	case n < 22:
		return EmuROAddr + r.Uint64N(EmuROSize)
	default:
		return EmuCodeLow + r.Uint64N(EmuCodeSize)
	}
}

// other returns a value for a perturbed register: a new value whose low
// byte differs from old, so that a byte operand sees the change too.
func (g *regsetGen) other(old uint64) uint64 {
	for {
		if v := g.value(); (v^old)&0xff != 0 {
			return v
		}
	}
}

// target returns an address for a memory operand to succeed on (or, in the
// read-only page, to fault on when written).
func (g *regsetGen) target() uint64 {
	r := g.r
	var a uint64
	if r.IntN(5) == 0 {
		a = EmuROAddr + r.Uint64N(EmuROSize)
	} else {
		a = EmuRWAddr + r.Uint64N(EmuRWSize-64)
	}
	switch r.IntN(4) {
	case 0:
		return a
	case 1:
		return a &^ 63
	default:
		return a &^ 7
	}
}

// regsetSegBase returns the segment base of inst's memory operand.
func regsetSegBase(inst *decode.X86Inst) uint64 {
	switch inst.LastSeg {
	case 0x64:
		return EmuFSBase
	case 0x65:
		return EmuGSBase
	}
	return 0
}

// prepare patches the absolute parts of inst's memory operand in b (the
// instruction's bytes, decoded into inst at rip): a 64-bit moffs address
// always, since any value could reach the harness, and a RIP-relative
// displacement often, so that the operand reaches the data window. It
// re-decodes b into inst and reports whether the bytes still decode to the
// same instruction.
func (g *regsetGen) prepare(dec decode.X86Decoder, inst *decode.X86Inst, b []byte, rip uint64) bool {
	r := g.r
	changed := false
	switch {
	case inst.DispSize == 8:
		v := g.target()
		if r.IntN(3) == 0 {
			v = regsetHighLo + r.Uint64N(regsetHighHi-regsetHighLo)
		}
		emuPutLE(b[inst.DispOff:], 8, v-regsetSegBase(inst))
		changed = true
	case inst.RIPRel && inst.DispSize == 4 && inst.AddrSize == 64 && r.IntN(4) != 0:
		d := int64(g.target() - (rip + uint64(inst.Len)))
		if d == int64(int32(d)) {
			emuPutLE(b[inst.DispOff:], 4, uint64(d))
			changed = true
		}
	}
	if !changed {
		return true
	}
	old := *inst
	if err := dec.Decode(b, rip, inst); err != nil {
		return false
	}
	return inst.Len == old.Len && inst.Mnemonic == old.Mnemonic && inst.Read == old.Read && inst.Written == old.Written
}

// state returns a random initial state for inst at rip, often with its
// ModRM memory operand aimed at the data pages. Every register value lies
// in regsetValueRanges.
func (g *regsetGen) state(inst *decode.X86Inst, rip uint64) emulate.X86State {
	r := g.r
	var st emulate.X86State
	for i := range st.GPR {
		st.GPR[i] = g.value()
	}
	if r.IntN(2) == 0 {
		// A stack that pushes and pops succeed on.
		st.GPR[decode.RSP] = EmuRWAddr + 0x100 + r.Uint64N(EmuRWSize-0x200)&^7
	}
	st.RIP = rip
	st.RFLAGS = 0x202 | r.Uint64()&(emulate.FlagsStatus|emulate.FlagDF)
	st.FSBase, st.GSBase = EmuFSBase, EmuGSBase
	if r.IntN(5) < 3 {
		g.aim(inst, &st)
	}
	for g.canonicalRSP && !canonical48(st.GPR[decode.RSP]) {
		st.GPR[decode.RSP] = g.value()
	}
	return st
}

// aim sets the base or index register of inst's ModRM memory operand so
// that the operand addresses a target in the data pages. The aimed values
// stay in regsetValueRanges; an aim that would leave them is not made.
func (g *regsetGen) aim(inst *decode.X86Inst, st *emulate.X86State) {
	if !inst.HasModRM || inst.Mod == 3 || inst.RIPRel {
		return
	}
	want := g.target() - regsetSegBase(inst)
	if inst.AddrSize == 32 && want >= 1<<32 {
		return
	}
	base, idx, scale := emuAddrRegs(inst)
	disp := uint64(inst.Disp)
	var reg int
	var v uint64
	switch {
	case base >= 0 && base == idx:
		return
	case base >= 0:
		if idx >= 0 {
			st.GPR[idx] = uint64(g.r.IntN(64))
			disp += st.GPR[idx] << scale
		}
		reg, v = base, want-disp
	case idx >= 0:
		reg, v = idx, uint64(int64(want-disp)>>scale)
	default:
		return
	}
	if inst.AddrSize == 32 {
		v &= 0xffff_ffff
	}
	if regsetValueOK(v) {
		st.GPR[reg] = v
	}
}

// regsetFlags is the part of RFLAGS the check compares: the status flags
// and DF.
const regsetFlags = emulate.FlagsStatus | emulate.FlagDF

// regsetDiff lists the outputs in which two runs of an instruction differ:
// the general-purpose registers (but those in skip), RIP, the status flags
// and DF, the signal, its code and address, the trap and its error code,
// and the changed quadwords of the read-write window.
func regsetDiff(a, b *EmuCPUResult, skip decode.RegSet) []string {
	var d []string
	for r := 0; r < 16; r++ {
		if !skip.Has(r) && a.State.GPR[r] != b.State.GPR[r] {
			d = append(d, fmt.Sprintf("%s %#x/%#x", decode.X86RegName(r), a.State.GPR[r], b.State.GPR[r]))
		}
	}
	if a.State.RIP != b.State.RIP {
		d = append(d, fmt.Sprintf("rip %#x/%#x", a.State.RIP, b.State.RIP))
	}
	if x := (a.State.RFLAGS ^ b.State.RFLAGS) & regsetFlags; x != 0 {
		d = append(d, fmt.Sprintf("rflags %#x/%#x", a.State.RFLAGS&regsetFlags, b.State.RFLAGS&regsetFlags))
	}
	if a.Signal != b.Signal || a.Code != b.Code || a.Trap != b.Trap || a.ErrCode != b.ErrCode {
		d = append(d, fmt.Sprintf("signal %d/%d code %d/%d trap %d/%d err %#x/%#x", a.Signal, b.Signal, a.Code, b.Code, a.Trap, b.Trap, a.ErrCode, b.ErrCode))
	}
	if a.Addr != b.Addr {
		d = append(d, fmt.Sprintf("fault address %#x/%#x", a.Addr, b.Addr))
	}
	if a.WritesLost != b.WritesLost || emuWritesDiff(a.Writes, b.Writes) != "" {
		d = append(d, fmt.Sprintf("memory %s/%s", emuWordsText(a.Writes), emuWordsText(b.Writes)))
	}
	return d
}

// regsetResetBytes is the instruction that resets the FPU and vector state
// before a run: xrstor64 [rsi].
var regsetResetBytes = []byte{0x48, 0x0f, 0xae, 0x2e}

// regsetXComp is an extended-state component: its number and where the
// standard XSAVE format keeps it (CPUID leaf 0xD, sub-leaf number).
type regsetXComp struct {
	num, off, size int
}

// regsetResetComps are the components the reset loads with data, besides
// SSE: the upper halves of the YMM registers, the opmask registers and the
// upper ZMM registers.
var regsetResetComps = [...]int{2, 5, 6, 7}

// regsetResetArea writes into dst (a 64-byte aligned area, at least 576
// bytes, whose other bytes are left as they are) an XSAVE image for the
// reset: x87 in its initial state (empty
// stack, zeroed registers, default control word), MXCSR at its default,
// and random contents (from r) for the XMM registers and the components
// comps that xcr0 enables and that fit in dst. It returns the
// requested-feature bitmap to load it with (EDX:EAX of xrstor).
func regsetResetArea(dst []byte, xcr0 uint64, comps []regsetXComp, r *rand.Rand) uint64 {
	clear(dst[:576])
	le := func(off int, v uint64, n int) { emuPutLE(dst[off:], n, v) }
	le(24, 0x1f80, 4) // MXCSR: every exception masked
	le(28, 0xffff, 4) // MXCSR_MASK, ignored by xrstor
	emuFillRandom(r, dst[160:416])
	rfbm := uint64(1 | 2) // x87 (initialised: XSTATE_BV bit 0 clear), SSE
	bv := uint64(2)
	for _, c := range comps {
		if xcr0&(1<<uint(c.num)) == 0 || c.off+c.size > len(dst) || c.off < 576 {
			continue
		}
		emuFillRandom(r, dst[c.off:c.off+c.size])
		rfbm |= 1 << uint(c.num)
		bv |= 1 << uint(c.num)
	}
	le(512, bv, 8) // XSTATE_BV; XCOMP_BV and the rest of the header stay 0
	return rfbm
}
