//go:build linux && (amd64 || arm64)

package probe

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/proc"
)

// Start-up and dlopen. The dynamic linker calls its rendezvous function
// (r_debug.r_brk) with r_debug.r_state RT_ADD before it maps new objects,
// and with RT_CONSISTENT once it has mapped and relocated them, before
// their initialisers run. Relocation runs code of the new objects
// already: IFUNC resolvers (memcpy's, strlen's...), and at start-up the C
// library's early initialisation. A kernel uprobe is in place from the
// moment its file is mapped, so it counts those calls; probes installed
// at RT_CONSISTENT would miss them.
//
// So from the rendezvous of RT_ADD to that of RT_CONSISTENT the engine
// watches the system calls of the thread that loads
// (proc.TrapContext.WatchSyscalls): at the end of each mmap that maps
// something executable, the thread is held as at the rendezvous, and the
// new mapping is probed before the thread runs on. Each system call
// during loading costs two stops of that thread; each executable mapping
// one stop of the process.

// rdebugSymbol is the dynamic linker's r_debug (GNU C library).
const rdebugSymbol = "_r_debug"

// r_debug's r_state (struct r_debug: int r_version, a pointer r_map, an
// address r_brk, then r_state) and its values.
const (
	rdebugStateOff = 24
	rtAdd          = 1
)

// addingObjects reports whether the dynamic linker, at its rendezvous, is
// about to map objects (r_state RT_ADD). It runs on the ptrace thread.
func (tg *target) addingObjects() bool {
	a := tg.rdebug.Load()
	f := tg.mem.Load()
	if a == 0 || f == nil {
		return false
	}
	var b [4]byte
	if _, err := f.ReadAt(b[:], int64(a+rdebugStateOff)); err != nil {
		return false
	}
	return binary.LittleEndian.Uint32(b[:]) == rtAdd
}

// watchedSyscall handles the end of a system call of a thread that loads
// objects: an mmap that made something executable holds it until the
// new mapping is probed. It runs on the ptrace thread.
func (tg *target) watchedSyscall(ctx *proc.TrapContext) proc.TrapAction {
	sc := ctx.Syscall
	if sc.Nr != unix.SYS_MMAP || sc.Ret < 0 && sc.Ret > -4096 || sc.Args[2]&unix.PROT_EXEC == 0 {
		return proc.TrapResume
	}
	tg.hold(held{tid: ctx.Tid, rendezvous: true})
	return proc.TrapHold
}
