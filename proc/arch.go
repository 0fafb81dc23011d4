package proc

// arch is what the tracer needs to know of an instruction set, one table
// per architecture instead of per-architecture branches in the tracer. The
// register layout itself (Regs, its accessors such as PC, inSyscall or
// prepareSyscall, and the ptrace requests that fill it) is the file
// regs_linux_GOARCH.go, which also names the host's table, hostArch.
type arch struct {
	name string
	// breakpoint is the trap instruction a TrapHandler serves (int3,
	// brk #0), breakpointCode the si_code of the SIGTRAP it raises, and
	// breakpointPCAdjust how far past the instruction the PC is when the
	// trap is reported (TrapContext.Addr = PC - breakpointPCAdjust).
	breakpoint         []byte
	breakpointCode     int32
	breakpointPCAdjust uint64
	// singleStep is set when PTRACE_SINGLESTEP executes one instruction
	// (World.Step fails with ErrNotSupported otherwise).
	singleStep bool
	// stepOverSyscallSIUser is set when a single step over a system-call
	// instruction ends, at the system call's exit, with a SIGTRAP whose
	// si_code is SI_USER and si_pid 0 (the kernel's generic
	// user_single_step_report, which arm64 uses; x86-64 reports
	// TRAP_BRKPT): such a trap ends the step, it was sent by no process.
	stepOverSyscallSIUser bool
	// rewindsSyscalls is set when the registers cannot tell a thread
	// stopped in a system call (arm64 keeps the call's number outside
	// user_pt_regs, and rewinds the PC of an interrupted restartable call
	// to its svc before the stop): World.Threads then reports InSyscall
	// for a thread whose PC is at a system-call instruction.
	rewindsSyscalls bool
	// syscallInsn is the system-call instruction a remote system call
	// runs; it is looked for at multiples of insnAlign.
	syscallInsn []byte
	insnAlign   uint64
	// remoteSyscalls is set when Regs can be set up for a system call
	// (prepareSyscall): World.Syscall fails with ErrNotSupported otherwise.
	remoteSyscalls bool
	// syscallStops is set when a remote system call runs under
	// PTRACE_SYSCALL, stopping at its entry and its exit, rather than
	// as a single step over the instruction: a tracer that dies in the
	// middle then leaves the thread no SIGTRAP to die of (see
	// runSyscall). The exit stop skips the kernel's restart of a call of
	// the borrowed thread's own that an interrupt cut short: the
	// registers put back make it (Regs.restartSyscall).
	syscallStops bool
	// regSet is the PTRACE_GETREGSET note type Regs are read and written
	// with (NT_PRSTATUS), 0 where PTRACE_GETREGS and PTRACE_SETREGS are
	// used; regsSize is the size of that layout in bytes: sizeof(Regs)
	// less regsExtra, the registers Regs holds from other register sets.
	regSet   int
	regsSize uintptr
}

// ntPRStatus is NT_PRSTATUS, the general-purpose register set.
const ntPRStatus = 1

// archX86_64 is x86-64: struct user_regs_struct through PTRACE_GETREGS.
var archX86_64 = arch{
	name:               "x86-64",
	breakpoint:         []byte{0xcc}, // int3
	breakpointCode:     0x80,         // SI_KERNEL
	breakpointPCAdjust: 1,            // the PC is after the int3
	singleStep:         true,
	syscallInsn:        []byte{0x0f, 0x05}, // syscall
	insnAlign:          1,
	remoteSyscalls:     true,
	syscallStops:       true,
	regsSize:           27 * 8,
}

// archARM64 is arm64: struct user_pt_regs through NT_PRSTATUS; remote
// system calls run svc #0 with the number in x8.
var archARM64 = arch{
	name:                  "arm64",
	breakpoint:            []byte{0x00, 0x00, 0x20, 0xd4}, // brk #0
	breakpointCode:        1,                              // TRAP_BRKPT
	breakpointPCAdjust:    0,                              // the PC still points at the brk
	singleStep:            true,
	stepOverSyscallSIUser: true,
	rewindsSyscalls:       true,
	syscallInsn:           []byte{0x01, 0x00, 0x00, 0xd4}, // svc #0
	insnAlign:             4,
	remoteSyscalls:        true,
	regSet:                ntPRStatus,
	regsSize:              34 * 8, // x0-x30, sp, pc, pstate
}
