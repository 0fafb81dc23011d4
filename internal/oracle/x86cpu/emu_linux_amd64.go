//go:build linux && amd64

package x86cpu

import (
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// emuBatchTimeout bounds one batch of the emulator oracle; the child is
// replaced after it.
const emuBatchTimeout = 10 * time.Second

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
// The child is spawned and set up through proc, then detached: it runs
// untraced and dies with this process (see oracleHost).
//
// The methods are safe for concurrent use; batches are served one at a
// time. If the child dies, it is replaced and the batch is run once more;
// if it dies again, or a batch does not finish within seconds, the batch
// fails with ErrChildDied or ErrTimeout (the child is replaced for the
// next one).
type EmuOracle struct {
	oracleHost
	harness emuHarnessCode
}

// NewEmuOracle starts the child. It fails with an error wrapping the errno
// (EPERM, for example) when ptrace is not permitted.
func NewEmuOracle() (*EmuOracle, error) {
	h, err := buildEmuHarness()
	if err != nil {
		return nil, err
	}
	o := &EmuOracle{harness: h}
	o.timeout, o.prepare = emuBatchTimeout, o.prepareChild
	o.timedOut = func() error { return fmt.Errorf("oracle batch: %w", ErrTimeout) }
	if err := o.start("probeopt-emu", emuFileSize, emuOffCtrl, emuOffHarness, h.code); err != nil {
		return nil, err
	}
	return o, nil
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
	return o.runBatches(len(cases), emuMaxBatch, nil, func(lo, hi int) error { return o.batch(cases[lo:hi], out[lo:hi]) })
}

// batch runs at most emuMaxBatch cases.
func (o *EmuOracle) batch(cases []EmuCase, out []EmuCPUResult) error {
	for i := range cases {
		c := &cases[i]
		rec := o.mem[emuOffCases+i<<emuCaseShift:]
		putCaseRegs(rec, &c.Init.GPR, c.Init.RIP, c.Init.RFLAGS)
		if o.notRun(c) {
			// Not started with its own rsp (see noncanonical_linux_amd64.go):
			// it runs with rsp 0 instead, and its result is not used.
			binary.LittleEndian.PutUint64(rec[8*x86hGregRSP:], 0)
		}
	}
	binary.LittleEndian.PutUint64(o.mem[emuOffCtrl+x86hCtlN:], uint64(len(cases)))
	if err := o.kick(); err != nil {
		return err
	}
	for i := range cases {
		o.result(i, &cases[i], &out[i])
	}
	return nil
}

// notRun reports whether case c cannot be started on this host: its rsp
// is not canonical and the host does not enter user mode with one.
func (o *EmuOracle) notRun(c *EmuCase) bool {
	return !o.noncanonical && !hostCanonical(c.Init.GPR[4]) // rsp
}

// result decodes the result record of case i.
func (o *EmuOracle) result(i int, c *EmuCase, r *EmuCPUResult) {
	rec := o.mem[emuOffResults+i<<emuResultShift:]
	h := readResultHead(rec)
	*r = EmuCPUResult{Signal: h.signal, Code: h.code, Addr: h.addr, Trap: h.trap, ErrCode: h.errCode, NotRun: o.notRun(c)}
	r.State.GPR, r.State.RIP, r.State.RFLAGS = h.gpr, h.rip, h.rflags
	r.State.FSBase, r.State.GSBase = c.Init.FSBase, c.Init.GSBase
	r.Writes, r.WritesLost = readWrites(rec, emuResNDiff, emuResDiffs, emuMaxDiffs)
}

// prepareChild maps the areas in the stopped child, removes everything
// else, installs the signal handler and lets the child go to its idle
// loop.
func (o *EmuOracle) prepareChild(ch *oracleChild) error {
	if err := ch.mapHarness(emuCtrlAddr+emuOffHarness, emuOffHarness); err != nil {
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
	// FS and GS bases for the cases.
	return o.launch(ch, childLayout{
		ctrl: emuCtrlAddr, ctrlOff: emuOffCtrl, harness: emuCtrlAddr + emuOffHarness, entries: o.harness.x86hEntries,
		altStack: emuAltStack, altSize: emuAltSize,
	}, func(regs *unix.PtraceRegs) {
		regs.Fs_base = EmuFSBase
		regs.Gs_base = EmuGSBase
	})
}
