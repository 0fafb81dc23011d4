// Package elfscan reads what a probe planner needs from an ELF file: the
// functions (from .symtab and .dynsym, deduplicated, with sizes, bindings,
// aliases and demangled names; from the Go function table of a Go binary,
// stripped or not; PLT stubs named after the functions they call), the
// USDT probes of .note.stapsdt (with the .stapsdt.base correction,
// semaphores and parsed argument specifications), the mapping between
// virtual addresses and file offsets, probe specifications such as
// "main", "parse+0x10", "0x401000", "usdt:provider:name" and globs, the
// executable sections (ExecSections), and the exception tables:
// .eh_frame's FDEs and the landing pads their LSDAs list
// (ExceptionTables, ParseExceptionTables). SamePath tells whether two
// paths name one file.
//
// It handles ELF64 little-endian executables (ET_EXEC), position-independent
// executables and shared libraries (ET_DYN) for x86-64 and arm64. Every
// other input is refused with a typed error: ErrNotELF, ErrUnsupported
// (through an *UnsupportedError), ErrTruncated, or a *FormatError for
// malformed contents. No input makes the package panic.
//
// Addresses are link-time virtual addresses as written in the file (what
// readelf and nm print); offsets are byte offsets in the file (what a
// kernel uprobe takes).
//
// The package decodes no instructions itself (what a NOP or a PLT stub is,
// it asks decode: NopLen, StubSlot) and does not decide how to probe
// anything (see plan).
package elfscan
