package decode

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/arch/arm64/arm64asm"
)

// ARM64Class is the broad kind of an arm64 instruction, as far as probing
// cares. Every 32-bit word that decodes has exactly one class.
type ARM64Class uint8

const (
	// ARM64ClassOther is every instruction the classifier does not single
	// out: data processing, FP/SIMD arithmetic, SVE and so on.
	ARM64ClassOther ARM64Class = iota
	// ARM64ClassBranch: b, bl, b.cond, bc.cond, cbz/cbnz, tbz/tbnz,
	// br/blr/ret, the PAC branches (braa... retab) and eret/eretaa/eretab.
	ARM64ClassBranch
	// ARM64ClassAdr: adr and adrp, which compute an address from the PC.
	ARM64ClassAdr
	// ARM64ClassLiteral: ldr/ldrsw/prfm (literal) and the FP/SIMD ldr
	// (literal) forms, which load from an address relative to the PC.
	ARM64ClassLiteral
	// ARM64ClassExclusive: load/store exclusive (ldxr, stxr, ldaxp...);
	// see ARM64Inst.Exclusive for which side of the pair it is.
	ARM64ClassExclusive
	// ARM64ClassAtomic: the LSE atomics (cas*, casp*, ld<op>*, st<op>*, swp*).
	ARM64ClassAtomic
	// ARM64ClassHint: the HINT space (nop, yield, wfe, the PAC hints,
	// bti, esb, csdb, hint #n ...).
	ARM64ClassHint
	// ARM64ClassBarrier: dsb, dmb, isb, sb, ssbb, pssbb and clrex.
	ARM64ClassBarrier
	// ARM64ClassSystem: msr (immediate and register), mrs, sys, sysl,
	// the PSTATE instructions cfinv/xaflag/axflag/smstart/smstop, and
	// wfet/wfit.
	ARM64ClassSystem
	// ARM64ClassException: svc, hvc, smc, brk, hlt and dcps1-3.
	ARM64ClassException
	// ARM64ClassLoadStore: ordinary loads and stores addressed from a base
	// register: immediate (unsigned offset, unscaled, pre/post-indexed,
	// unprivileged), register offset, pairs, load-acquire/store-release,
	// ldapr, ldraa/ldrab and prfm/prfum.
	ARM64ClassLoadStore
)

var arm64ClassNames = [...]string{
	ARM64ClassOther:     "other",
	ARM64ClassBranch:    "branch",
	ARM64ClassAdr:       "adr",
	ARM64ClassLiteral:   "literal",
	ARM64ClassExclusive: "exclusive",
	ARM64ClassAtomic:    "atomic",
	ARM64ClassHint:      "hint",
	ARM64ClassBarrier:   "barrier",
	ARM64ClassSystem:    "system",
	ARM64ClassException: "exception",
	ARM64ClassLoadStore: "ldst",
}

// String returns the short lowercase name of the class ("branch", "ldst"...).
func (c ARM64Class) String() string {
	if int(c) < len(arm64ClassNames) {
		return arm64ClassNames[c]
	}
	return "unknown"
}

// ARM64Exclusive says whether an instruction is one half of a load/store
// exclusive pair. A breakpoint or single step between the two clears the
// exclusive monitor, so the store side then always fails.
type ARM64Exclusive uint8

const (
	// ARM64ExclNone: not a load/store exclusive.
	ARM64ExclNone ARM64Exclusive = iota
	// ARM64ExclLoad: ldxr, ldaxr, ldxp, ldaxp (and their b/h forms).
	ARM64ExclLoad
	// ARM64ExclStore: stxr, stlxr, stxp, stlxp (and their b/h forms).
	ARM64ExclStore
)

// String returns "none", "load" or "store".
func (e ARM64Exclusive) String() string {
	switch e {
	case ARM64ExclNone:
		return "none"
	case ARM64ExclLoad:
		return "load"
	case ARM64ExclStore:
		return "store"
	}
	return "unknown"
}

// ARM64Reg is a general-purpose register operand as encoded: 0-30 are
// x0..x30 (or w0..w30), and register number 31 is resolved to ARM64SP or
// ARM64ZR according to the operand. For FP/SIMD operands (ARM64Inst.Vec)
// the value 0-31 is the vector register number instead.
type ARM64Reg int8

const (
	// ARM64NoReg marks an operand the instruction does not have.
	ARM64NoReg ARM64Reg = -1
	// ARM64SP is register number 31 used as the stack pointer.
	ARM64SP ARM64Reg = 31
	// ARM64ZR is register number 31 used as the zero register.
	ARM64ZR ARM64Reg = 32
)

// String returns the 64-bit name ("x3", "sp", "xzr") or "none".
func (r ARM64Reg) String() string {
	switch {
	case r >= 0 && r <= 30:
		return fmt.Sprintf("x%d", int(r))
	case r == ARM64SP:
		return "sp"
	case r == ARM64ZR:
		return "xzr"
	}
	return "none"
}

// ARM64Cond is an arm64 condition code in its 4-bit encoding (0 = eq,
// 1 = ne ... 14 = al, 15 = nv).
type ARM64Cond uint8

