package decode

import "errors"

// Errors returned by the decoders. They are returned unwrapped, so comparing
// with == works, but callers should use errors.Is.
var (
	// ErrTruncated means the input ended before the instruction did.
	ErrTruncated = errors.New("truncated instruction")
	// ErrInvalid means the bytes do not form a valid instruction in 64-bit
	// mode (for example an opcode that is invalid in long mode).
	ErrInvalid = errors.New("invalid instruction")
	// ErrTooLong means an x86 instruction would exceed the 15-byte limit.
	ErrTooLong = errors.New("instruction longer than 15 bytes")
	// ErrUnknown means the opcode is valid-looking but not in the decoder's
	// tables, so its length cannot be known.
	ErrUnknown = errors.New("unknown opcode")
)

// Arch names an instruction set.
type Arch uint8

const (
	X86_64 Arch = iota + 1
	ARM64
)

func (a Arch) String() string {
	switch a {
	case X86_64:
		return "x86-64"
	case ARM64:
		return "arm64"
	}
	return "unknown"
}

// BranchKind classifies how an instruction may change the flow of control.
type BranchKind uint8

const (
	BranchNone         BranchKind = iota
	BranchJmp                     // unconditional direct jump: jmp rel, b
	BranchJcc                     // conditional direct jump: jcc rel, b.cond, bc.cond
	BranchCompare                 // arm64 cbz/cbnz: compare a register with zero and branch
	BranchTest                    // arm64 tbz/tbnz: test a bit and branch
	BranchCall                    // direct call: call rel, bl
	BranchJmpIndirect             // jmp r/m, br, braa...
	BranchCallIndirect            // call r/m, blr, blraa...
	BranchRet                     // ret, ret xN, retaa/retab
	BranchRetImm                  // x86 ret imm16
	BranchLoop                    // x86 loop/loope/loopne/jrcxz
	BranchXbegin                  // x86 xbegin rel (aborts continue at the target)
	BranchFarJmp                  // x86 far jmp through memory
	BranchFarCall                 // x86 far call through memory
	BranchFarRet                  // x86 retf / retf imm16
	BranchSyscall                 // syscall, sysenter, svc, hvc, smc
	BranchInt                     // int n, int3, into, int1, brk, hlt (arm64)
	BranchIret                    // iret, sysret, sysexit, eret
	BranchJmpAbs                  // x86 APX jmpabs: a direct jump to a 64-bit absolute address
)

var branchNames = [...]string{
	BranchNone:         "none",
	BranchJmp:          "jmp",
	BranchJcc:          "jcc",
	BranchCompare:      "cbz",
	BranchTest:         "tbz",
	BranchCall:         "call",
	BranchJmpIndirect:  "jmp-indirect",
	BranchCallIndirect: "call-indirect",
	BranchRet:          "ret",
	BranchRetImm:       "ret-imm",
	BranchLoop:         "loop",
	BranchXbegin:       "xbegin",
	BranchFarJmp:       "far-jmp",
	BranchFarCall:      "far-call",
	BranchFarRet:       "far-ret",
	BranchSyscall:      "syscall",
	BranchInt:          "int",
	BranchIret:         "iret",
	BranchJmpAbs:       "jmpabs",
}

func (k BranchKind) String() string {
	if int(k) < len(branchNames) {
		return branchNames[k]
	}
	return "unknown"
}

// Relative reports whether the branch target is encoded relative to the
// instruction, so that moving the instruction changes where it goes.
func (k BranchKind) Relative() bool {
	switch k {
	case BranchJmp, BranchJcc, BranchCompare, BranchTest, BranchCall, BranchLoop, BranchXbegin:
		return true
	}
	return false
}

// RegSet is a set of general-purpose registers, one bit per register number.
// On x86-64 bits 0-15 are rax..r15 in encoding order (rax rcx rdx rbx rsp rbp
// rsi rdi r8..r15) and bits 16-31 the APX registers r16..r31. On arm64 bits
// 0-30 are x0..x30 and bit 31 is sp (the zero register is never a member).
type RegSet uint64

// Has reports whether register r is in the set.
func (s RegSet) Has(r int) bool { return r >= 0 && r < 64 && s&(1<<uint(r)) != 0 }

// Add returns the set with register r added.
func (s RegSet) Add(r int) RegSet { return s | 1<<uint(r) }
