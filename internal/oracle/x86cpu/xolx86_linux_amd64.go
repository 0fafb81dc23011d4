//go:build linux && amd64

package x86cpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// xoBatchTimeout bounds one batch of the relocation oracle.
const xoBatchTimeout = 5 * time.Second

// XOLX86Oracle runs x86-64 code on the host CPU for the relocation
// campaign: an original instruction at its address and its relocated copy
// at a slot, from the same registers, vector state and memory, many runs
// per round trip.
//
// It keeps one child process (the current executable, stopped by ptrace
// before its first instruction, then stripped of every mapping) that runs
// only a small harness. The parent writes a batch (code windows, data,
// run records) into a memory file both map, bumps a futex word and sleeps;
// the child runs each run with the trap flag set, and a signal handler
// records the registers, the changed memory and the XSAVE image of the
// signal frame, restores the data and vector state, and starts the next
// run with rt_sigreturn. ptrace is used only to set the child up.
//
// The child is spawned and set up through proc, then detached: it runs
// untraced and dies with this process (see oracleHost).
//
// The methods are safe for concurrent use; batches run one at a time. A
// child that dies is replaced and the batch run once more; if it dies
// again, or a batch does not finish in time, Run fails with ErrChildDied
// or ErrTimeout.
type XOLX86Oracle struct {
	oracleHost
	harness xoHarnessCode
	fpSize  int
	fpBase  []byte    // the XSAVE image captured from the child
	xfeat   uint64    // state components in the image
	comp    [8][2]int // offset and size of components 2..7 (cpuid leaf 0xd)
}

// NewXOLX86Oracle starts the child. It fails with an error wrapping the
// errno (EPERM, for example) when ptrace is not permitted.
func NewXOLX86Oracle() (*XOLX86Oracle, error) {
	h, err := buildXOLHarness()
	if err != nil {
		return nil, err
	}
	o := &XOLX86Oracle{harness: h}
	o.timeout, o.prepare, o.spawned = xoBatchTimeout, o.prepareChild, o.capture
	o.timedOut = func() error { return &XOLX86TimeoutError{Run: int(o.ctl(x86hCtlCur))} }
	if err := o.start("probeopt-xol", xoFileSize, xoOffCtrl, xoOffHarness, h.code); err != nil {
		return nil, err
	}
	return o, nil
}

// Run runs the runs with memory image img and stores what happened in
// out[i] (len(out) >= len(runs)). It returns an error only when the oracle
// itself failed.
func (o *XOLX86Oracle) Run(img *XOLX86Image, runs []XOLX86Run, out []XOLX86Result) error {
	if len(out) < len(runs) {
		return fmt.Errorf("relocation oracle: %d results for %d runs", len(out), len(runs))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return ErrClosed
	}
	o.load(img)
	return o.runBatches(len(runs), xoMaxRuns, func() {
		// The run that killed the child may have left the data window
		// changed.
		o.load(img)
	}, func(lo, hi int) error {
		err := o.batch(runs[lo:hi], out[lo:hi])
		var te *XOLX86TimeoutError
		if errors.As(err, &te) {
			te.Run += lo
		}
		return err
	})
}

// load writes img into the shared file: code windows, data, the template
// of the read-write window and the XSAVE template.
func (o *XOLX86Oracle) load(img *XOLX86Image) {
	for w := range img.Code {
		copy(o.mem[xoOffCode+w*XOLX86WindowSize:], img.Code[w][:])
	}
	copy(o.mem[xoOffRO:], img.RO[:])
	copy(o.mem[xoOffRW:], img.RW[:])
	copy(o.mem[xoOffTemplate:], img.RW[:])
	o.vectors(img.VecSeed)
}

// vectors writes the XSAVE template: the captured image with random xmm,
// ymm and zmm registers and opmask registers, their components marked in
// use.
func (o *XOLX86Oracle) vectors(seed uint64) {
	fp := o.mem[xoOffFP : xoOffFP+o.fpSize]
	copy(fp, o.fpBase)
	r := rand.New(rand.NewPCG(seed, 0x766563746f7273))
	fill := func(b []byte) {
		for i := 0; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], r.Uint64())
		}
	}
	bv := binary.LittleEndian.Uint64(fp[512:])
	if o.xfeat&2 != 0 {
		fill(fp[160 : 160+256]) // xmm0-15
		bv |= 2
	}
	for c := 2; c <= 7; c++ {
		off, size := o.comp[c][0], o.comp[c][1]
		if c == 3 || c == 4 || o.xfeat&(1<<c) == 0 || size == 0 || off+size > len(fp) {
			continue // 3, 4: MPX, not vector state
		}
		fill(fp[off : off+size])
		bv |= 1 << c
	}
	binary.LittleEndian.PutUint64(fp[512:], bv)
}

