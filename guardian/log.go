package guardian

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Errors of the package.
var (
	// ErrNotSupported means the guardian does not run on this platform.
	ErrNotSupported = errors.New("guardian: not supported on this platform")
	// ErrFull means the undo log has no room for another record.
	ErrFull = errors.New("guardian: undo log full")
	// ErrBadLog means the shared log does not hold a log of this version.
	ErrBadLog = errors.New("guardian: not an undo log")
)

// Kind says what a record's bytes were replaced by.
type Kind uint8

const (
	// KindJump is a site rewritten into a jump (a trampoline).
	KindJump Kind = 1
	// KindTrap is a site whose first byte may hold a breakpoint (int3):
	// a thread stopped just past it had trapped there and is sent back.
	KindTrap Kind = 2
)

// Record is one range of text the tracer may change: the bytes it writes
// there and the bytes to put back if the tracer dies. The guardian writes
// Orig back only where memory holds New: bytes it does not recognise as
// the tracer's (the program rewrote its text, or mapped other code there)
// are left alone.
type Record struct {
	Addr uint64 // run-time virtual address in the traced process
	Kind Kind
	// InstLen is the length of the original instruction at Addr (KindTrap).
	InstLen int
	Orig    []byte // the file's bytes at Addr, at most MaxOrig
	New     []byte // the bytes the tracer writes there, as long as Orig
}

// MaxOrig is the longest range one record restores.
const MaxOrig = 32

// The shared log: a header, then fixed-size records. The tracer appends
// a record and then publishes it by storing the new count; the guardian
// reads the count, then the records below it.
const (
	logMagic   = 0x33676f6c64726167 // "gardlog3"
	headerSize = 1024
	recordSize = 16 + 2*MaxOrig
	// header fields (byte offsets)
	offMagic = 0
	offPid   = 8
	offState = 16 // stateActive or stateReleased
	offCount = 24
	offCap   = 32
	// offStep is the thread the tracer single-steps (0 for none): set
	// before the step, cleared once its stop is collected.
	offStep = 48
	// offBorrow is the thread a remote system call of the tracer's
	// borrows (0 for none), then its registers before the call
	// (offBorrowRegs, maxRegs bytes): the tracer stores the registers,
	// then the thread id, and clears the id once they are back.
	offBorrow     = 64
	offBorrowRegs = 72
	// offServe is the thread whose trap the tracer served last (0 for
	// none), then the registers it gave the thread (offServeRegs,
	// maxRegs bytes), stored before they are set: the tracer stores 0,
	// the registers, then the thread id.
	offServe     = 512
	offServeRegs = 520
	maxRegs      = offServe - offBorrowRegs
	// record fields
	recAddr = 0
	recKind = 8
	recInst = 9
	recLen  = 10
	recOrig = 16
	recNew  = recOrig + MaxOrig

	stateActive   = 0
	stateReleased = 1
)

// encodeRecord writes r into b (recordSize bytes).
func encodeRecord(b []byte, r Record) error {
	if len(r.Orig) == 0 || len(r.Orig) > MaxOrig || len(r.New) != len(r.Orig) {
		return fmt.Errorf("record at %#x: %d bytes for %d, want 1 to %d each", r.Addr, len(r.New), len(r.Orig), MaxOrig)
	}
	binary.LittleEndian.PutUint64(b[recAddr:], r.Addr)
	b[recKind] = byte(r.Kind)
	b[recInst] = byte(r.InstLen)
	b[recLen] = byte(len(r.Orig))
	copy(b[recOrig:recOrig+MaxOrig], r.Orig)
	copy(b[recNew:recNew+MaxOrig], r.New)
	return nil
}

// decodeRecord reads the record in b.
func decodeRecord(b []byte) (Record, error) {
	n := int(b[recLen])
	if n == 0 || n > MaxOrig {
		return Record{}, fmt.Errorf("record of %d bytes: %w", n, ErrBadLog)
	}
	return Record{
		Addr:    binary.LittleEndian.Uint64(b[recAddr:]),
		Kind:    Kind(b[recKind]),
		InstLen: int(b[recInst]),
		Orig:    append([]byte(nil), b[recOrig:recOrig+n]...),
		New:     append([]byte(nil), b[recNew:recNew+n]...),
	}, nil
}

// memory reads a traced process's memory.
type memory interface {
	ReadMemory(addr uint64, buf []byte) error
}

// plan is what the guardian restores.
type plan struct {
	writes map[uint64]byte // address -> original byte, where memory holds the tracer's
	// traps are the trap sites a thread just past which executed the
	// int3: those whose int3 is in memory, and those whose original
	// instruction (in memory again) is longer than one byte, so that no
	// instruction boundary lies just past them (a site removed after a
	// thread executed its int3).
	traps map[uint64]bool
	left  int // records whose range holds neither its bytes nor the file's
}

// makePlan decides, from the newest record to the oldest, which bytes go
// back: a record whose range holds its New bytes (as memory holds them,
// after the newer records' writes) gets its Orig; one that holds Orig
// needs nothing; any other is left alone and counted.
func makePlan(m memory, recs []Record) *plan {
	pl := &plan{writes: map[uint64]byte{}, traps: map[uint64]bool{}}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		cur := make([]byte, len(r.New))
		if m.ReadMemory(r.Addr, cur) != nil {
			continue // unmapped: nothing of the tracer's is there
		}
		for j := range cur {
			if b, ok := pl.writes[r.Addr+uint64(j)]; ok {
				cur[j] = b
			}
		}
		switch {
		case bytes.Equal(cur, r.Orig):
			if r.Kind == KindTrap && r.InstLen > 1 {
				pl.traps[r.Addr] = true
			}
		case bytes.Equal(cur, r.New):
			if r.Kind == KindTrap && len(r.New) > 0 && r.New[0] == int3 {
				pl.traps[r.Addr] = true
			}
			for j, b := range r.Orig {
				pl.writes[r.Addr+uint64(j)] = b
			}
		default:
			pl.left++
		}
	}
	return pl
}

// int3 is the x86-64 breakpoint instruction.
const int3 = 0xcc

// run is a contiguous range of original bytes.
type run struct {
	addr uint64
	orig []byte
}

// runs returns the contiguous ranges of the plan's writes, in address
// order.
func (pl *plan) runs() []run {
	addrs := make([]uint64, 0, len(pl.writes))
	for a := range pl.writes {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	var out []run
	for _, a := range addrs {
		if n := len(out); n > 0 && out[n-1].addr+uint64(len(out[n-1].orig)) == a {
			out[n-1].orig = append(out[n-1].orig, pl.writes[a])
			continue
		}
		out = append(out, run{addr: a, orig: []byte{pl.writes[a]}})
	}
	return out
}
