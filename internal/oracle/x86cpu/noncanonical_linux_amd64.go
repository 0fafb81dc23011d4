//go:build linux && amd64

package x86cpu

import (
	"fmt"
	"sync"

	"github.com/probeopt/probeopt/internal/hostcpu"
	"github.com/probeopt/probeopt/proc"
)

// Some hosts cannot return to user mode with a non-canonical stack
// pointer: the return itself raises #GP, and the thread gets SIGSEGV
// (si_code SI_KERNEL, trap 13) at the first instruction, which never runs.
// Seen on an AMD EPYC of family 26 (model 2) under KVM, where a step of a
// one-byte nop with rsp = 1<<63 stops with SIGSEGV before the nop and
// rsp = 0xffff800000000000 steps it; an AMD EPYC of family 25 and Intel
// Xeons entered such states, and the instruction then ran (or faulted for
// its own reasons). On the family 26 host, a return through rt_sigreturn
// to such a state right after a page fault's signal did not even fault:
// the thread spun in the kernel. So a case that starts with a
// non-canonical rsp is never started on a host that cannot enter one (the
// oracles run it with rsp 0 and mark the result not run; the emulator
// campaign then generates only canonical ones): what the CPU would do
// with the instruction is unknown there.

// hostNoncanonical caches HostEntersNoncanonicalRSP.
var hostNoncanonical struct {
	once sync.Once
	ok   bool
	err  error
}

// HostEntersNoncanonicalRSP reports whether this host returns to user mode
// with a non-canonical stack pointer and runs the instruction there. It
// asks once: a child of this program, stopped at its exec, gets a nop at
// its entry point and rsp = 1<<63, and is stepped once; the nop either ran
// (true) or the thread stopped with SIGSEGV before it (false). The child
// is killed.
func HostEntersNoncanonicalRSP() (bool, error) {
	e := &hostNoncanonical
	e.once.Do(func() { e.ok, e.err = hostEntersRSP(1 << 63) })
	return e.ok, e.err
}

// hostEntersRSP steps a nop in a child of this program with rsp set to
// rsp, and reports whether the nop ran.
func hostEntersRSP(rsp uint64) (bool, error) {
	p, err := proc.Spawn([]string{"/proc/self/exe"}, &proc.SpawnOptions{Env: []string{}})
	if err != nil {
		return false, fmt.Errorf("non-canonical rsp probe: start child: %w", err)
	}
	defer p.Kill()
	pid := p.Pid()
	r, err := p.Regs(pid)
	if err != nil {
		return false, fmt.Errorf("non-canonical rsp probe: %w", err)
	}
	entry := r.PC()
	if err := p.WriteMemory(entry, []byte{0x90}); err != nil {
		return false, fmt.Errorf("non-canonical rsp probe: write the nop: %w", err)
	}
	r.Rsp = rsp
	if err := p.SetRegs(pid, &r); err != nil {
		return false, fmt.Errorf("non-canonical rsp probe: %w", err)
	}
	if err := p.Step(pid, 0); err != nil {
		return false, fmt.Errorf("non-canonical rsp probe: step: %w", err)
	}
	if r, err = p.Regs(pid); err != nil {
		return false, fmt.Errorf("non-canonical rsp probe: %w", err)
	}
	switch r.PC() {
	case entry + 1:
		return true, nil
	case entry:
		return false, nil
	}
	return false, fmt.Errorf("non-canonical rsp probe: the step stopped at %#x, want %#x or %#x", r.PC(), entry, entry+1)
}

// hostCanonical reports whether a is canonical on this host (48-bit
// addresses, 57-bit with LA57).
func hostCanonical(a uint64) bool {
	shift := 64 - 48
	if hostcpu.Host().LA57 {
		shift = 64 - 57
	}
	return int64(a<<shift)>>shift == int64(a)
}
