//go:build linux && amd64

package guardian

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/proc"
)

// envServe is set in the environment of the re-executed program that
// serves as a guardian (see the package documentation).
const envServe = "PROBEOPT_GUARDIAN_SERVE"

// The guardian's inherited descriptors.
const (
	fdLog   = 3 // the shared undo log (a memfd)
	fdDeath = 4 // read end of a pipe whose write end only the tracer holds
	fdReady = 5 // write end of a pipe: one byte once the guardian is ready
)

// DefaultRecords is the capacity of a log when Options.Records is 0.
const DefaultRecords = 1 << 17

// Options tune Start. A nil *Options means the defaults.
type Options struct {
	// Records is the capacity of the undo log, in records; 0 means
	// DefaultRecords (the log is sparse: its pages exist once written).
	Records int
	// Stderr receives the guardian's report when it restores a process;
	// nil means the tracer's standard error.
	Stderr *os.File
}

// Guard is the tracer's side of a guardian watching one process. Its
// methods are safe for concurrent use.
type Guard struct {
	pid  int
	mem  []byte // the shared log, mapped
	cap  int
	cmd  *exec.Cmd
	done chan struct{} // closed once the guardian exited
	err  error         // its exit error, after done

	mu     sync.Mutex
	death  *os.File // write end of the death pipe; nil once released
	closed bool
}

// Start starts a guardian for process pid: a child of the calling program
// (the program's own executable run again, in a session of its own) that
// restores every byte recorded in the log if the calling program dies
// before Release. The caller records a range before it writes it (Record).
// The process must have been seized with proc.Options.StopLatch, so that
// it stops when its tracer dies.
func Start(pid int, opts *Options) (*Guard, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Records <= 0 {
		o.Records = DefaultRecords
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	size := headerSize + o.Records*recordSize
	fd, err := unix.MemfdCreate("probeopt-guardian", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("guardian for %d: create the log: %w", pid, err)
	}
	logf := os.NewFile(uintptr(fd), "probeopt-guardian-log")
	defer logf.Close()
	if err := logf.Truncate(int64(size)); err != nil {
		return nil, fmt.Errorf("guardian for %d: size the log: %w", pid, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("guardian for %d: map the log: %w", pid, err)
	}
	binary.LittleEndian.PutUint64(mem[offPid:], uint64(pid))
	binary.LittleEndian.PutUint64(mem[offCap:], uint64(o.Records))
	binary.LittleEndian.PutUint64(mem[offMagic:], logMagic)
	g := &Guard{pid: pid, mem: mem, cap: o.Records, done: make(chan struct{})}
	fail := func(err error) (*Guard, error) {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("guardian for %d: %w", pid, err)
	}
	deathR, deathW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		deathR.Close()
		deathW.Close()
		return fail(err)
	}
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{exe, "probeopt-guardian", strconv.Itoa(pid)},
		Env:         append(os.Environ(), envServe+"=1"),
		ExtraFiles:  []*os.File{logf, deathR, readyW},
		Stderr:      o.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	deathR.Close()
	readyW.Close()
	if err != nil {
		readyR.Close()
		deathW.Close()
		return fail(fmt.Errorf("start: %w", err))
	}
	g.cmd, g.death = cmd, deathW
	go func() {
		g.err = cmd.Wait()
		close(g.done)
	}()
	// The guardian says it is ready once it has mapped the log; EOF
	// means it died first.
	_ = readyR.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	_, err = io.ReadFull(readyR, b[:])
	readyR.Close()
	if err != nil {
		deathW.Close()
		<-g.done
		return fail(fmt.Errorf("not ready: %w (exit: %v)", err, g.err))
	}
	return g, nil
}

// Pid returns the process id of the guardian.
func (g *Guard) Pid() int { return g.cmd.Process.Pid }

// Record appends records to the log. Call it before the ranges are
// written: a record of a range that keeps its original bytes restores
// nothing.
func (g *Guard) Record(recs ...Record) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("record in the log of %d: %w", g.pid, os.ErrClosed)
	}
	count := int(g.loadCount())
	if count+len(recs) > g.cap {
		return fmt.Errorf("record %d ranges of %d (%d of %d used): %w", len(recs), g.pid, count, g.cap, ErrFull)
	}
	for i, r := range recs {
		off := headerSize + (count+i)*recordSize
		if err := encodeRecord(g.mem[off:off+recordSize], r); err != nil {
			return err
		}
	}
	// Published: the guardian reads the count, then the records below it.
	atomic.StoreUint64(g.countPtr(), uint64(count+len(recs)))
	return nil
}

