package emulate

// Memory is the address space an emulated instruction reads and writes.
// Addresses are linear (virtual) addresses, size is 1, 2, 4 or 8 bytes and
// values are little-endian, zero-extended to 64 bits.
//
// A non-nil error means the access faults. The error may be, or wrap, a
// *Fault whose Addr names the first byte that could not be accessed (for
// an access that crosses into a page that is not there, the start of that
// page); otherwise the emulator reports the first byte of the access.
//
// On x86-64 the emulator never accesses an address that is not canonical;
// it raises the CPU's fault instead.
type Memory interface {
	// Read returns size bytes at addr.
	Read(addr uint64, size int) (uint64, error)
	// Write stores the low size bytes of val at addr. It must store all of
	// them or, when it returns an error, none: the emulator relies on it to
	// leave memory unchanged when an instruction faults. (An x86-64
	// instruction makes at most one Write, after all of its reads.)
	Write(addr uint64, size int, val uint64) error
}

// WriteChecker is implemented by a Memory that can tell whether a write
// would fault without making it. The x86-64 emulator uses it for the
// destination of a read-modify-write instruction (add to memory, inc, shl,
// xchg...), which the CPU checks for writing before it reads: an operand
// that starts on a read-only page and ends on a missing one faults on the
// read-only page. Without a WriteChecker the emulator reads first and, in
// that one case, reports the missing page instead.
type WriteChecker interface {
	// CheckWrite returns the error Write would return for an access of
	// size bytes at addr, without writing.
	CheckWrite(addr uint64, size int) error
}