var arm64CondNames = [16]string{"eq", "ne", "cs", "cc", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al", "nv"}

// String returns the lowercase condition name; 2 and 3 are "cs" and "cc"
// (also known as hs and lo).
func (c ARM64Cond) String() string {
	if int(c) < len(arm64CondNames) {
		return arm64CondNames[c]
	}
	return "unknown"
}

// ARM64Inst is one decoded arm64 instruction.
type ARM64Inst struct {
	Addr uint64 // virtual address the instruction was decoded at
	Len  int    // 4 when decoded, 0 on error
	Word uint32 // the instruction word (decoded little-endian)

	Class ARM64Class
	// Mnemonic is this decoder's own name for the instruction, lowercase,
	// using the preferred alias where the architecture has one (stadd for
	// ldadd with the zero register, ssbb for dsb #0, b.eq, bti c). It is
	// empty for ARM64ClassOther.
	Mnemonic string

	Branch BranchKind
	// PCRel is set when the instruction encodes an offset from its own
	// address: direct branches, adr, adrp and literal loads. Moving such an
	// instruction changes its meaning.
	PCRel bool
	// Offset is the signed PC-relative offset as encoded, scaled to bytes
	// (for adrp: the page offset, already shifted left by 12).
	Offset int64
	// Target is the absolute address a PC-relative instruction refers to:
	// Addr+Offset, or (Addr &^ 0xfff)+Offset for adrp. 0 unless PCRel.
	Target uint64

	// Cond is the condition of b.cond and bc.cond; valid when HasCond.
	Cond    ARM64Cond
	HasCond bool

	// Register operands as encoded; ARM64NoReg where the instruction has no
	// such operand. Rd: adr/adrp destination. Rn: base or branch register.
	// Rt, Rt2: data registers (loads, stores, cbz, tbz, mrs/msr, sys).
	// Rs: status register of a store-exclusive, or the compare/source
	// register of an atomic. Rm: index register, or the PAC modifier of
	// braa/blraa.
	Rd, Rn, Rt, Rt2, Rs, Rm ARM64Reg

	// Width is the width in bits (32 or 64) of the general-purpose data
	// registers, 0 when not applicable or when they are FP/SIMD registers.
	Width int
	// Vec is set when Rt and Rt2 are FP/SIMD registers.
	Vec bool
	// MemSize is the number of bytes accessed per data register by a load,
	// store, exclusive, atomic or literal load; 0 otherwise.
	MemSize int
	// Load and Store say whether the instruction reads or writes data
	// memory (both for atomics; neither for prefetches).
	Load, Store bool
	// Writeback is set for pre/post-indexed forms, which also write Rn.
	Writeback bool
	// Disp is the byte offset added to the base register by immediate
	// load/store forms (scaled), including post-index amounts.
	Disp int64

	// Imm is the instruction's immediate where it has a simple one: the
	// imm16 of svc/hvc/smc/brk/hlt/dcps, the hint number (CRm:op2), the
	// barrier option (CRm), the msr (immediate) value.
	Imm uint64
	// Bit is the bit number tested by tbz/tbnz.
	Bit uint8
	// SysReg is the system register or operation of msr/mrs/sys/sysl as
	// op0:op1:CRn:CRm:op2 (bits 20:5 of the word); for msr (immediate) it
	// holds op1<<3|op2, the PSTATE field selector.
	SysReg uint16
	// DAIF is set when the instruction reads or writes the interrupt mask
	// bits: mrs/msr of DAIF and msr daifset/daifclr.
	DAIF bool

	// Exclusive says whether this is a load- or store-exclusive.
	Exclusive ARM64Exclusive
	// Acquire and Release give the ordering semantics of exclusives,
	// atomics and load-acquire/store-release forms.
	Acquire, Release bool
	// Pair is set for the pair forms (ldxp/stxp, casp, ldp/stp).
	Pair bool
	// LSE is set for the Large System Extension atomics.
	LSE bool
	// PAC is set for pointer-authentication instructions: the PAC hints,
	// the PAC branches and returns, eretaa/eretab and ldraa/ldrab.
	PAC bool

	// Read and Written are the general-purpose registers the instruction
	// reads and writes (x0..x30 as bits 0..30, sp as bit 31, never the zero
	// register), including implicit ones such as x30 for bl and blr.
	Read, Written RegSet
	// RegsApprox is set when Read and Written are a conservative guess
	// (every register, sp included) because the classifier does not
	// describe this instruction's operands: always so for ARM64ClassOther.
	RegsApprox bool
}

// arm64AllRegs is x0..x30 and sp.
const arm64AllRegs RegSet = 1<<32 - 1

// ARM64Code returns arm64 instruction words as they lie in memory: each
// word little-endian, in order. DecodeARM64 reads them back.
func ARM64Code(words ...uint32) []byte {
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// DecodeARM64 decodes the little-endian arm64 instruction word at the start
// of b, located at address addr. Only the first 4 bytes are used.
//
// Errors: ErrTruncated when b is shorter than 4 bytes; ErrInvalid for the
// permanently undefined encodings (udf, top 16 bits zero). On error the
// returned instruction is the zero value (Len 0). Any other word decodes,
// with ARM64ClassOther when the classifier does not single it out.
func DecodeARM64(b []byte, addr uint64) (ARM64Inst, error) {
	if len(b) < 4 {
		return ARM64Inst{}, ErrTruncated
	}
	w := binary.LittleEndian.Uint32(b)
	if w>>16 == 0 {
		return ARM64Inst{}, ErrInvalid
	}
	i := ARM64Inst{
		Addr: addr, Len: 4, Word: w,
		Rd: ARM64NoReg, Rn: ARM64NoReg, Rt: ARM64NoReg, Rt2: ARM64NoReg, Rs: ARM64NoReg, Rm: ARM64NoReg,
	}
	switch {
	case w&0x1C000000 == 0x14000000:
		i.decodeBranchSys(w)
	case w&0x1F000000 == 0x10000000:
		i.decodeAdr(w)
	case w&0x0A000000 == 0x08000000:
		i.decodeLoadStore(w)
	}
	if i.Class == ARM64ClassOther {
		// Reset whatever a partial match may have filled in.
		i = ARM64Inst{
			Addr: addr, Len: 4, Word: w,
			Rd: ARM64NoReg, Rn: ARM64NoReg, Rt: ARM64NoReg, Rt2: ARM64NoReg, Rs: ARM64NoReg, Rm: ARM64NoReg,
			Read: arm64AllRegs, Written: arm64AllRegs, RegsApprox: true,
		}
	}
	return i, nil
}

// Field helpers.

func a64Bits(w uint32, hi, lo uint) uint32 { return (w >> lo) & (1<<(hi-lo+1) - 1) }

func a64Sext(v uint32, n uint) int64 { return int64(int32(v<<(32-n)) >> (32 - n)) }

func a64Gpr(n uint32) ARM64Reg {
	if n == 31 {
		return ARM64ZR
	}
	return ARM64Reg(n)
}

func a64GprSP(n uint32) ARM64Reg {
	if n == 31 {
		return ARM64SP
	}
	return ARM64Reg(n)
}

func (i *ARM64Inst) read(rs ...ARM64Reg) {
	for _, r := range rs {
		if r >= 0 && r <= 31 {
			i.Read |= 1 << uint(r)
		}
	}
}

func (i *ARM64Inst) write(rs ...ARM64Reg) {
	for _, r := range rs {
		if r >= 0 && r <= 31 {
			i.Written |= 1 << uint(r)
		}
	}
}

func (i *ARM64Inst) setRel(off int64) {
	i.PCRel = true
	i.Offset = off
	i.Target = i.Addr + uint64(off)
}

// Branches, exception generation and system instructions (op0 = 101x).

func (i *ARM64Inst) decodeBranchSys(w uint32) {
	switch {
	case w&0x7C000000 == 0x14000000: // b, bl
		i.Class = ARM64ClassBranch
		i.setRel(a64Sext(a64Bits(w, 25, 0), 26) << 2)
		if w>>31 == 0 {
			i.Mnemonic, i.Branch = "b", BranchJmp
		} else {
			i.Mnemonic, i.Branch = "bl", BranchCall
			i.write(30)
		}
	case w&0xFF000000 == 0x54000000: // b.cond, bc.cond
		i.Class = ARM64ClassBranch
		i.Branch = BranchJcc
		i.Cond, i.HasCond = ARM64Cond(w&0xF), true
		if w&0x10 == 0 {
			i.Mnemonic = a64BcondNames[w&0xF]
		} else {
			i.Mnemonic = a64BccondNames[w&0xF]
		}
		i.setRel(a64Sext(a64Bits(w, 23, 5), 19) << 2)
	case w&0x7E000000 == 0x34000000: // cbz, cbnz
		i.Class = ARM64ClassBranch
		i.Branch = BranchCompare
		i.Mnemonic = "cbz"
		if w&(1<<24) != 0 {
			i.Mnemonic = "cbnz"
		}
		i.Width = 32
		if w>>31 != 0 {
			i.Width = 64
		}
		i.Rt = a64Gpr(a64Bits(w, 4, 0))
		i.read(i.Rt)
		i.setRel(a64Sext(a64Bits(w, 23, 5), 19) << 2)
	case w&0x7E000000 == 0x36000000: // tbz, tbnz
		i.Class = ARM64ClassBranch
		i.Branch = BranchTest
		i.Mnemonic = "tbz"
		if w&(1<<24) != 0 {
			i.Mnemonic = "tbnz"
		}
		i.Bit = uint8(w>>31<<5 | a64Bits(w, 23, 19))
		i.Width = 32
		if w>>31 != 0 {
			i.Width = 64
		}
		i.Rt = a64Gpr(a64Bits(w, 4, 0))
		i.read(i.Rt)
		i.setRel(a64Sext(a64Bits(w, 18, 5), 14) << 2)
	case w&0xFF000000 == 0xD4000000:
		i.decodeException(w)
	case w&0xFFC00000 == 0xD5000000:
		i.decodeSystem(w)
	case w&0xFE000000 == 0xD6000000:
		i.decodeBranchReg(w)
	}
}

var (
	a64BcondNames  [16]string
	a64BccondNames [16]string
)

func init() {
	for c, n := range arm64CondNames {
		a64BcondNames[c] = "b." + n
		a64BccondNames[c] = "bc." + n
	}
}

func (i *ARM64Inst) decodeException(w uint32) {
	opc, op2, ll := a64Bits(w, 23, 21), a64Bits(w, 4, 2), a64Bits(w, 1, 0)
	if op2 != 0 {
		return
	}
	switch {
	case opc == 0 && ll == 1:
		i.Mnemonic, i.Branch = "svc", BranchSyscall
	case opc == 0 && ll == 2:
		i.Mnemonic, i.Branch = "hvc", BranchSyscall
	case opc == 0 && ll == 3:
		i.Mnemonic, i.Branch = "smc", BranchSyscall
	case opc == 1 && ll == 0:
		i.Mnemonic, i.Branch = "brk", BranchInt
	case opc == 2 && ll == 0:
		i.Mnemonic, i.Branch = "hlt", BranchInt
	case opc == 5 && ll != 0:
		i.Mnemonic = [...]string{"", "dcps1", "dcps2", "dcps3"}[ll]
	default:
		return
	}
	i.Class = ARM64ClassException
	i.Imm = uint64(a64Bits(w, 20, 5))
}

// a64HintNames maps CRm:op2 of the HINT space to the instruction it names.
var a64HintNames = map[uint32]string{
	0: "nop", 1: "yield", 2: "wfe", 3: "wfi", 4: "sev", 5: "sevl", 6: "dgh",
	7: "xpaclri", 8: "pacia1716", 10: "pacib1716", 12: "autia1716", 14: "autib1716",
	16: "esb", 17: "psb csync", 18: "tsb csync", 19: "gcsb dsync", 20: "csdb", 22: "clrbhb",
	24: "paciaz", 25: "paciasp", 26: "pacibz", 27: "pacibsp",
	28: "autiaz", 29: "autiasp", 30: "autibz", 31: "autibsp",
	32: "bti", 34: "bti c", 36: "bti j", 38: "bti jc", 40: "chkfeat",
}

func (i *ARM64Inst) decodeHint(n uint32) {
	i.Class = ARM64ClassHint
	i.Imm = uint64(n)
	name, ok := a64HintNames[n]
	if !ok {
		i.Mnemonic = "hint"
		return
	}
	i.Mnemonic = name
	switch n {
	case 7: // xpaclri
		i.PAC = true
		i.read(30)
		i.write(30)
	case 8, 10, 12, 14: // pac/aut ia/ib 1716: x17 = f(x17, x16)
		i.PAC = true
		i.read(16, 17)
		i.write(17)
	case 24, 26, 28, 30: // ...z: x30 = f(x30, 0)
		i.PAC = true
		i.read(30)
		i.write(30)
	case 25, 27, 29, 31: // ...sp: x30 = f(x30, sp)
		i.PAC = true
		i.read(30, ARM64SP)
		i.write(30)
	case 40: // chkfeat x16
		i.read(16)
		i.write(16)
	}
}

var a64DsbOptions = [16]string{1: "oshld", 2: "oshst", 3: "osh", 5: "nshld", 6: "nshst", 7: "nsh", 9: "ishld", 10: "ishst", 11: "ish", 13: "ld", 14: "st", 15: "sy"}

func (i *ARM64Inst) decodeSystem(w uint32) {
	l := w>>21&1 != 0
	op0, op1, crn, crm, op2, rt := a64Bits(w, 20, 19), a64Bits(w, 18, 16), a64Bits(w, 15, 12), a64Bits(w, 11, 8), a64Bits(w, 7, 5), a64Bits(w, 4, 0)
	switch {
	case op0 == 0 && !l:
		switch {
		case crn == 2 && op1 == 3 && rt == 31:
			i.decodeHint(crm<<3 | op2)
		case crn == 3 && op1 == 3 && rt == 31:
			i.Imm = uint64(crm)
			switch op2 {
			case 1:
				if crm&3 != 2 {
					return
				}
				i.Mnemonic = "dsb" // dsb <option>nxs
			case 2:
				i.Mnemonic = "clrex"
			case 4:
				switch crm {
				case 0:
					i.Mnemonic = "ssbb"
				case 4:
					i.Mnemonic = "pssbb"
				default:
					i.Mnemonic = "dsb"
				}
			case 5:
				i.Mnemonic = "dmb"
			case 6:
				i.Mnemonic = "isb"
			case 7:
				if crm != 0 {
					return
				}
				i.Mnemonic = "sb"
			default:
				return
			}
			i.Class = ARM64ClassBarrier
		case crn == 1 && op1 == 3 && crm == 0 && op2 <= 1: // wfet, wfit
			i.Class = ARM64ClassSystem
			i.Mnemonic = "wfet"
			if op2 == 1 {
				i.Mnemonic = "wfit"
			}
			i.Rt = a64Gpr(rt)
			i.Width = 64
			i.read(i.Rt)
		case crn == 4 && rt == 31: // PSTATE: msr (immediate), cfinv, xaflag, axflag
			i.Class = ARM64ClassSystem
			i.SysReg = uint16(op1<<3 | op2)
			i.Imm = uint64(crm)
			switch {
			case op1 == 0 && op2 <= 2:
				if crm != 0 {
					i.Class = ARM64ClassOther
					return
				}
				i.Mnemonic = [...]string{"cfinv", "xaflag", "axflag"}[op2]
			case op1 == 3 && op2 == 3 && crm&8 == 0 && crm>>1 != 0:
				// msr svcr*, #imm: the SME mode switches.
				i.Mnemonic = a64Pick(crm&1 != 0, "smstart", "smstop")
			default:
				i.Mnemonic = "msr"
				i.DAIF = op1 == 3 && (op2 == 6 || op2 == 7)
			}
		}
	case op0 >= 1: // sys, sysl; msr (register), mrs
		i.Class = ARM64ClassSystem
		i.SysReg = uint16(a64Bits(w, 20, 5))
		i.Rt = a64Gpr(rt)
		i.Width = 64
		names := [2]string{"sys", "sysl"} // by L: Rt read, Rt written
		if op0 >= 2 {
			names = [2]string{"msr", "mrs"}
			i.DAIF = i.SysReg == a64SysregDAIF
		}
		if l {
			i.Mnemonic = names[1]
			i.write(i.Rt)
		} else {
			i.Mnemonic = names[0]
			i.read(i.Rt)
		}
	}
}

func a64Sysreg(op0, op1, crn, crm, op2 uint16) uint16 {
	return op0<<14 | op1<<11 | crn<<7 | crm<<3 | op2
}

var a64SysregDAIF = a64Sysreg(3, 3, 4, 2, 1)

// a64SysregNames names the system registers that user-space code and common
// kernels touch, keyed by op0:op1:CRn:CRm:op2. Others print generically.
var a64SysregNames = map[uint16]string{
	a64Sysreg(3, 3, 4, 2, 0):  "nzcv",
	a64Sysreg(3, 3, 4, 2, 1):  "daif",
	a64Sysreg(3, 3, 4, 2, 5):  "dit",
	a64Sysreg(3, 3, 4, 2, 6):  "ssbs",
	a64Sysreg(3, 3, 4, 2, 7):  "tco",
	a64Sysreg(3, 3, 4, 4, 0):  "fpcr",
	a64Sysreg(3, 3, 4, 4, 1):  "fpsr",
	a64Sysreg(3, 3, 4, 5, 0):  "dspsr_el0",
	a64Sysreg(3, 3, 4, 5, 1):  "dlr_el0",
	a64Sysreg(3, 3, 13, 0, 2): "tpidr_el0",
	a64Sysreg(3, 3, 13, 0, 3): "tpidrro_el0",
	a64Sysreg(3, 3, 0, 0, 1):  "ctr_el0",
	a64Sysreg(3, 3, 0, 0, 7):  "dczid_el0",
	a64Sysreg(3, 3, 14, 0, 0): "cntfrq_el0",
	a64Sysreg(3, 3, 14, 0, 1): "cntpct_el0",
	a64Sysreg(3, 3, 14, 0, 2): "cntvct_el0",
	a64Sysreg(3, 3, 14, 2, 0): "cntp_tval_el0",
	a64Sysreg(3, 3, 14, 2, 1): "cntp_ctl_el0",
	a64Sysreg(3, 3, 14, 2, 2): "cntp_cval_el0",
	a64Sysreg(3, 3, 14, 3, 0): "cntv_tval_el0",
	a64Sysreg(3, 3, 14, 3, 1): "cntv_ctl_el0",
	a64Sysreg(3, 3, 14, 3, 2): "cntv_cval_el0",
	a64Sysreg(3, 3, 9, 12, 0): "pmcr_el0",
	a64Sysreg(3, 3, 9, 13, 0): "pmccntr_el0",
	a64Sysreg(3, 3, 9, 14, 0): "pmuserenr_el0",
	a64Sysreg(3, 3, 2, 4, 0):  "rndr",
	a64Sysreg(3, 3, 2, 4, 1):  "rndrrs",
	a64Sysreg(3, 0, 0, 0, 0):  "midr_el1",
	a64Sysreg(3, 0, 0, 0, 5):  "mpidr_el1",
	a64Sysreg(3, 0, 0, 0, 6):  "revidr_el1",
	a64Sysreg(3, 0, 0, 4, 0):  "id_aa64pfr0_el1",
	a64Sysreg(3, 0, 0, 4, 1):  "id_aa64pfr1_el1",
	a64Sysreg(3, 0, 0, 5, 0):  "id_aa64dfr0_el1",
	a64Sysreg(3, 0, 0, 6, 0):  "id_aa64isar0_el1",
	a64Sysreg(3, 0, 0, 6, 1):  "id_aa64isar1_el1",
	a64Sysreg(3, 0, 0, 7, 0):  "id_aa64mmfr0_el1",
	a64Sysreg(3, 0, 0, 7, 1):  "id_aa64mmfr1_el1",
	a64Sysreg(3, 0, 0, 7, 2):  "id_aa64mmfr2_el1",
	a64Sysreg(3, 0, 1, 0, 0):  "sctlr_el1",
	a64Sysreg(3, 0, 1, 0, 2):  "cpacr_el1",
	a64Sysreg(3, 0, 2, 0, 0):  "ttbr0_el1",
	a64Sysreg(3, 0, 2, 0, 1):  "ttbr1_el1",
	a64Sysreg(3, 0, 2, 0, 2):  "tcr_el1",
	a64Sysreg(3, 0, 4, 0, 0):  "spsr_el1",
	a64Sysreg(3, 0, 4, 0, 1):  "elr_el1",
	a64Sysreg(3, 0, 4, 1, 0):  "sp_el0",
	a64Sysreg(3, 0, 4, 2, 0):  "spsel",
	a64Sysreg(3, 0, 4, 2, 2):  "currentel",
	a64Sysreg(3, 0, 4, 2, 3):  "pan",
	a64Sysreg(3, 0, 4, 2, 4):  "uao",
	a64Sysreg(3, 0, 5, 2, 0):  "esr_el1",
	a64Sysreg(3, 0, 6, 0, 0):  "far_el1",
	a64Sysreg(3, 0, 10, 2, 0): "mair_el1",
	a64Sysreg(3, 0, 12, 0, 0): "vbar_el1",
	a64Sysreg(3, 0, 13, 0, 1): "contextidr_el1",
	a64Sysreg(3, 0, 13, 0, 4): "tpidr_el1",
	a64Sysreg(3, 1, 0, 0, 0):  "ccsidr_el1",
	a64Sysreg(3, 1, 0, 0, 1):  "clidr_el1",
	a64Sysreg(3, 2, 0, 0, 0):  "csselr_el1",
	a64Sysreg(3, 4, 1, 1, 0):  "hcr_el2",
	a64Sysreg(2, 0, 0, 2, 2):  "mdscr_el1",
}

// a64PstateNames names the PSTATE fields of msr (immediate), keyed op1<<3|op2.
var a64PstateNames = map[uint16]string{
	0<<3 | 3: "uao",
	0<<3 | 4: "pan",
	0<<3 | 5: "spsel",
	3<<3 | 1: "ssbs",
	3<<3 | 2: "dit",
	3<<3 | 4: "tco",
	3<<3 | 6: "daifset",
	3<<3 | 7: "daifclr",
}

// Unconditional branch (register): br, blr, ret, the PAC forms, eret.
func (i *ARM64Inst) decodeBranchReg(w uint32) {
	opc, op2, op3, rn, op4 := a64Bits(w, 24, 21), a64Bits(w, 20, 16), a64Bits(w, 15, 10), a64Bits(w, 9, 5), a64Bits(w, 4, 0)
	if op2 != 31 {
		return
	}
	// key: B for the b-key forms.
	b := op3 == 3
	pac := op3 == 2 || op3 == 3
	switch {
	case opc == 0 && op3 == 0 && op4 == 0: // br
		i.Mnemonic, i.Branch = "br", BranchJmpIndirect
		i.Rn = a64Gpr(rn)
		i.read(i.Rn)
	case opc == 0 && pac && op4 == 31: // braaz, brabz
		i.Mnemonic, i.Branch = a64Pick(b, "brabz", "braaz"), BranchJmpIndirect
		i.Rn = a64Gpr(rn)
		i.read(i.Rn)
	case opc == 1 && op3 == 0 && op4 == 0: // blr
		i.Mnemonic, i.Branch = "blr", BranchCallIndirect
		i.Rn = a64Gpr(rn)
		i.read(i.Rn)
		i.write(30)
	case opc == 1 && pac && op4 == 31: // blraaz, blrabz
		i.Mnemonic, i.Branch = a64Pick(b, "blrabz", "blraaz"), BranchCallIndirect
		i.Rn = a64Gpr(rn)
		i.read(i.Rn)
		i.write(30)
	case opc == 2 && op3 == 0 && op4 == 0: // ret
		i.Mnemonic, i.Branch = "ret", BranchRet
		i.Rn = a64Gpr(rn)
		i.read(i.Rn)
	case opc == 2 && pac && rn == 31 && op4 == 31: // retaa, retab: x30 authenticated with sp
		i.Mnemonic, i.Branch = a64Pick(b, "retab", "retaa"), BranchRet
		i.Rn = 30
		i.read(30, ARM64SP)
	case opc == 4 && op3 == 0 && rn == 31 && op4 == 0:
		i.Mnemonic, i.Branch = "eret", BranchIret
	case opc == 4 && pac && rn == 31 && op4 == 31: // eretaa, eretab: elr authenticated with sp
		i.Mnemonic, i.Branch = a64Pick(b, "eretab", "eretaa"), BranchIret
		i.read(ARM64SP)
	case opc == 8 && pac: // braa, brab
		i.Mnemonic, i.Branch = a64Pick(b, "brab", "braa"), BranchJmpIndirect
		i.Rn, i.Rm = a64Gpr(rn), a64GprSP(op4)
		i.read(i.Rn, i.Rm)
	case opc == 9 && pac: // blraa, blrab
		i.Mnemonic, i.Branch = a64Pick(b, "blrab", "blraa"), BranchCallIndirect
		i.Rn, i.Rm = a64Gpr(rn), a64GprSP(op4)
		i.read(i.Rn, i.Rm)
		i.write(30)
	default:
		return
	}
	i.Class = ARM64ClassBranch
	i.PAC = pac
}

func a64Pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

// adr, adrp.
func (i *ARM64Inst) decodeAdr(w uint32) {
	i.Class = ARM64ClassAdr
	imm := a64Sext(a64Bits(w, 23, 5)<<2|a64Bits(w, 30, 29), 21)
	i.Rd = a64Gpr(a64Bits(w, 4, 0))
	i.Width = 64
	i.write(i.Rd)
	if w>>31 == 0 {
		i.Mnemonic = "adr"
		i.setRel(imm)
		return
	}
	i.Mnemonic = "adrp"
	i.PCRel = true
	i.Offset = imm << 12
	i.Target = i.Addr&^0xfff + uint64(i.Offset)
}

// Loads and stores (op0 = x1x0).
func (i *ARM64Inst) decodeLoadStore(w uint32) {
	switch {
	case w&0x3F000000 == 0x08000000:
		i.decodeExclusive(w)
	case w&0x3B000000 == 0x18000000:
		i.decodeLiteral(w)
	case w&0x3A000000 == 0x28000000:
		i.decodePair(w)
	case w&0x3A000000 == 0x38000000:
		i.decodeLoadStoreReg(w)
	}
}

// Exclusives, load-acquire/store-release, cas and casp (bits 29:24 = 001000).
func (i *ARM64Inst) decodeExclusive(w uint32) {
	size, o2, l, o1, rs, o0, rt2, rn, rt := a64Bits(w, 31, 30), w>>23&1, w>>22&1 != 0, w>>21&1, a64Bits(w, 20, 16), w>>15&1 != 0, a64Bits(w, 14, 10), a64Bits(w, 9, 5), a64Bits(w, 4, 0)
	i.Rn = a64GprSP(rn)
	i.Rt = a64Gpr(rt)
	i.read(i.Rn)
	width := 32
	if size == 3 {
		width = 64
	}
	switch {
	case o2 == 0 && o1 == 0: // ldxr, ldaxr, stxr, stlxr (b, h)
		i.Class = ARM64ClassExclusive
		i.Width, i.MemSize = width, 1<<size
		if l {
			i.Mnemonic = a64ExclNames[0][a64B2i(o0)][size]
			i.Exclusive, i.Load, i.Acquire = ARM64ExclLoad, true, o0
			i.write(i.Rt)
		} else {
			i.Mnemonic = a64ExclNames[1][a64B2i(o0)][size]
			i.Exclusive, i.Store, i.Release = ARM64ExclStore, true, o0
			i.Rs = a64Gpr(rs)
			i.read(i.Rt)
			i.write(i.Rs)
		}
	case o2 == 0 && o1 == 1 && size >= 2: // ldxp, ldaxp, stxp, stlxp
		i.Class = ARM64ClassExclusive
		i.Pair = true
		i.Width, i.MemSize = 32, 4
		if size == 3 {
			i.Width, i.MemSize = 64, 8
		}
		i.Rt2 = a64Gpr(rt2)
		sz := size - 2
		if l {
			i.Mnemonic = a64ExclPairNames[0][a64B2i(o0)][sz]
			i.Exclusive, i.Load, i.Acquire = ARM64ExclLoad, true, o0
			i.write(i.Rt, i.Rt2)
		} else {
			i.Mnemonic = a64ExclPairNames[1][a64B2i(o0)][sz]
			i.Exclusive, i.Store, i.Release = ARM64ExclStore, true, o0
			i.Rs = a64Gpr(rs)
			i.read(i.Rt, i.Rt2)
			i.write(i.Rs)
		}
	case o2 == 0 && o1 == 1 && rt2 == 31: // casp, caspa, caspl, caspal
		if rs&1 != 0 || rt&1 != 0 {
			i.Class = ARM64ClassOther
			return
		}
		i.Class = ARM64ClassAtomic
		i.LSE, i.Pair, i.Load, i.Store = true, true, true, true
		i.Acquire, i.Release = l, o0
		i.Width, i.MemSize = 32, 4
		if size&1 != 0 {
			i.Width, i.MemSize = 64, 8
		}
		i.Mnemonic = a64CaspNames[a64B2i(l)][a64B2i(o0)]
		i.Rs, i.Rt2 = a64Gpr(rs), a64Gpr(rt+1)
		rs1 := a64Gpr(rs + 1)
		i.read(i.Rs, rs1, i.Rt, i.Rt2)
		i.write(i.Rs, rs1)
	case o2 == 1 && o1 == 0: // stllr, stlr, ldlar, ldar (b, h)
		i.Class = ARM64ClassLoadStore
		i.Width, i.MemSize = width, 1<<size
		if l {
			i.Mnemonic = a64OrderedNames[0][a64B2i(o0)][size]
			i.Load, i.Acquire = true, true
			i.write(i.Rt)
		} else {
			i.Mnemonic = a64OrderedNames[1][a64B2i(o0)][size]
			i.Store, i.Release = true, true
			i.read(i.Rt)
		}
	case o2 == 1 && o1 == 1 && rt2 == 31: // cas, casa, casl, casal (b, h)
		i.Class = ARM64ClassAtomic
		i.LSE, i.Load, i.Store = true, true, true
		i.Acquire, i.Release = l, o0
		i.Width, i.MemSize = width, 1<<size
		i.Mnemonic = a64CasNames[a64B2i(l)][a64B2i(o0)][size]
		i.Rs = a64Gpr(rs)
		i.read(i.Rs, i.Rt)
		i.write(i.Rs)
	}
}

func a64B2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var a64SizeSuffix = [4]string{"b", "h", "", ""}

var (
	a64ExclNames     [2][2][4]string // [store][ordered][size]
	a64ExclPairNames [2][2][2]string // [store][ordered][sz]
	a64OrderedNames  [2][2][4]string // [store][o0][size]
	a64CasNames      [2][2][4]string // [acquire][release][size]
	a64CaspNames     [2][2]string    // [acquire][release]
	// a64AtomicNames[st][o3opc][A][R][size]; st selects the st<op> alias.
	a64AtomicNames [2][9][2][2][4]string
)

var a64AtomicOps = [9]string{"add", "clr", "eor", "set", "smax", "smin", "umax", "umin", "swp"}

func init() {
	for s := 0; s < 4; s++ {
		suf := a64SizeSuffix[s]
		a64ExclNames[0][0][s] = "ldxr" + suf
		a64ExclNames[0][1][s] = "ldaxr" + suf
		a64ExclNames[1][0][s] = "stxr" + suf
		a64ExclNames[1][1][s] = "stlxr" + suf
		a64OrderedNames[0][0][s] = "ldlar" + suf
		a64OrderedNames[0][1][s] = "ldar" + suf
		a64OrderedNames[1][0][s] = "stllr" + suf
		a64OrderedNames[1][1][s] = "stlr" + suf
		for a := 0; a < 2; a++ {
			for r := 0; r < 2; r++ {
				ar := [2]string{"", "a"}[a] + [2]string{"", "l"}[r]
				a64CasNames[a][r][s] = "cas" + ar + suf
				a64CaspNames[a][r] = "casp" + ar
				for op, name := range a64AtomicOps {
					if op == 8 {
						a64AtomicNames[0][op][a][r][s] = "swp" + ar + suf
						continue
					}
					a64AtomicNames[0][op][a][r][s] = "ld" + name + ar + suf
					if a == 0 {
						a64AtomicNames[1][op][a][r][s] = "st" + name + [2]string{"", "l"}[r] + suf
					}
				}
			}
		}
	}
	a64ExclPairNames = [2][2][2]string{{{"ldxp", "ldxp"}, {"ldaxp", "ldaxp"}}, {{"stxp", "stxp"}, {"stlxp", "stlxp"}}}
}

// Load register (literal).
func (i *ARM64Inst) decodeLiteral(w uint32) {
	opc, v := a64Bits(w, 31, 30), w>>26&1 != 0
	rt := a64Bits(w, 4, 0)
	if v {
		if opc == 3 {
			return
		}
		i.Mnemonic, i.Vec, i.MemSize, i.Load = "ldr", true, 4<<opc, true
		i.Rt = ARM64Reg(rt)
	} else {
		switch opc {
		case 0:
			i.Mnemonic, i.Width, i.MemSize = "ldr", 32, 4
		case 1:
			i.Mnemonic, i.Width, i.MemSize = "ldr", 64, 8
		case 2:
			i.Mnemonic, i.Width, i.MemSize = "ldrsw", 64, 4
		case 3:
			i.Mnemonic = "prfm"
			i.Imm = uint64(rt)
		}
		if opc != 3 {
			i.Load = true
			i.Rt = a64Gpr(rt)
			i.write(i.Rt)
		}
	}
	i.Class = ARM64ClassLiteral
	i.setRel(a64Sext(a64Bits(w, 23, 5), 19) << 2)
}

// Load/store pair: stp, ldp, stnp, ldnp, ldpsw, stgp.
func (i *ARM64Inst) decodePair(w uint32) {
	opc, v, typ, l := a64Bits(w, 31, 30), w>>26&1 != 0, a64Bits(w, 24, 23), w>>22&1 != 0
	if opc == 3 {
		return
	}
	scale := uint(2 + opc)
	if v {
		i.Vec = true
		i.Mnemonic = a64Pick(l, "ldp", "stp")
	} else {
		switch {
		case opc == 0:
			i.Width = 32
			i.Mnemonic = a64Pick(l, "ldp", "stp")
		case opc == 2:
			i.Width, scale = 64, 3
			i.Mnemonic = a64Pick(l, "ldp", "stp")
		case typ == 0: // opc == 1: no no-allocate form
			return
		case l:
			i.Width, scale = 64, 2
			i.Mnemonic = "ldpsw"
		default:
			i.Width, scale = 64, 4
			i.Mnemonic = "stgp"
		}
	}
	if typ == 0 {
		i.Mnemonic = a64Pick(l, "ldnp", "stnp")
	}
	i.Class = ARM64ClassLoadStore
	i.Pair = true
	i.MemSize = 1 << scale
	if i.Mnemonic == "stgp" {
		i.MemSize = 8
	}
	i.Disp = a64Sext(a64Bits(w, 21, 15), 7) << scale
	i.Writeback = typ == 1 || typ == 3
	i.Rn = a64GprSP(a64Bits(w, 9, 5))
	if v {
		i.Rt, i.Rt2 = ARM64Reg(a64Bits(w, 4, 0)), ARM64Reg(a64Bits(w, 14, 10))
	} else {
		i.Rt, i.Rt2 = a64Gpr(a64Bits(w, 4, 0)), a64Gpr(a64Bits(w, 14, 10))
	}
	i.read(i.Rn)
	if i.Writeback {
		i.write(i.Rn)
	}
	if l {
		i.Load = true
		if !v {
			i.write(i.Rt, i.Rt2)
		}
	} else {
		i.Store = true
		if !v {
			i.read(i.Rt, i.Rt2)
		}
	}
}

// Load/store register forms (bits 29:27 = 111, bit 25 = 0).
func (i *ARM64Inst) decodeLoadStoreReg(w uint32) {
	size, v, opc := a64Bits(w, 31, 30), w>>26&1 != 0, a64Bits(w, 23, 22)
	rn, rt := a64Bits(w, 9, 5), a64Bits(w, 4, 0)
	const (
		formPlain = iota // unsigned offset, pre/post-index, register offset
		formUnscaled
		formUnpriv
	)
	form := formPlain
	switch {
	case w>>24&1 != 0: // unsigned offset
		i.Disp = int64(a64Bits(w, 21, 10))
	case w>>21&1 == 0: // imm9 forms
		i.Disp = a64Sext(a64Bits(w, 20, 12), 9)
		switch a64Bits(w, 11, 10) {
		case 0:
			form = formUnscaled
		case 1, 3:
			i.Writeback = true
		case 2:
			form = formUnpriv
		}
	default:
		switch {
		case a64Bits(w, 11, 10) == 2: // register offset
			if a64Bits(w, 15, 13)&2 == 0 {
				return
			}
			i.Rm = a64Gpr(a64Bits(w, 20, 16))
		case a64Bits(w, 11, 10) == 0:
			if !v {
				i.decodeAtomic(w)
			}
			return
		default: // ldraa, ldrab
			if size != 3 || v {
				return
			}
			i.decodeLdra(w)
			return
		}
	}
	var memSize int
	if v {
		switch {
		case opc < 2:
			memSize = 1 << size
		case size == 0:
			memSize = 16
		default:
			return
		}
		if form == formUnpriv {
			return
		}
		i.Vec = true
		i.Load = opc&1 != 0
		i.Store = !i.Load
		i.Mnemonic = a64Pick(i.Load, [2]string{"ldr", "ldur"}[form], [2]string{"str", "stur"}[form])
		i.Rt = ARM64Reg(rt)
	} else {
		memSize = 1 << size
		name := a64LdstNames[form][opc][size]
		if name == "" {
			return
		}
		if name == "prfm" || name == "prfum" {
			if i.Writeback {
				return
			}
			i.Imm = uint64(rt)
		} else {
			i.Rt = a64Gpr(rt)
			i.Width = 32
			if size == 3 || opc == 2 {
				i.Width = 64
			}
			if opc == 0 {
				i.Store = true
				i.read(i.Rt)
			} else {
				i.Load = true
				i.write(i.Rt)
			}
		}
		i.Mnemonic = name
	}
	i.MemSize = memSize
	if w>>24&1 != 0 {
		i.Disp *= int64(memSize)
	}
	if i.Mnemonic == "prfm" || i.Mnemonic == "prfum" {
		i.MemSize = 0
	}
	i.Class = ARM64ClassLoadStore
	i.Rn = a64GprSP(rn)
	i.read(i.Rn, i.Rm)
	if i.Writeback {
		i.write(i.Rn)
	}
}

// a64LdstNames[form][opc][size] names the general-register load/store forms
// ("" where the encoding is unallocated).
var a64LdstNames = func() (t [3][4][4]string) {
	infix := [3]string{"", "u", "t"}
	for f := 0; f < 3; f++ {
		for s := 0; s < 4; s++ {
			suf := a64SizeSuffix[s]
			t[f][0][s] = "st" + infix[f] + "r" + suf
			t[f][1][s] = "ld" + infix[f] + "r" + suf
			switch s {
			case 0, 1:
				t[f][2][s] = "ld" + infix[f] + "rs" + suf
				t[f][3][s] = "ld" + infix[f] + "rs" + suf
			case 2:
				t[f][2][s] = "ld" + infix[f] + "rsw"
			case 3:
				t[f][2][s] = [3]string{"prfm", "prfum", ""}[f]
			}
		}
	}
	return t
}()

// Atomic memory operations (LSE) and ldapr.
func (i *ARM64Inst) decodeAtomic(w uint32) {
	size, a, r, rs, o3, opc, rn, rt := a64Bits(w, 31, 30), w>>23&1 != 0, w>>22&1 != 0, a64Bits(w, 20, 16), w>>15&1, a64Bits(w, 14, 12), a64Bits(w, 9, 5), a64Bits(w, 4, 0)
	i.Rn, i.Rt = a64GprSP(rn), a64Gpr(rt)
	i.Width, i.MemSize = 32, 1<<size
	if size == 3 {
		i.Width = 64
	}
	if o3 == 1 && opc == 4 && a && !r && rs == 31 { // ldapr, ldaprb, ldaprh
		i.Class = ARM64ClassLoadStore
		i.Mnemonic = "ldapr" + a64SizeSuffix[size]
		i.Load, i.Acquire = true, true
		i.read(i.Rn)
		i.write(i.Rt)
		return
	}
	op := int(opc)
	if o3 == 1 {
		if opc != 0 {
			return
		}
		op = 8 // swp
	}
	st := 0
	if op != 8 && !a && rt == 31 {
		st = 1 // st<op> alias: the loaded value is discarded
	}
	i.Class = ARM64ClassAtomic
	i.Mnemonic = a64AtomicNames[st][op][a64B2i(a)][a64B2i(r)][size]
	i.LSE, i.Load, i.Store = true, true, true
	i.Acquire, i.Release = a, r
	i.Rs = a64Gpr(rs)
	i.read(i.Rs, i.Rn)
	i.write(i.Rt)
}

// ldraa, ldrab: 64-bit load from an authenticated base, offset imm10<<3.
func (i *ARM64Inst) decodeLdra(w uint32) {
	i.Class = ARM64ClassLoadStore
	i.Mnemonic = a64Pick(w>>23&1 != 0, "ldrab", "ldraa")
	i.PAC, i.Load = true, true
	i.Width, i.MemSize = 64, 8
	i.Disp = a64Sext(w>>22&1<<9|a64Bits(w, 20, 12), 10) << 3
	i.Writeback = w>>11&1 != 0
	i.Rn, i.Rt = a64GprSP(a64Bits(w, 9, 5)), a64Gpr(a64Bits(w, 4, 0))
	i.read(i.Rn)
	i.write(i.Rt)
	if i.Writeback {
		i.write(i.Rn)
	}
}

// Text returns the instruction in lowercase assembler syntax, with
// PC-relative operands shown as absolute addresses. The text comes from
// golang.org/x/arch/arm64/arm64asm when that decoder recognizes the word as
// the same instruction this one classified; otherwise (unknown to arm64asm,
// a generic "hint" where the PAC or BTI name is known, a raw system register
// number where its name is known, or any disagreement) the text is rendered
// here. A word that neither decoder knows prints as ".inst 0x........".
// The zero ARM64Inst (a failed decode) prints as "(bad)". Text renders
// from Word and Addr, so it stays right even if other fields were changed.
func (i *ARM64Inst) Text() string {
	if i.Len != 4 {
		return "(bad)"
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], i.Word)
	d, err := DecodeARM64(b[:], i.Addr)
	if err != nil {
		return "(bad)"
	}
	if t, ok := d.asmText(); ok {
		return t
	}
	return d.ownText()
}

// arm64asmMu serializes arm64asm.Decode, which updates a package-level
// variable without a lock (a data race when Text is called concurrently).
var arm64asmMu sync.Mutex

// asmText returns arm64asm's text for the word when it agrees with the
// classification.
func (i *ARM64Inst) asmText() (string, bool) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], i.Word)
	arm64asmMu.Lock()
	inst, err := arm64asm.Decode(b[:])
	arm64asmMu.Unlock()
	if err != nil || !i.agrees(inst) {
		return "", false
	}
	text := strings.TrimSpace(arm64asm.GNUSyntax(inst))
	rel := false
	for _, a := range inst.Args {
		if a == nil {
			break
		}
		if r, ok := a.(arm64asm.PCRel); ok {
			if !i.PCRel || int64(r) != i.Offset || rel {
				return "", false
			}
			rel = true
			s := strings.ToLower(r.String())
			if !strings.Contains(text, s) {
				return "", false
			}
			text = strings.Replace(text, s, fmt.Sprintf("%#x", i.Target), 1)
		}
	}
	if rel != i.PCRel || text == "" {
		return "", false
	}
	// The printed mnemonic must be this decoder's (arm64asm prints b.nv as
	// b.al, for one); sys prints as its dc/ic/at/tlbi alias.
	first, _, _ := strings.Cut(text, " ")
	if want, _, _ := strings.Cut(i.Mnemonic, " "); i.Class != ARM64ClassOther && first != want && i.Mnemonic != "sys" {
		return "", false
	}
	for _, bad := range [...]string{"unimplemented", "reg(", "op(", "unknown"} {
		if strings.Contains(text, bad) {
			return "", false
		}
	}
	return text, true
}

