//go:build linux && amd64

package fuzz

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds what the two x86-64 CPU oracles (EmuOracle and
// XOLX86Oracle) share in setting up their child: starting it traced,
// mapping the harness and the areas of the shared file, installing the
// signal handler, and the system calls the stopped child makes on the
// parent's behalf. Every function must be called on the oracle's keeper
// thread (the one that forked the child), as ptrace requires.

// Kernel interface constants not worth an import.
const (
	oracleSASiginfo  = 0x4
	oracleSAOnstack  = 0x08000000
	oracleSARestorer = 0x04000000
	oracleSigSetMask = 2
	oracleFutexWait  = 0
	oracleFutexWake  = 1
)

// oracleChild is an oracle's child during setup, while it is traced.
type oracleChild struct {
	pid    int
	mem    int // /proc/pid/mem
	regs   unix.PtraceRegs
	gadget uint64 // address of `syscall; int3`
}

// oracleArea is a mapping made in the child: size bytes at addr, from
// offset off of the shared file (flag MAP_SHARED) or anonymous.
type oracleArea struct {
	addr, size uint64
	prot, flag int
	off        uint64
}

// Mapping flags and protections of the oracles' children.
const (
	oracleShared = unix.MAP_SHARED | unix.MAP_FIXED_NOREPLACE
	oracleAnon   = unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_FIXED_NOREPLACE
	oracleR      = unix.PROT_READ
	oracleRW     = unix.PROT_READ | unix.PROT_WRITE
	oracleRX     = unix.PROT_READ | unix.PROT_EXEC
	oracleFD     = 3 // the shared file in the child
)

// startOracleChild starts exe traced (it stops at its exec), with no
// environment, /dev/null as its standard files and memfd as descriptor
// oracleFD, killed when the calling thread ends. It returns the pid.
func startOracleChild(exe string, memfd int) (int, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	pid, err := syscall.ForkExec(exe, []string{exe}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), uintptr(memfd)},
		Sys: &syscall.SysProcAttr{
			Ptrace:    true,
			Pdeathsig: syscall.SIGKILL,
			Setpgid:   true,
		},
	})
	if err != nil {
		return 0, fmt.Errorf("start oracle child %s: %w", exe, err)
	}
	return pid, nil
}

// attach waits for the child's stop at its exec, makes it die with its
// tracer, opens its memory and reads its registers.
func (ch *oracleChild) attach() error {
	var ws unix.WaitStatus
	if err := oracleWait(ch.pid, &ws); err != nil {
		return fmt.Errorf("wait for oracle child: %w", err)
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
		return fmt.Errorf("oracle child did not stop at exec: %s", describeWait(ws))
	}
	if err := unix.PtraceSetOptions(ch.pid, unix.PTRACE_O_EXITKILL); err != nil {
		return fmt.Errorf("set ptrace options: %w", err)
	}
	mem, err := unix.Open(fmt.Sprintf("/proc/%d/mem", ch.pid), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open child memory: %w", err)
	}
	ch.mem = mem
	if err := unix.PtraceGetRegs(ch.pid, &ch.regs); err != nil {
		return fmt.Errorf("get child registers: %w", err)
	}
	return nil
}

// mapHarness maps the harness page of the shared file (at file offset off)
// at addr, through a first gadget written at the entry point; then the
// gadget at gadgetOff in the harness serves, and every other mapping of
// the child is removed.
func (ch *oracleChild) mapHarness(addr, off uint64, gadgetOff int) error {
	ch.gadget = ch.regs.Rip
	if _, err := unix.Pwrite(ch.mem, []byte{0x0f, 0x05, 0xcc}, int64(ch.gadget)); err != nil {
		return fmt.Errorf("write child gadget: %w", err)
	}
	if err := ch.mmap(addr, 0x1000, oracleRX, oracleShared, oracleFD, off); err != nil {
		return err
	}
	ch.gadget = addr + uint64(gadgetOff)
	return ch.unmapOthers(addr)
}

// mapAreas maps the areas in the child, then closes its descriptor of the
// shared file.
func (ch *oracleChild) mapAreas(areas []oracleArea) error {
	for _, m := range areas {
		f := oracleFD
		if m.flag == oracleAnon {
			f = -1
		}
		if err := ch.mmap(m.addr, m.size, m.prot, m.flag, f, m.off); err != nil {
			return err
		}
	}
	_, err := ch.syscall(unix.SYS_CLOSE, oracleFD)
	return err
}

// oracleSignals says where the child's signal handler is: the scratch
// bytes of the control page (in the parent's mapping, and at scratchAddr in
// the child), the alternate stack, and the handler and restorer.
type oracleSignals struct {
	scratch           []byte
	scratchAddr       uint64
	altStack, altSize uint64
	handler, restorer uint64
}

// installHandler sets up the alternate signal stack, the handler of the
// signals a case may raise (every signal blocked while it runs), and an
// empty signal mask. The structures go in the scratch part of the control
// page.
func (ch *oracleChild) installHandler(s oracleSignals) error {
	le := binary.LittleEndian
	scratch := s.scratch
	le.PutUint64(scratch[0:], s.altStack) // stack_t
	le.PutUint64(scratch[8:], 0)
	le.PutUint64(scratch[16:], s.altSize)
	le.PutUint64(scratch[32:], s.handler) // sigaction
	le.PutUint64(scratch[40:], oracleSASiginfo|oracleSAOnstack|oracleSARestorer)
	le.PutUint64(scratch[48:], s.restorer)
	le.PutUint64(scratch[56:], ^uint64(0)) // every signal blocked in the handler
	le.PutUint64(scratch[64:], 0)          // the empty set
	base := s.scratchAddr
	if _, err := ch.syscall(unix.SYS_SIGALTSTACK, base); err != nil {
		return err
	}
	for _, sig := range []int{int(unix.SIGTRAP), int(unix.SIGSEGV), int(unix.SIGBUS), int(unix.SIGILL), int(unix.SIGFPE)} {
		if _, err := ch.syscall(unix.SYS_RT_SIGACTION, uint64(sig), base+32, 0, 8); err != nil {
			return err
		}
	}
	_, err := ch.syscall(unix.SYS_RT_SIGPROCMASK, oracleSigSetMask, base+64, 0, 8)
	return err
}

