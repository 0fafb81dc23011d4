//go:build linux && amd64

package x86cpu

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// oracleHost is what the oracles that run code in a child process share:
// the child (started and prepared through proc, then running untraced),
// the memory file both map, the life pipe that kills the child when the
// parent ends (see child_linux_amd64.go), the handshake of a batch on two
// futex words of the file, and the replacement of a child that dies or
// hangs.
//
// The oracle fills in the hooks before the first spawn; mu guards the
// rest.
type oracleHost struct {
	mu       sync.Mutex
	closed   bool
	exe      string
	shared   *os.File // the memory file
	mem      []byte   // the shared file, mapped read-write
	lifeR    *os.File // read end of the life pipe, given to each child
	lifeW    *os.File // its write end, held only by this process
	pid      int
	seq      uint32
	restarts int

	// seqOff and doneOff are the futex words in the file: the parent
	// bumps seq to start a batch, the child sets done to it when the
	// batch is over.
	seqOff, doneOff int
	// timeout bounds a batch.
	timeout time.Duration
	// noncanonical is HostEntersNoncanonicalRSP: without it a case whose
	// rsp is not canonical is not started with it.
	noncanonical bool
	// prepare readies a child stopped before its first instruction (its
	// areas, its signal handler) and lets it go to its idle loop.
	prepare func(ch *oracleChild) error
	// spawned, when set, runs after each child is ready.
	spawned func() error
	// timedOut returns the error of a batch that did not finish in time.
	timedOut func() error
}

// open creates the shared file of size bytes, maps it and creates the life
// pipe. On failure everything is released.
func (h *oracleHost) open(name string, size int) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find executable for the oracle child: %w", err)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("create shared file: %w", err)
	}
	h.exe, h.shared = exe, os.NewFile(uintptr(fd), name)
	if h.lifeR, h.lifeW, err = os.Pipe(); err != nil {
		h.release()
		return fmt.Errorf("create life pipe: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		h.release()
		return fmt.Errorf("size shared file: %w", err)
	}
	if h.mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		h.release()
		return fmt.Errorf("map shared file: %w", err)
	}
	return nil
}

// oraclePoll is how often a parent waiting for a batch checks that the
// child lives.
const oraclePoll = 50 * time.Millisecond

// start creates the shared file (open), puts the harness code at offset
// harnessOff in it and spawns the first child; the futex words are those
// of the control page at ctrlOff. On failure everything is released.
func (h *oracleHost) start(name string, size, ctrlOff, harnessOff int, code []byte) error {
	var err error
	if h.noncanonical, err = HostEntersNoncanonicalRSP(); err != nil {
		return err
	}
	h.seqOff, h.doneOff = ctrlOff+x86hCtlSeq, ctrlOff+x86hCtlDone
	if err := h.open(name, size); err != nil {
		return err
	}
	copy(h.mem[harnessOff:], code)
	if err := h.spawn(); err != nil {
		h.release()
		return err
	}
	return nil
}

// Close kills the child and releases the shared file. Calls after Close
// fail with ErrClosed.
func (h *oracleHost) Close() error {
	h.close()
	return nil
}

// Restarts returns how many times the child had to be replaced.
func (h *oracleHost) Restarts() int { return h.restartCount() }

// EntersNoncanonicalRSP reports whether the oracle can start a case (or
// let a run go on) with a non-canonical rsp: whether this host returns to
// user mode with such a stack pointer (HostEntersNoncanonicalRSP).
func (h *oracleHost) EntersNoncanonicalRSP() bool { return h.noncanonical }

// close kills the child and releases the shared file.
func (h *oracleHost) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		h.release()
	}
}

// restartCount returns how many times the child had to be replaced.
func (h *oracleHost) restartCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.restarts
}

// release kills the child, and unmaps and closes the shared file and the
// life pipe.
func (h *oracleHost) release() {
	h.kill()
	if h.mem != nil {
		_ = unix.Munmap(h.mem)
		h.mem = nil
	}
	for _, f := range []**os.File{&h.shared, &h.lifeR, &h.lifeW} {
		if *f != nil {
			_ = (*f).Close()
			*f = nil
		}
	}
}