func (g *Guard) countPtr() *uint64 { return (*uint64)(unsafe.Pointer(&g.mem[offCount])) }
func (g *Guard) loadCount() uint64 { return atomic.LoadUint64(g.countPtr()) }

// Borrow records that a remote system call borrows thread tid, whose
// registers before it are saved: a guardian that restores the process
// puts them back (the tracer died in the middle of the call).
func (g *Guard) Borrow(tid int, saved *proc.Regs) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(saved)), unsafe.Sizeof(*saved))
	atomic.StoreUint64(g.borrowPtr(), 0)
	copy(g.mem[offBorrowRegs:offBorrowRegs+maxRegs], b)
	atomic.StoreUint64(g.borrowPtr(), uint64(tid))
}

// Serving records the registers the tracer is about to give thread tid
// as it serves the trap the thread took at a trap site (an emulated
// instruction's result), before it sets them. A thread the guardian
// finds just past a trap site whose instruction is one byte long either
// took the int3 and waits to be served (it is sent back to the site) or
// was served and not resumed yet (it is left as it is): these registers
// tell the two apart.
func (g *Guard) Serving(tid int, regs *proc.Regs) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	p := (*uint64)(unsafe.Pointer(&g.mem[offServe]))
	atomic.StoreUint64(p, 0)
	copy(g.mem[offServeRegs:offServeRegs+maxRegs], unsafe.Slice((*byte)(unsafe.Pointer(regs)), unsafe.Sizeof(*regs)))
	atomic.StoreUint64(p, uint64(tid))
}

// Return records that the borrowed thread has its registers back.
func (g *Guard) Return() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		atomic.StoreUint64(g.borrowPtr(), 0)
	}
}

// Stepping records that the tracer single-steps thread tid, or, with 0,
// that the step's stop is collected: a guardian that restores the process
// discards the SIGTRAP that step leaves the thread (the tracer died before
// its wait collected the stop).
func (g *Guard) Stepping(tid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&g.mem[offStep])), uint64(tid))
	}
}

// The registers fit in the log's header.
var _ [maxRegs - unsafe.Sizeof(proc.Regs{})]byte

func (g *Guard) borrowPtr() *uint64 { return (*uint64)(unsafe.Pointer(&g.mem[offBorrow])) }

// Reset empties the log: the process replaced its image (exec), and the
// ranges recorded name addresses of the old one.
func (g *Guard) Reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		atomic.StoreUint64(g.countPtr(), 0)
	}
}

// Release tells the guardian that the process no longer needs it (it was
// detached cleanly, or it exited) and waits until the guardian is gone.
func (g *Guard) Release() error { return g.end(stateReleased) }

// Restore asks the guardian to restore the process now, as if the tracer
// had died, and waits until it has. The caller must not trace the process
// any more (the guardian seizes it).
func (g *Guard) Restore() error { return g.end(stateActive) }

func (g *Guard) end(state uint64) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		<-g.done
		return nil
	}
	g.closed = true
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&g.mem[offState])), state)
	g.death.Close()
	g.mu.Unlock()
	var err error
	select {
	case <-g.done:
		err = g.err
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
		err = fmt.Errorf("guardian of %d did not finish", g.pid)
	}
	_ = unix.Munmap(g.mem)
	if err != nil {
		return fmt.Errorf("guardian of %d: %w", g.pid, err)
	}
	return nil
}

// init turns the program into a guardian when it was started as one: the
// guardian is the tracer's own executable run again, so that a program that
// uses the library guards its processes without any file of ours.
func init() {
	if os.Getenv(envServe) == "" {
		return
	}
	os.Exit(serve())
}

