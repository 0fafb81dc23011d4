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

// syscallInsn is svc #0.
var syscallInsn = []byte{0x01, 0x00, 0x00, 0xd4}

const (
	syscallInsnAlign = 4
	// remoteSyscalls is false: remote system calls are not implemented on
	// arm64 yet.
	remoteSyscalls = false
	// breakpointPCAdjust: after brk the PC still points at it.
	breakpointPCAdjust = 0
)

// isBreakpointCode reports whether si_code of a SIGTRAP means brk.
func isBreakpointCode(code int32) bool { return code == 1 } // TRAP_BRKPT

const ntPRStatus = 1

func getRegs(tid int, r *Regs) error {
	return unix.PtraceGetRegSetArm64(tid, ntPRStatus, &r.PtraceRegsArm64)
}

func setRegs(tid int, r *Regs) error {
	return unix.PtraceSetRegSetArm64(tid, ntPRStatus, &r.PtraceRegsArm64)
}
