//go:build linux && (amd64 || arm64)

package proc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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

// TestWatchSyscalls watches the system calls of a new image from its exec
// (Release sets WatchSyscalls): the handler sees, in order, the calls
// strace -n reports for the same command, with the same results where
// they are not addresses or ids; and once a handler clears WatchSyscalls, it
// sees no more.
func TestWatchSyscalls(t *testing.T) {
	testenv.NeedPtrace(t)
	strace := testenv.MustHaveTool(t, "strace")
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.WriteFile(data, []byte("some text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := []string{cat, data, filepath.Join(dir, "missing")}
	log := filepath.Join(dir, "strace")
	_ = exec.Command(strace, append([]string{"-n", "-qq", "-o", log}, argv...)...).Run() // cat fails on the missing file
	out, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var want []SyscallExit
	// "[ 257] openat(AT_FDCWD, ...) = 3", "[  12] brk(NULL)      = 0x5581...",
	// "[  21] access(...) = -1 ENOENT (...)"; exit_group ends "= ?".
	re := regexp.MustCompile(`^\[\s*(\d+)\] .*\)\s+= (-?\w+)(?: (E[A-Z0-9]+))?`)
	for _, line := range strings.Split(string(out), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		nr, _ := strconv.ParseUint(m[1], 10, 64)
		ret, err := strconv.ParseInt(m[2], 0, 64)
		if err != nil {
			t.Fatalf("strace line %q", line)
		}
		if m[3] != "" {
			ret = -int64(errnoNamed(t, m[3]))
		}
		want = append(want, SyscallExit{Nr: nr, Ret: ret})
	}
	if len(want) < 10 || want[0].Nr != unix.SYS_EXECVE {
		t.Fatalf("strace gave %d calls, starting %v", len(want), want[:min(1, len(want))])
	}
	want = want[1:] // the exec's own end, which is watched from within

	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, stopAfter := range []int{0, 5} {
		// The shell execs cat: its image is held at the exec.
		p, err := Spawn([]string{sh, "-c", "exec " + strings.Join(argv, " ")}, &SpawnOptions{Options: Options{HoldExec: true}})
		if err != nil {
			t.Fatal(err)
		}
		var got []SyscallExit
		if _, err := p.SetTrapHandler(func(ctx *TrapContext) TrapAction {
			if ctx.Syscall == nil {
				return TrapPass
			}
			got = append(got, *ctx.Syscall)
			if len(got) == stopAfter {
				ctx.WatchSyscalls = false
			}
			return TrapResume
		}); err != nil {
			t.Fatal(err)
		}
		if err := p.Resume(); err != nil {
			t.Fatal(err)
		}
		for execd := false; !execd; {
			select {
			case ev := <-p.Events():
				execd = ev.Kind == EventExec
			case <-time.After(10 * time.Second):
				p.Kill()
				t.Fatal("no exec event")
			}
		}
		if err := p.Release(func(ctx *TrapContext) bool { ctx.WatchSyscalls = true; return true }); err != nil {
			t.Fatal(err)
		}
		if st, err := p.Wait(); err != nil || st.Code != 1 {
			t.Fatalf("cat: %+v %v (it fails on the missing file)", st, err)
		}
		if stopAfter > 0 {
			if len(got) != stopAfter {
				t.Errorf("%d calls seen, the watch ended after %d", len(got), stopAfter)
			}
			continue
		}
		if len(got) != len(want) {
			t.Errorf("%d calls watched, strace %d", len(got), len(want))
		}
		for i := range min(len(got), len(want)) {
			g, w := got[i], want[i]
			// Results compared but addresses and ids (set_tid_address's).
			small := w.Ret > -4096 && w.Ret < 1<<16 && w.Nr != unix.SYS_SET_TID_ADDRESS
			if g.Nr != w.Nr || small && g.Ret != w.Ret {
				t.Logf("watched %v\nstrace %v", got, want)
				t.Fatalf("call %d: nr %d = %d, strace nr %d = %d", i, g.Nr, g.Ret, w.Nr, w.Ret)
			}
		}
		t.Logf("%d system calls watched, as strace reports them", len(got))
	}
}

// errnoNamed returns the number of the errno strace names.
func errnoNamed(t *testing.T, name string) unix.Errno {
	t.Helper()
	for e := unix.Errno(1); e < 4096; e++ {
		if unix.ErrnoName(e) == name {
			return e
		}
	}
	t.Fatalf("errno %s unknown", name)
	return 0
}
