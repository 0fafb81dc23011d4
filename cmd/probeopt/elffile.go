package main

// Reading the functions of an ELF file for scan. This is a preliminary
// reader: the elfscan package will own ELF reading (Go pclntab, demangling,
// USDT notes), and scan will call it instead.

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/probeopt/probeopt/decode"
)

// Errors about the file given to scan. The messages are complete sentences
// after "scan PATH: ".
var (
	errNotELF       = errors.New("not an ELF file")
	errELF32        = errors.New("32-bit ELF files are not supported (want ELF64)")
	errBigEndian    = errors.New("big-endian ELF files are not supported")
	errTruncatedELF = errors.New("truncated ELF file")
	errMalformedELF = errors.New("malformed ELF file")
	errNoSymbols    = errors.New("no function symbols (.symtab, .dynsym or Go .gopclntab)")
)

// machineError reports an ELF file for an instruction set probeopt does not
// decode.
type machineError struct {
	Machine elf.Machine
}

func (e *machineError) Error() string {
	return fmt.Sprintf("unsupported machine %v (want EM_X86_64 or EM_AARCH64)", e.Machine)
}

// elfHeaderSize is the size of an ELF64 file header.
const elfHeaderSize = 64

// elfFunc is one function symbol to sweep.
type elfFunc struct {
	Name string
	Addr uint64 // virtual address of the first byte
	Size uint64 // bytes
	sec  *elf.Section
}

// elfImage is an opened ELF64 little-endian file of a supported machine.
type elfImage struct {
	Path    string
	Arch    decode.Arch
	Symtab  string // where the functions came from: ".symtab", ".dynsym" or ".gopclntab"
	Funcs   []elfFunc
	Aliases int // function symbols skipped because another one starts at the same address

	file *os.File
	ef   *elf.File
	size int64
	data map[*elf.Section][]byte
}

// openELF opens path and lists its function symbols. The checks happen in
// an order that gives the most useful message: magic, class, byte order,
// header and section table within the file, machine, symbols.
func openELF(path string) (img *elfImage, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: not a regular file", errNotELF)
	}
	if err := checkELFHeader(f, st.Size()); err != nil {
		return nil, err
	}
	ef, err := newELFFile(f)
	if err != nil {
		return nil, err
	}
	img = &elfImage{Path: path, file: f, ef: ef, size: st.Size(), data: map[*elf.Section][]byte{}}
	switch ef.Machine {
	case elf.EM_X86_64:
		img.Arch = decode.X86_64
	case elf.EM_AARCH64:
		img.Arch = decode.ARM64
	default:
		return nil, &machineError{ef.Machine}
	}
	if err := img.loadFuncs(); err != nil {
		return nil, err
	}
	return img, nil
}

// Close closes the file.
func (img *elfImage) Close() error { return img.file.Close() }

// checkELFHeader validates the identification bytes and that the section
// header table lies within the file, so that each problem has its own error.
func checkELFHeader(r io.ReaderAt, size int64) error {
	var h [elfHeaderSize]byte
	n, err := r.ReadAt(h[:], 0)
	if n < 4 || string(h[:4]) != elf.ELFMAG {
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read ELF header: %w", err)
		}
		return errNotELF
	}
	if n < 6 {
		return fmt.Errorf("%w: %d bytes", errTruncatedELF, n)
	}
	switch elf.Class(h[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
	case elf.ELFCLASS32:
		return errELF32
	default:
		return fmt.Errorf("%w: unknown class %d", errMalformedELF, h[elf.EI_CLASS])
	}
	switch elf.Data(h[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
	case elf.ELFDATA2MSB:
		return errBigEndian
	default:
		return fmt.Errorf("%w: unknown byte order %d", errMalformedELF, h[elf.EI_DATA])
	}
	if n < elfHeaderSize {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", errTruncatedELF, n, elfHeaderSize)
	}
	le := binary.LittleEndian
	shoff := le.Uint64(h[0x28:])
	shentsize := uint64(le.Uint16(h[0x3a:]))
	shnum := uint64(le.Uint16(h[0x3c:]))
	if shoff != 0 && shnum == 0 {
		shnum = 1 // extended numbering: the count is in section 0
	}
	if end := shoff + shnum*shentsize; shoff > uint64(size) || end > uint64(size) || end < shoff {
		return fmt.Errorf("%w: section headers end at %d, file has %d bytes", errTruncatedELF, end, size)
	}
	return nil
}

// newELFFile parses the file with debug/elf. A parse failure is reported as
// a malformed file, and a panic inside the parser (it has had some on
// hostile input) as well: no file may crash the command.
func newELFFile(r io.ReaderAt) (ef *elf.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			ef, err = nil, fmt.Errorf("%w: %v", errMalformedELF, p)
		}
	}()
	ef, err = elf.NewFile(r)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: %w", errTruncatedELF, err)
		}
		return nil, fmt.Errorf("%w: %w", errMalformedELF, err)
	}
	return ef, nil
}

