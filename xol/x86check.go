package xol

import (
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/reason"
)

func regName(r int) string { return decode.X86RegName(r) }

// RefuseVendorDependent: Intel and AMD CPUs execute the instruction
// differently in a way the relocation depends on (a 66 prefix on a near
// branch or call; REX.W on a far call), so neither the copy nor its fixup
// can be right on both.
const RefuseVendorDependent reason.Code = "vendor-dependent"

// RefuseNonCanonical: a relative branch whose target is not a canonical
// address (with 4-level paging: between 2^47 and 2^64-2^47). Taken, it
// raises #GP at its own address; a copy cannot fault there.
const RefuseNonCanonical reason.Code = "noncanonical-target"

// RefuseKernelEmulated: an instruction that Linux emulates when the CPU
// faults on it in user mode (UMIP: sgdt, sidt, sldt, str, smsw). The
// emulation advances the instruction pointer without raising the
// single-step trap, so the step does not stop after the copy.
const RefuseKernelEmulated reason.Code = "kernel-emulated"

// x86Canonical48 reports whether addr is canonical with 4-level paging.
func x86Canonical48(addr uint64) bool {
	return addr < 1<<47 || addr >= 0xFFFF_8000_0000_0000
}

// scratchOrder is the order in which scratch registers are tried for a
// RIP-relative rewrite: RSI, RDI and RBX first (as Linux does), then the
// other low registers (a VEX2 prefix cannot name r8-r15). RSP is never a
// candidate: it needs a SIB byte.
var scratchOrder = [...]int{decode.RSI, decode.RDI, decode.RBX, decode.RBP, decode.RDX, decode.RCX, decode.RAX}

// CheckX86 says whether inst can be single-stepped from another address and
// which fixups that needs. A refusal is a *RefusalError wrapping
// ErrNotRelocatable.
func CheckX86(inst *decode.X86Inst) (Fixup, error) {
	if err := x86Refusal(inst); err != nil {
		return Fixup{}, err
	}
	var f Fixup
	switch inst.Branch {
	case decode.BranchJmp, decode.BranchJcc, decode.BranchLoop:
		f.IP, f.RelBranch = true, true
	case decode.BranchCall:
		f.IP, f.Call, f.RelBranch = true, true, true
	case decode.BranchCallIndirect, decode.BranchFarCall:
		f.Call = true
	case decode.BranchJmpIndirect, decode.BranchRet, decode.BranchRetImm,
		decode.BranchFarJmp, decode.BranchFarRet, decode.BranchJmpAbs:
		// The new instruction pointer is absolute.
	default:
		f.IP = true
	}
	if inst.Encoding == decode.EncLegacy && inst.Map == decode.Map1Byte {
		switch op := inst.Opcode; {
		case op == 0x9C:
			f.PushfTF = true
		case op == 0x9D:
			f.PopfTF = true
		case (op >= 0xA4 && op <= 0xA7 || op >= 0xAA && op <= 0xAF) && inst.Prefixes&(decode.PrefixREP|decode.PrefixREPNE) != 0:
			f.Rep = true
		}
	}
	if inst.RIPRel {
		if inst.AddrSize == 32 {
			return Fixup{}, refuse(RefuseAddr32RIP, "its operand is EIP-relative (67 prefix); a 64-bit scratch base would address the wrong place")
		}
		f.RIPRel, f.DispOff, f.Scratch = true, inst.DispOff, scratchX86(inst)
	}
	return f, nil
}

// scratchX86 picks a register the instruction neither reads nor writes,
// nor names in ModRM.reg or VEX.vvvv. When the decoder's register sets are
// only a guess (most vector forms), it reasons as Linux does: only RSI, RDI
// and RBX are candidates (no instruction with a ModRM byte uses RSI
// implicitly; maskmovdqu uses RDI and cmpxchg8b RBX, both never
// RIP-relative), avoiding ModRM.reg and vvvv. It returns -1 when none is
// free.
//
// An EVEX form with P0 bit 3 set (APX's B4) gets no scratch register: the
// rewrite must clear that bit to name a low register as base, and on a CPU
// without APX the bit makes the original invalid (#UD), so the copy would
// run where the original faults. Such an operand is reached only through
// a recomputed displacement.
func scratchX86(inst *decode.X86Inst) int {
	if inst.Encoding == decode.EncEVEX && inst.B4 {
		return -1
	}
	reg := int(inst.Reg)
	if inst.R {
		reg += 8
	}
	vvvv := -1
	switch inst.Encoding {
	case decode.EncVEX2, decode.EncVEX3, decode.EncEVEX, decode.EncXOP:
		vvvv = int(inst.VVVV)
	}
	used := inst.Read | inst.Written
	order := scratchOrder[:]
	if inst.RegsApprox {
		used, order = 0, scratchOrder[:3]
	}
	for _, r := range order {
		if used.Has(r) || reg == r || vvvv == r {
			continue
		}
		return r
	}
	return -1
}

