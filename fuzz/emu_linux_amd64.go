//go:build linux && amd64

package fuzz

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Tuning of the emulator oracle.
const (
	// emuBatchTimeout bounds one batch; the child is replaced after it.
	emuBatchTimeout = 10 * time.Second
	// emuPoll is how often a waiting parent checks that the child lives.
	emuPoll = 50 * time.Millisecond
)

// Kernel interface constants not worth an import.
const (
	emuSASiginfo  = 0x4
	emuSAOnstack  = 0x08000000
	emuSARestorer = 0x04000000
	emuFutexWait  = 0
	emuFutexWake  = 1
	emuSigSetMask = 2
)

// EmuOracle runs x86-64 instructions on the host CPU, many per round trip,
// for comparison with the emulator.
//
// It keeps one child process (the current executable, stopped by ptrace
// before its first instruction and then stripped of every mapping) that
// runs only a small harness. The harness and the cases are shared with the
// parent through a memory file: the parent writes a batch of cases (bytes
// into the code windows, initial registers into records), bumps a futex
// word and sleeps; the child runs each case with the trap flag set, so
// that the instruction is followed by a single-step trap, or faults; a
// signal handler in the child records the registers and the changed
// memory, restores the data window, and starts the next case with
// rt_sigreturn. ptrace is used only to set the child up; the batch runs
// without a single stop, which is what makes tens of thousands of cases a
// second possible.
//
// The child is started by a goroutine locked to its OS thread for the
// oracle's whole life: ptrace requests must come from the thread that
// forked the child, and the child is killed (PR_SET_PDEATHSIG) when that
// thread ends, so the thread must not be handed back to the runtime.
//
// The methods are safe for concurrent use; batches are served one at a
// time. If the child dies, it is replaced and the batch is run once more;
// if it dies again, or a batch does not finish within seconds, the batch
// fails with ErrChildDied or ErrTimeout (the child is replaced for the
// next one).
type EmuOracle struct {
	mu       sync.Mutex
	closed   bool
	keeper   chan func()   // work for the thread that owns the child
	exited   chan struct{} // closed when that thread has ended
	exe      string
	memfd    int
	mem      []byte // the shared file, mapped read-write
	harness  emuHarnessCode
	pid      int
	seq      uint32
	restarts int
}

// NewEmuOracle starts the child. It fails with an error wrapping the errno
// (EPERM, for example) when ptrace is not permitted.
func NewEmuOracle() (*EmuOracle, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find executable for the oracle child: %w", err)
	}
	h, err := buildEmuHarness()
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("probeopt-emu", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create shared file: %w", err)
	}
	o := &EmuOracle{exe: exe, memfd: fd, harness: h, keeper: make(chan func()), exited: make(chan struct{})}
	go o.keep()
	if err := unix.Ftruncate(fd, emuFileSize); err != nil {
		o.release()
		return nil, fmt.Errorf("size shared file: %w", err)
	}
	o.mem, err = unix.Mmap(fd, 0, emuFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		o.release()
		return nil, fmt.Errorf("map shared file: %w", err)
	}
	copy(o.mem[emuOffHarness:], h.code)
	if err := o.spawn(); err != nil {
		o.release()
		return nil, err
	}
	return o, nil
}

// Close kills the child and releases the shared file. Calls after Close
// fail with ErrClosed.
func (o *EmuOracle) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	o.release()
	return nil
}

// Restarts returns how many times the child had to be replaced.
func (o *EmuOracle) Restarts() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.restarts
}

// keep is the thread that owns the child: it runs the closures sent to
// o.keeper until the channel is closed, and never unlocks its thread, so
// the runtime ends the thread with it.
func (o *EmuOracle) keep() {
	runtime.LockOSThread()
	defer close(o.exited)
	for f := range o.keeper {
		f()
	}
}

// release kills the child, ends the keeper thread, and unmaps and closes
// the shared file.
func (o *EmuOracle) release() {
	o.kill()
	if o.keeper != nil {
		close(o.keeper)
		<-o.exited
		o.keeper = nil
	}
	if o.mem != nil {
		_ = unix.Munmap(o.mem)
		o.mem = nil
	}
	if o.memfd >= 0 {
		_ = unix.Close(o.memfd)
		o.memfd = -1
	}
}

