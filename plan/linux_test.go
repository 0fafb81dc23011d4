package plan_test

import (
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/plan"
)

// decideX86 decides a site made of the given hex bytes at addr.
func decideX86(t *testing.T, p plan.Policy, h string, addr uint64, fn *plan.Function) plan.Decision {
	t.Helper()
	b, err := hex.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	return plan.Decide(p, &plan.Site{Arch: decode.X86_64, Addr: addr, Code: b, Func: fn, Branches: plan.NoBranches}, &plan.Options{Rules: true})
}

// TestLinuxX86Facts checks the linux-uprobes policy against the facts of
// the reference on Linux 6.18 uprobes (acceptance table, prefixes, the
// emulation of NOPs, branches and pushes, the fixups of the out-of-line
// step, the nop5 optimization), quirks included. The live-kernel test
// checks the same policy against the running kernel.
func TestLinuxX86Facts(t *testing.T) {
	const a = 0x401000
	tests := []struct {
		hex      string
		what     string
		strategy plan.Strategy
		reason   plan.Reason
	}{
		// Seen rejected on 6.18.
		{"66e80000", "callw", plan.Reject, plan.ReasonBranch66},
		{"660f8400000000", "66 jcc32", plan.Reject, plan.ReasonBranch66},
		{"2e90", "cs nop", plan.Reject, plan.ReasonPrefixSegment},
		{"f0480107", "lock add", plan.Reject, plan.ReasonPrefixLock},
		{"8ed0", "mov to %ss", plan.Reject, plan.ReasonMovSS},
		{"cc", "int3", plan.Reject, plan.ReasonOpcodeRejected},
		{"cd80", "int $0x80", plan.Reject, plan.ReasonOpcodeRejected},
		{"f4", "hlt", plan.Reject, plan.ReasonOpcodeRejected},
		{"ec", "in", plan.Reject, plan.ReasonOpcodeRejected},
		{"2e0f1f840000000000", "9-byte nop", plan.Reject, plan.ReasonPrefixSegment},
		{"3effe0", "notrack jmp", plan.Reject, plan.ReasonPrefixSegment},
		{"26488b07", "es:", plan.Reject, plan.ReasonPrefixSegment},
		// 64 65 66 67 F2 F3 are allowed.
		{"64488b042528000000", "fs: load", plan.XOL, plan.ReasonXOL},
		{"67488d0407", "addr32 lea", plan.XOL, plan.ReasonXOL},
		// 0F is whitelisted: every 0F-escaped instruction is accepted.
		{"0f0b", "ud2", plan.XOL, plan.ReasonXOL},
		{"0fa2", "cpuid", plan.XOL, plan.ReasonXOL},
		{"0f30", "wrmsr", plan.XOL, plan.ReasonXOL},
		{"660f3800c1", "pshufb", plan.XOL, plan.ReasonXOL},
		{"0f05", "syscall", plan.XOL, plan.ReasonXOLSyscall},
		// VEX/EVEX opcode bytes looked up in the one-byte table.
		{"c5fe6f07", "vmovdqu load", plan.Reject, plan.ReasonVEXOpcodeRejected},
		{"c5f9efc0", "vpxor", plan.Reject, plan.ReasonVEXOpcodeRejected},
		{"c5fdfec1", "vpaddd", plan.XOL, plan.ReasonXOL},
		{"62f1fe486f07", "vmovdqu64 load", plan.Reject, plan.ReasonVEXOpcodeRejected},
		// ... and in the branch emulation (seen on the live kernel).
		{"c5fe7f07", "vmovdqu store: 7f = jg", plan.Emulate, plan.ReasonEmulatedMisread},
		{"c5f877", "vzeroupper: 77 = ja", plan.Emulate, plan.ReasonEmulatedMisread},
		{"c5f9e8c1", "vpsubsb: e8 = call", plan.Emulate, plan.ReasonEmulatedMisread},
		{"c5f890c9", "kmovw: 90 = nop", plan.Emulate, plan.ReasonEmulatedMisread},
		{"c5f8c2c100", "vcmpps: c2 = ret imm", plan.XOL, plan.ReasonXOLMisread},
		{"c4e2798e17", "vpmaskmovd: 8e /2", plan.Reject, plan.ReasonMovSS},
		{"62f3fd481fc900", "vpcmpq: 1f", plan.Reject, plan.ReasonPopSS},
		// NOPs: the canonical strings, and 90 with any prefix.
		{"90", "nop", plan.Emulate, plan.ReasonEmulatedNop},
		{"6690", "nop2", plan.Emulate, plan.ReasonEmulatedNop},
		{"0f1f4000", "nop4", plan.Emulate, plan.ReasonEmulatedNop},
		{"0f1f840000000000", "nop8", plan.Emulate, plan.ReasonEmulatedNop},
		{"f390", "pause", plan.Emulate, plan.ReasonEmulatedNop},
		{"4190", "xchg %r8,%rax (the 6.16-6.18 bug)", plan.Emulate, plan.ReasonEmulatedMisread},
		{"660f1f00", "non-canonical 4-byte nopw", plan.XOL, plan.ReasonXOL},
		{"4889c0", "mov %rax,%rax (a NOP only from 6.19)", plan.XOL, plan.ReasonXOL},
		// nop5 optimization.
		{"0f1f440000", "nop5", plan.TrampolineNop, plan.ReasonNop5Optimized},
		{"660f1f4000", "5-byte nopw", plan.TrampolineNop, plan.ReasonNop5Optimized},
		{"6666666690", "90 with four prefixes", plan.TrampolineNop, plan.ReasonNop5Optimized},
		// Branches.
		{"eb00", "jmp rel8", plan.Emulate, plan.ReasonEmulatedBranch},
		{"e900000000", "jmp rel32", plan.Emulate, plan.ReasonEmulatedBranch},
		{"e800000000", "call", plan.Emulate, plan.ReasonEmulatedBranch},
		{"7400", "je rel8", plan.Emulate, plan.ReasonEmulatedBranch},
		{"0f8f00000000", "jg rel32", plan.Emulate, plan.ReasonEmulatedBranch},
		{"e200", "loop (not emulated)", plan.XOL, plan.ReasonXOL},
		{"e300", "jrcxz (not emulated)", plan.XOL, plan.ReasonXOL},
		// push: 50-57 alone or with exactly REX 41.
		{"55", "push %rbp", plan.Emulate, plan.ReasonEmulatedPush},
		{"54", "push %rsp", plan.Emulate, plan.ReasonEmulatedPush},
		{"4157", "push %r15", plan.Emulate, plan.ReasonEmulatedPush},
		{"4850", "push %rax with REX.W", plan.XOL, plan.ReasonXOL},
		{"6650", "pushw %ax", plan.XOL, plan.ReasonXOL},
		{"6a00", "push $0", plan.XOL, plan.ReasonXOL},
		// Fixups of the out-of-line step.
		{"9d", "popf", plan.XOL, plan.ReasonXOLPopf},
		{"c3", "ret", plan.XOL, plan.ReasonXOLNoFixup},
		{"c20800", "ret $8", plan.XOL, plan.ReasonXOLNoFixup},
		{"48cb", "lretq", plan.XOL, plan.ReasonXOLNoFixup},
		{"ffe0", "jmp *%rax", plan.XOL, plan.ReasonXOLNoFixup},
		{"ffd0", "call *%rax", plan.XOL, plan.ReasonXOLCall},
		{"ff1f", "lcall *(%rdi)", plan.XOL, plan.ReasonXOLCall},
		{"488b0510000000", "mov x(%rip),%rax", plan.XOL, plan.ReasonXOLRIPRel},
		{"4889f8", "mov %rdi,%rax", plan.XOL, plan.ReasonXOL},
		{"f30f1efa", "endbr64", plan.XOL, plan.ReasonXOL},
	}
	for _, tt := range tests {
		d := decideX86(t, plan.LinuxUprobes, tt.hex, a, nil)
		if d.Strategy != tt.strategy || d.Reason != tt.reason {
			t.Errorf("%s (%s): %s (%s), want %s (%s): %s", tt.what, tt.hex, d.Strategy, d.Reason, tt.strategy, tt.reason, d.Detail)
		}
		if d.Detail == "" || len(d.Rules) == 0 {
			t.Errorf("%s: no sentence or rules", tt.what)
		}
	}
	// A nop5 that crosses a page is not optimized.
	if d := decideX86(t, plan.LinuxUprobes, "0f1f440000", 0x401ffd, nil); d.Strategy != plan.Emulate || d.Reason != plan.ReasonNop5PageCross {
		t.Errorf("nop5 across a page: %s (%s)", d.Strategy, d.Reason)
	}
	if d := decideX86(t, plan.LinuxUprobes, "0f1f440000", 0x401ffb, nil); d.Strategy != plan.TrampolineNop {
		t.Errorf("nop5 ending at a page boundary: %s (%s)", d.Strategy, d.Reason)
	}
	// Bytes that do not decode.
	if d := decideX86(t, plan.LinuxUprobes, "0f", a, nil); d.Strategy != plan.Reject || d.Reason != plan.ReasonUndecodable {
		t.Errorf("truncated: %s (%s)", d.Strategy, d.Reason)
	}
}

