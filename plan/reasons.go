package plan

import (
	"github.com/probeopt/probeopt/internal/reason"
	"github.com/probeopt/probeopt/xol"
)

// Reason is a stable, machine-readable code for a decision. Reasons lists
// every code with its meaning.
//
// It is the project's one reason-code type: xol's refusals
// (xol.RefusalError.Code) and trampoline's (trampoline.SiteError.Code) are
// of the same type, and a decision that passes one on carries it as it is.
// The reasons that are xol's refusals are defined as xol's constants, so
// each string is written once.
type Reason = reason.Code

// Reasons shared by the policies.
const (
	ReasonUnknownPolicy   Reason = "unknown-policy"
	ReasonUndecodable     Reason = reason.Undecodable
	ReasonMidInstruction  Reason = "mid-instruction"
	ReasonBoundaryUnknown Reason = "boundary-unknown"
	ReasonNoFunction      Reason = "no-function"
	ReasonMisaligned      Reason = "misaligned"
	ReasonEmulatedNop     Reason = "emulated-nop"
	ReasonEmulatedBranch  Reason = "emulated-branch"
	ReasonEmulatedPush    Reason = "emulated-push"
	ReasonXOL             Reason = "xol"
	ReasonXOLRIPRel       Reason = "xol-riprel"
	ReasonXOLCall         Reason = "xol-call"
	ReasonXOLNoFixup      Reason = "xol-no-fixup"
	ReasonExclusive       Reason = xol.RefuseExclusive
)

// Reasons of the linux-uprobes policy.
const (
	ReasonPrefixLock        Reason = "prefix-lock"
	ReasonPrefixSegment     Reason = "prefix-segment"
	ReasonMovSS             Reason = "mov-ss"
	ReasonPopSS             Reason = "pop-ss"
	ReasonOpcodeRejected    Reason = "opcode-rejected"
	ReasonVEXOpcodeRejected Reason = "vex-opcode-rejected"
	ReasonBranch66          Reason = "branch-66"
	ReasonEmulatedMisread   Reason = "emulated-misread"
	ReasonNop5Optimized     Reason = "nop5-optimized"
	ReasonNop5PageCross     Reason = "nop5-page-cross"
	ReasonXOLPopf           Reason = "xol-popf"
	ReasonXOLMisread        Reason = "xol-misread"
	ReasonXOLSyscall        Reason = "xol-syscall"
	ReasonEmulatedAdr       Reason = "emulated-adr"
	ReasonXOLPCRelGap       Reason = "xol-pcrel-gap"
	ReasonException         Reason = "exception"
	ReasonSystem            Reason = "system"
	ReasonHintRejected      Reason = "hint-rejected"
	ReasonPACBranch         Reason = "pac-branch"
	ReasonLiteral           Reason = "literal"
	ReasonExclusiveLivelock Reason = "exclusive-livelock"
)

// Reasons of the probeopt policy.
const (
	ReasonEmulated         Reason = "emulated"
	ReasonXOLPCRel         Reason = "xol-pcrel"
	ReasonSyscall          Reason = xol.RefuseSyscall
	ReasonTrap             Reason = xol.RefuseTrap
	ReasonPrivileged       Reason = xol.RefusePrivileged
	ReasonTrapShadow       Reason = xol.RefuseTrapShadow
	ReasonRTM              Reason = xol.RefuseRTM
	ReasonRIPAddr32        Reason = xol.RefuseAddr32RIP
	ReasonExclusiveWindow  Reason = xol.RefuseExclusiveWindow
	ReasonVendorDependent  Reason = xol.RefuseVendorDependent
	ReasonNonCanonical     Reason = xol.RefuseNonCanonical
	ReasonKernelEmulated   Reason = xol.RefuseKernelEmulated
	ReasonTrampolineNop    Reason = "trampoline-nop"
	ReasonTrampolineDetour Reason = "trampoline-detour"
)

// ReasonInfo describes a reason code.
type ReasonInfo struct {
	Code     Reason
	Policies string // "linux-uprobes", "probeopt" or "both"
	Meaning  string
}

