//go:build linux && (amd64 || arm64)

package proc

import (
	"errors"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	fixtures "github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// collect gathers events until the process exits or the deadline passes.
func collect(p *Process, d time.Duration) []Event {
	var out []Event
	timeout := time.After(d)
	for {
		select {
		case ev := <-p.Events():
			out = append(out, ev)
		case <-p.Exited():
			for {
				select {
				case ev := <-p.Events():
					out = append(out, ev)
				default:
					return out
				}
			}
		case <-timeout:
			return out
		}
	}
}

// TestExecForkExitEvents runs a shell that forks a child, waits for it and
// execs another program: the events say so, and the exit status is kept.
func TestExecForkExitEvents(t *testing.T) {
	testenv.NeedPtrace(t)
	sh := "/bin/sh"
	if _, err := exec.LookPath(sh); err != nil {
		t.Skip("no /bin/sh")
	}
	p, err := Spawn([]string{sh, "-c", "/bin/true; exec /bin/sh -c 'exit 7'"}, &SpawnOptions{Options: Options{FollowForks: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	var forks, execs, exits int
	var status ExitStatus
	deadline := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-p.Events():
			if ev.Child != nil {
				// A followed child (after fork, or after the exec of a
				// vfork child) is stopped; let it run its program.
				if err := ev.Child.Resume(); err != nil {
					t.Errorf("resume child: %v", err)
				}
				go ev.Child.Wait()
			}
			switch ev.Kind {
			case EventFork, EventVfork:
				forks++
			case EventExec:
				if ev.Pid == p.Pid() {
					execs++
				}
			case EventExit:
				exits++
				status = ev.Status
				done = true
			}
		case <-deadline:
			t.Fatal("no exit event")
		}
	}
	if forks == 0 || execs == 0 || exits != 1 {
		t.Errorf("forks %d, execs %d, exits %d", forks, execs, exits)
	}
	if status.Code != 7 || status.Signal != 0 {
		t.Errorf("exit status %+v, want code 7", status)
	}
	st, err := p.Wait()
	if err != nil || st != status {
		t.Errorf("Wait = %+v, %v", st, err)
	}
	if p.Execs() != 0 {
		// The process is gone: queries fail or return zero, never panic.
	}
	if err := p.Stop(); !errors.Is(err, ErrExited) {
		t.Errorf("Stop after exit: %v, want ErrExited", err)
	}
	if err := p.ReadMemory(0x1000, make([]byte, 1)); !errors.Is(err, ErrExited) {
		t.Errorf("ReadMemory after exit: %v, want ErrExited", err)
	}
}

// TestAttachDetach attaches to a running 8-thread process that was not
// started traced, stops it, detaches, and checks it runs on untraced.
func TestAttachDetach(t *testing.T) {
	testenv.NeedPtrace(t)
	path := buildFixture(t)
	cmd := exec.Command(path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// Attach once all 9 threads exist (a slow machine, such as the arm64
	// guest under emulation, takes a while to start them).
	if !fixtures.Eventually(60*time.Second, func() bool { tids, _ := listTasks(cmd.Process.Pid); return len(tids) == 9 }) {
		t.Fatal("the fixture did not start its 8 workers")
	}
	p, err := Attach(cmd.Process.Pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	tids, err := p.Threads()
	if err != nil || len(tids) != 9 {
		t.Fatalf("threads %v, %v; want 9", tids, err)
	}
	if _, err := p.Regs(tids[3]); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := p.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); !errors.Is(err, ErrDetached) {
		t.Errorf("Wait after Detach: %v, want ErrDetached", err)
	}
	if err := p.Stop(); !errors.Is(err, ErrDetached) {
		t.Errorf("Stop after Detach: %v, want ErrDetached", err)
	}
	// Untraced again: another tracer can attach.
	time.Sleep(10 * time.Millisecond)
	st := readStatus(t, cmd.Process.Pid)
	if st != 0 {
		t.Errorf("TracerPid %d after detach", st)
	}
	// SIGTERM ends it normally.
	if err := cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("fixture after detach: %v", err)
	}
}

// readStatus returns TracerPid of a process.
func readStatus(t *testing.T, pid int) int {
	t.Helper()
	tgid, err := readTracer(pid)
	if err != nil {
		t.Fatal(err)
	}
	return tgid
}

// TestVanished checks that a pid that does not exist and a process killed
// under the tracer give error values.
func TestVanished(t *testing.T) {
	testenv.NeedPtrace(t)
	if _, err := Attach(1<<22+12345, nil); !errors.Is(err, ErrExited) {
		t.Errorf("Attach to a missing pid: %v, want ErrExited", err)
	}
	f := startFixture(t, nil)
	if err := unix.Kill(f.p.Pid(), unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, err := f.p.Wait()
	if err != nil || st.Signal != int(unix.SIGKILL) {
		t.Errorf("Wait = %+v, %v; want killed by SIGKILL", st, err)
	}
	if _, err := f.p.Stopped(func(w *World) error { return nil }); !errors.Is(err, ErrExited) {
		t.Errorf("Stopped after death: %v", err)
	}
	if _, err := f.p.Mmap(0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1, 0); !errors.Is(err, ErrExited) {
		t.Errorf("Mmap after death: %v", err)
	}
}

// TestGroupStopAndSignals sends SIGSTOP and SIGCONT to a traced process:
// job control is respected (a stopped process stays stopped across our
// stop and resume) and the workers go on after SIGCONT.
func TestGroupStopAndSignals(t *testing.T) {
	f := startFixture(t, nil)
	if err := unix.Kill(f.p.Pid(), unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := f.p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Resume(); err != nil {
		t.Fatal(err)
	}
	a := f.read64(t, fixtures.SharedCalls)
	time.Sleep(100 * time.Millisecond)
	if b := f.read64(t, fixtures.SharedCalls); b != a {
		t.Errorf("workers ran while the process was job-control stopped (%d -> %d)", a, b)
	}
	if err := unix.Kill(f.p.Pid(), unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !fixtures.Eventually(60*time.Second, func() bool { return f.read64(t, fixtures.SharedCalls) > a }) {
		t.Errorf("workers did not resume after SIGCONT")
	}
}

// TestUnfollowedForks runs the fixture's forking thread without
// FollowForks: the children are detached at once and run to their exit,
// so the parent keeps forking, and the world still stops and resumes.
func TestUnfollowedForks(t *testing.T) {
	f := startFixture(t, nil, "fork")
	if !fixtures.Eventually(60*time.Second, func() bool { return f.read64(t, fixtures.SharedForks) >= 20 }) {
		t.Fatalf("only %d forks", f.read64(t, fixtures.SharedForks))
	}
	for i := 0; i < 20; i++ {
		if _, err := f.p.Stopped(func(w *World) error { _, err := w.Threads(); return err }); err != nil {
			t.Fatal(err)
		}
	}
	n := f.read64(t, fixtures.SharedForks)
	if !fixtures.Eventually(60*time.Second, func() bool { return f.read64(t, fixtures.SharedForks) > n+5 }) {
		t.Fatalf("forking stopped at %d", n)
	}
	tids, _ := f.p.Threads()
	if len(tids) != 10 {
		t.Errorf("threads %v, want 10 (main, 8 workers, forker)", tids)
	}
}

// TestHoldExec checks that with HoldExec a process that execs stays
// stopped after its EventExec, runs nothing of the new image, and goes on
// when released.
func TestHoldExec(t *testing.T) {
	testenv.NeedPtrace(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Spawn([]string{sh, "-c", "exec sh -c 'exit 7'"}, &SpawnOptions{Options: Options{HoldExec: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for execd := false; !execd; {
		select {
		case ev := <-p.Events():
			execd = ev.Kind == EventExec
		case <-p.Exited():
			t.Fatal("exited before its exec was seen")
		case <-deadline:
			t.Fatal("no exec event")
		}
	}
	select {
	case <-p.Exited():
		t.Fatal("the new image ran before Release")
	case <-time.After(100 * time.Millisecond):
	}
	if err := p.Release(nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("still running after Release")
	}
	if st, _ := p.Wait(); st.Code != 7 {
		t.Errorf("exit status %+v, want 7", st)
	}
}
