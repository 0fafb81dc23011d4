//go:build linux && amd64

package guardian

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/proc"
)

// stepAndDieEnv makes the test binary a tracer that dies in the middle of
// a single step: "PID" (see stepAndDie).
const stepAndDieEnv = "PROBEOPT_TEST_STEP_AND_DIE"

func TestMain(m *testing.M) {
	if arg := os.Getenv(stepAndDieEnv); arg != "" {
		os.Exit(stepAndDie(arg))
	}
	os.Exit(m.Run())
}

// stepAndDie does to the one-threaded process PID what a tracer that dies
// in the middle of a single step does: it seizes it, arms the stop latch
// as proc does (a SIGSTOP whose group stop it resumes), interrupts it
// (it is blocked reading its input), steps it, says "stepping" and the
// registers it had before the step (hexadecimal), and exits
// once the step's stop is there (its read returned), seen with WNOWAIT
// and not collected: the kernel delivers the step's SIGTRAP as it
// detaches the thread.
func stepAndDie(arg string) int {
	runtime.LockOSThread()
	pid, _ := strconv.Atoi(arg)
	fail := func(what string, err error) int {
		fmt.Printf("%s: %v\n", what, err)
		return 1
	}
	wait := func() (unix.WaitStatus, error) {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		return ws, err
	}
	if err := unix.PtraceSeize(pid); err != nil {
		return fail("seize", err)
	}
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		return fail("stop", err)
	}
	if _, err := wait(); err != nil { // the SIGSTOP's delivery stop
		return fail("wait", err)
	}
	if err := unix.PtraceCont(pid, int(unix.SIGSTOP)); err != nil {
		return fail("deliver the stop", err)
	}
	if _, err := wait(); err != nil { // the group stop: the latch holds
		return fail("wait", err)
	}
	if err := unix.PtraceCont(pid, 0); err != nil {
		return fail("resume", err)
	}
	if err := unix.PtraceInterrupt(pid); err != nil {
		return fail("interrupt", err)
	}
	if _, err := wait(); err != nil {
		return fail("wait", err)
	}
	var regs proc.Regs
	if err := unix.PtraceGetRegs(pid, &regs.PtraceRegs); err != nil {
		return fail("registers", err)
	}
	if err := unix.PtraceSingleStep(pid); err != nil {
		return fail("step", err)
	}
	fmt.Printf("stepping %x\n", unsafe.Slice((*byte)(unsafe.Pointer(&regs)), unsafe.Sizeof(regs)))
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOWAIT|unix.WALL, nil); err != nil {
		return fail("waitid", err)
	}
	return 0
}

// TestRestoreStepTrap leaves bash as a tracer that dies with a single
// step's stop uncollected leaves a process, bash having a SIGTRAP handler
// of its own (trap 'echo trapped' TRAP) as a process with the trap guard
// has: the kernel delivers the step's SIGTRAP as it detaches the thread,
// and the stop latch stops the thread at the handler's first instruction.
// restore, told the thread was being stepped, unwinds the handler's frame
// before the handler runs: bash reads on and never says "trapped". The
// control, restore without it, leaves the SIGTRAP to bash's handler: it
// says "trapped". Told besides that the step was a remote system call's
// that had borrowed the thread, with the registers from before it (here
// the interrupted read's, which the kernel would restart), restore puts
// them in the frame: bash makes its read again (the byte the step's read
// took is gone), and reads on. (A tracer that dies while the stepped thread is blocked
// in a system call leaves no SIGTRAP: measured on Linux 6.18 with this
// test's tracer exiting before the read returned, nothing pending, and
// the guardian's detach ends the step.)
func TestRestoreStepTrap(t *testing.T) {
	testenv.NeedPtrace(t)
	testenv.MustHaveTool(t, "bash")
	for _, c := range []struct {
		name           string
		stepped, saved bool
		want           string // what bash says after the step
		rep            Report
	}{
		{"stepped", true, false, "got b\ngot c\n", Report{StepTraps: 1}},
		// bash reads a byte at a time: the step's read took the "b",
		// the read made again the newline.
		{"borrowed", true, true, "got\ngot c\n", Report{StepTraps: 1, Returned: 1}},
		{"control", false, false, "trapped", Report{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, rep := stepTrapRun(t, c.stepped, c.saved)
			if c.stepped && (out != c.want || rep != c.rep) || !c.stepped && !strings.Contains(out, c.want) {
				t.Errorf("bash said %q, want %q; report %+v, want %+v", out, c.want, rep, c.rep)
			}
			t.Logf("bash said %q; report %+v", out, rep)
		})
	}
}

// stepTrapRun makes one run: bash echoing lines, a tracer that steps it
// and dies, the restore (told whether the thread was being stepped, and
// the registers from before the step as a borrowed thread's), then one
// more line; it returns what bash printed and the report.
func stepTrapRun(t *testing.T, stepped, saved bool) (string, Report) {
	cmd := exec.Command("bash", "-c", `trap 'echo trapped' TRAP; while read -r l; do echo "got $l"; done`)
	inW, out := fixture.StartPiped(t, cmd)
	defer func() {
		inW.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	if _, err := inW.WriteString("a\n"); err != nil {
		t.Fatal(err)
	}
	if l, err := fixture.ReadLine(out, 5*time.Second); err != nil || strings.TrimSpace(l) != "got a" {
		t.Fatalf("bash said %q, %v", l, err)
	}
	tracer := exec.Command(os.Args[0])
	tracer.Env = append(os.Environ(), fmt.Sprintf("%s=%d", stepAndDieEnv, pid))
	tracer.Stderr = os.Stderr
	tout, err := tracer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	l, err := bufio.NewReader(tout).ReadString('\n')
	regsHex, ok := strings.CutPrefix(strings.TrimSpace(l), "stepping ")
	before, herr := hex.DecodeString(regsHex)
	if err != nil || !ok || herr != nil || len(before) != int(unsafe.Sizeof(proc.Regs{})) {
		_ = tracer.Process.Kill()
		_ = tracer.Wait()
		t.Fatalf("tracer said %q, %v", l, err)
	}
	// The read returns: the step ends, in a stop the tracer sees and
	// leaves uncollected.
	if _, err := inW.WriteString("b\n"); err != nil {
		t.Fatal(err)
	}
	if err := tracer.Wait(); err != nil {
		t.Fatalf("tracer: %v", err)
	}
	var f inFlight
	if stepped {
		f.stepped = pid
	}
	if saved {
		f.borrowed, f.saved = pid, new(proc.Regs)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(f.saved)), len(before)), before)
	}
	rep, err := restore(pid, nil, f, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = inW.WriteString("c\n")
	inW.Close()
	var b strings.Builder
	for {
		l, err := fixture.ReadLine(out, 5*time.Second)
		if err != nil {
			break
		}
		b.WriteString(strings.TrimSpace(l) + "\n")
	}
	return b.String(), rep
}