// x86Refusal returns the refusal for instructions that cannot run from a
// slot, or nil.
func x86Refusal(inst *decode.X86Inst) error {
	switch inst.Branch {
	case decode.BranchSyscall:
		return refuse(RefuseSyscall, "a system call made from the slot may not return to it (rt_sigreturn, execve) or may return twice (fork, clone, vfork resume the child in the slot)")
	case decode.BranchInt:
		return refuse(RefuseTrap, "it always traps or faults (int3, int n, ud2, hlt...), and the signal would name the slot")
	case decode.BranchIret:
		return refuse(RefusePrivileged, "iret, sysret and sysexit do not belong in a user-space probe site")
	case decode.BranchXbegin:
		return refuse(RefuseRTM, "a debug trap aborts the transaction, and the abort path is relative to the copy")
	case decode.BranchJmp, decode.BranchJcc, decode.BranchLoop, decode.BranchCall, decode.BranchCallIndirect:
		if inst.Prefixes&decode.PrefixData != 0 || inst.VendorDependent {
			return refuse(RefuseVendorDependent, "a 66 prefix on a near branch: Intel ignores it, AMD makes the branch 16-bit (a 16-bit displacement or return address, the instruction pointer truncated to 16 bits)")
		}
	case decode.BranchFarCall:
		if inst.W {
			return refuse(RefuseVendorDependent, "a far call with REX.W: Intel loads a 64-bit offset and pushes 8-byte cs and return address, AMD treats it as m16:32")
		}
	}
	if inst.Branch.Relative() && !x86Canonical48(inst.Target) {
		return refuse(RefuseNonCanonical, fmt.Sprintf("its target %#x is not canonical: the branch faults at its own address when taken, which a copy elsewhere cannot reproduce", inst.Target))
	}
	if inst.Encoding != decode.EncLegacy && inst.Encoding != decode.EncREX2 {
		return nil
	}
	op, reg, mod := inst.Opcode, inst.Reg, inst.Mod
	switch inst.Map {
	case decode.Map1Byte:
		switch {
		case op == 0x8E && reg == 2:
			return refuse(RefuseTrapShadow, "mov to %ss suppresses the single-step trap after it, so the step would run past the copy")
		case op == 0xF4 || op == 0xFA || op == 0xFB,
			op >= 0x6C && op <= 0x6F, op >= 0xE4 && op <= 0xE7, op >= 0xEC && op <= 0xEF:
			return refuse(RefusePrivileged, "it faults in user mode (hlt, cli, sti, in, out, ins, outs)")
		}
	case decode.Map0F:
		switch {
		case op == 0x00 && reg <= 1, op == 0x01 && (reg == 4 || reg <= 1 && mod != 3):
			return refuse(RefuseKernelEmulated, "sgdt, sidt, sldt, str and smsw fault under UMIP and Linux emulates them without the single-step trap after, so the step would run past the copy")
		case op == 0x0B || op == 0xB9 || op == 0xFF:
			return refuse(RefuseTrap, "ud0, ud1 and ud2 always raise an invalid-opcode fault")
		case op == 0x06 || op == 0x08 || op == 0x09 || op >= 0x20 && op <= 0x23 ||
			op == 0x30 || op == 0x32 || op == 0x37 || op == 0xAA ||
			(op == 0x78 || op == 0x79) && inst.MandPrefix == 0,
			op == 0x00 && (reg == 2 || reg == 3):
			return refuse(RefusePrivileged, "it is a privileged system instruction and faults in user mode")
		case op == 0x01:
			if mod != 3 {
				if reg == 2 || reg == 3 || reg == 6 || reg == 7 {
					return refuse(RefusePrivileged, "lgdt, lidt, lmsw and invlpg fault in user mode")
				}
				return nil
			}
			switch inst.ModRM {
			case 0xD0, 0xD5, 0xD6, 0xE8, 0xEE, 0xEF, 0xF9, 0xFA, 0xFB, 0xFC:
				// xgetbv, xend, xtest, serialize, rdpkru, wrpkru,
				// rdtscp, monitorx, mwaitx, clzero: user mode.
				return nil
			}
			return refuse(RefusePrivileged, "this 0F 01 system instruction faults in user mode or changes the execution context")
		}
	case decode.Map0F38:
		if inst.MandPrefix == 0x66 && op >= 0x80 && op <= 0x82 {
			return refuse(RefusePrivileged, "invept, invvpid and invpcid fault in user mode")
		}
	}
	return nil
}

// BoostableX86 reports whether a boosted copy of inst (X86Copy.Boost: run
// from the slot without a trap, then a jump back) raises no exception in
// user space, so that no signal is delivered with the instruction pointer
// in the slot, where the engine cannot correct it before delivery. It
// refuses branches, memory operands other than a RIP-relative one (into
// the program's own data), stack accesses (push, pop, enter, leave),
// implicit memory accesses (string instructions, xlat, maskmovq,
// maskmovdqu), division (#DE) and x87 (whose last-instruction pointer
// would show the slot as well). A program that unmasks floating-point
// exceptions (feenableexcept) and makes a boosted vector instruction raise
// one still sees its SIGFPE delivered in the slot.
//
// It answers for the instruction alone; whether its copy can run without
// a trap at all is RelocateX86's (X86Copy.Boost).
func BoostableX86(inst *decode.X86Inst) bool {
	switch {
	case inst.Branch != decode.BranchNone:
		return false
	case inst.HasModRM && inst.Mod != 3 && !inst.RIPRel:
		return false // a memory operand that may fault
	case inst.Read.Has(decode.RSP) || inst.Written.Has(decode.RSP):
		return false // push, pop, enter, leave: the stack may fault
	}
	if inst.Encoding == decode.EncLegacy && inst.Map == decode.Map1Byte {
		op := inst.Opcode
		switch {
		case op >= 0xA4 && op <= 0xAF, op == 0xD7, op == 0x6C, op == 0x6D, op == 0x6E, op == 0x6F:
			return false // string instructions, xlat: implicit memory
		case op >= 0xD8 && op <= 0xDF:
			return false // x87
		case (op == 0xF6 || op == 0xF7) && (inst.Reg == 6 || inst.Reg == 7):
			return false // div, idiv: #DE
		}
	}
	if inst.Map == decode.Map0F && inst.Opcode == 0xF7 {
		return false // maskmovq, maskmovdqu: an implicit store through rdi
	}
	return true
}
