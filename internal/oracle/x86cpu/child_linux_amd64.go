//go:build linux && amd64

package x86cpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/proc"
)

// This file is the traced-child driver of the two x86-64 CPU oracles that
// run code in a child (EmuOracle and XOLX86Oracle), built on package proc:
// proc starts the child traced and stopped before its first instruction,
// and makes its system calls (on a system-call instruction of the vDSO),
// its register changes and its single steps; the oracle maps the harness
// and the areas of the shared file, installs the signal handler, removes
// every other mapping and detaches, after which the child runs untraced
// and talks to the parent only through the shared file.
//
// The child is given two descriptors: the shared file as its standard
// input (mapped, then closed) and, as its standard output, the read end of
// a pipe whose only write end the parent holds. The child asks for SIGIO
// on that descriptor (O_ASYNC), so when the parent ends — the write end is
// closed then, whatever way it ends — the child is killed by the signal:
// this replaces the parent-death signal, which Linux ties to the thread
// that forked the child (proc's tracer thread, which ends when the child
// is detached).

// Kernel interface constants not worth an import.
const (
	oracleSASiginfo  = 0x4
	oracleSAOnstack  = 0x08000000
	oracleSARestorer = 0x04000000
	oracleSigSetMask = 2
	oracleFutexWait  = 0
	oracleFutexWake  = 1
)

// Descriptors of the child.
const (
	oracleFD     = 0 // the shared file, until the areas are mapped
	oracleLifeFD = 1 // the read end of the parent's life pipe
)

// oracleChild is an oracle's child during setup, while it is traced.
type oracleChild struct {
	p    *proc.Process
	pid  int
	regs proc.Regs // at the exec stop
	// initial are the mappings the child had at its exec: removed once
	// the oracle's own are in place (detach).
	initial []proc.Mapping
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
)

// startOracleChild starts exe traced with proc (it stops after its exec,
// before its first instruction), with no environment, shared (the memory
// file) as its standard input and life (the read end of the parent's life
// pipe) as its standard output and error.
func startOracleChild(exe string, shared, life *os.File) (*oracleChild, error) {
	p, err := proc.Spawn([]string{exe}, &proc.SpawnOptions{
		Env:    []string{},
		Stdin:  shared,
		Stdout: life,
		Stderr: life,
	})
	if err != nil {
		return nil, fmt.Errorf("start oracle child %s: %w", exe, err)
	}
	ch := &oracleChild{p: p, pid: p.Pid()}
	if err := ch.attach(); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return ch, nil
}

// attach reads the child's registers and mappings, puts it in a process
// group of its own (so that a terminal's signals do not reach it) and ties
// its life to the parent's life pipe.
func (ch *oracleChild) attach() error {
	var err error
	if ch.regs, err = ch.p.Regs(ch.pid); err != nil {
		return fmt.Errorf("get child registers: %w", err)
	}
	if ch.initial, err = ch.p.Maps(); err != nil {
		return fmt.Errorf("read child maps: %w", err)
	}
	if _, err := ch.syscall(unix.SYS_SETPGID, 0, 0); err != nil {
		return err
	}
	if _, err := ch.syscall(unix.SYS_FCNTL, oracleLifeFD, unix.F_SETOWN, uint64(ch.pid)); err != nil {
		return err
	}
	_, err = ch.syscall(unix.SYS_FCNTL, oracleLifeFD, unix.F_SETFL, unix.O_RDONLY|unix.O_ASYNC)
	return err
}

