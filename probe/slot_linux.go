//go:build linux && (amd64 || arm64)

package probe

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/xol"
)

// Slot areas hold the relocated copies (xol.RelocateX86) of the
// instructions that run out of line without a second trap ("boosted"): at a
// hit the thread is sent to the copy, which does what the original does and
// jumps back to the instruction after it. No text is restored and no other
// thread is stopped.
//
// A boosted copy runs with the instruction pointer in the slot, so a
// signal that its instruction raises would be delivered there, not at the
// original address (the tracer cannot correct a signal before it is
// delivered). Copies are therefore boosted only for instructions that raise
// no exception in user space (xol.BoostableX86 says which: no memory
// operand other than a RIP-relative one into the program's own data, no
// implicit memory access, no division, no x87). A program that unmasks
// floating-point exceptions (feenableexcept) and makes a boosted vector
// instruction raise one would see its SIGFPE delivered in the slot. Every
// other XOL instruction is single-stepped in place.
//
// Slot areas stay mapped until the process execs or exits, after Detach
// too: a thread interrupted by a signal inside a copy returns there from
// its handler.

// areaSize is the size of one slot area.
const areaSize = 64 << 10

// slotArea is a read-execute mapping in the tracee, carved into slots in
// order.
type slotArea struct {
	start, end uint64
	next       uint64
}

// reaches reports whether every byte of the area lies within the reach of
// a rel32 from every address of addrs.
func (a *slotArea) reaches(addrs []uint64) bool {
	for _, x := range addrs {
		lo, hi := a.start, a.end
		if x > lo && x-lo > trampoline.MaxReach || hi > x && hi-x > trampoline.MaxReach {
			return false
		}
	}
	return true
}

// boost makes the boosted copy of a site's instruction in a slot, or
// returns nil when the instruction must be stepped. The world is stopped.
func (tg *target) boost(w *proc.World, s *liveSite) *xol.X86Copy {
	if !canBoost {
		return nil
	}
	var inst decode.X86Inst
	if (decode.X86Decoder{Vendor: tg.t.vendor}).Decode(s.ps.code, s.addr, &inst) != nil || !xol.BoostableX86(&inst) {
		return nil
	}
	reach := []uint64{s.addr, s.addr + uint64(inst.Len)}
	if inst.RIPRel {
		reach = append(reach, inst.Target)
	}
	a, err := tg.area(w, reach)
	if err != nil {
		return nil
	}
	slot := a.next
	c, err := xol.RelocateX86(&inst, slot, nil)
	if err != nil || !c.Boost {
		return nil
	}
	if err := tg.writeSlot(w, slot, c.Code); err != nil {
		return nil
	}
	a.next += xol.X86MaxCopy
	return c
}

// area returns a slot area with room for a copy that every address of
// reach can reach, mapping a new one near them when none has.
func (tg *target) area(w *proc.World, reach []uint64) (*slotArea, error) {
	for _, a := range tg.areas {
		if a.next+xol.X86MaxCopy <= a.end && a.reaches(reach) {
			return a, nil
		}
	}
	maps, err := w.Maps()
	if err != nil {
		return nil, err
	}
	var tm []trampoline.Mapping
	for _, m := range maps {
		tm = append(tm, trampoline.Mapping{Start: m.Start, End: m.End, Path: m.Path})
	}
	at, err := trampoline.Place(tm, reach, areaSize, nil)
	if err != nil {
		return nil, err
	}
	// A signal that stops the borrowed thread before its system call (the
	// SIGCONT of a process just spawned, say) makes the call fail once;
	// proc queues the signal again and the next attempt goes through.
	var got uint64
	for try := 0; ; try++ {
		got, err = w.Mmap(at, areaSize, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, -1, 0)
		if err == nil {
			break
		}
		var se *proc.SyscallError
		if try == 2 || errors.As(err, &se) {
			return nil, err
		}
	}
	if got != at {
		_ = w.Munmap(got, areaSize)
		return nil, fmt.Errorf("slot area mapped at %#x, not at %#x", got, at)
	}
	a := &slotArea{start: at, end: at + areaSize, next: at}
	tg.areas = append(tg.areas, a)
	return a, nil
}