// agrees reports whether arm64asm's decoding names the instruction this
// decoder classified.
func (i *ARM64Inst) agrees(inst arm64asm.Inst) bool {
	op := strings.ToLower(inst.Op.String())
	switch {
	case i.Class == ARM64ClassOther:
		return true
	case i.HasCond:
		c, ok := inst.Args[0].(arm64asm.Cond)
		return op == "b" && i.Mnemonic[:2] == "b." && ok && !c.Invert && c.Value == uint8(i.Cond)
	case i.Mnemonic == "sys":
		return op == "sys" || op == "dc" || op == "ic" || op == "at" || op == "tlbi"
	case i.Mnemonic == "mrs" || i.Mnemonic == "msr":
		// Prefer this decoder's system register and PSTATE names:
		// arm64asm prints most registers (even DAIF) by number.
		if i.Mnemonic == "msr" && i.Rt == ARM64NoReg {
			_, named := a64PstateNames[i.SysReg]
			return op == "msr" && !named
		}
		_, named := a64SysregNames[i.SysReg]
		return op == i.Mnemonic && !named
	}
	return op == i.Mnemonic
}

func a64Xreg(r ARM64Reg, width int) string {
	if width == 32 {
		switch {
		case r >= 0 && r <= 30:
			return fmt.Sprintf("w%d", int(r))
		case r == ARM64SP:
			return "wsp"
		case r == ARM64ZR:
			return "wzr"
		}
	}
	return r.String()
}

