//go:build linux && (amd64 || arm64)

package probe

import (
	"encoding/binary"
	"errors"

	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/trampoline"
)

// goid reads the goroutine id of the g at g (a stopped thread's goReg), 0
// for no g or an unreadable one. It runs on the tracer thread (a read of
// the memory file, no ptrace call).
func (tg *target) goid(g uint64, o *trampoline.GoG) uint64 {
	f := tg.mem.Load()
	if g == 0 || f == nil {
		return 0
	}
	var b [8]byte
	if _, err := f.ReadAt(b[:], int64(g)+int64(o.Goid)); err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b[:])
}

// errGoThreadTrap is why a site of a Go program takes its trap instead of
// a trampoline (goThreadTrap).
var errGoThreadTrap = errors.New("its events need the thread, which a slot cannot read in Go code that does not hold g in r14 (assembly, ABI wrappers) of a static Go program; served by traps")

// goThreadTrap returns errGoThreadTrap for a site whose slot could not
// tell the thread of its events: it records entry events, it lies in Go
// code where r14 may not hold g (s.ps.goG is nil), and the program is a
// static Go program (no C library thread control block: its slots read no
// thread pointer on a CPU without FSGSBASE, see threadPointer, and one
// read with rdfsbase leads to no thread id). Its trap knows the thread. A site whose
// trap strategy is a refusal, or that needs a trampoline (a BPF program),
// keeps its trampoline and records no thread.
func (tg *target) goThreadTrap(s *liveSite) error {
	if !tg.t.opts.Events || !s.ps.goABI || s.ps.goG != nil || !s.wantsEntry() || s.hasPrograms() || s.ps.decision.Strategy == plan.Reject {
		return nil
	}
	// A Go program without a dynamic linker has no C library thread
	// control block to find a thread through from the thread pointer.
	if m := tg.mainModule(); m == nil || m.fi.f.Interp != "" || !m.fi.f.IsGo() {
		return nil
	}
	return errGoThreadTrap
}
