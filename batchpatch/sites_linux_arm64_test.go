package batchpatch

// The patch fixture's sites as arm64 patches (testdata/patchfixture/sites.S;
// instruction words little-endian).

import (
	"errors"
	"testing"
	"time"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/proc"
)

// Instruction words of the patches.
const (
	insnMovW8W0  = 0x2a0003e8 // mov w8, w0
	insnAddW0W8  = 0x11000100 // add w0, w8, #imm12 (imm12 at bit 10)
	insnAddW0W0  = 0x11000000 // add w0, w0, #imm12
	insnNop      = 0xd503201f // nop
	insnMovW1    = 0x52800001 // mov w1, #imm16 (imm16 at bit 5)
	insnMovX8_73 = 0xd2800928 // mov x8, #73 (ppoll)
	insnSvc0     = 0xd4000001 // svc #0
	insnMovX16   = 0xaa1003f0 // mov x16, x16: a nop that is not nop
)

// aPatch replaces the two-instruction range of A function i (mov w8, w0;
// add w0, w8, #K) by add w0, w0, #M and a nop: the function then returns
// x+M.
func aPatch(f *fixture, i int) Patch {
	k, m := uint32(i&63), uint32(64+i&63)
	return Patch{
		Addr: f.A + 16*uint64(i),
		Old:  decode.ARM64Code(insnMovW8W0, insnAddW0W8|k<<10),
		New:  decode.ARM64Code(insnAddW0W0|m<<10, insnNop),
	}
}

// bPatch replaces the single instruction mov w1, #K of B function i by
// mov w1, #M.
func bPatch(f *fixture, i int) Patch {
	k, m := uint32(i&63), uint32(64+i&63)
	return Patch{Addr: f.B + 16*uint64(i), Old: decode.ARM64Code(insnMovW1 | k<<5), New: decode.ARM64Code(insnMovW1 | m<<5)}
}

// parkPatch covers the park thread's system call: mov x8, #73 before
// fx_park_site, the svc at it and the nop after, that nop replaced by
// another. The kernel rewinds the parked thread's PC to the svc, strictly
// inside.
func parkPatch(f *fixture) Patch {
	return Patch{
		Addr: f.Park - 4,
		Old:  decode.ARM64Code(insnMovX8_73, insnSvc0, insnNop),
		New:  decode.ARM64Code(insnMovX8_73, insnSvc0, insnMovX16),
	}
}

// parkPC is the PC of the parked thread: the svc, where the kernel moved it
// back to restart the call.
func parkPC(f *fixture) uint64 { return f.Park }

// parkGate is a range the parked thread's PC is strictly inside.
func parkGate(f *fixture) Range { return Range{f.Park - 4, f.Park + 4} }

// setSyscall sets the registers for system call nr with first argument a0.
func setSyscall(r *proc.Regs, nr, a0 uint64) { r.Regs[8], r.Regs[0] = nr, a0 }

// TestLiveParkedThreadPC parks a thread in ppoll: the kernel has moved its
// PC back to the svc (the restart PC, so RestartPC is 0) and puts it in a
// system call. A patch covering the svc must not be written while it is
// there.
func TestLiveParkedThreadPC(t *testing.T) {
	f := startFixture(t, nil, "park")
	tid := parked(t, f)
	info := f.threadInfo(t, tid)
	if info.PC != f.Park || info.RestartPC != 0 || !info.InSyscall {
		t.Fatalf("park thread %+v: want PC %#x, no restart PC, in a system call", info, f.Park)
	}
	park, free := parkPatch(f), aPatch(f, 5)
	batch := []Patch{free, park}
	Sort(batch)
	slow := &Options{StepTimeout: 100 * time.Millisecond}
	res, err := Apply(f.p, batch, slow)
	if err != nil {
		t.Fatal(err)
	}
	expectRefused(t, res, tid, map[uint64]uint64{park.Addr: f.Park})
	expectText(t, f.p, []Patch{park}, true)
	expectText(t, f.p, []Patch{free}, false)
	unpark(t, f, tid)
	if res, err = Apply(f.p, []Patch{park}, slow); err != nil || len(res.Refused) != 0 {
		t.Fatalf("after the thread left: %v, refused %v", err, res.Refused)
	}
	expectText(t, f.p, []Patch{park}, false)
	finish(t, f)
}

// TestStopFreeRefused checks that StopFree, whose protocol writes the
// x86-64 int3, refuses on arm64 and leaves the text alone.
func TestStopFreeRefused(t *testing.T) {
	f := startFixture(t, nil)
	ps := patches(f, 16, bPatch)
	if _, err := StopFree(f.p, ps, nil); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("StopFree: %v, want ErrNotSupported", err)
	}
	expectText(t, f.p, ps, true)
	finish(t, f)
}
