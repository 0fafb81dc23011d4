package qemu

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/probeopt/probeopt/emulate"
)

// The address space of the arm64 oracle. The code windows are filled with
// ARM64TrapWord, so that control reaching any of their words stops the
// case; branches beyond them fault on the fetch. Around the windows,
// reservations without access make every nearby address fault
// deterministically (qemu-user would otherwise let a guest read its own
// host memory).
const (
	// ARM64CodeAddr is the main code window, where the instructions under
	// test are placed; ARM64CodeSize is the size of every code window.
	ARM64CodeAddr = 0x10_0000_0000
	ARM64CodeSize = 0x10000
	// ARM64ROAddr is a read-only data page (ARM64ROSize bytes) right after
	// the main code window, within reach of its literal loads.
	ARM64ROAddr = ARM64CodeAddr + ARM64CodeSize
	ARM64ROSize = 0x1000
	// ARM64RWAddr is the read-write data window (ARM64RWSize bytes), after
	// the read-only page and followed by a page without access.
	ARM64RWAddr = ARM64ROAddr + ARM64ROSize
	ARM64RWSize = 0x2000
	// ARM64NearAddr is a code window 2 MiB above the main one: beyond the
	// reach of b.cond, cbz, tbz, adr and literal loads, within that of b.
	ARM64NearAddr = ARM64CodeAddr + 0x20_0000
	// ARM64MidAddr is a code window 256 MiB below the main one: beyond the
	// reach of b and bl, within that of adrp.
	ARM64MidAddr = ARM64CodeAddr - 0x1000_0000
	// ARM64FarAddr is a code window 6 GiB above the main one: beyond the
	// reach of every PC-relative form.
	ARM64FarAddr = ARM64CodeAddr + 0x1_8000_0000

	// ARM64TrapWord fills the code windows: brk #0xa64.
	ARM64TrapWord uint32 = 0xD4214C80

	// arm64Reserve is the half-size of the reservations around windows.
	arm64Reserve = 16 << 20
)

// ARM64CodeWindows lists the code windows, main one first.
var ARM64CodeWindows = []uint64{ARM64CodeAddr, ARM64NearAddr, ARM64MidAddr, ARM64FarAddr}

// Window kinds, as the harness knows them.
const (
	arm64WinReserve = 0 // no access
	arm64WinCode    = 1 // read+execute, trap-filled, patched per case
	arm64WinData    = 2 // restored after each case; changes reported
	arm64WinConst   = 3 // fixed content
)

// Protections.
const (
	arm64ProtRead  = 1
	arm64ProtWrite = 2
	arm64ProtExec  = 4
)

// arm64Window is one area of the oracle's address space.
type arm64Window struct {
	addr, size uint64
	kind       uint32
	prot       uint32
	content    []byte
}

// ARM64Image is the initial content of the oracle's address space: code
// windows full of trap words, a read-only page and a read-write window of
// seeded random bytes. Cases see it afresh: the harness restores the
// read-write window and the patched code words after each one.
type ARM64Image struct {
	// Seed is the seed of the data windows' content.
	Seed uint64
	win  []arm64Window
}

// NewARM64Image builds the image whose data windows hold bytes derived
// from seed.
func NewARM64Image(seed uint64) *ARM64Image {
	img := &ARM64Image{Seed: seed}
	code := make([]byte, ARM64CodeSize)
	for i := 0; i < len(code); i += 4 {
		binary.LittleEndian.PutUint32(code[i:], ARM64TrapWord)
	}
	r := newA64Rand(seed ^ 0x5eed_da7a)
	ro := make([]byte, ARM64ROSize)
	rw := make([]byte, ARM64RWSize)
	r.fill(ro)
	r.fill(rw)
	// Reservations first: the harness maps the windows over them.
	img.win = append(img.win,
		arm64Window{addr: ARM64CodeAddr - arm64Reserve, size: 2 * arm64Reserve, kind: arm64WinReserve},
		arm64Window{addr: ARM64MidAddr - arm64Reserve, size: 2 * arm64Reserve, kind: arm64WinReserve},
		arm64Window{addr: ARM64FarAddr - arm64Reserve, size: 2 * arm64Reserve, kind: arm64WinReserve},
	)
	for _, a := range ARM64CodeWindows {
		img.win = append(img.win, arm64Window{addr: a, size: ARM64CodeSize, kind: arm64WinCode, prot: arm64ProtRead | arm64ProtExec, content: code})
	}
	img.win = append(img.win,
		arm64Window{addr: ARM64ROAddr, size: ARM64ROSize, kind: arm64WinConst, prot: arm64ProtRead, content: ro},
		arm64Window{addr: ARM64RWAddr, size: ARM64RWSize, kind: arm64WinData, prot: arm64ProtRead | arm64ProtWrite, content: rw},
	)
	return img
}