// TestLinuxARM64Facts checks the linux-uprobes policy for arm64 against the
// facts of the reference (classification order, steppable forms, the
// simulated branches, the PAC branches, the 6.12 literal change, and the
// gaps in the masks).
func TestLinuxARM64Facts(t *testing.T) {
	tests := []struct {
		word     uint32
		what     string
		strategy plan.Strategy
		reason   plan.Reason
	}{
		{0xD503201F, "nop", plan.Emulate, plan.ReasonEmulatedNop},
		{0xAA0103E0, "mov x0, x1", plan.XOL, plan.ReasonXOL},
		{0xF9400020, "ldr x0, [x1]", plan.XOL, plan.ReasonXOL},
		{0xA9BF7BFD, "stp x29, x30, [sp, #-16]!", plan.XOL, plan.ReasonXOL},
		{0xD503233F, "paciasp", plan.XOL, plan.ReasonXOL},
		{0xD503237F, "pacibsp", plan.XOL, plan.ReasonXOL},
		{0xD503245F, "bti c", plan.XOL, plan.ReasonXOL},
		{0xD50320FF, "xpaclri", plan.XOL, plan.ReasonXOL},
		{0xD53BD040, "mrs x0, tpidr_el0", plan.XOL, plan.ReasonXOL},
		{0xC8A07C41, "cas x0, x1, [x2] (LSE)", plan.XOL, plan.ReasonXOL},
		{0xD50323BF, "autiasp", plan.Reject, plan.ReasonHintRejected},
		{0xD503203F, "yield", plan.Reject, plan.ReasonHintRejected},
		{0xD503205F, "wfe", plan.Reject, plan.ReasonHintRejected},
		{0x14000010, "b", plan.Emulate, plan.ReasonEmulatedBranch},
		{0x94000010, "bl", plan.Emulate, plan.ReasonEmulatedBranch},
		{0x54000080, "b.eq", plan.Emulate, plan.ReasonEmulatedBranch},
		{0xB4000080, "cbz", plan.Emulate, plan.ReasonEmulatedBranch},
		{0x37000080, "tbnz", plan.Emulate, plan.ReasonEmulatedBranch},
		{0xD61F0200, "br x16", plan.Emulate, plan.ReasonEmulatedBranch},
		{0xD63F0200, "blr x16", plan.Emulate, plan.ReasonEmulatedBranch},
		{0xD65F03C0, "ret", plan.Emulate, plan.ReasonEmulatedBranch},
		{0x10000080, "adr", plan.Emulate, plan.ReasonEmulatedAdr},
		{0x90000000, "adrp", plan.Emulate, plan.ReasonEmulatedAdr},
		{0xD65F0BFF, "retaa", plan.Reject, plan.ReasonPACBranch},
		{0xD61F0A1F, "braaz x16", plan.Reject, plan.ReasonPACBranch},
		{0xD63F0A1F, "blraaz x16", plan.Reject, plan.ReasonPACBranch},
		{0x58000080, "ldr x0, literal", plan.Reject, plan.ReasonLiteral},
		{0x98000080, "ldrsw literal", plan.Reject, plan.ReasonLiteral},
		{0xD8000080, "prfm literal", plan.Reject, plan.ReasonLiteral},
		{0xD4000001, "svc #0", plan.Reject, plan.ReasonException},
		{0xD4200000, "brk #0", plan.Reject, plan.ReasonException},
		{0xD51B4200, "msr nzcv, x0", plan.Reject, plan.ReasonSystem},
		{0xD50343DF, "msr daifset, #3", plan.Reject, plan.ReasonSystem},
		{0xD53B4220, "mrs x0, daif", plan.Reject, plan.ReasonSystem},
		{0xD69F03E0, "eret", plan.Reject, plan.ReasonSystem},
		{0xC85F7C20, "ldxr", plan.Reject, plan.ReasonExclusive},
		{0xC8027C20, "stxr", plan.Reject, plan.ReasonExclusive},
		// Gaps: escapes the masks, stepped from the slot.
		{0x54000090, "bc.eq", plan.XOL, plan.ReasonXOLPCRelGap},
		{0x5C000080, "ldr d0, literal", plan.XOL, plan.ReasonXOLPCRelGap},
		{0x9C000080, "ldr q0, literal", plan.XOL, plan.ReasonXOLPCRelGap},
	}
	for _, tt := range tests {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], tt.word)
		d := plan.Decide(plan.LinuxUprobes, &plan.Site{Arch: decode.ARM64, Addr: 0x1000, Code: b[:], Branches: plan.NoBranches}, nil)
		if d.Strategy != tt.strategy || d.Reason != tt.reason {
			t.Errorf("%s (%08x): %s (%s), want %s (%s): %s", tt.what, tt.word, d.Strategy, d.Reason, tt.strategy, tt.reason, d.Detail)
		}
	}
	nop := []byte{0x1f, 0x20, 0x03, 0xd5}
	if d := plan.Decide(plan.LinuxUprobes, &plan.Site{Arch: decode.ARM64, Addr: 0x1002, Code: nop, Branches: plan.NoBranches}, nil); d.Reason != plan.ReasonMisaligned {
		t.Errorf("misaligned: %s (%s)", d.Strategy, d.Reason)
	}
}

