//go:build linux && arm64

package proc

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Regs are the general-purpose registers of a thread (struct
// user_pt_regs), and its thread pointer.
type Regs struct {
	unix.PtraceRegsArm64
	// TPIDR is the thread pointer, tpidr_el0 (the NT_ARM_TLS register
	// set, read with the others; SetRegs does not write it).
	TPIDR uint64
}

// PC returns the program counter.
func (r *Regs) PC() uint64 { return r.Pc }

// SetPC sets the program counter.
func (r *Regs) SetPC(pc uint64) { r.Pc = pc }

// SP returns the stack pointer.
func (r *Regs) SP() uint64 { return r.Sp }

// threadPointer returns the thread pointer (tpidr_el0).
func (r *Regs) threadPointer() uint64 { return r.TPIDR }

// inSyscall reports nothing on arm64: the system-call number is not part
// of user_pt_regs (it is the NT_ARM_SYSTEM_CALL register set), and a
// thread interrupted in a system call has left it before the tracer sees
// it (see restartPC).
func (r *Regs) inSyscall() bool { return false }

// restartPC reports nothing on arm64: for a system call interrupted with
// one of the ERESTART* codes the kernel moves the PC back to the svc and
// puts the first argument back in x0 before the thread stops (so that
// the tracer sees the registers the call restarts with), so the PC is
// already the restart PC.
func (r *Regs) restartPC() (uint64, bool) { return 0, false }

// prepareSyscall sets the registers to run system call nr at site (an
// svc #0): x8 is the number, x0-x5 the arguments. A pending restart of
// the call the thread was interrupted in is not applied to them: the
// kernel restarts only a thread that resumes at the svc it rewound to.
func (r *Regs) prepareSyscall(site, nr uint64, a [6]uint64) {
	r.Regs[8] = nr
	copy(r.Regs[0:6], a[:])
	r.Pc = site
}

func (r *Regs) syscallResult() uint64 { return r.Regs[0] }

// restartSyscall does nothing: remote system calls are single steps here
// (arch.syscallStops), whose stop is in signal delivery, after which the
// kernel restarts an interrupted call itself.
func (r *Regs) restartSyscall() {}

// hostArch is the table of the architecture the tracer runs on.
var hostArch = archARM64

// regsExtra is the size of the fields of Regs that are not the general
// register set: TPIDR.
const regsExtra = 8

// ntARMTLS is NT_ARM_TLS, the register set of tpidr_el0.
const ntARMTLS = 0x401

// getRegs reads the general registers and the thread pointer: two
// PTRACE_GETREGSET requests.
func getRegs(tid int, r *Regs) error {
	if err := unix.PtraceGetRegSetArm64(tid, hostArch.regSet, &r.PtraceRegsArm64); err != nil {
		return err
	}
	iov := unix.Iovec{Base: (*byte)(unsafe.Pointer(&r.TPIDR))}
	iov.SetLen(8)
	return ptrace(unix.PTRACE_GETREGSET, tid, ntARMTLS, uintptr(unsafe.Pointer(&iov)))
}

func setRegs(tid int, r *Regs) error {
	return unix.PtraceSetRegSetArm64(tid, hostArch.regSet, &r.PtraceRegsArm64)
}
