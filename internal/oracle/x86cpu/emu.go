package x86cpu

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/probeopt/probeopt/emulate"
)

// EmuCase is one test of the emulator against the CPU: an instruction and
// the state it starts from. The bytes sit at Init.RIP, in one of the code
// windows (EmuCodeLow, EmuCodeHigh); Init.FSBase and Init.GSBase must be
// EmuFSBase and EmuGSBase; only the status flags and DF of Init.RFLAGS are
// used (IF is always set, everything else clear).
type EmuCase struct {
	Class string // the generator class that made it
	Bytes []byte // the instruction
	Init  emulate.X86State
}

// MemWord is an aligned quadword of an oracle's read-write window and its
// value.
type MemWord struct {
	Addr, Val uint64
}

// EmuMemWord is a quadword the emulator oracle saw change.
type EmuMemWord = MemWord

// EmuCPUResult is what the CPU did with one case.
type EmuCPUResult struct {
	// Signal ended the case: SIGTRAP (5) is the single-step trap after the
	// instruction completed; SIGSEGV (11) and SIGBUS (7) are faults; any
	// other signal is unexpected.
	Signal int
	Code   int    // si_code of the signal
	Addr   uint64 // si_addr: the faulting address of a page fault
	// Trap is the exception vector the kernel recorded (1 debug, 12 stack
	// fault, 13 general protection, 14 page fault) and ErrCode its error
	// code (for a page fault, bit 1 means a write).
	Trap    int
	ErrCode uint64
	// State is the register file when the signal arrived: after the
	// instruction, or at the instruction when it faulted. FSBase and GSBase
	// are copied from the case.
	State emulate.X86State
	// Writes lists the quadwords of the read-write window whose value
	// changed, by ascending address; WritesLost is set when more changed
	// than the harness records.
	Writes     []EmuMemWord
	WritesLost bool
	// NotRun is set when the case could not be started: its rsp is not
	// canonical and this host does not enter user mode with such a stack
	// pointer (HostEntersNoncanonicalRSP). The rest says nothing of the
	// instruction then.
	NotRun bool
}

// Trap vectors and signals the oracle distinguishes.
const (
	emuTrapDB = 1
	emuTrapSS = 12
	emuTrapGP = 13
	emuTrapPF = 14

	emuSigTrap = 5
	emuSigBus  = 7
	emuSigSegv = 11
)

// EmuImage is the memory a batch of cases runs with: both code windows,
// the read-only page and the initial content of the read-write window. The
// cases' bytes are placed into the code windows (Place); everything else
// comes from the seed.
type EmuImage struct {
	Seed     uint64
	CodeLow  [EmuCodeSize]byte
	CodeHigh [EmuCodeSize]byte
	RO       [EmuROSize]byte
	RW       [EmuRWSize]byte
}

// NewEmuImage fills an image from seed: random code bytes, and data
// quadwords that are random, edge values (0, -1, sign bits), or addresses
// in the windows (so that indirect branches and returns often go somewhere
// canonical).
func NewEmuImage(seed uint64) *EmuImage {
	m := &EmuImage{Seed: seed}
	r := rand.New(rand.NewPCG(seed, 0x656d7520696d6167))
	emuFillRandom(r, m.CodeLow[:])
	emuFillRandom(r, m.CodeHigh[:])
	for i := 0; i < len(m.RO); i += 8 {
		binary.LittleEndian.PutUint64(m.RO[i:], emuDataWord(r))
	}
	for i := 0; i < len(m.RW); i += 8 {
		binary.LittleEndian.PutUint64(m.RW[i:], emuDataWord(r))
	}
	return m
}

// emuFillRandom fills b with random bytes.
func emuFillRandom(r *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
}

// emuDataWord returns a quadword for the data pages.
func emuDataWord(r *rand.Rand) uint64 {
	switch n := r.IntN(10); {
	case n < 4:
		return r.Uint64()
	case n < 6:
		return emuEdgeValue(r)
	case n < 8:
		return EmuCodeLow + r.Uint64N(EmuCodeSize)
	case n < 9:
		return EmuRWAddr + r.Uint64N(EmuRWSize)
	default:
		return EmuCodeHigh + r.Uint64N(EmuCodeSize)
	}
}

// window returns the code window holding addr and the offset in it.
func (m *EmuImage) window(addr uint64) ([]byte, int, bool) {
	switch {
	case addr >= EmuCodeLow && addr < EmuCodeLow+EmuCodeSize:
		return m.CodeLow[:], int(addr - EmuCodeLow), true
	case addr >= EmuCodeHigh && addr < EmuCodeHigh+EmuCodeSize:
		return m.CodeHigh[:], int(addr - EmuCodeHigh), true
	}
	return nil, 0, false
}

// Place copies the case's bytes into the code window at its RIP.
func (m *EmuImage) Place(c *EmuCase) error {
	w, off, ok := m.window(c.Init.RIP)
	if !ok || off+len(c.Bytes) > len(w) {
		return fmt.Errorf("case at %#x: %d bytes do not fit in a code window", c.Init.RIP, len(c.Bytes))
	}
	copy(w[off:], c.Bytes)
	return nil
}