// setup returns the harness's setup message.
func (img *ARM64Image) setup() []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write(le.AppendUint32(nil, 0x36344853))
	b.Write(le.AppendUint32(nil, uint32(len(img.win))))
	b.Write(make([]byte, 8))
	for _, w := range img.win {
		var d [24]byte
		le.PutUint64(d[0:], w.addr)
		le.PutUint64(d[8:], w.size)
		le.PutUint64(d[16:], uint64(w.kind)|uint64(w.prot)<<32)
		b.Write(d[:])
		if w.kind != arm64WinReserve {
			b.Write(w.content)
		}
	}
	return b.Bytes()
}

// window returns the window (not a reservation) holding a, or nil.
func (img *ARM64Image) window(a uint64) *arm64Window {
	for i := range img.win {
		w := &img.win[i]
		if w.kind != arm64WinReserve && a >= w.addr && a-w.addr < w.size {
			return w
		}
	}
	return nil
}

// ARM64Patch is an instruction word placed in a code window for one case.
type ARM64Patch struct {
	Addr uint64
	Word uint32
}

// ARM64Case is one case for the oracle: the code words to place and the
// state to start from (State.PC is where execution starts).
type ARM64Case struct {
	State emulate.ARM64State
	// Vec says the FP/SIMD registers are set from State.V and reported;
	// otherwise they start at zero and are not reported.
	Vec bool
	// Code is placed in the code windows for this case only.
	Code []ARM64Patch
}

// ARM64MemWord is a quadword of the read-write window after a case, at an
// 8-byte aligned address, that differs from the image.
type ARM64MemWord struct {
	Addr uint64
	Val  uint64
}

// ARM64Result is the state at the first signal after a case started.
type ARM64Result struct {
	// Signo, Code and Addr are the signal's number, si_code and si_addr
	// (SIGTRAP at the trap word that ends a case normally; SIGVTALRM for
	// a case stopped after 100-200 ms of CPU time, a loop).
	Signo, Code int
	Addr        uint64
	// State is the register file at the signal; NZCV holds pstate's
	// flags, PState the whole pstate.
	State  emulate.ARM64State
	PState uint64
	// Writes are the changed quadwords of the read-write window, in
	// address order; NWrites counts them all when there were more than the
	// harness reports (64).
	Writes  []ARM64MemWord
	NWrites int
}

// Signal numbers on Linux arm64.
const (
	sigILL    = 4
	sigTRAP   = 5
	sigBUS    = 7
	sigFPE    = 8
	sigSEGV   = 11
	sigVTALRM = 26
)

// QEMUOptions configure the arm64 oracle. Nil means defaults.
type QEMUOptions struct {
	// QEMU is the qemu-aarch64 executable; default "qemu-aarch64" on PATH.
	QEMU string
	// CPU is qemu's -cpu argument; default QEMUDefaultCPU.
	CPU string
	// CC and CacheDir are given to BuildQEMUHarness.
	CC, CacheDir string
}

// QEMUDefaultCPU is the CPU the oracle emulates: every feature qemu has
// except SVE and SME (whose registers would change the signal frame) and
// pointer authentication (so that the PAC hints are NOPs, as on a CPU
// without PAuth).
const QEMUDefaultCPU = "max,sve=off,sme=off,pauth=off"

