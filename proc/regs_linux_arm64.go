//go:build linux && arm64

package proc

import "golang.org/x/sys/unix"

// Regs are the general-purpose registers of a thread (struct user_pt_regs).
type Regs struct {
	unix.PtraceRegsArm64
}

// PC returns the program counter.
func (r *Regs) PC() uint64 { return r.Pc }

// SetPC sets the program counter.
func (r *Regs) SetPC(pc uint64) { r.Pc = pc }

// SP returns the stack pointer.
func (r *Regs) SP() uint64 { return r.Sp }

// The system-call number is not part of user_pt_regs (it lives in the
// NT_ARM_SYSTEM_CALL register set), so these report nothing on arm64.
func (r *Regs) inSyscall() bool { return false }

func (r *Regs) restartPC() (uint64, bool) { return 0, false }

func (r *Regs) prepareSyscall(site, nr uint64, a [6]uint64) {}

func (r *Regs) syscallResult() uint64 { return r.Regs[0] }

// hostArch is the table of the architecture the tracer runs on.
var hostArch = archARM64

func getRegs(tid int, r *Regs) error {
	return unix.PtraceGetRegSetArm64(tid, hostArch.regSet, &r.PtraceRegsArm64)
}

func setRegs(tid int, r *Regs) error {
	return unix.PtraceSetRegSetArm64(tid, hostArch.regSet, &r.PtraceRegsArm64)
}