// serve is the guardian: it waits for the tracer's death and restores the
// process. Its exit code is 0 when nothing was left to restore or every
// byte was restored.
func serve() int {
	_ = os.Unsetenv(envServe)
	logf := os.NewFile(fdLog, "log")
	death := os.NewFile(fdDeath, "death")
	ready := os.NewFile(fdReady, "ready")
	st, err := logf.Stat()
	if err != nil {
		fmt.Fprintf(os.Stderr, "probeopt guardian: %v\n", err)
		return 2
	}
	mem, err := unix.Mmap(fdLog, 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probeopt guardian: map the log: %v\n", err)
		return 2
	}
	logf.Close()
	if binary.LittleEndian.Uint64(mem[offMagic:]) != logMagic {
		fmt.Fprintf(os.Stderr, "probeopt guardian: %v\n", ErrBadLog)
		return 2
	}
	pid := int(binary.LittleEndian.Uint64(mem[offPid:]))
	_, _ = ready.Write([]byte{1})
	ready.Close()
	// Only the tracer holds the write end: EOF comes when it closes it
	// (Release, Restore) or when it is gone, however it died.
	var b [1]byte
	for {
		if _, err := death.Read(b[:]); err != nil {
			break
		}
	}
	if atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[offState]))) == stateReleased {
		return 0
	}
	recs, err := readLog(mem)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probeopt guardian: process %d: %v\n", pid, err)
		return 1
	}
	rep, err := restore(pid, recs, readInFlight(mem), time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probeopt guardian: process %d: %v\n", pid, err)
		return 1
	}
	if rep != (Report{}) {
		fmt.Fprintf(os.Stderr, "probeopt guardian: the tracer of process %d is gone: restored %d bytes in %d ranges; %d threads sent back to their trap sites, %d late traps served, %d borrowed threads given their registers back, %d single steps' traps discarded; %d ranges left as the program has them\n",
			pid, rep.Bytes, rep.Ranges, rep.Rewound, rep.Late, rep.Returned, rep.StepTraps, rep.Left)
	}
	return 0
}

// readLog returns the published records of a mapped log.
func readLog(mem []byte) ([]Record, error) {
	n := int(atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[offCount]))))
	capacity := int(binary.LittleEndian.Uint64(mem[offCap:]))
	if n > capacity || headerSize+n*recordSize > len(mem) {
		return nil, fmt.Errorf("%d records in a log of %d: %w", n, capacity, ErrBadLog)
	}
	recs := make([]Record, 0, n)
	for i := 0; i < n; i++ {
		off := headerSize + i*recordSize
		r, err := decodeRecord(mem[off : off+recordSize])
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// inFlight is what the tracer was doing to a thread when it died.
type inFlight struct {
	// borrowed is the thread a remote system call had borrowed (0 for
	// none), saved its registers before the call.
	borrowed int
	saved    *proc.Regs
	// stepped is the thread in a single step whose stop the tracer had
	// not collected (0 for none).
	stepped int
	// served is the thread whose trap the tracer served last (0 for
	// none), given the registers servedRegs (see Guard.Serving).
	served     int
	servedRegs *proc.Regs
}

// wasServed reports whether thread tid stands with the registers the
// tracer gave it when it served its trap: the same general registers,
// stack pointer and instruction pointer.
func (f inFlight) wasServed(tid int, r *proc.Regs) bool {
	s := f.servedRegs
	return f.served == tid && s != nil && s.Rip == r.Rip && s.Rsp == r.Rsp &&
		s.Rax == r.Rax && s.Rbx == r.Rbx && s.Rcx == r.Rcx && s.Rdx == r.Rdx && s.Rsi == r.Rsi && s.Rdi == r.Rdi && s.Rbp == r.Rbp &&
		s.R8 == r.R8 && s.R9 == r.R9 && s.R10 == r.R10 && s.R11 == r.R11 && s.R12 == r.R12 && s.R13 == r.R13 && s.R14 == r.R14 && s.R15 == r.R15
}

// readInFlight returns the threads the tracer was working on when it died.
func readInFlight(mem []byte) inFlight {
	f := inFlight{stepped: int(atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[offStep]))))}
	f.borrowed = int(atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[offBorrow]))))
	if f.borrowed != 0 {
		f.saved = new(proc.Regs)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(f.saved)), unsafe.Sizeof(*f.saved)), mem[offBorrowRegs:offBorrowRegs+maxRegs])
	}
	f.served = int(atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[offServe]))))
	if f.served != 0 {
		f.servedRegs = new(proc.Regs)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(f.servedRegs)), unsafe.Sizeof(*f.servedRegs)), mem[offServeRegs:offServeRegs+maxRegs])
	}
	return f
}

