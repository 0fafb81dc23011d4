package emulate

import (
	"errors"
	"fmt"
)

// ErrNotEmulated means the instruction is outside what the emulator
// executes exactly; the caller must use another strategy.
var ErrNotEmulated = errors.New("instruction not emulated")

// ErrNonCanonical is the cause recorded in a Fault raised because an
// address was not canonical (x86-64 #GP or #SS), rather than refused by the
// memory.
var ErrNonCanonical = errors.New("non-canonical address")

// Access is the kind of memory access that faulted.
type Access uint8

const (
	// AccessRead is a data read.
	AccessRead Access = iota + 1
	// AccessWrite is a data write.
	AccessWrite
	// AccessFetch is a transfer of control to the address: a branch
	// target the CPU refuses before fetching from it.
	AccessFetch
)

var accessNames = [...]string{AccessRead: "read", AccessWrite: "write", AccessFetch: "fetch"}

// String returns "read", "write" or "fetch".
func (a Access) String() string {
	if int(a) < len(accessNames) && accessNames[a] != "" {
		return accessNames[a]
	}
	return "unknown"
}

// FaultKind says which exception an x86-64 CPU raises for a Fault.
type FaultKind uint8

const (
	// FaultPage: the memory refused the access (#PF on x86-64).
	FaultPage FaultKind = iota + 1
	// FaultGP: a non-canonical address in a data segment, or a branch to a
	// non-canonical address (#GP).
	FaultGP
	// FaultSS: a non-canonical address in the stack segment: an implicit
	// stack access, or a memory operand based on rsp or rbp without a
	// segment override (#SS).
	FaultSS
)

var faultKindNames = [...]string{FaultPage: "page fault", FaultGP: "general protection", FaultSS: "stack fault"}

// String names the exception.
func (k FaultKind) String() string {
	if int(k) < len(faultKindNames) && faultKindNames[k] != "" {
		return faultKindNames[k]
	}
	return "unknown"
}

// Fault is the error returned when an emulated instruction faults. The
// state given to the emulator is left exactly as it was and, except for a
// call to a non-canonical target (see X86.Step), nothing was written to
// memory: the instruction had no effect, as on the CPU.
type Fault struct {
	// Addr is the linear address of the first byte that could not be
	// accessed: for FaultPage the byte the memory refused (the CPU's CR2),
	// for FaultGP and FaultSS the first byte of the access.
	Addr uint64
	// Size is the size of the access in bytes.
	Size int
	// Access is the kind of access. The read of a read-modify-write
	// operand (add to memory, inc, xchg...) is reported as a write, as the
	// CPU does.
	Access Access
	// Kind is the exception.
	Kind FaultKind
	// Err is the cause: the memory's error for FaultPage, ErrNonCanonical
	// otherwise.
	Err error
}

// Error describes the fault.
func (f *Fault) Error() string {
	return fmt.Sprintf("%s: %s of %d bytes at %#x: %v", f.Kind, f.Access, f.Size, f.Addr, f.Err)
}

// Unwrap returns the cause.
func (f *Fault) Unwrap() error { return f.Err }

// memFault turns an error of the memory at a (size bytes, access acc)
// into a *Fault of kind FaultPage, keeping what a *Fault it wraps says.
func memFault(err error, a uint64, size int, acc Access) error {
	var f *Fault
	if errors.As(err, &f) {
		g := *f
		if g.Size == 0 {
			g.Size = size
		}
		g.Access, g.Kind = acc, FaultPage
		return &g
	}
	return &Fault{Addr: a, Size: size, Access: acc, Kind: FaultPage, Err: err}
}