// exclusiveLoop is an ldxr/stxr increment loop:
//
//	0x1000 ldxr x0, [x1]
//	0x1004 add  x0, x0, #1
//	0x1008 stxr w2, x0, [x1]
//	0x100c cbnz w2, 0x1000
//	0x1010 ret
var exclusiveLoop = []uint32{0xC85F7C20, 0x91000400, 0xC8027C20, 0x35FFFFA2, 0xD65F03C0}

// TestExclusiveWindow checks both policies inside and outside an
// ldxr...stxr sequence: Linux probes inside it (and livelocks), probeopt
// refuses; after the sequence Linux emulates the branches and probeopt
// detours them through a trampoline.
func TestExclusiveWindow(t *testing.T) {
	code := decode.ARM64Code(exclusiveLoop...)
	fn := plan.AnalyzeARM64(0x1000, code)
	for _, tc := range []struct {
		addr          uint64
		linux, probe  plan.Reason
		linuxStrategy plan.Strategy
	}{
		{0x1004, plan.ReasonExclusiveLivelock, plan.ReasonExclusiveWindow, plan.XOL},
		{0x1008, plan.ReasonExclusive, plan.ReasonExclusiveWindow, plan.Reject},
		{0x100c, plan.ReasonEmulatedBranch, plan.ReasonTrampolineDetour, plan.Emulate},
		{0x1010, plan.ReasonEmulatedBranch, plan.ReasonTrampolineDetour, plan.Emulate},
	} {
		site := &plan.Site{Arch: decode.ARM64, Addr: tc.addr, Code: code[tc.addr-0x1000:], Func: fn, Branches: plan.NoBranches}
		l := plan.Decide(plan.LinuxUprobes, site, nil)
		p := plan.Decide(plan.Probeopt, site, nil)
		if l.Reason != tc.linux || l.Strategy != tc.linuxStrategy || p.Reason != tc.probe {
			t.Errorf("%#x: linux %s (%s), probeopt %s (%s); want linux %s (%s), probeopt %s", tc.addr, l.Strategy, l.Reason, p.Strategy, p.Reason, tc.linuxStrategy, tc.linux, tc.probe)
		}
	}
}