// QEMUOracle is a harness process under qemu-aarch64 that runs batches of
// ARM64Case. It is not safe for concurrent use.
type QEMUOracle struct {
	img    *ARM64Image
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *lockedBuffer
	buf    []byte
	dead   error
}

// lockedBuffer collects the harness's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<16 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(l.b.String())
}

// errQEMU wraps failures of the oracle process.
var errQEMU = errors.New("arm64 oracle")

// StartQEMU builds (or finds cached) the harness and starts it under
// qemu-aarch64 with the address space of img. Errors wrap ErrNoToolchain
// when a tool is missing.
func StartQEMU(img *ARM64Image, opt *QEMUOptions) (*QEMUOracle, error) {
	var o QEMUOptions
	if opt != nil {
		o = *opt
	}
	if o.QEMU == "" {
		o.QEMU = "qemu-aarch64"
	}
	if o.CPU == "" {
		o.CPU = QEMUDefaultCPU
	}
	qemu, err := exec.LookPath(o.QEMU)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.QEMU, ErrNoToolchain)
	}
	exe, err := BuildQEMUHarness(o.CC, o.CacheDir)
	if err != nil {
		return nil, err
	}
	q := &QEMUOracle{img: img, stderr: &lockedBuffer{}}
	q.cmd = exec.Command(qemu, "-cpu", o.CPU, exe)
	q.cmd.Stderr = q.stderr
	q.in, err = q.cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errQEMU, err)
	}
	stdout, err := q.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errQEMU, err)
	}
	q.out = bufio.NewReaderSize(stdout, 1<<20)
	if err := q.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: start %s: %v", errQEMU, qemu, err)
	}
	if err := q.roundTrip(img.setup(), 30*time.Second, func() error {
		var m [4]byte
		if _, err := io.ReadFull(q.out, m[:]); err != nil {
			return err
		}
		if binary.LittleEndian.Uint32(m[:]) != 0x36344852 {
			return fmt.Errorf("bad reply to the setup")
		}
		return nil
	}); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

// Image returns the address space the oracle was started with.
func (q *QEMUOracle) Image() *ARM64Image { return q.img }

// roundTrip writes msg and runs read, killing the process when both take
// longer than timeout.
func (q *QEMUOracle) roundTrip(msg []byte, timeout time.Duration, read func() error) error {
	if q.dead != nil {
		return q.dead
	}
	t := time.AfterFunc(timeout, func() {
		if q.cmd.Process != nil {
			q.cmd.Process.Kill()
		}
	})
	defer t.Stop()
	werr := make(chan error, 1)
	go func() {
		_, err := q.in.Write(msg)
		werr <- err
	}()
	rerr := read()
	err := <-werr
	if rerr != nil {
		err = rerr
	}
	if err != nil {
		q.in.Close()
		q.cmd.Wait()
		msg := q.stderr.String()
		if !t.Stop() {
			msg = fmt.Sprintf("no answer within %v; %s", timeout, msg)
		}
		q.dead = fmt.Errorf("%w: harness under qemu failed: %v (%s)", errQEMU, err, msg)
		return q.dead
	}
	return nil
}

// Case and result record sizes.
const (
	a64CaseHdr = 8 + 34*8
	a64ResHdr  = 16 + 34*8 + 8
	a64VecSize = 512
)

