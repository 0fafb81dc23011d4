package elfscan

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/probeopt/probeopt/decode"
)

// Sizes of ELF64 structures.
const (
	ehdrSize = 64
	phdrSize = 56
	shdrSize = 64
	symSize  = 24
	relaSize = 24
)

// Segment is one loadable segment (PT_LOAD) of a file.
type Segment struct {
	Vaddr  uint64       // virtual address of the first byte
	Memsz  uint64       // size in memory, bytes
	Off    uint64       // file offset of the first byte
	Filesz uint64       // bytes backed by the file (the rest is zero-filled)
	Flags  elf.ProgFlag // PF_R, PF_W, PF_X
}

// Exec reports whether the segment is mapped executable.
func (s *Segment) Exec() bool { return s.Flags&elf.PF_X != 0 }

// containsAddr reports whether vaddr lies in the file-backed part.
func (s *Segment) containsAddr(vaddr uint64) bool {
	return vaddr >= s.Vaddr && vaddr-s.Vaddr < s.Filesz
}

// File is an opened ELF file. Its methods are safe for concurrent use.
// Functions and USDT probes are read on first use.
//
// Byte slices returned by a File (Code) are views of the file's contents,
// valid until Close; copy them to keep them longer.
type File struct {
	// Path is the path the file was opened with ("" for NewFile).
	Path string
	// Arch is the instruction set: decode.X86_64 or decode.ARM64.
	Arch decode.Arch
	// Type is ET_EXEC or ET_DYN.
	Type elf.Type
	// Machine is e_machine: EM_X86_64 or EM_AARCH64.
	Machine elf.Machine
	// Segments are the PT_LOAD segments in file order.
	Segments []Segment
	// Interp is the program interpreter (PT_INTERP), "" when there is none.
	Interp string
	// Dev and Ino identify the file Open read (its device and inode, as
	// fstat gave them for the descriptor it read from); zero for NewFile
	// and where the system has no such numbers.
	Dev, Ino uint64

	data   []byte
	closer func() error
	ef     *elf.File

	funcsOnce  sync.Once
	funcs      []Func
	funcSource string
	funcsErr   error

	usdtOnce sync.Once
	usdt     []USDTProbe
	usdtErr  error

	ehOnce sync.Once
	eh     *ExceptionTables
	ehErr  error

	goLayoutOnce sync.Once
	goLayout     GoLayout
	goLayoutErr  error

	goResumeOnce sync.Once
	goResume     []GoResume
	goResumeErr  error
}

// Open opens the ELF file at path, checks its headers and returns it. The
// checks happen in an order that gives the most useful error: magic, class,
// byte order, type, machine, then the header tables.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		fh.Close()
		return nil, fmt.Errorf("%w: not a regular file", ErrNotELF)
	}
	// Look at the identification bytes before mapping anything, so that
	// a directory walk over many non-ELF files stays cheap.
	var ident [elf.EI_NIDENT]byte
	n, err := fh.ReadAt(ident[:], 0)
	if err != nil && err != io.EOF {
		fh.Close()
		return nil, fmt.Errorf("read ELF header: %w", err)
	}
	if err := checkIdent(ident[:n]); err != nil {
		fh.Close()
		return nil, err
	}
	data, unmap, err := mapFile(fh, st.Size())
	fh.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	f, err := NewFile(data)
	if err != nil {
		unmap()
		return nil, err
	}
	f.Path = path
	f.closer = unmap
	f.Dev, f.Ino = fileID(st)
	return f, nil
}

