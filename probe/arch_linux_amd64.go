//go:build linux && amd64

package probe

import (
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/internal/hostcpu"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/xol"
)

// What the live engine does differently on x86-64; arch_linux_arm64.go is
// the arm64 half. Everything else of the engine is the same code.

// trapBytes is the breakpoint instruction the engine writes at a trap
// site: int3.
type trapBytes [1]byte

// trapInsn is the engine's breakpoint, kernelTrap the one a kernel uprobe
// writes (the same int3 on x86-64).
var (
	trapInsn   = trapBytes{0xCC}
	kernelTrap = trapBytes{0xCC}
)

// trapPCAdjust is how far past its breakpoint a thread that executed it
// stands: the PC is after the int3.
const trapPCAdjust = 1

// archTrampolines says whether the engine installs trampolines here,
// archTrampEvents whether with Options.Events too; archReach is the
// farthest a site may be from its slot and the data area (rel32);
// archBPF says whether BPF programs run at probes (bpf/jit);
// archDataReach is the farthest the data area may be from the sites (the
// slots address it RIP-relative).
const (
	archTrampolines = true
	archTrampEvents = true
	archReach       = trampoline.MaxReach
	archDataReach   = trampoline.MaxReach
	archBPF         = true
)

// canBoost says whether an XOL instruction may run as a relocated copy
// in a slot without a second trap (slot_linux.go).
const canBoost = true

// archSpawnGuard says whether a spawned process gets a guardian unless
// Options.NoGuardian (guard_linux.go).
const archSpawnGuard = true

// hostEmu is the emulator of the traced processes' CPU.
type hostEmu = emulate.X86

// eventArgs are the six integer argument registers of the System V ABI.
func eventArgs(r *proc.Regs) [6]uint64 {
	return [6]uint64{r.Rdi, r.Rsi, r.Rdx, r.Rcx, r.R8, r.R9}
}

// goArgs are the first six integer argument registers of Go's register
// ABI (trampoline.GoArgs), retValue the integer result register.
func goArgs(r *proc.Regs) [6]uint64 {
	return [6]uint64{r.Rax, r.Rbx, r.Rcx, r.Rdi, r.Rsi, r.R8}
}

func retValue(r *proc.Regs) uint64 { return r.Rax }

// threadBase returns the thread pointer (the fs base).
func threadBase(r *proc.Regs) uint64 { return r.Fs_base }

// glibcTidOffset is where the GNU C library keeps the thread id from the
// thread pointer (struct pthread, field tid: the thread control block
// starts at the thread pointer), tidSearchFrom where the search for it
// starts (ring_linux.go).
const (
	glibcTidOffset = 0x2d0
	tidSearchFrom  = 0
)

// counterPerNs returns 0: the time stamp counter's rate is measured
// against the clock by the ring's reader (ring_linux.go).
func counterPerNs() float64 { return 0 }

// goReg returns the register Go code holds its goroutine's g in (r14;
// gothread.go).
func goReg(r *proc.Regs) uint64 { return r.R14 }

// hostEmulator returns the emulator of the CPU i describes, which is the
// CPU of every traced process: its vendor's behaviour and its address
// width. ok is false when the emulator cannot follow that CPU exactly (a
// vendor whose differences from Intel and AMD are not characterised, or
// one that cannot be told): the sites the plan emulates are then stepped.
func hostEmulator(i *hostcpu.Info) (x emulate.X86, ok bool) {
	v, err := i.X86Vendor()
	return emulate.X86{Vendor: v, LA57: i.LA57}, err == nil
}

// emulate executes the site's instruction on the thread's registers and
// the process's memory. It reports false, with nothing changed, when the
// emulator refuses or the instruction faults or touches memory the
// emulation must not (see remoteMem): the thread is then stepped.
func (tg *target) emulate(ctx *proc.TrapContext, e *entry) bool {
	r := ctx.Regs
	st := emulate.X86State{
		GPR: [16]uint64{r.Rax, r.Rcx, r.Rdx, r.Rbx, r.Rsp, r.Rbp, r.Rsi, r.Rdi,
			r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15},
		RIP:    ctx.Addr,
		RFLAGS: r.Eflags,
		FSBase: r.Fs_base,
		GSBase: r.Gs_base,
	}
	if st.RFLAGS&emulate.FlagTF != 0 {
		return false // the program single-steps itself: let the CPU trap
	}
	if !tg.t.emuOK {
		return false // this CPU's behaviour is not characterised: step
	}
	m := remoteMem{tg: tg, tid: ctx.Tid, sp: r.Rsp}
	if err := tg.t.emu.Step(e.inst, &st, &m); err != nil {
		return false
	}
	g := &st.GPR
	r.Rax, r.Rcx, r.Rdx, r.Rbx, r.Rsp, r.Rbp, r.Rsi, r.Rdi = g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]
	r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15 = g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]
	r.Rip, r.Eflags = st.RIP, st.RFLAGS
	return true
}

// enterBoost sends a thread stopped at a site's int3 to the boosted copy.
func enterBoost(c *xol.X86Copy, r *proc.Regs, addr uint64) bool {
	x := xol.X86Regs{RIP: addr, RFLAGS: r.Eflags}
	if err := c.BoostEnter(&x); err != nil {
		return false
	}
	r.Rip = x.RIP
	return true
}
