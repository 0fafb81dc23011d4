//go:build linux && amd64

package proc

import "golang.org/x/sys/unix"

// Regs are the general-purpose registers of a thread (struct
// user_regs_struct).
type Regs struct {
	unix.PtraceRegs
}

// PC returns the instruction pointer.
func (r *Regs) PC() uint64 { return r.Rip }

// SetPC sets the instruction pointer. It also sets orig_rax to -1, so
// that a system call the thread was interrupted in is not restarted (the
// kernel would otherwise move the new PC back over a syscall instruction
// on resume), as debuggers do when they move a thread.
func (r *Regs) SetPC(pc uint64) { r.Rip, r.Orig_rax = pc, ^uint64(0) }

// SP returns the stack pointer.
func (r *Regs) SP() uint64 { return r.Rsp }

// threadPointer returns the thread pointer: the %fs base.
func (r *Regs) threadPointer() uint64 { return r.Fs_base }

// inSyscall reports whether the thread stopped inside (or on its way out
// of) a system call: orig_rax holds the call number, -1 otherwise.
func (r *Regs) inSyscall() bool { return int64(r.Orig_rax) >= 0 }

// restartPC returns the address of the syscall instruction the kernel will
// run again on resume, for a system call interrupted with one of the
// ERESTART* codes.
func (r *Regs) restartPC() (uint64, bool) {
	if !r.inSyscall() {
		return 0, false
	}
	switch int64(r.Rax) {
	case -512, -513, -514, -516: // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK
		return r.Rip - 2, true
	}
	return 0, false
}

// prepareSyscall sets the registers to run system call nr at site.
// orig_rax = -1 keeps the kernel from applying a pending restart to them.
func (r *Regs) prepareSyscall(site, nr uint64, a [6]uint64) {
	r.Rax, r.Orig_rax = nr, ^uint64(0)
	r.Rdi, r.Rsi, r.Rdx, r.R10, r.R8, r.R9 = a[0], a[1], a[2], a[3], a[4], a[5]
	r.Rip = site
}

func (r *Regs) syscallResult() uint64 { return r.Rax }

// restartSyscall makes registers read in a system call that an interrupt
// cut short (rax one of the kernel's restart codes) into those of a thread
// about to make it again, as the kernel does when the thread returns to
// user mode through signal delivery with no handler to run: the
// instruction pointer back on the syscall instruction, rax the call's
// number (restart_syscall's for ERESTART_RESTARTBLOCK).
func (r *Regs) restartSyscall() {
	if int64(r.Orig_rax) < 0 {
		return
	}
	switch e := -int64(r.Rax); {
	case e >= 512 && e <= 514: // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND
		r.Rax, r.Rip = r.Orig_rax, r.Rip-2
	case e == 516: // ERESTART_RESTARTBLOCK
		r.Rax, r.Rip = unix.SYS_RESTART_SYSCALL, r.Rip-2
	}
}

// hostArch is the table of the architecture the tracer runs on.
var hostArch = archX86_64

// regsExtra is the size of the fields of Regs that are not the general
// register set: none on x86-64.
const regsExtra = 0

func getRegs(tid int, r *Regs) error { return unix.PtraceGetRegs(tid, &r.PtraceRegs) }

func setRegs(tid int, r *Regs) error { return unix.PtraceSetRegs(tid, &r.PtraceRegs) }