// Run runs cases and stores their results in out (len(out) >=
// len(cases)). After an error the oracle is dead: start another.
func (q *QEMUOracle) Run(cases []ARM64Case, out []ARM64Result) error {
	if len(out) < len(cases) {
		return fmt.Errorf("%w: %d results for %d cases", errQEMU, len(out), len(cases))
	}
	le := binary.LittleEndian
	b := q.buf[:0]
	b = le.AppendUint32(b, 0x36344842)
	b = le.AppendUint32(b, uint32(len(cases)))
	b = le.AppendUint64(b, 0) // payload size, set below
	for i := range cases {
		c := &cases[i]
		flags := uint32(0)
		if c.Vec {
			flags = 1
		}
		if len(c.Code) > 64 {
			return fmt.Errorf("%w: case %d has %d code words, at most 64", errQEMU, i, len(c.Code))
		}
		b = le.AppendUint32(b, flags)
		b = le.AppendUint32(b, uint32(len(c.Code)))
		for _, x := range c.State.X {
			b = le.AppendUint64(b, x)
		}
		b = le.AppendUint64(b, c.State.SP)
		b = le.AppendUint64(b, c.State.PC)
		b = le.AppendUint64(b, c.State.NZCV)
		if c.Vec {
			for _, v := range c.State.V {
				b = le.AppendUint64(b, v[0])
				b = le.AppendUint64(b, v[1])
			}
		}
		for _, p := range c.Code {
			b = le.AppendUint64(b, p.Addr)
			b = le.AppendUint32(b, p.Word)
			b = le.AppendUint32(b, 0)
		}
	}
	le.PutUint32(b[8:], uint32(len(b)-16))
	q.buf = b
	timeout := 30*time.Second + time.Duration(len(cases))*250*time.Millisecond
	return q.roundTrip(b, timeout, func() error {
		var h [16]byte
		if _, err := io.ReadFull(q.out, h[:]); err != nil {
			return err
		}
		if le.Uint32(h[0:]) != 0x36344852 || int(le.Uint32(h[4:])) != len(cases) {
			return fmt.Errorf("bad batch reply")
		}
		payload := make([]byte, le.Uint32(h[8:]))
		if _, err := io.ReadFull(q.out, payload); err != nil {
			return err
		}
		return decodeA64Results(payload, cases, out)
	})
}

// decodeA64Results parses a batch of result records.
func decodeA64Results(p []byte, cases []ARM64Case, out []ARM64Result) error {
	le := binary.LittleEndian
	for i := range cases {
		if len(p) < a64ResHdr {
			return fmt.Errorf("short result %d", i)
		}
		r := &out[i]
		*r = ARM64Result{Writes: r.Writes[:0]}
		r.Signo = int(le.Uint32(p[0:]))
		r.Code = int(int32(le.Uint32(p[4:])))
		r.Addr = le.Uint64(p[8:])
		for k := 0; k < 31; k++ {
			r.State.X[k] = le.Uint64(p[16+8*k:])
		}
		r.State.SP = le.Uint64(p[16+31*8:])
		r.State.PC = le.Uint64(p[16+32*8:])
		r.PState = le.Uint64(p[16+33*8:])
		r.State.NZCV = r.PState & emulate.NZCVMask
		flags := le.Uint32(p[16+34*8:])
		nd := int(le.Uint32(p[20+34*8:]))
		p = p[a64ResHdr:]
		if flags&1 != 0 {
			if len(p) < a64VecSize {
				return fmt.Errorf("short result %d", i)
			}
			for k := 0; k < 32; k++ {
				r.State.V[k] = [2]uint64{le.Uint64(p[16*k:]), le.Uint64(p[16*k+8:])}
			}
			p = p[a64VecSize:]
		}
		r.NWrites = nd
		nd = min(nd, 64)
		if len(p) < 16*nd {
			return fmt.Errorf("short result %d", i)
		}
		for k := 0; k < nd; k++ {
			r.Writes = append(r.Writes, ARM64MemWord{Addr: le.Uint64(p[16*k:]), Val: le.Uint64(p[16*k+8:])})
		}
		p = p[16*nd:]
	}
	return nil
}

// Close stops the harness.
func (q *QEMUOracle) Close() error {
	if q.cmd == nil || q.cmd.Process == nil {
		return nil
	}
	q.in.Close()
	done := make(chan error, 1)
	go func() { done <- q.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		q.cmd.Process.Kill()
		<-done
	}
	q.cmd = nil
	if q.dead == nil {
		q.dead = fmt.Errorf("%w: closed", errQEMU)
	}
	return nil
}
