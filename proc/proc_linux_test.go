//go:build linux && (amd64 || arm64)

package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	fixtures "github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// TestSpawnStopResume spawns the 8-thread fixture, stops and resumes it
// many times and checks every thread is tracked and the workers run on.
func TestSpawnStopResume(t *testing.T) {
	f := startFixture(t, nil)
	p := f.p
	if !fixtures.Eventually(60*time.Second, func() bool { tids, _ := p.Threads(); return len(tids) == 9 }) {
		tids, _ := p.Threads()
		t.Fatalf("threads = %v, want 9 (main + 8 workers)", tids)
	}
	for i := 0; i < 50; i++ {
		st, err := p.Stopped(func(w *World) error {
			ths, err := w.Threads()
			if err != nil {
				return err
			}
			if len(ths) != 9 {
				t.Errorf("stop %d: %d threads", i, len(ths))
			}
			for _, th := range ths {
				if th.PC == 0 {
					t.Errorf("thread %d: PC 0", th.Tid)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
		if st.Threads != 9 || st.Pause <= 0 || st.Total < st.Pause {
			t.Errorf("stats %+v", st)
		}
	}
	f.checkRuns(t, "stops")
}

// TestRegsAndMemory reads registers of a stopped thread and writes and
// reads back memory through /proc/PID/mem, including read-only text.
func TestRegsAndMemory(t *testing.T) {
	f := startFixture(t, nil)
	p := f.p
	if _, err := p.Regs(p.Pid()); !errors.Is(err, ErrRunning) {
		t.Errorf("Regs while running: %v, want ErrRunning", err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	r, err := p.Regs(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	if r.PC() == 0 || r.SP() == 0 {
		t.Errorf("regs PC %#x SP %#x", r.PC(), r.SP())
	}
	if err := p.SetRegs(p.Pid(), &r); err != nil {
		t.Fatal(err)
	}
	// Text is read-only in the mappings and still writable through mem.
	text := make([]byte, len(site5))
	if err := p.ReadMemory(f.A+16*5, text); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(text, site5) {
		t.Fatalf("site 5 = % x, want % x", text, site5)
	}
	if err := p.WriteMemory(f.A+16*5+uint64(site5Imm), site5[site5Imm:site5Imm+1]); err != nil {
		t.Fatal(err)
	}
	maps, err := p.Maps()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := FindMapping(maps, f.A)
	if !ok || !m.Exec || m.Write {
		t.Errorf("mapping of text = %+v, %v", m, ok)
	}
	if err := p.ReadMemory(0, make([]byte, 8)); err == nil {
		t.Errorf("read at 0 succeeded")
	} else {
		var me *MemoryError
		if !errors.As(err, &me) || me.Addr != 0 {
			t.Errorf("read at 0: %v", err)
		}
	}
	if _, err := p.Regs(12345678); !errors.Is(err, ErrNoThread) {
		t.Errorf("Regs of a missing thread: %v, want ErrNoThread", err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
}

// TestRemoteSyscalls maps, protects and unmaps memory and creates a
// memfd inside the tracee, and checks no mapping is writable and
// executable afterwards.
func TestRemoteSyscalls(t *testing.T) {
	f := startFixture(t, nil)
	p := f.p
	var addr uint64
	_, err := p.Stopped(func(w *World) error {
		var err error
		addr, err = w.Mmap(0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1, 0)
		if err != nil {
			return err
		}
		if err := w.WriteMemory(addr, retInsn); err != nil {
			return err
		}
		if err := w.Mprotect(addr, 8192, unix.PROT_READ|unix.PROT_EXEC); err != nil {
			return err
		}
		fd, err := w.MemfdCreate("probeopt-test", unix.MFD_CLOEXEC)
		if err != nil {
			return err
		}
		link, err := os.Readlink("/proc/" + itoa(p.Pid()) + "/fd/" + itoa(fd))
		if err != nil || !strings.Contains(link, "memfd:probeopt-test") {
			t.Errorf("memfd fd %d -> %q, %v", fd, link, err)
		}
		if _, err := w.Syscall(unix.SYS_CLOSE, uint64(fd)); err != nil {
			return err
		}
		_, err = w.Syscall(unix.SYS_CLOSE, uint64(fd))
		var se *SyscallError
		if !errors.As(err, &se) || !errors.Is(err, unix.EBADF) {
			t.Errorf("second close: %v, want EBADF", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	maps, err := p.Maps()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := FindMapping(maps, addr)
	if !ok || !m.Exec || m.Write || m.Start != addr {
		t.Errorf("new mapping = %+v %v", m, ok)
	}
	for _, m := range maps {
		if m.Write && m.Exec {
			t.Errorf("W+X mapping %+v", m)
		}
	}
	if err := p.Munmap(addr, 8192); err != nil {
		t.Fatal(err)
	}
	maps, _ = p.Maps()
	if _, ok := FindMapping(maps, addr); ok {
		t.Errorf("mapping still there after munmap")
	}
	// The workers computed correctly through all this.
	if bad := f.read64(t, fixtures.SharedBad); bad != 0 {
		t.Errorf("bad results: %d", bad)
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}

// TestStepWithPendingSignal steps a thread that has a signal pending:
// the kernel reports the signal before the instruction runs, and the step
// must still execute exactly one instruction, the signal kept for later.
func TestStepWithPendingSignal(t *testing.T) {
	f := startFixture(t, nil)
	p := f.p
	for round := 0; round < 20; round++ {
		_, err := p.Stopped(func(w *World) error {
			page, err := w.Mmap(0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1, 0)
			if err != nil {
				return err
			}
			defer w.Munmap(page, 4096)
			// Three nops and an endless loop.
			if err := w.WriteMemory(page, nopsThenLoop); err != nil {
				return err
			}
			if err := w.Mprotect(page, 4096, unix.PROT_READ|unix.PROT_EXEC); err != nil {
				return err
			}
			ths, err := w.Threads()
			if err != nil {
				return err
			}
			tid := ths[round%len(ths)].Tid
			saved, err := w.Regs(tid)
			if err != nil {
				return err
			}
			r := saved
			r.SetPC(page)
			if err := w.SetRegs(tid, &r); err != nil {
				return err
			}
			// SIGURG is ignored by default, and a traced thread still
			// reports it.
			if err := unix.Tgkill(p.Pid(), tid, unix.SIGURG); err != nil {
				return err
			}
			for i := 1; i <= 2; i++ {
				if err := w.Step(tid, 5*time.Second); err != nil {
					return err
				}
				got, err := w.Regs(tid)
				if err != nil {
					return err
				}
				if want := page + uint64(i*nopLen); got.PC() != want {
					t.Errorf("round %d, step %d: PC %#x, want %#x", round, i, got.PC(), want)
				}
			}
			return w.SetRegs(tid, &saved)
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	f.checkRuns(t, "steps")
}

// TestRefreshKeepsPause checks that a World.Refresh in the middle of a stop
// does not restart the clock: the pause runs from the first time every
// thread was stopped to the resume, so work done before the refresh (such
// as stepping one thread while the others wait) is part of it.
func TestRefreshKeepsPause(t *testing.T) {
	f := startFixture(t, nil)
	const busy = 30 * time.Millisecond
	st, err := f.p.Stopped(func(w *World) error {
		time.Sleep(busy)
		if err := w.Refresh(); err != nil {
			return err
		}
		_, err := w.Threads()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Pause < busy || st.Total != st.Stop+st.Pause {
		t.Errorf("stats %+v: the pause must include the %v spent before the refresh", st, busy)
	}
}

// threadNice reads the nice value of thread tid of this process as the
// kernel reports it (/proc/self/task/TID/stat, field 19).
func threadNice(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which ends with the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	n, err := strconv.Atoi(f[16]) // field 19 is the 17th after the name
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStopNice checks that with Options.StopNice the tracer thread runs
// at that nice value inside Stopped, as the kernel reports it, that it
// gets its value back after, that the stopped process's thread (raised
// until it stopped) has its own value back inside the stop and after
// it, and that a process spawned later does not inherit it.
func TestStopNice(t *testing.T) {
	testenv.NeedPtrace(t)
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "setting a negative nice value needs root")
	}
	sh := "/bin/sh"
	p, err := Spawn([]string{sh, "-c", "sleep 30"}, &SpawnOptions{Options: Options{StopNice: -20}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	var tid, before, inside int
	for i := 0; i < 2; i++ {
		var target string
		if _, err := p.Stopped(func(w *World) error {
			tid = unix.Gettid()
			inside = threadNice(t, tid)
			target = procNice(t, p.Pid())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if after := procNice(t, p.Pid()); target != "0" || after != "0" {
			t.Errorf("stop %d: the traced thread's nice is %s inside the stop, %s after, want 0", i, target, after)
		}
		if inside != -20 {
			t.Errorf("stop %d: nice %d inside Stopped, want -20", i, inside)
		}
		if after := threadNice(t, tid); i == 0 {
			before = after
		} else if after != before {
			t.Errorf("nice %d after the second stop, %d after the first", after, before)
		}
	}
	if before == -20 {
		t.Errorf("nice still -20 after Stopped")
	}
	q, err := Spawn([]string{sh, "-c", "exit 0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Kill()
	if n := procNice(t, q.Pid()); n == "-20" {
		t.Errorf("a process spawned after the stops has nice %s", n)
	}
}

// procNice reads the nice value of process pid (/proc/PID/stat, field
// 19).
func procNice(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))[16]
}

// TestStopFIFO checks that with Options.StopFIFO the tracer thread runs
// under SCHED_FIFO inside Stopped, as the kernel reports it, and has its
// own policy and nice value back after, with and without StopNice.
func TestStopFIFO(t *testing.T) {
	testenv.NeedPtrace(t)
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "a real-time policy needs root")
	}
	for _, nice := range []int{0, -20} {
		p, err := Spawn([]string{"/bin/sh", "-c", "sleep 30"}, &SpawnOptions{Options: Options{StopFIFO: true, StopNice: nice}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Kill()
		if err := p.Resume(); err != nil {
			t.Fatal(err)
		}
		var tid int
		var inside *unix.SchedAttr
		if _, err := p.Stopped(func(w *World) error {
			tid = unix.Gettid()
			inside, err = unix.SchedGetAttr(tid, 0)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if inside.Policy != unix.SCHED_FIFO || inside.Priority != 1 {
			t.Errorf("nice %d: policy %d priority %d inside Stopped, want SCHED_FIFO 1", nice, inside.Policy, inside.Priority)
		}
		after, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			t.Fatal(err)
		}
		if after.Policy != unix.SCHED_NORMAL || after.Nice == -20 {
			t.Errorf("nice %d: policy %d nice %d after Stopped, want SCHED_NORMAL at the thread's own nice", nice, after.Policy, after.Nice)
		}
	}
}

// TestRemoteSyscallBlockedThread borrows the one thread of cat, blocked in
// its read, for remote system calls: the thread is interrupted inside the
// read (which the kernel restarts when the thread resumes), and must
// still read the next line when the world resumes, its read made again
// rather than ended with the restart code (errno 512 to cat).
func TestRemoteSyscallBlockedThread(t *testing.T) {
	testenv.NeedPtrace(t)
	testenv.MustHaveTool(t, "cat")
	cmd := exec.Command("cat")
	inW, out := fixtures.StartPiped(t, cmd)
	defer func() {
		inW.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	ask := func(s string) {
		t.Helper()
		if _, err := inW.WriteString(s + "\n"); err != nil {
			t.Fatal(err)
		}
		if l, err := fixtures.ReadLine(out, 5*time.Second); err != nil || strings.TrimSpace(l) != s {
			t.Fatalf("cat said %q (%v), want %q", l, err, s)
		}
	}
	ask("a")
	time.Sleep(20 * time.Millisecond) // in its read again
	p, err := Attach(cmd.Process.Pid, &Options{StopLatch: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_, err = p.Stopped(func(w *World) error {
			pid, err := w.Syscall(unix.SYS_GETPID)
			if err == nil && int(pid) != cmd.Process.Pid {
				err = fmt.Errorf("remote getpid = %d, want %d", pid, cmd.Process.Pid)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	ask("b")
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	ask("c")
}
