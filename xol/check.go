package xol

import (
	"errors"
	"strings"

	"github.com/probeopt/probeopt/internal/reason"
)

// ErrNotRelocatable means the instruction cannot be executed correctly from
// another address; errors returned by CheckX86 and CheckARM64 wrap it and
// are *RefusalError values.
var ErrNotRelocatable = errors.New("cannot be executed out of line")

// Refusal codes, stable strings for reports. They are of the project's one
// reason-code type: plan passes them on as its decision reasons (a
// plan.Reason is the same type), so each string is written here only.
const (
	// RefuseSyscall: a system call stepped from a slot may not come back
	// to it (rt_sigreturn, execve) or may come back twice (fork, clone,
	// vfork: the child would resume inside the slot).
	RefuseSyscall reason.Code = "syscall"
	// RefuseTrap: the instruction always raises a trap or an exception
	// (int3, int n, ud2, brk...), which would be reported at the slot.
	RefuseTrap reason.Code = "trap"
	// RefusePrivileged: the instruction faults in user mode (hlt, cli,
	// in/out, wrmsr, eret, DAIF access...).
	RefusePrivileged reason.Code = "privileged"
	// RefuseTrapShadow: mov to %ss suppresses the single-step trap of the
	// next instruction, so the step would not stop after the copy.
	RefuseTrapShadow reason.Code = "trap-shadow"
	// RefuseRTM: xbegin; a debug trap aborts the transaction and the abort
	// path is relative to the copy.
	RefuseRTM reason.Code = "rtm"
	// RefuseAddr32RIP: an EIP-relative operand (67 prefix): the
	// scratch-register rewrite would compute a 64-bit address.
	RefuseAddr32RIP reason.Code = "riprel-addr32"
	// RefuseExclusive: an arm64 load/store exclusive: the trap clears the
	// exclusive monitor, so the store-exclusive fails every time.
	RefuseExclusive reason.Code = "exclusive"
)

// RefusalError says why an instruction cannot be executed out of line.
type RefusalError struct {
	Code   reason.Code // one of the Refuse* codes
	Reason string      // a sentence for a person
}

func (e *RefusalError) Error() string {
	return "cannot be executed out of line (" + string(e.Code) + "): " + e.Reason
}

// Is makes errors.Is(err, ErrNotRelocatable) true.
func (e *RefusalError) Is(target error) bool { return target == ErrNotRelocatable }

func refuse(code reason.Code, why string) error { return &RefusalError{Code: code, Reason: why} }

// PCRelKind says how an arm64 PC-relative instruction is handled out of
// line.
type PCRelKind uint8

const (
	PCRelNone    PCRelKind = iota
	PCRelBranch            // b, bl, b.cond, bc.cond, cbz, tbz: re-targeted copy, taken or not told by the PC after the step
	PCRelAddress           // adr, adrp: the destination register gets the value computed at the original address
	PCRelLiteral           // ldr/ldrsw/prfm (literal), also FP/SIMD: the load uses the original literal address
)

func (k PCRelKind) String() string {
	switch k {
	case PCRelBranch:
		return "branch"
	case PCRelAddress:
		return "address"
	case PCRelLiteral:
		return "literal"
	}
	return "none"
}

// Fixup lists what must be corrected around an out-of-line step. The zero
// value means: nothing; the copy's effects are the original's, including
// the instruction pointer (ret, indirect jumps).
type Fixup struct {
	// IP: after the step the instruction pointer is relative to the copy;
	// add (original address - slot address). Relative branches are right
	// either way they go.
	IP bool
	// Call: the copy stored its own return address (slot+len, x86 on the
	// stack, arm64 in x30); store original+len instead.
	Call bool
	// RelBranch: a relative branch. The IP fixup handles a single step; a
	// copy that stays (a detour) needs its displacement re-targeted.
	RelBranch bool
	// RIPRel: an x86-64 RIP-relative memory operand whose disp32 sits at
	// DispOff. The copy either gets a recomputed displacement (only when
	// the slot lies within +-2 GiB of the operand) or addresses the
	// operand through Scratch: ModRM becomes mod=10 with Scratch as base,
	// Scratch holds original+len during the step and is restored after.
	RIPRel  bool
	DispOff int
	// Scratch is the scratch register (decode register number, RSI first,
	// then RDI, RBX...), or -1 when none is known to be free: then only a
	// recomputed displacement works.
	Scratch int
	// PushfTF: pushf stores the trap flag of the single step; clear TF in
	// the stored image.
	PushfTF bool
	// PopfTF: popf loads the trap flag; keep the loaded value instead of
	// restoring the one saved before the step.
	PopfTF bool
	// Rep: a REP string instruction traps after each iteration with the
	// instruction pointer still on the copy; step again until it moves.
	Rep bool
	// PCRel: an arm64 PC-relative form and how it is handled.
	PCRel PCRelKind
}

// String lists the fixups: "ip", "ip+call+rel", "riprel(rsi)+ip"...
func (f Fixup) String() string {
	var parts []string
	add := func(ok bool, s string) {
		if ok {
			parts = append(parts, s)
		}
	}
	add(f.IP, "ip")
	add(f.Call, "call")
	add(f.RelBranch, "rel")
	if f.RIPRel {
		if f.Scratch >= 0 {
			parts = append(parts, "riprel("+regName(f.Scratch)+")")
		} else {
			parts = append(parts, "riprel(disp)")
		}
	}
	add(f.PushfTF, "pushf-tf")
	add(f.PopfTF, "popf-tf")
	add(f.Rep, "rep")
	if f.PCRel != PCRelNone {
		parts = append(parts, "pcrel-"+f.PCRel.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}
