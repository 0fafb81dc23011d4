//go:build linux && amd64

package x86cpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

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
	// noncanonical is HostEntersNoncanonicalRSP: without it a case whose
	// rsp is not canonical is not run (EmuCPUResult.NotRun).
	noncanonical bool
}

// NewEmuOracle starts the child. It fails with an error wrapping the errno
// (EPERM, for example) when ptrace is not permitted.
func NewEmuOracle() (*EmuOracle, error) {
	h, err := buildEmuHarness()
	if err != nil {
		return nil, err
	}
	o := &EmuOracle{harness: h}
	if o.noncanonical, err = HostEntersNoncanonicalRSP(); err != nil {
		return nil, err
	}
	o.seqOff, o.doneOff = emuOffCtrl+x86hCtlSeq, emuOffCtrl+x86hCtlDone
	o.timeout, o.poll = emuBatchTimeout, emuPoll
	o.prepare = o.prepareChild
	o.timedOut = func() error { return fmt.Errorf("oracle batch: %w", ErrTimeout) }
	if err := o.start("probeopt-emu", emuFileSize, emuOffHarness, h.code); err != nil {
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
			le.PutUint64(rec[8*x86hGregOf[r]:], c.Init.GPR[r])
		}
		if o.notRun(c) {
			// Not started with its own rsp (see noncanonical_linux_amd64.go):
			// it runs with rsp 0 instead, and its result is not used.
			le.PutUint64(rec[8*x86hGregRSP:], 0)
		}
		le.PutUint64(rec[8*x86hGregRIP:], c.Init.RIP)
		le.PutUint64(rec[8*x86hGregFlags:], c.Init.RFLAGS&emuFlagsIn|0x202)
	}
	le.PutUint64(o.mem[emuOffCtrl+x86hCtlN:], uint64(len(cases)))
	if err := o.kick(); err != nil {
		return err
	}
	for i := range cases {
		o.result(i, &cases[i], &out[i])
	}
	return nil
}

// EntersNoncanonicalRSP reports whether the oracle can start a case whose
// rsp is not canonical: whether this host returns to user mode with such
// a stack pointer (HostEntersNoncanonicalRSP).
func (o *EmuOracle) EntersNoncanonicalRSP() bool { return o.noncanonical }

// notRun reports whether case c cannot be started on this host: its rsp
// is not canonical and the host does not enter user mode with one.
func (o *EmuOracle) notRun(c *EmuCase) bool {
	return !o.noncanonical && !hostCanonical(c.Init.GPR[4]) // rsp
}

// emuFlagsIn is the part of a case's RFLAGS that the case may choose.
const emuFlagsIn = 0x8d5 | 0x400

// result decodes the result record of case i.
func (o *EmuOracle) result(i int, c *EmuCase, r *EmuCPUResult) {
	le := binary.LittleEndian
	rec := o.mem[emuOffResults+i<<emuResultShift:]
	greg := func(k int) uint64 { return le.Uint64(rec[x86hResGregs+8*k:]) }
	*r = EmuCPUResult{
		Signal:  int(int32(le.Uint64(rec[x86hResSigno:]))),
		Code:    int(int32(le.Uint64(rec[x86hResCode:]))),
		Addr:    le.Uint64(rec[x86hResAddr:]),
		Trap:    int(greg(x86hGregTrap)),
		ErrCode: greg(x86hGregErr),
	}
	for k := 0; k < 16; k++ {
		r.State.GPR[k] = greg(x86hGregOf[k])
	}
	r.State.RIP = greg(x86hGregRIP)
	r.State.RFLAGS = greg(x86hGregFlags)
	r.State.FSBase, r.State.GSBase = c.Init.FSBase, c.Init.GSBase
	r.NotRun = o.notRun(c)
	n := int(le.Uint64(rec[emuResNDiff:]))
	r.WritesLost = n > emuMaxDiffs
	for k := 0; k < min(n, emuMaxDiffs); k++ {
		r.Writes = append(r.Writes, EmuMemWord{Addr: le.Uint64(rec[emuResDiffs+16*k:]), Val: le.Uint64(rec[emuResDiffs+16*k+8:])})
	}
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
