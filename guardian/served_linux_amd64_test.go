//go:build linux && amd64

package guardian

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/proc"
)

// TestRestoreServedThread leaves the trace fixture's server as a tracer
// that dies after serving a trap leaves it: the thread took the int3 at
// k_push, whose instruction is the one-byte push %rbx, the tracer emulated
// the push (the stack pointer moved, rbx stored, the instruction pointer
// just past the site) and set the registers, and died before resuming it.
// restore, told the registers the tracer gave the thread, leaves it as it
// is: the server answers as before. The control, restore without them,
// sends the thread back to the site, the push runs twice, and k_push's ret
// returns to the pushed value: no answer (what TestGuardianKillFrozen saw
// about once in 500 runs).
func TestRestoreServedThread(t *testing.T) {
	testenv.NeedPtrace(t)
	testenv.MustHaveTool(t, "make")
	testenv.MustHaveTool(t, "gcc")
	dir := t.TempDir()
	if b, err := exec.Command("make", "-s", "-C", filepath.Join(fixture.Dir(t), "trace"), "OUT="+dir).CombinedOutput(); err != nil {
		t.Fatalf("make: %v\n%s", err, b)
	}
	exe := filepath.Join(dir, "tracee")
	sym := symbolValue(t, exe, "k_push")
	for _, give := range []bool{true, false} {
		cmd := exec.Command(exe, "serve")
		in, out := fixture.StartPiped(t, cmd)
		pid := cmd.Process.Pid
		if l, err := fixture.ReadLine(out, 5*time.Second); err != nil || strings.TrimSpace(l) != "ready" {
			t.Fatalf("server said %q, %v", l, err)
		}
		want := ask(t, in, out, "3")
		site := loadBase(t, pid, exe) + sym
		orig, served, err := serveAndDie(pid, site, in)
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatal(err)
		}
		f := inFlight{}
		if give {
			f.served, f.servedRegs = pid, served
		}
		recs := []Record{{Addr: site, Kind: KindTrap, InstLen: 1, Orig: []byte{orig}, New: []byte{0xcc}}}
		rep, err := restore(pid, recs, f, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The "3" serveAndDie sent is the request the thread was serving.
		l, rerr := fixture.ReadLine(out, 5*time.Second)
		in.Close()
		werr := cmd.Wait()
		switch {
		case give && (rerr != nil || strings.TrimSpace(l) != want || rep.Rewound != 0):
			t.Errorf("served registers given: server said %q (%v), ended with %v; report %+v", l, rerr, werr, rep)
		case !give && rerr == nil && strings.TrimSpace(l) == want:
			t.Errorf("control: server said %q and ended with %v: the test does not see the damage", l, werr)
		}
		t.Logf("served registers given %v: %q (%v), ended with %v, report %+v", give, strings.TrimSpace(l), rerr, werr, rep)
	}
}

// ask sends line to the server and returns its answer.
func ask(t *testing.T, in *os.File, out *bufio.Reader, line string) string {
	t.Helper()
	if _, err := in.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
	l, err := fixture.ReadLine(out, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(l)
}

// symbolValue returns the value of symbol name in the ELF file path.
func symbolValue(t *testing.T, path, name string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("%s has no %s", path, name)
	return 0
}

// loadBase returns where process pid maps the start of the file path (a
// position-independent executable whose first segment is at 0).
func loadBase(t *testing.T, pid int, path string) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	maps, err := proc.ParseMaps(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Path == path && m.Offset == 0 {
			return m.Start
		}
	}
	t.Fatalf("process %d does not map %s", pid, path)
	return 0
}

// serveAndDie does to the server what a tracer that dies right after
// serving a trap does: it seizes it, writes an int3 at site, asks the
// server for "work 3" and waits for the trap there, emulates the site's
// push %rbx (checked to be its instruction) and sets the registers, then
// lets the server go stopped (a SIGSTOP before PTRACE_DETACH, as the stop
// latch would leave it). It returns the site's original byte and the
// registers it set.
func serveAndDie(pid int, site uint64, in *os.File) (byte, *proc.Regs, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return 0, nil, err
	}
	defer mem.Close()
	if err := unix.PtraceSeize(pid); err != nil {
		return 0, nil, err
	}
	if err := unix.PtraceInterrupt(pid); err != nil {
		return 0, nil, err
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return 0, nil, err
	}
	var b [1]byte
	if _, err := mem.ReadAt(b[:], int64(site)); err != nil {
		return 0, nil, err
	}
	if b[0] != 0x53 {
		return 0, nil, fmt.Errorf("k_push starts with %#x, not push %%rbx", b[0])
	}
	if _, err := mem.WriteAt([]byte{0xcc}, int64(site)); err != nil {
		return 0, nil, err
	}
	if err := unix.PtraceCont(pid, 0); err != nil {
		return 0, nil, err
	}
	if _, err := in.WriteString("3\n"); err != nil {
		return 0, nil, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := unix.Wait4(pid, &ws, unix.WALL|unix.WNOHANG, nil)
		if err != nil {
			return 0, nil, err
		}
		if n == pid && ws.Stopped() && ws.StopSignal() == unix.SIGTRAP {
			break
		}
		if n == pid && ws.Stopped() {
			if err := unix.PtraceCont(pid, 0); err != nil {
				return 0, nil, err
			}
		}
		if time.Now().After(deadline) {
			return 0, nil, fmt.Errorf("no trap at k_push (%#x)", site)
		}
		time.Sleep(time.Millisecond)
	}
	var r proc.Regs
	if err := unix.PtraceGetRegs(pid, &r.PtraceRegs); err != nil {
		return 0, nil, err
	}
	if r.Rip != site+1 {
		return 0, nil, fmt.Errorf("trap at %#x, want %#x", r.Rip-1, site)
	}
	// push %rbx, emulated.
	r.Rsp -= 8
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], r.Rbx)
	if _, err := mem.WriteAt(w[:], int64(r.Rsp)); err != nil {
		return 0, nil, err
	}
	if err := unix.PtraceSetRegs(pid, &r.PtraceRegs); err != nil {
		return 0, nil, err
	}
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		return 0, nil, err
	}
	if err := unix.PtraceDetach(pid); err != nil {
		return 0, nil, err
	}
	return b[0], &r, nil
}