// NewFile parses an ELF file held in memory. The File keeps data and its
// methods return views of it; data must not change while the File is used.
func NewFile(data []byte) (f *File, err error) {
	if err := checkIdent(data); err != nil {
		return nil, err
	}
	if len(data) < ehdrSize {
		return nil, truncErr("ELF header", 0, "%d bytes, shorter than the %d-byte header", len(data), ehdrSize)
	}
	le := binary.LittleEndian
	f = &File{
		data:    data,
		Type:    elf.Type(le.Uint16(data[0x10:])),
		Machine: elf.Machine(le.Uint16(data[0x12:])),
	}
	switch f.Type {
	case elf.ET_EXEC, elf.ET_DYN:
	case elf.ET_REL:
		return nil, &UnsupportedError{What: "relocatable object (ET_REL): probes go in linked executables and shared libraries"}
	case elf.ET_CORE:
		return nil, &UnsupportedError{What: "core file (ET_CORE)"}
	default:
		return nil, &UnsupportedError{What: fmt.Sprintf("ELF type %v", f.Type)}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		f.Arch = decode.X86_64
	case elf.EM_AARCH64:
		f.Arch = decode.ARM64
	default:
		return nil, &UnsupportedError{What: fmt.Sprintf("machine %v (want EM_X86_64 or EM_AARCH64)", f.Machine), Machine: f.Machine}
	}
	if err := f.readSegments(); err != nil {
		return nil, err
	}
	if err := checkSectionTable(data); err != nil {
		return nil, err
	}
	if f.ef, err = newELFFile(data); err != nil {
		return nil, err
	}
	return f, nil
}

// checkIdent validates the identification bytes: magic, class, byte order.
func checkIdent(b []byte) error {
	if len(b) < 4 || string(b[:4]) != elf.ELFMAG {
		return ErrNotELF
	}
	if len(b) < elf.EI_NIDENT {
		return truncErr("ELF identification", 0, "%d bytes", len(b))
	}
	switch elf.Class(b[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
	case elf.ELFCLASS32:
		return &UnsupportedError{What: "32-bit ELF (want ELF64)"}
	default:
		return formatErr("ELF identification", elf.EI_CLASS, "unknown class %d", b[elf.EI_CLASS])
	}
	switch elf.Data(b[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
	case elf.ELFDATA2MSB:
		return &UnsupportedError{What: "big-endian ELF"}
	default:
		return formatErr("ELF identification", elf.EI_DATA, "unknown byte order %d", b[elf.EI_DATA])
	}
	return nil
}

// readSegments reads the program header table: PT_LOAD segments and
// PT_INTERP.
func (f *File) readSegments() error {
	le := binary.LittleEndian
	data := f.data
	phoff := le.Uint64(data[0x20:])
	phentsize := uint64(le.Uint16(data[0x36:]))
	phnum := uint64(le.Uint16(data[0x38:]))
	if phnum == 0 {
		return nil
	}
	if phentsize != phdrSize {
		return formatErr("ELF header", 0x36, "program header size %d, want %d", phentsize, phdrSize)
	}
	if end, ok := span(phoff, phnum*phdrSize); !ok || end > uint64(len(data)) {
		return truncErr("program headers", int64(phoff), "%d headers do not fit in %d bytes", phnum, len(data))
	}
	for i := uint64(0); i < phnum; i++ {
		p := data[phoff+i*phdrSize:]
		typ := elf.ProgType(le.Uint32(p))
		off, vaddr, filesz, memsz := le.Uint64(p[8:]), le.Uint64(p[16:]), le.Uint64(p[32:]), le.Uint64(p[40:])
		where := int64(phoff + i*phdrSize)
		switch typ {
		case elf.PT_LOAD:
			if _, ok := span(vaddr, memsz); !ok || filesz > memsz {
				return formatErr("program headers", where, "PT_LOAD with vaddr %#x, filesz %#x, memsz %#x", vaddr, filesz, memsz)
			}
			if end, ok := span(off, filesz); !ok || end > uint64(len(data)) {
				return truncErr("program headers", where, "PT_LOAD at offset %#x with %#x bytes in a %d-byte file", off, filesz, len(data))
			}
			f.Segments = append(f.Segments, Segment{Vaddr: vaddr, Memsz: memsz, Off: off, Filesz: filesz, Flags: elf.ProgFlag(le.Uint32(p[4:]))})
		case elf.PT_INTERP:
			if end, ok := span(off, filesz); ok && end <= uint64(len(data)) {
				f.Interp = string(bytes.TrimRight(data[off:end], "\x00"))
			}
		}
	}
	return nil
}

// checkSectionTable checks that the section header table lies within the
// file, including the extended numbering forms, before debug/elf reads it.
func checkSectionTable(data []byte) error {
	le := binary.LittleEndian
	shoff := le.Uint64(data[0x28:])
	shentsize := uint64(le.Uint16(data[0x3a:]))
	shnum := uint64(le.Uint16(data[0x3c:]))
	if shoff == 0 {
		return nil
	}
	if shentsize != shdrSize {
		return formatErr("ELF header", 0x3a, "section header size %d, want %d", shentsize, shdrSize)
	}
	if shnum == 0 {
		// Extended numbering: the count is in section 0's sh_size.
		if end, ok := span(shoff, shdrSize); !ok || end > uint64(len(data)) {
			return truncErr("section headers", int64(shoff), "section 0 does not fit in %d bytes", len(data))
		}
		shnum = le.Uint64(data[shoff+32:])
	}
	if end, ok := span(shoff, shnum*shdrSize); !ok || shnum > 1<<24 || end > uint64(len(data)) {
		return truncErr("section headers", int64(shoff), "%d headers do not fit in %d bytes", shnum, len(data))
	}
	return nil
}

// newELFFile hands the validated file to debug/elf. A parse failure, or a
// panic inside the parser, is reported as a *FormatError: no file may crash
// the caller.
func newELFFile(data []byte) (ef *elf.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			ef, err = nil, formatErr("ELF file", -1, "%v", p)
		}
	}()
	ef, err = elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, &FormatError{Where: "ELF file", Off: -1, Err: err}
	}
	return ef, nil
}