// mapHarness maps the harness page of the shared file (at file offset
// off) at addr.
func (ch *oracleChild) mapHarness(addr, off uint64) error {
	return ch.mmap(addr, 0x1000, oracleRX, oracleShared, oracleFD, off)
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

// detach removes every mapping the child had at its exec (but the vsyscall
// page, which cannot be removed), so that a case's stray access faults
// instead of reaching memory the oracle does not model, then lets the
// child go at rip (the harness's idle loop) with interrupts-enabled flags
// and the registers edit sets, and stops tracing it. The vDSO, where proc
// finds the system-call instruction it runs the calls on, goes last.
func (ch *oracleChild) detach(rip uint64, edit func(*unix.PtraceRegs)) error {
	var vdso []proc.Mapping
	for _, m := range ch.initial {
		switch m.Path {
		case "[vsyscall]":
		case "[vdso]":
			vdso = append(vdso, m)
		default:
			if err := ch.munmap(m); err != nil {
				return err
			}
		}
	}
	for _, m := range vdso {
		if err := ch.munmap(m); err != nil {
			return err
		}
	}
	regs := ch.regs
	regs.SetPC(rip)
	regs.Eflags = 0x202
	if edit != nil {
		edit(&regs.PtraceRegs)
	}
	if err := ch.p.SetRegs(ch.pid, &regs); err != nil {
		return fmt.Errorf("set child registers: %w", err)
	}
	if err := ch.p.Detach(); err != nil {
		return fmt.Errorf("detach oracle child: %w", err)
	}
	return nil
}

// kill kills a child that is still traced (a setup that failed).
func (ch *oracleChild) kill() { _ = ch.p.Kill() }

// mmap maps memory in the child at a fixed address.
func (ch *oracleChild) mmap(addr, size uint64, prot, flags, fd int, off uint64) error {
	got, err := ch.p.Mmap(addr, size, prot, flags, fd, off)
	if err == nil && got != addr {
		err = fmt.Errorf("mapped at %#x", got)
	}
	if err != nil {
		return fmt.Errorf("child mmap %#x+%#x: %w", addr, size, err)
	}
	return nil
}

// munmap removes one of the child's initial mappings.
func (ch *oracleChild) munmap(m proc.Mapping) error {
	if err := ch.p.Munmap(m.Start, m.End-m.Start); err != nil {
		return fmt.Errorf("child munmap %#x-%#x %s: %w", m.Start, m.End, m.Path, err)
	}
	return nil
}

// syscall makes the stopped child run system call nr; a negative errno is
// returned as an error wrapping it.
func (ch *oracleChild) syscall(nr uint64, args ...uint64) (uint64, error) {
	r, err := ch.p.Syscall(nr, args...)
	if err != nil {
		return r, fmt.Errorf("child syscall %d: %w", nr, ch.died(err))
	}
	return r, nil
}

// cpuid makes the child run cpuid with eax=leaf, ecx=sub at the gadget
// (`cpuid; int3`): one single step (or the int3, see below).
func (ch *oracleChild) cpuid(gadget uint64, leaf, sub uint32) (eax, ebx uint32, err error) {
	r := ch.regs
	r.Rax, r.Rcx = uint64(leaf), uint64(sub)
	r.SetPC(gadget)
	if err := ch.p.SetRegs(ch.pid, &r); err != nil {
		return 0, 0, fmt.Errorf("child cpuid: set registers: %w", ch.died(err))
	}
	if err := ch.p.Step(ch.pid, 0); err != nil {
		return 0, 0, fmt.Errorf("child cpuid: step: %w", ch.died(err))
	}
	if r, err = ch.p.Regs(ch.pid); err != nil {
		return 0, 0, fmt.Errorf("child cpuid: get registers: %w", ch.died(err))
	}
	// Under some hypervisors the single-step trap after cpuid (which the
	// hypervisor executes for the guest) is lost, and the int3 after it
	// stops the child (seen under KVM on an AMD EPYC of family 26): the
	// registers hold cpuid's results either way.
	if r.PC() != gadget+2 && r.PC() != gadget+3 {
		return 0, 0, fmt.Errorf("child cpuid stopped at %#x, want %#x (or %#x after the int3)", r.PC(), gadget+2, gadget+3)
	}
	return uint32(r.Rax), uint32(r.Rbx), nil
}

// died adds ErrChildDied to an error that says the child is gone.
func (ch *oracleChild) died(err error) error {
	if errors.Is(err, proc.ErrExited) || errors.Is(err, proc.ErrNoThread) {
		return fmt.Errorf("%w: %w", err, ErrChildDied)
	}
	return err
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
