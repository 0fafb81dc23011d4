package elfscan

import (
	"debug/elf"
	"errors"
	"fmt"
)

// Errors returned by the package, directly or wrapped; test with errors.Is.
var (
	// ErrNotELF means the input does not start with the ELF magic number
	// (or is not a regular file).
	ErrNotELF = errors.New("not an ELF file")
	// ErrUnsupported means a well-formed ELF file of a kind the package
	// does not handle; the error is an *UnsupportedError that says which.
	ErrUnsupported = errors.New("unsupported ELF file")
	// ErrTruncated means the file ends before a structure it declares.
	ErrTruncated = errors.New("truncated ELF file")
	// ErrNoFunctions means the file has no function symbols at all: no
	// .symtab, no .dynsym and no Go function table with a function in
	// an executable section.
	ErrNoFunctions = errors.New("no function symbols (.symtab, .dynsym or Go .gopclntab)")
	// ErrNotMapped means a virtual address or file offset lies in no
	// loadable segment of the file (PT_LOAD), or, for code, in none that
	// is executable.
	ErrNotMapped = errors.New("not in a loadable segment")
	// ErrNoSymbol means a probe spec matched nothing in the file.
	ErrNoSymbol = errors.New("no such symbol")
	// ErrBadSpec means a probe spec or USDT argument string could not be
	// parsed.
	ErrBadSpec = errors.New("invalid probe spec")
	// ErrNoSections means the file has no section headers (or none that
	// occupies memory): what only sections tell (which bytes are code,
	// the exception tables) is not known.
	ErrNoSections = errors.New("no section headers")
)

// UnsupportedError describes an ELF file of a kind the package does not
// handle. It matches ErrUnsupported under errors.Is.
type UnsupportedError struct {
	// What is a short description: "32-bit ELF (want ELF64)",
	// "big-endian ELF", "machine EM_RISCV", "relocatable object (ET_REL)".
	What string
	// Machine is the e_machine field when the machine is the reason.
	Machine elf.Machine
}

func (e *UnsupportedError) Error() string {
	return "unsupported ELF file: " + e.What
}

// Is reports whether target is ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// FormatError describes malformed contents: a header field out of range, a
// note that runs past its section, a damaged Go function table. When the
// file simply ends too early, Err is ErrTruncated.
type FormatError struct {
	// Where names the structure being read: "ELF header", "program
	// headers", "section headers", ".note.stapsdt", ".gopclntab"...
	Where string
	// Off is the file offset of the problem, or -1 when unknown.
	Off int64
	// Msg says what is wrong.
	Msg string
	// Err is the underlying error, if any (ErrTruncated for a short file).
	Err error
}

func (e *FormatError) Error() string {
	s := "malformed ELF file: " + e.Where
	if e.Off >= 0 {
		s += fmt.Sprintf(" at offset %#x", e.Off)
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }

// formatErr builds a *FormatError.
func formatErr(where string, off int64, format string, args ...any) *FormatError {
	return &FormatError{Where: where, Off: off, Msg: fmt.Sprintf(format, args...)}
}

// truncErr builds a *FormatError for a structure that runs past the end of
// the file.
func truncErr(where string, off int64, format string, args ...any) *FormatError {
	return &FormatError{Where: where, Off: off, Msg: fmt.Sprintf(format, args...), Err: ErrTruncated}
}
