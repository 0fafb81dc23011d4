package x86cpu

import "errors"

// CPUResult is the CPU's verdict on a byte string given to
// LengthOracle.Length.
type CPUResult uint8

const (
	// CPUNone is the zero value; Length returns it only together with an
	// error.
	CPUNone CPUResult = iota
	// CPUAccepted means the CPU fetched a whole instruction within the given
	// bytes and did not raise #UD. The length returned with it is the
	// instruction length, 1 to 15 bytes. The instruction may still have
	// faulted while executing (#GP, #PF on data, #DE...); that does not
	// change its length.
	CPUAccepted
	// CPUUndefined means the CPU raised #UD (SIGILL) for the bytes: an
	// opcode or an encoding this CPU does not accept, or ud0/ud1/ud2.
	CPUUndefined
	// CPULonger means the CPU tried to fetch more bytes than were given, or
	// more than 15: no prefix of the input is an instruction to this CPU.
	CPULonger
	// CPUAmbiguous means the CPU raised #GP with 15 bytes in hand and the
	// oracle could not tell a 15-byte instruction that faulted while
	// executing from a longer one (the CPU raises #GP for those without
	// fetching a 16th byte). It happens only when no prefix byte can be
	// removed without changing the length; the length is 15 or more.
	CPUAmbiguous
)

var cpuResultNames = [...]string{"none", "accepted", "undefined", "longer", "ambiguous"}

// String returns a short lowercase name for the result.
func (r CPUResult) String() string {
	if int(r) < len(cpuResultNames) {
		return cpuResultNames[r]
	}
	return "unknown"
}

// CPULength is one answer of an oracle: a length and a verdict, with the
// meaning documented at LengthOracle.Length.
type CPULength struct {
	N      int       // bytes, see Result
	Result CPUResult // the verdict
}

// MaxX86Len is the architectural limit on the length of an x86 instruction,
// in bytes.
const MaxX86Len = 15

// Errors returned (wrapped) by the oracles.
var (
	// ErrClosed means the oracle was used after Close.
	ErrClosed = errors.New("oracle closed")
	// ErrTimeout means one step of the traced child did not come back in
	// time; the child was killed and replaced.
	ErrTimeout = errors.New("oracle step timed out")
	// ErrChildDied means the traced child process of an oracle died
	// unexpectedly (and again after a restart).
	ErrChildDied = errors.New("traced child died")
)

// neutralPrefix returns the index of a prefix byte in the leading prefix
// run of b whose removal cannot change how long the CPU takes the rest to
// be, or -1 if there is none: a segment override (26 2E 36 3E 64 65; in
// 64-bit mode they select nothing that changes the length), LOCK (F0), a
// legacy prefix byte that occurs again later in the run, or a REX byte
// followed by another prefix (the CPU ignores a REX that does not come
// right before the opcode).
func neutralPrefix(b []byte) int {
	run := 0
	for run < len(b) && (isLegacyPrefix(b[run]) || b[run]&0xf0 == 0x40) {
		run++
	}
	for i := 0; i < run; i++ {
		switch c := b[i]; {
		case c == 0x26, c == 0x2e, c == 0x36, c == 0x3e, c == 0x64, c == 0x65, c == 0xf0:
			return i
		case c&0xf0 == 0x40:
			if i+1 < run {
				return i
			}
		default:
			for _, d := range b[i+1 : run] {
				if d == c {
					return i
				}
			}
		}
	}
	return -1
}

// isLegacyPrefix reports whether c is one of the eleven legacy prefix
// bytes.
func isLegacyPrefix(c byte) bool {
	switch c {
	case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf0, 0xf2, 0xf3:
		return true
	}
	return false
}
