//go:build linux && amd64

package guardian

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/proc"
)

// TestRestoreBorrowedThread leaves cat as a tracer that died in the middle
// of a remote system call leaves a process: its thread holding the call's
// registers (here an instruction pointer of 1), stopped. restore, told the
// registers from before the call, gives them back: cat answers the next
// line. The control, restore without them, leaves cat to die (of SIGSEGV)
// before it answers: what the kill campaigns saw at the detach kill point.
func TestRestoreBorrowedThread(t *testing.T) {
	testenv.NeedPtrace(t)
	testenv.MustHaveTool(t, "cat")
	for _, give := range []bool{true, false} {
		cmd := exec.Command("cat")
		inW, out := fixture.StartPiped(t, cmd)
		pid := cmd.Process.Pid
		if _, err := inW.WriteString("a\n"); err != nil {
			t.Fatal(err)
		}
		if l, err := fixture.ReadLine(out, 5*time.Second); err != nil || strings.TrimSpace(l) != "a" {
			t.Fatalf("cat said %q, %v", l, err)
		}
		saved, err := borrowAndDie(pid)
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatal(err)
		}
		var regs *proc.Regs
		if give {
			regs = saved
		}
		rep, err := restore(pid, nil, inFlight{borrowed: pid, saved: regs}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = inW.WriteString("b\n")
		l, rerr := fixture.ReadLine(out, 5*time.Second)
		inW.Close()
		// The guardian's tracer may have collected cat's end: its exit
		// status is then unknown here, and its answer is the oracle.
		werr := cmd.Wait()
		switch {
		case give && (rerr != nil || strings.TrimSpace(l) != "b" || rep.Returned != 1):
			t.Errorf("registers given back: cat said %q (%v), ended with %v; report %+v", l, rerr, werr, rep)
		case !give && rerr == nil:
			t.Errorf("control: cat said %q and ended with %v: the test does not see the damage", l, werr)
		}
		t.Logf("registers given back %v: %q (%v), ended with %v, report %+v", give, strings.TrimSpace(l), rerr, werr, rep)
	}
}

// borrowAndDie does to process pid (one thread) what a tracer that dies in
// the middle of a remote system call does: it seizes it, replaces its
// registers with others (an instruction pointer of 1), and lets it go
// stopped (a SIGSTOP before PTRACE_DETACH, as the stop latch would leave
// it).
// It returns the registers from before.
func borrowAndDie(pid int) (*proc.Regs, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(pid); err != nil {
		return nil, err
	}
	if err := unix.PtraceInterrupt(pid); err != nil {
		return nil, err
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return nil, err
	}
	var saved proc.Regs
	if err := unix.PtraceGetRegs(pid, &saved.PtraceRegs); err != nil {
		return nil, err
	}
	bad := saved
	bad.Rip = 1
	if err := unix.PtraceSetRegs(pid, &bad.PtraceRegs); err != nil {
		return nil, err
	}
	// Stopped once detached: the SIGSTOP is taken before the thread
	// returns to user space.
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		return nil, err
	}
	if err := unix.PtraceDetach(pid); err != nil {
		return nil, err
	}
	return &saved, nil
}