// kill kills and reaps the child, if any. The child runs untraced (it was
// detached), and is a child of this process: any thread reaps it.
func (h *oracleHost) kill() {
	if h.pid <= 0 {
		return
	}
	_ = unix.Kill(h.pid, unix.SIGKILL)
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(h.pid, &ws, unix.WALL, nil)
		if err != unix.EINTR {
			break
		}
	}
	h.pid = 0
}

// word returns a pointer to the 32-bit word at off in the shared file.
func (h *oracleHost) word(off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&h.mem[off]))
}

// kick starts a batch and waits until it is done.
func (h *oracleHost) kick() error {
	h.seq++
	seq := h.seq
	atomic.StoreUint32(h.word(h.seqOff), seq)
	if err := oracleFutex(h.word(h.seqOff), oracleFutexWake, 1, nil); err != nil {
		return fmt.Errorf("wake oracle child: %w", err)
	}
	return h.waitDone(seq)
}

// waitDone sleeps until the child reports batch seq done. A child that
// dies or times out is replaced and the batch fails.
func (h *oracleHost) waitDone(seq uint32) error {
	done := h.word(h.doneOff)
	deadline := time.Now().Add(h.timeout)
	ts := unix.NsecToTimespec(int64(oraclePoll))
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
		pid, err := unix.Wait4(h.pid, &ws, unix.WNOHANG|unix.WALL, nil)
		if err == nil && pid == h.pid && (ws.Exited() || ws.Signaled()) {
			h.pid = 0
			return h.replace(fmt.Errorf("oracle child: %s: %w", describeWait(ws), ErrChildDied))
		}
		if time.Now().After(deadline) {
			return h.replace(h.timedOut())
		}
	}
}

// replace kills the child, starts a new one and returns cause (or the
// error of the restart, after which the oracle is closed).
func (h *oracleHost) replace(cause error) error {
	h.kill()
	h.restarts++
	if err := h.spawn(); err != nil {
		h.closed = true
		return fmt.Errorf("restart oracle child: %w (after %w)", err, cause)
	}
	return cause
}

// spawn starts and prepares a child, then runs the spawned hook.
func (h *oracleHost) spawn() error {
	if err := h.setup(); err != nil {
		return err
	}
	if h.spawned != nil {
		return h.spawned()
	}
	return nil
}

// setup starts the child traced and prepares it; the child is detached at
// the end of prepare. On failure the child is killed.
func (h *oracleHost) setup() error {
	ch, err := startOracleChild(h.exe, h.shared, h.lifeR)
	if err != nil {
		return err
	}
	h.pid = ch.pid
	if err := h.prepare(ch); err != nil {
		ch.kill()
		h.kill()
		return err
	}
	return nil
}

// childLayout is where an oracle placed, in its child, what the shared
// harness needs: the control page (at ctrl, from file offset ctrlOff),
// the harness code and its entry points, and the signal stack.
type childLayout struct {
	ctrl, ctrlOff     uint64
	harness           uint64
	entries           x86hEntries
	altStack, altSize uint64
}

// launch ends the preparation of a child whose areas are mapped: it
// installs the harness's signal handler (signal stack, empty signal mask),
// resets the control words, lets the child go to the idle loop with the
// registers edit sets (nil: as they are), and waits until it reports the
// empty first batch done.
func (h *oracleHost) launch(ch *oracleChild, l childLayout, edit func(*unix.PtraceRegs)) error {
	err := ch.installHandler(oracleSignals{
		scratch:     h.mem[l.ctrlOff+x86hCtlScratch:],
		scratchAddr: l.ctrl + x86hCtlScratch,
		altStack:    l.altStack,
		altSize:     l.altSize,
		handler:     l.harness + uint64(l.entries.handler),
		restorer:    l.harness + uint64(l.entries.restorer),
	})
	if err != nil {
		return err
	}
	h.seq = 1
	atomic.StoreUint32(h.word(int(l.ctrlOff)+x86hCtlSeq), 1)
	atomic.StoreUint32(h.word(int(l.ctrlOff)+x86hCtlDone), 0)
	binary.LittleEndian.PutUint64(h.mem[l.ctrlOff+x86hCtlRunning:], 0)
	if err := ch.detach(l.harness+uint64(l.entries.idle), edit); err != nil {
		return err
	}
	return h.waitDone(1)
}