func a64Vreg(r ARM64Reg, size int) string {
	p := "q"
	switch size {
	case 1:
		p = "b"
	case 2:
		p = "h"
	case 4:
		p = "s"
	case 8:
		p = "d"
	}
	return fmt.Sprintf("%s%d", p, int(r))
}

// dataReg names a data register of a load or store.
func (i *ARM64Inst) dataReg(r ARM64Reg) string {
	if i.Vec {
		return a64Vreg(r, i.MemSize)
	}
	return a64Xreg(r, i.Width)
}

func a64Prfop(n uint64) string {
	typ, target, policy := n>>3, n>>1&3, n&1
	if typ == 3 || target == 3 {
		return fmt.Sprintf("#%#x", n)
	}
	return [...]string{"pld", "pli", "pst"}[typ] + [...]string{"l1", "l2", "l3"}[target] + [...]string{"keep", "strm"}[policy]
}

func a64SysregName(r uint16) string {
	if n, ok := a64SysregNames[r]; ok {
		return n
	}
	return fmt.Sprintf("s%d_%d_c%d_c%d_%d", r>>14, r>>11&7, r>>7&15, r>>3&15, r&7)
}

// ownText renders the instruction from this decoder's fields.
func (i *ARM64Inst) ownText() string {
	w := i.Word
	mn := i.Mnemonic
	switch i.Class {
	case ARM64ClassBranch:
		switch i.Branch {
		case BranchJmp, BranchCall, BranchJcc:
			return fmt.Sprintf("%s %#x", mn, i.Target)
		case BranchCompare:
			return fmt.Sprintf("%s %s, %#x", mn, a64Xreg(i.Rt, i.Width), i.Target)
		case BranchTest:
			return fmt.Sprintf("%s %s, #%d, %#x", mn, a64Xreg(i.Rt, i.Width), i.Bit, i.Target)
		}
		switch mn {
		case "ret":
			if i.Rn == 30 {
				return "ret"
			}
			return "ret " + i.Rn.String()
		case "br", "blr", "braaz", "brabz", "blraaz", "blrabz":
			return mn + " " + i.Rn.String()
		case "braa", "brab", "blraa", "blrab":
			return mn + " " + i.Rn.String() + ", " + i.Rm.String()
		}
		return mn
	case ARM64ClassAdr:
		return fmt.Sprintf("%s %s, %#x", mn, i.Rd, i.Target)
	case ARM64ClassLiteral:
		if mn == "prfm" {
			return fmt.Sprintf("prfm %s, %#x", a64Prfop(i.Imm), i.Target)
		}
		return fmt.Sprintf("%s %s, %#x", mn, i.dataReg(i.Rt), i.Target)
	case ARM64ClassExclusive:
		mem := "[" + i.Rn.String() + "]"
		switch {
		case i.Exclusive == ARM64ExclLoad && i.Pair:
			return fmt.Sprintf("%s %s, %s, %s", mn, a64Xreg(i.Rt, i.Width), a64Xreg(i.Rt2, i.Width), mem)
		case i.Exclusive == ARM64ExclLoad:
			return fmt.Sprintf("%s %s, %s", mn, a64Xreg(i.Rt, i.Width), mem)
		case i.Pair:
			return fmt.Sprintf("%s %s, %s, %s, %s", mn, a64Xreg(i.Rs, 32), a64Xreg(i.Rt, i.Width), a64Xreg(i.Rt2, i.Width), mem)
		}
		return fmt.Sprintf("%s %s, %s, %s", mn, a64Xreg(i.Rs, 32), a64Xreg(i.Rt, i.Width), mem)
	case ARM64ClassAtomic:
		mem := "[" + i.Rn.String() + "]"
		switch {
		case i.Pair:
			rs := ARM64Reg(int(i.Rs) + 1)
			if i.Rs == 30 {
				rs = ARM64ZR
			}
			return fmt.Sprintf("%s %s, %s, %s, %s, %s", mn, a64Xreg(i.Rs, i.Width), a64Xreg(rs, i.Width), a64Xreg(i.Rt, i.Width), a64Xreg(i.Rt2, i.Width), mem)
		case strings.HasPrefix(mn, "st"):
			return fmt.Sprintf("%s %s, %s", mn, a64Xreg(i.Rs, i.Width), mem)
		}
		return fmt.Sprintf("%s %s, %s, %s", mn, a64Xreg(i.Rs, i.Width), a64Xreg(i.Rt, i.Width), mem)
	case ARM64ClassHint:
		switch mn {
		case "hint":
			return fmt.Sprintf("hint #%#x", i.Imm)
		case "chkfeat":
			return "chkfeat x16"
		}
		return mn
	case ARM64ClassBarrier:
		switch {
		case mn == "dsb" && a64Bits(w, 7, 5) == 1:
			return "dsb " + [...]string{"osh", "nsh", "ish", "sy"}[i.Imm>>2] + "nxs"
		case mn == "dsb" || mn == "dmb":
			if o := a64DsbOptions[i.Imm]; o != "" {
				return mn + " " + o
			}
		case mn == "isb" || mn == "clrex":
			if i.Imm == 15 {
				return mn
			}
		default:
			return mn
		}
		return fmt.Sprintf("%s #%#x", mn, i.Imm)
	case ARM64ClassSystem:
		switch mn {
		case "msr":
			if i.Rt == ARM64NoReg {
				if n, ok := a64PstateNames[i.SysReg]; ok {
					return fmt.Sprintf("msr %s, #%#x", n, i.Imm)
				}
				return fmt.Sprintf("msr s0_%d_c4_c%d_%d, xzr", i.SysReg>>3, i.Imm, i.SysReg&7)
			}
			return fmt.Sprintf("msr %s, %s", a64SysregName(i.SysReg), i.Rt)
		case "mrs":
			return fmt.Sprintf("mrs %s, %s", i.Rt, a64SysregName(i.SysReg))
		case "sys", "sysl":
			r := i.SysReg
			ops := fmt.Sprintf("#%d, c%d, c%d, #%d", r>>11&7, r>>7&15, r>>3&15, r&7)
			if mn == "sysl" {
				return fmt.Sprintf("sysl %s, %s", i.Rt, ops)
			}
			if i.Rt == ARM64ZR {
				return "sys " + ops
			}
			return fmt.Sprintf("sys %s, %s", ops, i.Rt)
		case "wfet", "wfit":
			return mn + " " + i.Rt.String()
		case "smstart", "smstop":
			return mn + [...]string{"", " sm", " za", ""}[i.Imm>>1&3]
		}
		return mn
	case ARM64ClassException:
		if strings.HasPrefix(mn, "dcps") && i.Imm == 0 {
			return mn
		}
		return fmt.Sprintf("%s #%#x", mn, i.Imm)
	case ARM64ClassLoadStore:
		return i.ldstText()
	}
	return fmt.Sprintf(".inst 0x%08x", w)
}