// Report says what a restore did.
type Report struct {
	Bytes, Ranges int // bytes and contiguous ranges written back
	Rewound       int // threads sent back from just past a breakpoint to its site
	Late          int // traps taken just before the restore, served after it
	Left          int // recorded ranges that hold bytes other than the tracer's or the file's, left alone
	Returned      int // threads given back the registers a remote system call had replaced
	StepTraps     int // SIGTRAPs of a single step the tracer had made, discarded
}

// restore seizes process pid as soon as its former tracer has let it go
// (within wait), and in one stop: gives the thread a remote system call
// had borrowed (f.borrowed, 0 for none) its registers from before the call
// (f.saved), discards the SIGTRAP of the single step the tracer had made
// (f.stepped; see handlerFrame), sends every thread that stands just past
// a breakpoint of a trap site back to the site, clears a trap flag left by
// a single step, and writes back every byte of recs where memory holds the
// tracer's. It then ends the latch's group stop (SIGCONT), serves the
// breakpoint traps taken in the instant before the process stopped (the
// thread goes back to the site, where the original instruction is now),
// and detaches. A process that is gone needs nothing.
func restore(pid int, recs []Record, f inFlight, wait time.Duration) (Report, error) {
	var rep Report
	var p *proc.Process
	deadline := time.Now().Add(wait)
	for {
		var err error
		p, err = proc.Attach(pid, nil)
		if err == nil {
			break
		}
		if errors.Is(err, proc.ErrExited) {
			return rep, nil
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("seize: %w", err)
		}
		time.Sleep(200 * time.Microsecond) // the dying tracer still holds it
	}
	var pl *plan
	rewound := map[int]uint64{}
	late := false
	_, err := p.Stopped(func(w *proc.World) error {
		pl = makePlan(w, recs)
		var err error
		rep, err = restoreStopped(w, pl, rewound, f)
		late = trapPending(pid)
		return err
	})
	if err == nil && late {
		// A thread ran an int3 in the instant between the tracer's end
		// and its stop: its SIGTRAP is queued. Serve it, then detach.
		err = serveLate(p, pid, pl, rewound, &rep)
	}
	derr := p.Detach()
	_ = unix.Kill(pid, unix.SIGCONT) // end the latch's group stop
	if errors.Is(err, proc.ErrExited) {
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	if derr != nil && !errors.Is(derr, proc.ErrExited) {
		return rep, fmt.Errorf("detach: %w", derr)
	}
	return rep, nil
}

// serveLate lets the process run under the guardian until the SIGTRAP of
// every breakpoint it ran before the restore has been taken: the thread
// is sent back to the site, where the original instruction is now.
func serveLate(p *proc.Process, pid int, pl *plan, rewound map[int]uint64, rep *Report) error {
	_, err := p.SetTrapHandler(func(ctx *proc.TrapContext) proc.TrapAction {
		switch {
		case pl.traps[ctx.Addr]:
			ctx.Regs.SetPC(ctx.Addr)
		case rewound[ctx.Tid] == ctx.Regs.PC() && ctx.Regs.PC() != 0:
			// Sent back to the site already; the trap it took there
			// is all that is left.
			delete(rewound, ctx.Tid)
		default:
			return proc.TrapPass
		}
		rep.Late++
		return proc.TrapResume
	})
	if err != nil {
		return err
	}
	_ = unix.Kill(pid, unix.SIGCONT)
	if err := p.Resume(); err != nil {
		return err
	}
	return p.DrainTraps(time.Millisecond)
}

// trapPending reports whether a thread of process pid has a SIGTRAP
// queued.
func trapPending(pid int) bool {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil && threadTrapPending(pid, tid) {
			return true
		}
	}
	return false
}

// threadTrapPending reports whether thread tid of process pid has a
// SIGTRAP queued (SigPnd or ShdPnd of /proc/PID/task/TID/status).
func threadTrapPending(pid, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		for _, k := range []string{"SigPnd:", "ShdPnd:"} {
			if v, ok := strings.CutPrefix(l, k); ok {
				m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err == nil && m&(1<<(unix.SIGTRAP-1)) != 0 {
					return true
				}
			}
		}
	}
	return false
}

// trapFlag is the x86-64 EFLAGS single-step bit.
const trapFlag = 1 << 8

