//go:build linux && amd64

package fuzz

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// oracleHost is what the oracles that run code in a child process share:
// the child, the goroutine locked to the OS thread that started it
// (ptrace requests must come from that thread, and the child is killed
// when it ends, so it is never handed back to the runtime), the memory
// file both map, the handshake of a batch on two futex words of the file,
// and the replacement of a child that dies or hangs.
//
// The oracle fills in the hooks before the first spawn; mu guards the
// rest.
type oracleHost struct {
	mu       sync.Mutex
	closed   bool
	keeper   chan func()   // work for the thread that owns the child
	exited   chan struct{} // closed when that thread has ended
	exe      string
	memfd    int
	mem      []byte // the shared file, mapped read-write
	pid      int
	seq      uint32
	restarts int

	// seqOff and doneOff are the futex words in the file: the parent
	// bumps seq to start a batch, the child sets done to it when the
	// batch is over.
	seqOff, doneOff int
	// timeout bounds a batch; poll is how often a waiting parent checks
	// that the child lives.
	timeout, poll time.Duration
	// prepare readies a child stopped before its first instruction (its
	// areas, its signal handler) and lets it go to its idle loop.
	prepare func(ch *oracleChild) error
	// spawned, when set, runs after each child is ready.
	spawned func() error
	// timedOut returns the error of a batch that did not finish in time.
	timedOut func() error
}

// open creates the shared file of size bytes, maps it and starts the
// keeper thread. On failure everything is released.
func (h *oracleHost) open(name string, size int) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find executable for the oracle child: %w", err)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("create shared file: %w", err)
	}
	h.exe, h.memfd = exe, fd
	h.keeper, h.exited = make(chan func()), make(chan struct{})
	go h.keep()
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

// keep runs the closures sent to h.keeper on one locked thread until the
// channel is closed, and never unlocks it, so the runtime ends the thread
// with the goroutine.
func (h *oracleHost) keep() {
	runtime.LockOSThread()
	defer close(h.exited)
	for f := range h.keeper {
		f()
	}
}

// release kills the child, ends the keeper thread, and unmaps and closes
// the shared file.
func (h *oracleHost) release() {
	h.kill()
	if h.keeper != nil {
		close(h.keeper)
		<-h.exited
		h.keeper = nil
	}
	if h.mem != nil {
		_ = unix.Munmap(h.mem)
		h.mem = nil
	}
	if h.memfd >= 0 {
		_ = unix.Close(h.memfd)
		h.memfd = -1
	}
}

// kill kills and reaps the child, if any.
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
	ts := unix.NsecToTimespec(int64(h.poll))
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

// spawn starts and prepares a child on the keeper thread, then runs the
// spawned hook.
func (h *oracleHost) spawn() error {
	errc := make(chan error, 1)
	h.keeper <- func() { errc <- h.setup() }
	if err := <-errc; err != nil {
		return err
	}
	if h.spawned != nil {
		return h.spawned()
	}
	return nil
}

// setup forks the child and prepares it; on failure the child is killed.
func (h *oracleHost) setup() error {
	pid, err := startOracleChild(h.exe, h.memfd)
	if err != nil {
		return err
	}
	h.pid = pid
	ch := &oracleChild{pid: pid, mem: -1}
	err = h.prepare(ch)
	if ch.mem >= 0 {
		_ = unix.Close(ch.mem)
	}
	if err != nil {
		h.kill()
		return err
	}
	return nil
}
