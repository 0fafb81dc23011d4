//go:build linux && arm64

package probe

import (
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/internal/hostcpu"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/xol"
)

// What the live engine does differently on arm64; arch_linux_amd64.go is
// the x86-64 half. Everything else of the engine is the same code.
//
// A trap site is the site's instruction word replaced by the breakpoint
// proc serves (brk #0). At a hit the PC still points at the brk; the
// instruction is emulated with the thread's registers as if it ran at the
// site (so a bl or blr sets x30 to the site's address plus 4, and a
// branch, adr or literal load is taken relative to the site), or the
// original word is put back and the thread single-stepped over it in
// place, every other thread stopped (step_linux.go): the instruction runs
// at its own address, so nothing PC-relative needs fixing. A site the
// plan gives a trampoline is one word replaced by a b to its slot
// (tramp_linux.go), which counts the hit in the thread's stripe of the
// data area (found from tpidr_el0; a thread without one counts in the
// shared words), with Options.Events records an entry event in the
// thread's ring (x0-x5, the virtual counter after an isb), and runs the
// word relocated by xol. proc reads tpidr_el0 with the registers, which
// finds the thread id of a stripe's owner in glibc's struct pthread below
// it. Not on arm64 yet: return probes (arm64 slots have no return
// handler: refused), BPF programs (archBPF), boosted copies (every XOL
// instruction is stepped), goroutine ids in events, a guardian, and the
// unmapping of the areas.

// trapBytes is the breakpoint instruction the engine writes at a trap
// site: one instruction word.
type trapBytes [4]byte

// trapInsn is the engine's breakpoint (brk #0, proc's), kernelTrap the
// one a kernel uprobe writes (brk #5, the kernel's UPROBE_SWBP_INSN).
var (
	trapInsn   = trapBytes{0x00, 0x00, 0x20, 0xd4}
	kernelTrap = trapBytes{0xa0, 0x00, 0x20, 0xd4}
)

// trapPCAdjust is how far past its breakpoint a thread that executed it
// stands: the PC still points at the brk.
const trapPCAdjust = 0

// archTrampolines says whether the engine installs trampolines here,
// archTrampEvents whether with Options.Events too (the slots record entry
// events in the thread's ring, the time from cntvct_el0); archReach is the
// farthest a site may be from its slot (a b reaches 128 MiB; see
// trampoline.MaxReachARM64). archBPF says whether BPF programs run at
// probes: not on arm64 (the JIT, bpf/jit, writes x86-64 code).
// archDataReach is the farthest the data area may be from the sites: the
// slots address it with adrp (+-4 GiB), so it need not lie within a b's
// reach, and per-thread rings of 2^20 events (a GiB for 16 threads) fit
// where 128 MiB would not.
const (
	archTrampolines = true
	archTrampEvents = true
	archReach       = trampoline.MaxReachARM64
	archDataReach   = trampoline.MaxReach
	archBPF         = false
)

// canBoost says whether an XOL instruction may run as a relocated copy
// in a slot without a second trap: not on arm64 yet (every XOL
// instruction is stepped in place).
const canBoost = false

// archSpawnGuard says whether a spawned process gets a guardian unless
// Options.NoGuardian: not on arm64, where package guardian does not run;
// a spawned process is killed if the tracer dies, as before guardians.
const archSpawnGuard = false

// hostEmu is the emulator of the traced processes' CPU.
type hostEmu = emulate.ARM64

// eventArgs are the first six argument registers of the AAPCS64, x0-x5.
func eventArgs(r *proc.Regs) [6]uint64 {
	return [6]uint64(r.Regs[:6])
}

// goArgs are the first six integer argument registers of Go's arm64
// register ABI (R0-R5, as the AAPCS64's), retValue the integer result
// register (x0).
func goArgs(r *proc.Regs) [6]uint64 { return eventArgs(r) }

func retValue(r *proc.Regs) uint64 { return r.Regs[0] }

// threadBase returns the thread pointer (tpidr_el0, which proc reads
// with the registers).
func threadBase(r *proc.Regs) uint64 { return r.TPIDR }

// glibcTidOffset is where the GNU C library keeps the thread id from the
// thread pointer: its struct pthread lies just below the thread pointer
// (TLS variant I), 0x740 bytes in glibc 2.36, with tid at 0xd0 (measured:
// pthread_self() is the thread pointer minus 0x740, and gettid() is at
// pthread_self()+0xd0). tidSearchFrom is where the search for the offset
// starts (ring_linux.go): 2 KiB below the thread pointer (the main
// thread's block may start less than a page below it, and a read that
// crosses into an unmapped page fails).
const (
	glibcTidOffset = -0x740 + 0xd0
	tidSearchFrom  = -0x800
)

// cntfrq reads cntfrq_el0 (tsc_linux_arm64.s).
func cntfrq() uint64

// counterPerNs returns the ticks per nanosecond of the counter the events'
// time stamps come from: the virtual counter runs at cntfrq_el0's
// frequency (fixed, set by the firmware, 1 GHz on Armv8.6 and later; the
// reader measures only when it reads 0).
func counterPerNs() float64 { return float64(cntfrq()) / 1e9 }

// goReg returns the register Go code holds its goroutine's g in on arm64
// (x28). No arm64 site reads it yet: fileInfo.goG gives x86-64 files' sites
// only.
func goReg(r *proc.Regs) uint64 { return r.Regs[28] }

// hostEmulator returns the emulator of the traced processes' CPU. The
// zero emulate.ARM64 refuses every pointer-authentication instruction (a
// CPU with FEAT_PAuth executes them, one without runs them as NOPs), so
// that it is exact on either: such sites are stepped.
func hostEmulator(*hostcpu.Info) (emulate.ARM64, bool) {
	return emulate.ARM64{}, true
}

// emulate executes the site's instruction on the thread's registers and
// the process's memory, as if it ran at the site. It reports false, with
// nothing changed, when the emulator refuses or the instruction faults or
// touches memory the emulation must not (see remoteMem): the thread is
// then stepped.
func (tg *target) emulate(ctx *proc.TrapContext, e *entry) bool {
	if e.arm == nil || !tg.t.emuOK {
		return false
	}
	r := ctx.Regs
	st := emulate.ARM64State{X: [31]uint64(r.Regs[:31]), SP: r.Sp, PC: ctx.Addr, NZCV: r.Pstate}
	m := remoteMem{tg: tg, tid: ctx.Tid, sp: r.Sp}
	if err := tg.t.emu.Step(e.arm, &st, &m); err != nil {
		return false
	}
	copy(r.Regs[:31], st.X[:])
	r.Sp, r.Pc, r.Pstate = st.SP, st.PC, st.NZCV
	return true
}

// enterBoost is never called on arm64 (canBoost).
func enterBoost(*xol.X86Copy, *proc.Regs, uint64) bool { return false }