// The x86-64 signal frame the kernel builds for a handler (struct
// rt_sigframe): at the stack pointer the return address (the
// sigaction's restorer, which calls rt_sigreturn), then a ucontext, then
// the siginfo. The handler is entered with the signal in rdi, the
// siginfo's address in rsi and the ucontext's in rdx.
const (
	ucontextSize = 304    // struct ucontext: flags, link, stack, sigcontext, mask
	ucGregs      = 40     // the sigcontext's general registers, in ucontext
	nGregs       = 18     // r8 ... r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags
	gRip, gFlags = 16, 17 // their indexes
	trapBrkpt    = 1      // si_code of a step over a system call (TRAP_BRKPT)
	trapTrace    = 2      // si_code of the trap flag's debug trap (TRAP_TRACE)
	siKernel     = 0x80   // si_code of an int3's trap
)

// handlerFrame is the signal frame of a thread stopped at the first
// instruction of a SIGTRAP handler: the tracer died with the thread in a
// trap stop it had not collected, the kernel delivered that stop's
// SIGTRAP as it detached the thread, and the stop latch stopped the
// thread before the handler ran (the trap guard's handler, or the
// program's own: the Go runtime's would end the program).
type handlerFrame struct {
	uc, restorer uint64
	// code is the siginfo's si_code, which the kernel writes only for an
	// SA_SIGINFO handler (the trap guard's, the Go runtime's): info says
	// whether it did.
	code  uint32
	info  bool
	gregs [nGregs]uint64
}

// readHandlerFrame returns the frame of the thread whose registers are r
// when it stands at the first instruction of a SIGTRAP handler.
func readHandlerFrame(w *proc.World, r *proc.Regs) (*handlerFrame, bool) {
	uc := r.Rsp + 8
	if r.Rdi != uint64(unix.SIGTRAP) || r.Rdx != uc || r.Rsi != uc+ucontextSize {
		return nil, false
	}
	var info [12]byte
	var ret [8]byte
	var gregs [nGregs * 8]byte
	if w.ReadMemory(r.Rsi, info[:]) != nil || w.ReadMemory(r.Rsp, ret[:]) != nil || w.ReadMemory(uc+ucGregs, gregs[:]) != nil {
		return nil, false
	}
	f := &handlerFrame{uc: uc, restorer: binary.LittleEndian.Uint64(ret[:])}
	if f.restorer == 0 {
		return nil, false // no restorer to return through
	}
	if binary.LittleEndian.Uint32(info[0:]) == uint32(unix.SIGTRAP) {
		f.code, f.info = binary.LittleEndian.Uint32(info[8:]), true
	}
	for i := range f.gregs {
		f.gregs[i] = binary.LittleEndian.Uint64(gregs[8*i:])
	}
	return f, true
}

// step reports whether the frame's SIGTRAP may be a single step's.
func (f *handlerFrame) step() bool { return !f.info || f.code == trapBrkpt || f.code == trapTrace }

// breakpoint reports whether the frame's SIGTRAP may be an int3's.
func (f *handlerFrame) breakpoint() bool { return !f.info || f.code == siKernel }

// setRegs puts s in the frame's general registers, an interrupted system
// call of the thread's own restarted as the kernel would have when the
// thread returned to user mode with no handler to run.
func (f *handlerFrame) setRegs(s proc.Regs) {
	if int64(s.Orig_rax) >= 0 {
		switch e := -int64(s.Rax); {
		case e >= 512 && e <= 514: // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND
			s.Rax, s.Rip = s.Orig_rax, s.Rip-2
		case e == 516: // ERESTART_RESTARTBLOCK
			s.Rax, s.Rip = unix.SYS_RESTART_SYSCALL, s.Rip-2
		}
	}
	f.gregs = [nGregs]uint64{s.R8, s.R9, s.R10, s.R11, s.R12, s.R13, s.R14, s.R15, s.Rdi, s.Rsi, s.Rbp, s.Rbx, s.Rdx, s.Rax, s.Rcx, s.Rsp, s.Rip, s.Eflags}
}