func (i *ARM64Inst) ldstText() string {
	w := i.Word
	mn := i.Mnemonic
	var ops string
	switch {
	case mn == "prfm" || mn == "prfum":
		ops = a64Prfop(i.Imm)
	case i.Pair:
		ops = i.dataReg(i.Rt) + ", " + i.dataReg(i.Rt2)
	default:
		ops = i.dataReg(i.Rt)
	}
	base := i.Rn.String()
	var mem string
	switch {
	case i.Rm != ARM64NoReg: // register offset
		option, s := a64Bits(w, 15, 13), w>>12&1 != 0
		idx := a64Xreg(i.Rm, 32)
		if option&1 != 0 {
			idx = i.Rm.String()
		}
		ext := [...]string{2: "uxtw", 3: "lsl", 6: "sxtw", 7: "sxtx"}[option]
		amount := 3 // prfm scales like a doubleword load
		if i.Mnemonic != "prfm" {
			amount = 0
			for n := i.MemSize; n > 1; n >>= 1 {
				amount++
			}
		}
		switch {
		case s:
			mem = fmt.Sprintf("[%s,%s,%s #%d]", base, idx, ext, amount)
		case ext == "lsl":
			mem = fmt.Sprintf("[%s,%s]", base, idx)
		default:
			mem = fmt.Sprintf("[%s,%s,%s]", base, idx, ext)
		}
	case !i.Writeback:
		if i.Disp == 0 {
			mem = "[" + base + "]"
		} else {
			mem = fmt.Sprintf("[%s,#%d]", base, i.Disp)
		}
	case i.preIndex():
		mem = fmt.Sprintf("[%s,#%d]!", base, i.Disp)
	default:
		mem = fmt.Sprintf("[%s],#%d", base, i.Disp)
	}
	return mn + " " + ops + ", " + mem
}

// preIndex reports whether a writeback form updates the base before the
// access (rather than after).
func (i *ARM64Inst) preIndex() bool {
	w := i.Word
	switch {
	case i.Mnemonic == "ldraa" || i.Mnemonic == "ldrab":
		return true
	case i.Pair:
		return a64Bits(w, 24, 23) == 3
	}
	return a64Bits(w, 11, 10) == 3
}