// kill kills and reaps the child, if any.
func (o *EmuOracle) kill() {
	if o.pid <= 0 {
		return
	}
	_ = unix.Kill(o.pid, unix.SIGKILL)
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(o.pid, &ws, unix.WALL, nil)
		if err != unix.EINTR {
			break
		}
	}
	o.pid = 0
}

// word returns a pointer to the 32-bit word at off in the shared file.
func (o *EmuOracle) word(off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&o.mem[off]))
}

// Run runs the cases on the CPU with memory image img and stores what
// happened in out[i] (len(out) must be at least len(cases)). The cases'
// bytes must already be placed in img (EmuImage.Place). It returns an error
// only when the oracle itself failed.
func (o *EmuOracle) Run(img *EmuImage, cases []EmuCase, out []EmuCPUResult) error {
	if len(out) < len(cases) {
		return fmt.Errorf("emulator oracle: %d results for %d cases", len(out), len(cases))
	}
	for i := range cases {
		c := &cases[i]
		if c.Init.FSBase != EmuFSBase || c.Init.GSBase != EmuGSBase {
			return fmt.Errorf("case %d: fs/gs base %#x/%#x, the oracle has %#x/%#x", i, c.Init.FSBase, c.Init.GSBase, uint64(EmuFSBase), uint64(EmuGSBase))
		}
		if _, _, ok := img.window(c.Init.RIP); !ok {
			return fmt.Errorf("case %d: rip %#x is outside the code windows", i, c.Init.RIP)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return ErrClosed
	}
	copy(o.mem[emuOffCodeLow:], img.CodeLow[:])
	copy(o.mem[emuOffCodeHigh:], img.CodeHigh[:])
	copy(o.mem[emuOffRO:], img.RO[:])
	copy(o.mem[emuOffRW:], img.RW[:])
	copy(o.mem[emuOffTemplate:], img.RW[:])
	for start := 0; start < len(cases); start += emuMaxBatch {
		end := min(start+emuMaxBatch, len(cases))
		err := o.batch(cases[start:end], out[start:end])
		if errors.Is(err, ErrChildDied) && !o.closed {
			err = o.batch(cases[start:end], out[start:end])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// batch runs at most emuMaxBatch cases.
func (o *EmuOracle) batch(cases []EmuCase, out []EmuCPUResult) error {
	le := binary.LittleEndian
	for i := range cases {
		c := &cases[i]
		rec := o.mem[emuOffCases+i<<emuCaseShift:]
		for r := 0; r < 16; r++ {
			le.PutUint64(rec[8*emuGregOf[r]:], c.Init.GPR[r])
		}
		le.PutUint64(rec[8*emuGregRIP:], c.Init.RIP)
		le.PutUint64(rec[8*emuGregFlags:], c.Init.RFLAGS&emuFlagsIn|0x202)
	}
	le.PutUint64(o.mem[emuOffCtrl+emuCtlN:], uint64(len(cases)))
	o.seq++
	seq := o.seq
	atomic.StoreUint32(o.word(emuOffCtrl+emuCtlSeq), seq)
	if err := emuFutex(o.word(emuOffCtrl+emuCtlSeq), emuFutexWake, 1, nil); err != nil {
		return fmt.Errorf("wake oracle child: %w", err)
	}
	if err := o.waitDone(seq); err != nil {
		return err
	}
	for i := range cases {
		o.result(i, &cases[i], &out[i])
	}
	return nil
}

// emuFlagsIn is the part of a case's RFLAGS that the case may choose.
const emuFlagsIn = 0x8d5 | 0x400

// waitDone sleeps until the child reports batch seq done. If the child
// dies or times out it is replaced and the batch fails.
func (o *EmuOracle) waitDone(seq uint32) error {
	done := o.word(emuOffCtrl + emuCtlDone)
	deadline := time.Now().Add(emuBatchTimeout)
	ts := unix.NsecToTimespec(int64(emuPoll))
	for {
		d := atomic.LoadUint32(done)
		if d == seq {
			return nil
		}
		if err := emuFutex(done, emuFutexWait, d, &ts); err != nil && err != unix.EAGAIN && err != unix.ETIMEDOUT && err != unix.EINTR {
			return fmt.Errorf("wait for oracle child: %w", err)
		}
		if atomic.LoadUint32(done) == seq {
			return nil
		}
		var ws unix.WaitStatus
		pid, err := unix.Wait4(o.pid, &ws, unix.WNOHANG|unix.WALL, nil)
		if err == nil && pid == o.pid && (ws.Exited() || ws.Signaled()) {
			o.pid = 0
			return o.replace(fmt.Errorf("oracle child: %s: %w", describeWait(ws), ErrChildDied))
		}
		if time.Now().After(deadline) {
			return o.replace(fmt.Errorf("oracle batch: %w", ErrTimeout))
		}
	}
}

// replace kills the child, starts a new one and returns cause (or the
// error of the restart).
func (o *EmuOracle) replace(cause error) error {
	o.kill()
	o.restarts++
	if err := o.spawn(); err != nil {
		o.closed = true
		return fmt.Errorf("restart oracle child: %w (after %w)", err, cause)
	}
	return cause
}

// result decodes the result record of case i.
func (o *EmuOracle) result(i int, c *EmuCase, r *EmuCPUResult) {
	le := binary.LittleEndian
	rec := o.mem[emuOffResults+i<<emuResultShift:]
	greg := func(k int) uint64 { return le.Uint64(rec[emuResGregs+8*k:]) }
	*r = EmuCPUResult{
		Signal:  int(int32(le.Uint64(rec[emuResSigno:]))),
		Code:    int(int32(le.Uint64(rec[emuResCode:]))),
		Addr:    le.Uint64(rec[emuResAddr:]),
		Trap:    int(greg(emuGregTrap)),
		ErrCode: greg(emuGregErr),
	}
	for k := 0; k < 16; k++ {
		r.State.GPR[k] = greg(emuGregOf[k])
	}
	r.State.RIP = greg(emuGregRIP)
	r.State.RFLAGS = greg(emuGregFlags)
	r.State.FSBase, r.State.GSBase = c.Init.FSBase, c.Init.GSBase
	n := int(le.Uint64(rec[emuResNDiff:]))
	r.WritesLost = n > emuMaxDiffs
	for k := 0; k < min(n, emuMaxDiffs); k++ {
		r.Writes = append(r.Writes, EmuMemWord{Addr: le.Uint64(rec[emuResDiffs+16*k:]), Val: le.Uint64(rec[emuResDiffs+16*k+8:])})
	}
}

// emuFutex makes a futex call on a word of the shared file (not private: the
// child waits on the same word through its own mapping).
func emuFutex(addr *uint32, op int, val uint32, ts *unix.Timespec) error {
	_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), uintptr(op), uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// spawn starts and prepares a child on the keeper thread.
func (o *EmuOracle) spawn() error {
	errc := make(chan error, 1)
	o.keeper <- func() { errc <- o.setup() }
	return <-errc
}

// emuChild is the child during setup, while it is traced.
type emuChild struct {
	pid    int
	mem    int // /proc/pid/mem
	regs   unix.PtraceRegs
	gadget uint64 // address of `syscall; int3`
}

// setup forks the child and prepares it; on failure the child is killed.
func (o *EmuOracle) setup() error {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	pid, err := syscall.ForkExec(o.exe, []string{o.exe}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), uintptr(o.memfd)},
		Sys: &syscall.SysProcAttr{
			Ptrace:    true,
			Pdeathsig: syscall.SIGKILL,
			Setpgid:   true,
		},
	})
	if err != nil {
		return fmt.Errorf("start oracle child %s: %w", o.exe, err)
	}
	o.pid = pid
	ch := &emuChild{pid: pid, mem: -1}
	err = o.prepare(ch)
	if ch.mem >= 0 {
		_ = unix.Close(ch.mem)
	}
	if err != nil {
		o.kill()
		return err
	}
	return nil
}

// prepare maps the areas in the stopped child, removes everything else,
// installs the signal handler and lets the child go to its idle loop.
func (o *EmuOracle) prepare(ch *emuChild) error {
	var ws unix.WaitStatus
	if err := emuWait(ch.pid, &ws); err != nil {
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
	// A first gadget at the entry point maps the harness.
	ch.gadget = ch.regs.Rip
	if _, err := unix.Pwrite(ch.mem, []byte{0x0f, 0x05, 0xcc}, int64(ch.gadget)); err != nil {
		return fmt.Errorf("write child gadget: %w", err)
	}
	const (
		shared = unix.MAP_SHARED | unix.MAP_FIXED_NOREPLACE
		anon   = unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_FIXED_NOREPLACE
		r      = unix.PROT_READ
		rw     = unix.PROT_READ | unix.PROT_WRITE
		rx     = unix.PROT_READ | unix.PROT_EXEC
		fd     = 3 // the shared file in the child
	)
	if err := ch.mmap(emuCtrlAddr+emuOffHarness, 0x1000, rx, shared, fd, emuOffHarness); err != nil {
		return err
	}
	ch.gadget = emuCtrlAddr + emuOffHarness + uint64(o.harness.gadget)
	if err := ch.unmapOthers(); err != nil {
		return err
	}
	maps := []struct {
		addr, size uint64
		prot, flag int
		off        uint64
	}{
		{emuCtrlAddr, 0x1000, rw, shared, emuOffCtrl},
		{emuCtrlAddr + emuOffTemplate, emuOffCodeLow - emuOffTemplate, rw, shared, emuOffTemplate},
		{emuAltStack, emuAltSize, rw, anon, 0},
		{EmuCodeLow, EmuCodeSize, rx, shared, emuOffCodeLow},
		{EmuCodeHigh, EmuCodeSize, rx, shared, emuOffCodeHigh},
		{EmuROAddr, EmuROSize, r, shared, emuOffRO},
		{EmuRWAddr, EmuRWSize, rw, shared, emuOffRW},
	}
	for _, m := range maps {
		f := fd
		if m.flag == anon {
			f = -1
		}
		if err := ch.mmap(m.addr, m.size, m.prot, m.flag, f, m.off); err != nil {
			return err
		}
	}
	if _, err := ch.syscall(unix.SYS_CLOSE, fd); err != nil {
		return err
	}
	// Signal stack, handler, empty signal mask. The structures go in the
	// scratch part of the control page.
	le := binary.LittleEndian
	scratch := o.mem[emuOffCtrl+emuCtlScratch:]
	le.PutUint64(scratch[0:], emuAltStack) // stack_t
	le.PutUint64(scratch[8:], 0)
	le.PutUint64(scratch[16:], emuAltSize)
	le.PutUint64(scratch[32:], emuCtrlAddr+emuOffHarness+uint64(o.harness.handler)) // sigaction
	le.PutUint64(scratch[40:], emuSASiginfo|emuSAOnstack|emuSARestorer)
	le.PutUint64(scratch[48:], emuCtrlAddr+emuOffHarness+uint64(o.harness.restorer))
	le.PutUint64(scratch[56:], ^uint64(0)) // block everything in the handler
	le.PutUint64(scratch[64:], 0)          // the empty set
	base := uint64(emuCtrlAddr + emuCtlScratch)
	if _, err := ch.syscall(unix.SYS_SIGALTSTACK, base); err != nil {
		return err
	}
	for _, sig := range []int{int(unix.SIGTRAP), int(unix.SIGSEGV), int(unix.SIGBUS), int(unix.SIGILL), int(unix.SIGFPE)} {
		if _, err := ch.syscall(unix.SYS_RT_SIGACTION, uint64(sig), base+32, 0, 8); err != nil {
			return err
		}
	}
	if _, err := ch.syscall(unix.SYS_RT_SIGPROCMASK, emuSigSetMask, base+64, 0, 8); err != nil {
		return err
	}
	// Go: idle loop, FS and GS bases for the cases.
	o.seq = 1
	atomic.StoreUint32(o.word(emuOffCtrl+emuCtlSeq), 1)
	atomic.StoreUint32(o.word(emuOffCtrl+emuCtlDone), 0)
	regs := ch.regs
	regs.Rip = emuCtrlAddr + emuOffHarness + uint64(o.harness.idle)
	regs.Orig_rax = ^uint64(0)
	regs.Eflags = 0x202
	regs.Fs_base = EmuFSBase
	regs.Gs_base = EmuGSBase
	if err := unix.PtraceSetRegs(ch.pid, &regs); err != nil {
		return fmt.Errorf("set child registers: %w", err)
	}
	if err := unix.PtraceDetach(ch.pid); err != nil {
		return fmt.Errorf("detach oracle child: %w", err)
	}
	return o.waitDone(1)
}

// mmap maps memory in the child at a fixed address.
func (ch *emuChild) mmap(addr, size uint64, prot, flags, fd int, off uint64) error {
	got, err := ch.syscall(unix.SYS_MMAP, addr, size, uint64(prot), uint64(flags), uint64(int64(fd)), off)
	if err == nil && got != addr {
		err = fmt.Errorf("mapped at %#x", got)
	}
	if err != nil {
		return fmt.Errorf("child mmap %#x+%#x: %w", addr, size, err)
	}
	return nil
}

// unmapOthers removes every mapping of the child but the harness page (and
// the vsyscall page, which cannot be removed), so that a case's stray
// access faults instead of reaching memory the oracle does not model.
func (ch *emuChild) unmapOthers() error {
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
		if start == emuCtrlAddr+emuOffHarness {
			continue
		}
		if _, err := ch.syscall(unix.SYS_MUNMAP, start, end-start); err != nil {
			return fmt.Errorf("child munmap %#x-%#x: %w", start, end, err)
		}
	}
	return sc.Err()
}

// syscall makes the stopped child run system call nr at the gadget and
// returns its result; -4095..-1 is returned as an error wrapping the errno.
func (ch *emuChild) syscall(nr uint64, args ...uint64) (uint64, error) {
	var a [6]uint64
	copy(a[:], args)
	r := ch.regs
	r.Rip = ch.gadget
	r.Rax = nr
	r.Orig_rax = ^uint64(0)
	r.Rdi, r.Rsi, r.Rdx, r.R10, r.R8, r.R9 = a[0], a[1], a[2], a[3], a[4], a[5]
	if err := unix.PtraceSetRegs(ch.pid, &r); err != nil {
		return 0, fmt.Errorf("child syscall %d: set registers: %w", nr, err)
	}
	if err := unix.PtraceCont(ch.pid, 0); err != nil {
		return 0, fmt.Errorf("child syscall %d: continue: %w", nr, err)
	}
	var ws unix.WaitStatus
	if err := emuWait(ch.pid, &ws); err != nil {
		return 0, fmt.Errorf("child syscall %d: wait: %w", nr, err)
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
		if ws.Exited() || ws.Signaled() {
			return 0, fmt.Errorf("child syscall %d: %s: %w", nr, describeWait(ws), ErrChildDied)
		}
		return 0, fmt.Errorf("child syscall %d: unexpected %s", nr, describeWait(ws))
	}
	if err := unix.PtraceGetRegs(ch.pid, &r); err != nil {
		return 0, fmt.Errorf("child syscall %d: get registers: %w", nr, err)
	}
	if r.Rip != ch.gadget+3 {
		return 0, fmt.Errorf("child syscall %d stopped at %#x, want %#x", nr, r.Rip, ch.gadget+3)
	}
	if r.Rax > ^uint64(0)-4095 {
		return r.Rax, fmt.Errorf("child syscall %d: %w", nr, unix.Errno(-r.Rax))
	}
	return r.Rax, nil
}

// emuWait waits for the child to change state, retrying on EINTR.
func emuWait(pid int, ws *unix.WaitStatus) error {
	for {
		_, err := unix.Wait4(pid, ws, unix.WALL, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