// Reasons lists every reason code a decision can carry.
func Reasons() []ReasonInfo {
	return []ReasonInfo{
		{ReasonUndecodable, "both", "the bytes do not decode as an instruction"},
		{ReasonMidInstruction, "probeopt", "the address is inside an instruction, as decoded from the function start"},
		{ReasonBoundaryUnknown, "probeopt", "the function could not be decoded up to the address, so its instruction boundary is unknown"},
		{ReasonNoFunction, "probeopt", "no function holds the address, so its instruction boundary cannot be checked"},
		{ReasonMisaligned, "both", "an arm64 address that is not a multiple of 4"},
		{ReasonEmulatedNop, "both", "a NOP, emulated by skipping it"},
		{ReasonEmulatedBranch, "both", "a direct jump, conditional jump or call, emulated"},
		{ReasonEmulatedPush, "both", "a push of a register, emulated"},
		{ReasonTrampolineNop, "probeopt", "a NOP site (nop5, nop10, the USDT nop; nop5) rewritten into a jump to a trampoline: no trap"},
		{ReasonTrampolineDetour, "probeopt", "whole instructions covering 5 bytes moved to a trampoline and replaced by a jump to it: no trap"},
		{ReasonEmulated, "probeopt", "emulated by the emulate package"},
		{ReasonXOL, "both", "single-stepped out of line, the instruction pointer fixed up after"},
		{ReasonXOLRIPRel, "both", "single-stepped out of line with its RIP-relative operand rewritten"},
		{ReasonXOLCall, "both", "single-stepped out of line, the pushed return address fixed up after"},
		{ReasonXOLNoFixup, "both", "single-stepped out of line; it sets the instruction pointer itself (ret, indirect jump)"},
		{ReasonXOLPCRel, "probeopt", "an arm64 PC-relative instruction, executed out of line as a rewritten copy"},
		{ReasonExclusive, "both", "an arm64 load/store exclusive, which a trap makes fail forever"},
		{ReasonPrefixLock, "linux-uprobes", "Linux refuses a LOCK prefix"},
		{ReasonPrefixSegment, "linux-uprobes", "Linux refuses a CS, DS, ES or SS prefix (this includes notrack and the 9-11 byte NOPs)"},
		{ReasonMovSS, "linux-uprobes", "Linux refuses opcode 8E with ModRM.reg 2 (mov to %ss), whatever the encoding"},
		{ReasonPopSS, "linux-uprobes", "Linux refuses opcode byte 1F (its pop %ss check; 1F is pop %ds), whatever the encoding"},
		{ReasonOpcodeRejected, "linux-uprobes", "the first opcode byte is not in Linux's table of one-byte opcodes it probes"},
		{ReasonVEXOpcodeRejected, "linux-uprobes", "a VEX, EVEX, XOP or REX2 instruction whose opcode byte Linux looks up in its one-byte table, where it is refused"},
		{ReasonBranch66, "linux-uprobes", "a branch with a 66 prefix, which Linux refuses (Intel and AMD decode it differently)"},
		{ReasonEmulatedMisread, "linux-uprobes", "Linux takes the instruction for a NOP or a branch by its opcode byte and emulates that instead: the instruction itself never runs"},
		{ReasonNop5Optimized, "linux-uprobes", "a 5-byte NOP that Linux rewrites into a call to its uprobe trampoline after the first hit"},
		{ReasonNop5PageCross, "linux-uprobes", "a 5-byte NOP that Linux does not optimize because it crosses a page"},
		{ReasonXOLPopf, "linux-uprobes", "popf, single-stepped out of line keeping the trap flag it loads"},
		{ReasonXOLMisread, "linux-uprobes", "single-stepped out of line with the fixup of another instruction that has the same opcode byte: the result is wrong"},
		{ReasonXOLSyscall, "linux-uprobes", "syscall, single-stepped out of line; SYSCALL clears the trap flag, so the step ends one instruction late and the process resumes at a wrong address"},
		{ReasonEmulatedAdr, "linux-uprobes", "arm64 adr or adrp, simulated"},
		{ReasonXOLPCRelGap, "linux-uprobes", "an arm64 PC-relative instruction that escapes Linux's masks and is single-stepped from the slot, computing a wrong address"},
		{ReasonException, "linux-uprobes", "an arm64 exception-generating instruction (svc, brk, hlt...), refused"},
		{ReasonSystem, "linux-uprobes", "an arm64 system instruction Linux does not step (msr, mrs of DAIF, eret), refused"},
		{ReasonHintRejected, "linux-uprobes", "an arm64 hint outside Linux's list of steppable hints, refused"},
		{ReasonPACBranch, "linux-uprobes", "an arm64 pointer-authenticated branch, which Linux neither steps nor simulates"},
		{ReasonLiteral, "linux-uprobes", "an arm64 literal load, which uprobes stopped simulating in 6.12"},
		{ReasonExclusiveLivelock, "linux-uprobes", "inside an arm64 load/store-exclusive sequence: Linux probes it and the store-exclusive then fails every time (livelock)"},
		{ReasonSyscall, "probeopt", "a system call, which may not return to an out-of-line copy"},
		{ReasonTrap, "probeopt", "an instruction that always traps (int3, int n, ud2, brk, hlt)"},
		{ReasonPrivileged, "probeopt", "an instruction that faults in user mode"},
		{ReasonTrapShadow, "probeopt", "mov to %ss, which suppresses the single-step trap after it"},
		{ReasonRTM, "probeopt", "xbegin, whose transaction a trap aborts"},
		{ReasonRIPAddr32, "probeopt", "an EIP-relative operand (67 prefix) that cannot be rewritten through a 64-bit scratch register"},
		{ReasonExclusiveWindow, "probeopt", "inside an arm64 load/store-exclusive sequence, where any trap makes the store-exclusive fail"},
		{ReasonVendorDependent, "probeopt", "Intel and AMD execute it differently in a way a copy depends on (a 66 prefix on a near branch, REX.W on a far call)"},
		{ReasonNonCanonical, "probeopt", "a relative branch to a non-canonical address, which faults at its own address when taken"},
		{ReasonKernelEmulated, "probeopt", "sgdt, sidt, sldt, str or smsw, which Linux emulates under UMIP without the single-step trap after"},
	}
}
