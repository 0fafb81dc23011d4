// Package native runs machine code that a test placed in executable
// memory: it loads a register file, calls the code on a stack the test
// provides, and stores the register file the code returned with. It lets
// the trampoline tests execute generated code on the real CPU instead of
// trusting their own reading of it. It works on linux/amd64 only
// (Supported); elsewhere its functions do nothing.
package native

// Regs is the register file exchanged with native code.
type Regs struct {
	// GPR holds rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8..r15 in
	// encoding order. GPR[4] is ignored on entry; on return it holds the
	// stack pointer after the call, which equals StackTop(top) when the
	// code kept the stack balanced.
	GPR [16]uint64
	// Flags is rflags. On entry only the arithmetic flags (CF, PF, AF, ZF,
	// SF, OF) are taken, DF is clear as the ABI requires.
	Flags uint64
}

// ArithFlags is the mask of the arithmetic flags.
const ArithFlags = 1<<0 | 1<<2 | 1<<4 | 1<<6 | 1<<7 | 1<<11

// StackTop returns the stack pointer the code is called with (before the
// call pushes the return address) for a stack whose top is top.
func StackTop(top uintptr) uint64 { return uint64(top) - 32 }
