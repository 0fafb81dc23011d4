package batchpatch

// The patch fixture's sites as x86-64 patches (testdata/patchfixture/sites.S).

import (
	"testing"
	"time"

	"github.com/probeopt/probeopt/proc"
)

// aPatch replaces the two-instruction range of A function i (mov, add K)
// by lea M(%rdi),%eax and a 2-byte nop: the function then returns x+M.
func aPatch(f *fixture, i int) Patch {
	k, m := byte(i&63), byte(64+i&63)
	return Patch{
		Addr: f.A + 16*uint64(i),
		Old:  []byte{0x89, 0xf8, 0x83, 0xc0, k},
		New:  []byte{0x8d, 0x47, m, 0x66, 0x90},
	}
}

// bPatch replaces the single instruction mov $K,%eax of B function i by
// mov $M,%eax.
func bPatch(f *fixture, i int) Patch {
	k, m := byte(i&63), byte(64+i&63)
	return Patch{Addr: f.B + 16*uint64(i), Old: []byte{0xb8, k, 0, 0, 0}, New: []byte{0xb8, m, 0, 0, 0}}
}

// parkPatch covers the park thread's system call: syscall (0f 05) at
// fx_park_site and three nops, the nops replaced by one 3-byte nop. The
// parked thread's PC, after the syscall, is strictly inside.
func parkPatch(f *fixture) Patch {
	return Patch{Addr: f.Park, Old: []byte{0x0f, 0x05, 0x90, 0x90, 0x90}, New: []byte{0x0f, 0x05, 0x0f, 0x1f, 0x00}}
}

// parkPC is the PC of the parked thread: after the syscall instruction.
func parkPC(f *fixture) uint64 { return f.Park + 2 }

// parkGate is a range the parked thread's PC is strictly inside.
func parkGate(f *fixture) Range { return Range{f.Park, f.Park + 5} }

// setSyscall sets the registers for system call nr with first argument a0.
func setSyscall(r *proc.Regs, nr, a0 uint64) { r.Rax, r.Rdi = nr, a0 }

// TestLiveParkedThreadPCAndRestartPC parks a thread in pause(): its PC is
// f.Park+2, after the syscall instruction, and the kernel restarts the
// call at f.Park. One patch covers the PC and another the restart PC;
// neither may be written while the thread is there.
func TestLiveParkedThreadPCAndRestartPC(t *testing.T) {
	f := startFixture(t, nil, "park")
	tid := parked(t, f)
	info := f.threadInfo(t, tid)
	if info.PC != f.Park+2 || info.RestartPC != f.Park {
		t.Fatalf("park thread %+v: want PC %#x and restart PC %#x", info, f.Park+2, f.Park)
	}
	// fx_park_call is b8 22 00 00 00 (mov $34,%eax), 0f 05 (syscall) at
	// f.Park, then nops. restart covers the mov's immediate and the first
	// byte of the syscall, so f.Park is strictly inside it (its new bytes
	// make the call getpid); pc covers the second byte of the syscall and
	// the first nop, so f.Park+2 is strictly inside it (66 90 is a nop
	// too).
	restart := Patch{Addr: f.Park - 4, Old: []byte{0x22, 0x00, 0x00, 0x00, 0x0f}, New: []byte{0x27, 0x00, 0x00, 0x00, 0x0f}}
	pc := Patch{Addr: f.Park + 1, Old: []byte{0x05, 0x90}, New: []byte{0x05, 0x66}}
	free := aPatch(f, 5)
	batch := []Patch{restart, pc, free}
	Sort(batch)
	slow := &Options{StepTimeout: 100 * time.Millisecond}
	res, err := Apply(f.p, batch, slow)
	if err != nil {
		t.Fatal(err)
	}
	expectRefused(t, res, tid, map[uint64]uint64{restart.Addr: f.Park, pc.Addr: f.Park + 2})
	expectText(t, f.p, []Patch{restart, pc}, true)
	expectText(t, f.p, []Patch{free}, false)
	unpark(t, f, tid)
	res, err = Apply(f.p, []Patch{restart, pc}, slow)
	if err != nil || len(res.Refused) != 0 {
		t.Fatalf("after the thread left: %v, refused %v", err, res.Refused)
	}
	expectText(t, f.p, []Patch{restart, pc}, false)
	finish(t, f)
}