// loadFuncs collects the function symbols of executable sections from
// .symtab; from .dynsym when the file is stripped; and, for a stripped Go
// binary, from the Go runtime's function table (.gopclntab). Symbols of size
// 0 are skipped; of several symbols at one address the first is kept.
func (img *elfImage) loadFuncs() error {
	syms, err := img.ef.Symbols()
	img.Symtab = ".symtab"
	if errors.Is(err, elf.ErrNoSymbols) {
		syms, err = img.ef.DynamicSymbols()
		img.Symtab = ".dynsym"
	}
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return img.sectionError("read "+img.Symtab, err)
	}
	seen := map[uint64]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 ||
			s.Section == elf.SHN_UNDEF || int(s.Section) >= len(img.ef.Sections) {
			continue
		}
		img.addFunc(seen, s.Name, s.Value, s.Size, img.ef.Sections[s.Section])
	}
	if len(img.Funcs) == 0 && img.Symtab == ".dynsym" {
		if err := img.loadGoFuncs(seen); err != nil {
			return err
		}
	}
	if len(img.Funcs) == 0 && img.Symtab != ".symtab" {
		return errNoSymbols
	}
	sort.Slice(img.Funcs, func(i, j int) bool { return img.Funcs[i].Addr < img.Funcs[j].Addr })
	return nil
}

// addFunc records one function unless another starts at the same address
// or its section holds no instructions.
func (img *elfImage) addFunc(seen map[uint64]bool, name string, addr, size uint64, sec *elf.Section) {
	if sec == nil || sec.Flags&elf.SHF_EXECINSTR == 0 || sec.Type == elf.SHT_NOBITS {
		return
	}
	if seen[addr] {
		img.Aliases++
		return
	}
	seen[addr] = true
	img.Funcs = append(img.Funcs, elfFunc{Name: name, Addr: addr, Size: size, sec: sec})
}

// loadGoFuncs reads the functions of a Go binary from its .gopclntab
// section, which stays when the symbol table is stripped (as go test does).
func (img *elfImage) loadGoFuncs(seen map[uint64]bool) error {
	pcln, text := img.ef.Section(".gopclntab"), img.ef.Section(".text")
	if pcln == nil || text == nil {
		return nil
	}
	data, err := pcln.Data()
	if err != nil {
		return img.sectionError("read .gopclntab", err)
	}
	tab, err := newGoTable(data, text.Addr)
	if err != nil {
		return fmt.Errorf("%w: .gopclntab: %w", errMalformedELF, err)
	}
	img.Symtab = ".gopclntab"
	for _, fn := range tab.Funcs {
		if fn.End > fn.Entry {
			img.addFunc(seen, fn.Name, fn.Entry, fn.End-fn.Entry, img.sectionAt(fn.Entry))
		}
	}
	return nil
}

// newGoTable parses a Go line table, turning a parser panic on a damaged
// table into an error.
func newGoTable(data []byte, textStart uint64) (tab *gosym.Table, err error) {
	defer func() {
		if p := recover(); p != nil {
			tab, err = nil, fmt.Errorf("%v", p)
		}
	}()
	return gosym.NewTable(nil, gosym.NewLineTable(data, textStart))
}

// sectionAt returns the section that holds addr, or nil.
func (img *elfImage) sectionAt(addr uint64) *elf.Section {
	for _, s := range img.ef.Sections {
		if s.Addr <= addr && addr-s.Addr < s.Size && s.Flags&elf.SHF_ALLOC != 0 {
			return s
		}
	}
	return nil
}

// errOutsideSection means a symbol's bytes are not all inside its section.
var errOutsideSection = errors.New("function extends past its section")

// funcBytes returns the bytes of fn, reading its section once.
func (img *elfImage) funcBytes(fn *elfFunc) ([]byte, error) {
	data, ok := img.data[fn.sec]
	if !ok {
		var err error
		data, err = fn.sec.Data()
		if err != nil {
			return nil, img.sectionError("read section "+fn.sec.Name, err)
		}
		img.data[fn.sec] = data
	}
	start := fn.Addr - fn.sec.Addr
	if fn.Addr < fn.sec.Addr || start > uint64(len(data)) || fn.Size > uint64(len(data))-start {
		return nil, fmt.Errorf("%w %s (%#x-%#x)", errOutsideSection, fn.sec.Name, fn.sec.Addr, fn.sec.Addr+uint64(len(data)))
	}
	return data[start : start+fn.Size], nil
}

// sectionError classifies a failure to read part of the file: a read past
// the end means the file is truncated.
func (img *elfImage) sectionError(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s: %w", errTruncatedELF, what, err)
	}
	return fmt.Errorf("%w: %s: %w", errMalformedELF, what, err)
}
