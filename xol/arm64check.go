package xol

import (
	"github.com/probeopt/probeopt/decode"
)

// CheckARM64 says whether inst can be executed from another address and
// which fixups that needs. PC-relative forms are accepted with a PCRel
// fixup: they cannot run unchanged from a slot, but a branch can be
// re-targeted and an address or literal computed for the original address.
// A refusal is a *RefusalError wrapping ErrNotRelocatable.
func CheckARM64(inst *decode.ARM64Inst) (Fixup, error) {
	switch inst.Class {
	case decode.ARM64ClassException:
		switch inst.Mnemonic {
		case "svc":
			return Fixup{}, refuse(RefuseSyscall, "a system call made from the slot may not return to it (rt_sigreturn, execve) or may return twice (clone)")
		case "brk", "hlt":
			return Fixup{}, refuse(RefuseTrap, "it always raises a debug exception, which would name the slot")
		}
		return Fixup{}, refuse(RefusePrivileged, "hvc, smc and dcps are not available in user mode")
	case decode.ARM64ClassExclusive:
		return Fixup{}, refuse(RefuseExclusive, "the trap around the step clears the exclusive monitor, so the store-exclusive of the sequence fails every time")
	case decode.ARM64ClassSystem:
		if inst.DAIF {
			return Fixup{}, refuse(RefusePrivileged, "DAIF is not accessible in user mode")
		}
		if inst.Mnemonic == "msr" && inst.Rt == decode.ARM64NoReg && inst.SysReg>>3 != 3 {
			return Fixup{}, refuse(RefusePrivileged, "this msr (immediate) writes a PSTATE field user mode cannot write")
		}
		return Fixup{IP: true}, nil
	case decode.ARM64ClassAdr:
		return Fixup{PCRel: PCRelAddress}, nil
	case decode.ARM64ClassLiteral:
		return Fixup{IP: true, PCRel: PCRelLiteral}, nil
	case decode.ARM64ClassBranch:
		switch inst.Branch {
		case decode.BranchIret:
			return Fixup{}, refuse(RefusePrivileged, "eret does not belong in a user-space probe site")
		case decode.BranchCall:
			return Fixup{Call: true, RelBranch: true, PCRel: PCRelBranch}, nil
		case decode.BranchJmp, decode.BranchJcc, decode.BranchCompare, decode.BranchTest:
			return Fixup{RelBranch: true, PCRel: PCRelBranch}, nil
		case decode.BranchCallIndirect:
			return Fixup{Call: true}, nil
		}
		return Fixup{}, nil // br, ret and their PAC forms: the target is absolute
	}
	return Fixup{IP: true}, nil
}