// batch runs at most xoMaxRuns runs.
func (o *XOLX86Oracle) batch(runs []XOLX86Run, out []XOLX86Result) error {
	le := binary.LittleEndian
	for i := range runs {
		r := &runs[i]
		rec := o.mem[xoOffRuns+i<<xoRunShift:]
		putCaseRegs(rec, &r.Regs.GPR, r.Regs.RIP, r.Regs.RFLAGS)
		le.PutUint64(rec[xoRunLo:], r.Lo)
		le.PutUint64(rec[xoRunHi:], r.Hi)
	}
	le.PutUint64(o.mem[xoOffCtrl+x86hCtlN:], uint64(len(runs)))
	if err := o.kick(); err != nil {
		return err
	}
	for i := range runs {
		o.result(i, &out[i])
	}
	return nil
}

// ctl returns the control quadword at off.
func (o *XOLX86Oracle) ctl(off int) uint64 {
	return binary.LittleEndian.Uint64(o.mem[xoOffCtrl+off:])
}

// result decodes result record i.
func (o *XOLX86Oracle) result(i int, r *XOLX86Result) {
	rec := o.mem[xoOffResults+i<<xoResultShift:]
	h := readResultHead(rec)
	*r = XOLX86Result{Signal: h.signal, Code: h.code, Addr: h.addr, Trap: h.trap, ErrCode: h.errCode,
		Steps: int(binary.LittleEndian.Uint64(rec[xoResSteps:]))}
	r.Regs.GPR, r.Regs.RIP, r.Regs.RFLAGS = h.gpr, h.rip, h.rflags
	r.Writes, r.WritesLost = readWrites(rec, xoResNDiff, xoResDiffs, xoMaxDiffs)
	r.FP = append([]byte(nil), rec[xoResFP:xoResFP+o.fpSize]...)
}

// capture runs a batch of no runs in a new child, which captures the
// XSAVE image of a signal frame.
func (o *XOLX86Oracle) capture() error {
	// A batch of no runs captures the XSAVE image of a signal frame.
	le := binary.LittleEndian
	le.PutUint64(o.mem[xoOffCtrl+xoCtlCapture:], 1)
	le.PutUint64(o.mem[xoOffCtrl+x86hCtlN:], 0)
	if err := o.kick(); err != nil {
		return err
	}
	size := int(le.Uint64(o.mem[xoOffCtrl+xoCtlFPSize:]))
	if size < 576 || size > xoFPMax {
		o.kill()
		return fmt.Errorf("relocation oracle: XSAVE image of %d bytes (at most %d): %w", size, xoFPMax, ErrNotSupported)
	}
	o.fpSize = size
	o.fpBase = append([]byte(nil), o.mem[xoOffFP:xoOffFP+size]...)
	o.xfeat = le.Uint64(o.fpBase[472:]) // fx_sw_bytes.xfeatures
	return nil
}

// prepareChild maps the areas in the stopped child, removes everything
// else, reads the XSAVE layout with cpuid, installs the signal handler and
// lets the child go to its idle loop.
func (o *XOLX86Oracle) prepareChild(ch *oracleChild) error {
	if err := ch.mapHarness(xoCtrlAddr+xoOffHarness, xoOffHarness); err != nil {
		return err
	}
	areas := []oracleArea{
		{xoCtrlAddr, 0x1000, oracleRW, oracleShared, xoOffCtrl},
		{xoCtrlAddr + xoOffFP, xoOffCode - xoOffFP, oracleRW, oracleShared, xoOffFP},
		{xoAltStack, xoAltSize, oracleRW, oracleAnon, 0},
		{XOLX86ROAddr, XOLX86ROSize, oracleR, oracleShared, xoOffRO},
		{XOLX86RWAddr, XOLX86RWSize, oracleRW, oracleShared, xoOffRW},
	}
	for w, addr := range XOLX86Windows {
		areas = append(areas, oracleArea{addr, XOLX86WindowSize, oracleRX, oracleShared, uint64(xoOffCode + w*XOLX86WindowSize)})
	}
	if err := ch.mapAreas(areas); err != nil {
		return err
	}
	for c := 2; c <= 7; c++ {
		eax, ebx, err := ch.cpuid(xoCtrlAddr+xoOffHarness+uint64(o.harness.cpuid), 0xD, uint32(c))
		if err != nil {
			return err
		}
		o.comp[c] = [2]int{int(ebx), int(eax)}
	}
	return o.launch(ch, childLayout{
		ctrl: xoCtrlAddr, ctrlOff: xoOffCtrl, harness: xoCtrlAddr + xoOffHarness, entries: o.harness.x86hEntries,
		altStack: xoAltStack, altSize: xoAltSize,
	}, nil)
}