// ret makes the thread return from the handler at once: the frame's
// registers written back with the trap flag cleared, r at the restorer,
// whose rt_sigreturn puts back every register the frame holds (vector and
// floating-point state included).
func (f *handlerFrame) ret(w *proc.World, r *proc.Regs) error {
	f.gregs[gFlags] &^= trapFlag
	var b [nGregs * 8]byte
	for i, v := range f.gregs {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	if err := w.WriteMemory(f.uc+ucGregs, b[:]); err != nil {
		return err
	}
	r.Rip, r.Rsp = f.restorer, r.Rsp+8
	return nil
}

// restoreStopped is restore's work on the stopped world.
// Threads sent back are listed in rewound (tid -> site).
func restoreStopped(w *proc.World, pl *plan, rewound map[int]uint64, f inFlight) (Report, error) {
	rep := Report{Left: pl.left}
	ths, err := w.Threads()
	if err != nil {
		return rep, err
	}
	for _, th := range ths {
		if th.Exiting || th.Parked {
			continue
		}
		r, err := w.Regs(th.Tid)
		if err != nil {
			continue
		}
		changed := false
		var saved *proc.Regs
		if th.Tid == f.borrowed {
			saved = f.saved
		}
		fr, atHandler := readHandlerFrame(w, &r)
		switch {
		case atHandler && th.Tid == f.stepped && fr.step():
			// The SIGTRAP of the tracer's single step: returned from
			// the handler; when the step was a remote system call's,
			// with the registers from before the call.
			if saved != nil {
				fr.setRegs(*saved)
				saved = nil
				rep.Returned++
			}
			if err := fr.ret(w, &r); err != nil {
				return rep, fmt.Errorf("thread %d: %w", th.Tid, err)
			}
			changed = true
			rep.StepTraps++
		case atHandler && fr.breakpoint() && pl.traps[fr.gregs[gRip]-1]:
			// The SIGTRAP of a trap site's int3: returned from the
			// handler to the site, where the original instruction is
			// once the text is restored.
			fr.gregs[gRip]--
			if err := fr.ret(w, &r); err != nil {
				return rep, fmt.Errorf("thread %d: %w", th.Tid, err)
			}
			changed = true
			rep.Rewound++
		case th.Tid == f.stepped:
			// The tracer died before the stepped instruction ran: its
			// SIGTRAP is queued, or is still to come.
			if err := w.DropStepTrap(th.Tid); err != nil {
				return rep, fmt.Errorf("thread %d: %w", th.Tid, err)
			}
			if threadTrapPending(w.Pid(), th.Tid) {
				rep.StepTraps++ // discarded once taken
			}
		}
		if saved != nil {
			// The tracer died in a remote system call on this thread:
			// its registers as they were before it (the call's effect,
			// if it ran, stays).
			r, changed = *saved, true
			rep.Returned++
		}
		if r.Eflags&trapFlag != 0 {
			r.Eflags &^= trapFlag
			changed = true
		}
		if pl.traps[r.PC()-1] && !f.wasServed(th.Tid, &r) {
			r.SetPC(r.PC() - 1)
			rewound[th.Tid] = r.PC()
			rep.Rewound++
			changed = true
		}
		if changed {
			if err := w.SetRegs(th.Tid, &r); err != nil {
				return rep, fmt.Errorf("thread %d: %w", th.Tid, err)
			}
		}
	}
	var patches []batchpatch.Patch
	for _, rn := range pl.runs() {
		cur := make([]byte, len(rn.orig))
		if err := w.ReadMemory(rn.addr, cur); err != nil {
			continue
		}
		// Only the bytes that differ, each stretch a patch of its own.
		for i := 0; i < len(cur); {
			if cur[i] == rn.orig[i] {
				i++
				continue
			}
			j := i
			for j < len(cur) && cur[j] != rn.orig[j] {
				j++
			}
			patches = append(patches, batchpatch.Patch{Addr: rn.addr + uint64(i), Old: bytes.Clone(cur[i:j]), New: bytes.Clone(rn.orig[i:j])})
			rep.Bytes += j - i
			i = j
		}
	}
	if len(patches) == 0 {
		return rep, nil
	}
	rep.Ranges = len(patches)
	batchpatch.Sort(patches)
	if _, err := batchpatch.ApplyStopped(w, patches, &batchpatch.Options{AllOrNothing: true}); err != nil {
		return rep, fmt.Errorf("restore %d ranges: %w", len(patches), err)
	}
	return rep, nil
}
