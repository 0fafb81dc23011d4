//go:build linux && amd64

package fuzz

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
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
	if err := oracleFutex(o.word(emuOffCtrl+emuCtlSeq), oracleFutexWake, 1, nil); err != nil {
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
		if err := oracleFutex(done, oracleFutexWait, d, &ts); err != nil && err != unix.EAGAIN && err != unix.ETIMEDOUT && err != unix.EINTR {
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

// spawn starts and prepares a child on the keeper thread.
func (o *EmuOracle) spawn() error {
	errc := make(chan error, 1)
	o.keeper <- func() { errc <- o.setup() }
	return <-errc
}

// setup forks the child and prepares it; on failure the child is killed.
func (o *EmuOracle) setup() error {
	pid, err := startOracleChild(o.exe, o.memfd)
	if err != nil {
		return err
	}
	o.pid = pid
	ch := &oracleChild{pid: pid, mem: -1}
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
func (o *EmuOracle) prepare(ch *oracleChild) error {
	if err := ch.attach(); err != nil {
		return err
	}
	// A first gadget at the entry point maps the harness.
	if err := ch.mapHarness(emuCtrlAddr+emuOffHarness, emuOffHarness, o.harness.gadget); err != nil {
		return err
	}
	err := ch.mapAreas([]oracleArea{
		{emuCtrlAddr, 0x1000, oracleRW, oracleShared, emuOffCtrl},
		{emuCtrlAddr + emuOffTemplate, emuOffCodeLow - emuOffTemplate, oracleRW, oracleShared, emuOffTemplate},
		{emuAltStack, emuAltSize, oracleRW, oracleAnon, 0},
		{EmuCodeLow, EmuCodeSize, oracleRX, oracleShared, emuOffCodeLow},
		{EmuCodeHigh, EmuCodeSize, oracleRX, oracleShared, emuOffCodeHigh},
		{EmuROAddr, EmuROSize, oracleR, oracleShared, emuOffRO},
		{EmuRWAddr, EmuRWSize, oracleRW, oracleShared, emuOffRW},
	})
	if err != nil {
		return err
	}
	// Signal stack, handler, empty signal mask.
	err = ch.installHandler(oracleSignals{
		scratch:     o.mem[emuOffCtrl+emuCtlScratch:],
		scratchAddr: emuCtrlAddr + emuCtlScratch,
		altStack:    emuAltStack,
		altSize:     emuAltSize,
		handler:     emuCtrlAddr + emuOffHarness + uint64(o.harness.handler),
		restorer:    emuCtrlAddr + emuOffHarness + uint64(o.harness.restorer),
	})
	if err != nil {
		return err
	}
	// Go: idle loop, FS and GS bases for the cases.
	o.seq = 1
	atomic.StoreUint32(o.word(emuOffCtrl+emuCtlSeq), 1)
	atomic.StoreUint32(o.word(emuOffCtrl+emuCtlDone), 0)
	err = ch.detach(emuCtrlAddr+emuOffHarness+uint64(o.harness.idle), func(regs *unix.PtraceRegs) {
		regs.Fs_base = EmuFSBase
		regs.Gs_base = EmuGSBase
	})
	if err != nil {
		return err
	}
	return o.waitDone(1)
}