// span returns off+n and whether it did not overflow.
func span(off, n uint64) (uint64, bool) {
	end := off + n
	return end, end >= off
}

// Close releases the file's contents. Views returned by Code become
// invalid.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer()
	f.closer = nil
	return err
}

// Kind describes the file: "executable", "pie" (a position-independent
// executable) or "shared library".
func (f *File) Kind() string {
	if f.Type == elf.ET_EXEC {
		return "executable"
	}
	if f.Interp != "" || f.dynFlags1()&uint64(elf.DF_1_PIE) != 0 {
		return "pie"
	}
	return "shared library"
}

// dynFlags1 returns DT_FLAGS_1, or 0.
func (f *File) dynFlags1() uint64 {
	v, err := f.dynValue(elf.DT_FLAGS_1)
	if err != nil || len(v) == 0 {
		return 0
	}
	return v[0]
}

// dynValue reads a dynamic tag, turning a parser panic into an error.
func (f *File) dynValue(tag elf.DynTag) (v []uint64, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, formatErr(".dynamic", -1, "%v", p)
		}
	}()
	return f.ef.DynValue(tag)
}

// segmentFor returns the segment whose file-backed part holds vaddr,
// preferring an executable one when exec is set (and requiring it).
func (f *File) segmentFor(vaddr uint64, exec bool) *Segment {
	for i := range f.Segments {
		s := &f.Segments[i]
		if s.containsAddr(vaddr) && (!exec || s.Exec()) {
			return s
		}
	}
	return nil
}

// Offset returns the file offset of virtual address vaddr, through the
// loadable segment whose file-backed part contains it. An address in no
// such segment (or in the zero-filled tail, .bss) gives ErrNotMapped.
func (f *File) Offset(vaddr uint64) (uint64, error) {
	s := f.segmentFor(vaddr, false)
	if s == nil {
		return 0, fmt.Errorf("address %#x: %w", vaddr, ErrNotMapped)
	}
	return vaddr - s.Vaddr + s.Off, nil
}

// TextOffset returns the file offset of the code at vaddr, through the
// executable loadable segment that contains it, as libbpf and cilium/ebpf
// compute the offset a kernel uprobe takes. An address outside every
// executable segment gives ErrNotMapped.
func (f *File) TextOffset(vaddr uint64) (uint64, error) {
	s := f.segmentFor(vaddr, true)
	if s == nil {
		return 0, fmt.Errorf("address %#x: %w (no executable segment holds it)", vaddr, ErrNotMapped)
	}
	return vaddr - s.Vaddr + s.Off, nil
}