// detach lets the child go at rip (the harness's idle loop) with
// interrupts-enabled flags and the registers edit sets, and stops tracing
// it.
func (ch *oracleChild) detach(rip uint64, edit func(*unix.PtraceRegs)) error {
	regs := ch.regs
	regs.Rip = rip
	regs.Orig_rax = ^uint64(0)
	regs.Eflags = 0x202
	if edit != nil {
		edit(&regs)
	}
	if err := unix.PtraceSetRegs(ch.pid, &regs); err != nil {
		return fmt.Errorf("set child registers: %w", err)
	}
	if err := unix.PtraceDetach(ch.pid); err != nil {
		return fmt.Errorf("detach oracle child: %w", err)
	}
	return nil
}

// mmap maps memory in the child at a fixed address.
func (ch *oracleChild) mmap(addr, size uint64, prot, flags, fd int, off uint64) error {
	got, err := ch.syscall(unix.SYS_MMAP, addr, size, uint64(prot), uint64(flags), uint64(int64(fd)), off)
	if err == nil && got != addr {
		err = fmt.Errorf("mapped at %#x", got)
	}
	if err != nil {
		return fmt.Errorf("child mmap %#x+%#x: %w", addr, size, err)
	}
	return nil
}

// unmapOthers removes every mapping of the child but the one at keep (the
// harness page) and the vsyscall page (which cannot be removed), so that a
// case's stray access faults instead of reaching memory the oracle does
// not model.
func (ch *oracleChild) unmapOthers(keep uint64) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", ch.pid))
	if err != nil {
		return fmt.Errorf("read child maps: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || (len(f) >= 6 && f[5] == "[vsyscall]") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("child maps: bad line %q", sc.Text())
		}
		if start == keep {
			continue
		}
		if _, err := ch.syscall(unix.SYS_MUNMAP, start, end-start); err != nil {
			return fmt.Errorf("child munmap %#x-%#x: %w", start, end, err)
		}
	}
	return sc.Err()
}

// run makes the stopped child run from rip until its next trap (the int3
// after a gadget) and returns the registers then.
func (ch *oracleChild) run(r unix.PtraceRegs, rip uint64, what string) (unix.PtraceRegs, error) {
	r.Rip = rip
	r.Orig_rax = ^uint64(0)
	if err := unix.PtraceSetRegs(ch.pid, &r); err != nil {
		return r, fmt.Errorf("child %s: set registers: %w", what, err)
	}
	if err := unix.PtraceCont(ch.pid, 0); err != nil {
		return r, fmt.Errorf("child %s: continue: %w", what, err)
	}
	var ws unix.WaitStatus
	if err := oracleWait(ch.pid, &ws); err != nil {
		return r, fmt.Errorf("child %s: wait: %w", what, err)
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
		if ws.Exited() || ws.Signaled() {
			return r, fmt.Errorf("child %s: %s: %w", what, describeWait(ws), ErrChildDied)
		}
		return r, fmt.Errorf("child %s: unexpected %s", what, describeWait(ws))
	}
	if err := unix.PtraceGetRegs(ch.pid, &r); err != nil {
		return r, fmt.Errorf("child %s: get registers: %w", what, err)
	}
	return r, nil
}

// syscall makes the stopped child run system call nr at the gadget and
// returns its result; -4095..-1 is returned as an error wrapping the errno.
func (ch *oracleChild) syscall(nr uint64, args ...uint64) (uint64, error) {
	var a [6]uint64
	copy(a[:], args)
	r := ch.regs
	r.Rax = nr
	r.Rdi, r.Rsi, r.Rdx, r.R10, r.R8, r.R9 = a[0], a[1], a[2], a[3], a[4], a[5]
	what := fmt.Sprintf("syscall %d", nr)
	r, err := ch.run(r, ch.gadget, what)
	if err != nil {
		return 0, err
	}
	if r.Rip != ch.gadget+3 {
		return 0, fmt.Errorf("child %s stopped at %#x, want %#x", what, r.Rip, ch.gadget+3)
	}
	if r.Rax > ^uint64(0)-4095 {
		return r.Rax, fmt.Errorf("child %s: %w", what, unix.Errno(-r.Rax))
	}
	return r.Rax, nil
}

// cpuid makes the child run cpuid with eax=leaf, ecx=sub at the gadget
// (`cpuid; int3`).
func (ch *oracleChild) cpuid(gadget uint64, leaf, sub uint32) (eax, ebx uint32, err error) {
	r := ch.regs
	r.Rax, r.Rcx = uint64(leaf), uint64(sub)
	r, err = ch.run(r, gadget, "cpuid")
	if err != nil {
		return 0, 0, err
	}
	return uint32(r.Rax), uint32(r.Rbx), nil
}

// oracleFutex makes a futex call on a word of the shared file (not
// private: the child waits on the same word through its own mapping).
func oracleFutex(addr *uint32, op int, val uint32, ts *unix.Timespec) error {
	_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), uintptr(op), uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// oracleWait waits for the child to change state, retrying on EINTR.
func oracleWait(pid int, ws *unix.WaitStatus) error {
	for {
		_, err := unix.Wait4(pid, ws, unix.WALL, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