// Addr returns the virtual address of file offset off, through the first
// loadable segment (executable ones first) whose file-backed part holds it.
func (f *File) Addr(off uint64) (uint64, error) {
	for _, exec := range []bool{true, false} {
		for i := range f.Segments {
			s := &f.Segments[i]
			if s.Exec() == exec && off >= s.Off && off-s.Off < s.Filesz {
				return off - s.Off + s.Vaddr, nil
			}
		}
	}
	return 0, fmt.Errorf("offset %#x: %w", off, ErrNotMapped)
}

// Code returns up to n bytes of code starting at vaddr, from the executable
// segment that holds vaddr; fewer when the segment's file-backed part ends
// sooner. The slice is a view of the file (see File).
func (f *File) Code(vaddr, n uint64) ([]byte, error) {
	s := f.segmentFor(vaddr, true)
	if s == nil {
		return nil, fmt.Errorf("code at %#x: %w (no executable segment holds it)", vaddr, ErrNotMapped)
	}
	return f.segmentBytes(s, vaddr, n), nil
}

// Data returns up to n bytes of the file's contents at vaddr, from the
// loadable segment (code or data) whose file-backed part holds vaddr: the
// bytes a process maps there, before the dynamic linker applies any
// relocation. Fewer when that part ends sooner; an address in no such part
// (or in a zero-filled tail, .bss) gives ErrNotMapped. The slice is a view
// of the file (see File).
func (f *File) Data(vaddr, n uint64) ([]byte, error) {
	s := f.segmentFor(vaddr, false)
	if s == nil {
		return nil, fmt.Errorf("data at %#x: %w", vaddr, ErrNotMapped)
	}
	return f.segmentBytes(s, vaddr, n), nil
}

// segmentBytes returns up to n bytes of s's file-backed part from vaddr,
// which it holds.
func (f *File) segmentBytes(s *Segment, vaddr, n uint64) []byte {
	start := s.Off + (vaddr - s.Vaddr)
	end := s.Off + s.Filesz
	if n < end-start {
		end = start + n
	}
	return f.data[start:end:end]
}

// section returns the named section, or nil.
func (f *File) section(name string) *elf.Section {
	return f.ef.Section(name)
}

// sectionData returns a view of a section's contents. SHT_NOBITS sections
// have none.
func (f *File) sectionData(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		return nil, formatErr(s.Name, int64(s.Offset), "compressed section")
	}
	end, ok := span(s.Offset, s.Size)
	if !ok || end > uint64(len(f.data)) {
		return nil, truncErr(s.Name, int64(s.Offset), "%#x bytes do not fit in a %d-byte file", s.Size, len(f.data))
	}
	return f.data[s.Offset:end:end], nil
}

// IsGo reports whether the file is a Go binary (it has a Go function table).
func (f *File) IsGo() bool {
	return f.section(".gopclntab") != nil
}

// Section is an allocated section of the file and its contents.
type Section struct {
	Name  string
	Addr  uint64
	Flags elf.SectionFlag
	// Data is a view of the section's bytes in the file.
	Data []byte
}

// Sections returns the sections that occupy memory in a process and have
// contents in the file (SHF_ALLOC, not SHT_NOBITS), in header order. A
// file without section headers has none.
func (f *File) Sections() ([]Section, error) {
	var out []Section
	for _, s := range f.ef.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		b, err := f.sectionData(s)
		if err != nil {
			return nil, err
		}
		out = append(out, Section{Name: s.Name, Addr: s.Addr, Flags: s.Flags, Data: b})
	}
	return out, nil
}

// ExecSections returns the executable sections (SHF_EXECINSTR) that have
// contents in the file, in header order: the code a whole-file sweep
// reads. A file without section headers gives ErrNoSections: where its
// code lies (and which of its bytes are data) is not known.
func (f *File) ExecSections() ([]Section, error) {
	secs, err := f.Sections()
	if err != nil {
		return nil, err
	}
	if len(secs) == 0 {
		return nil, fmt.Errorf("%s: %w", f.Path, ErrNoSections)
	}
	out := secs[:0]
	for _, s := range secs {
		if s.Flags&elf.SHF_EXECINSTR != 0 {
			out = append(out, s)
		}
	}
	return out, nil
}

// SamePath reports whether two paths name the same file: equal paths, or
// paths that stat to the same file (through symbolic links, hard links or
// bind mounts).
func SamePath(a, b string) bool {
	if a == b {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
