package elfscan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// EHSection is the contents of one section of a file that exception
// handling reads: .eh_frame, or .gcc_except_table (where the LSDAs lie).
type EHSection struct {
	Name string // for errors: ".eh_frame"
	Addr uint64 // virtual address of Data[0]
	Data []byte
}

// ErrEHFrame is the cause of every error about exception tables (see
// EHError).
var ErrEHFrame = errors.New("bad exception tables")

// EHError is an error in the exception tables of a file: where, and what.
type EHError struct {
	Section string // ".eh_frame", ".gcc_except_table"...
	Off     uint64 // offset in the section of the entry or field at fault
	Reason  string
}

func (e *EHError) Error() string {
	return fmt.Sprintf("%s at offset %#x: %s", e.Section, e.Off, e.Reason)
}

// Unwrap returns ErrEHFrame.
func (e *EHError) Unwrap() error { return ErrEHFrame }

// FDE is what the unwinder knows about one function (or part of one, such
// as foo.cold): the code range of a frame description entry of .eh_frame
// and its language-specific data area.
type FDE struct {
	PCBegin, PCEnd uint64
	// LSDA is the address of the language-specific data area (for C++,
	// the call-site table with the landing pads), 0 when there is none.
	LSDA uint64
	// Err says why the landing pads of the range are not known (its LSDA
	// could not be read); nil when they are.
	Err error
}

// ExceptionTables is what the exception tables of a file say: the FDEs,
// and the landing pads, where the unwinder jumps (through a register)
// when an exception leaves a call: catch blocks and cleanups.
type ExceptionTables struct {
	FDEs []FDE
	// LandingPads are sorted, without duplicates.
	LandingPads []uint64
}

// DWARF exception-header pointer encodings (DW_EH_PE_*).
const (
	pePtr     = 0x00
	peULEB    = 0x01
	peUData2  = 0x02
	peUData4  = 0x03
	peUData8  = 0x04
	peSigned  = 0x08
	peSLEB    = 0x09
	peSData2  = 0x0a
	peSData4  = 0x0b
	peSData8  = 0x0c
	pePCRel   = 0x10
	peTextRel = 0x20
	peDataRel = 0x30
	peFuncRel = 0x40
	peAligned = 0x50
	peIndir   = 0x80
	peOmit    = 0xff
)

// ParseExceptionTables reads the CIEs and FDEs of frame (.eh_frame) and
// the call-site tables of the LSDAs they point to, which must lie in one
// of data (.gcc_except_table). It supports the pointer encodings GCC and
// LLVM emit: absolute and pc-relative, in every size, function-relative in
// an LSDA, and aligned; an LSDA reached only through an indirect,
// text-relative or data-relative pointer is not read, and its FDE says so
// in Err. An error in an LSDA leaves the landing pads of its FDE unknown
// (FDE.Err); an error in the structure of frame, after which no entry can
// be found, is returned (an *EHError).
func ParseExceptionTables(frame EHSection, data []EHSection) (*ExceptionTables, error) {
	p := &ehParser{frame: frame, data: data, cies: map[uint64]*cie{}}
	return p.parse()
}

type ehParser struct {
	frame EHSection
	data  []EHSection
	cies  map[uint64]*cie
	out   ExceptionTables
}

// cie is what an FDE needs from its common information entry.
type cie struct {
	fdeEnc  byte // 'R'
	lsdaEnc byte // 'L', peOmit when absent
	aug     bool // 'z': FDEs have augmentation data
	err     error
}

// ehReader reads a section with bounds checks: every read past the end
// sets err and returns zero.
type ehReader struct {
	sec  *EHSection
	off  uint64
	end  uint64 // the end of what may be read
	err  error
	what string // the entry being read, for errors
}

func (r *ehReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = &EHError{Section: r.sec.Name, Off: r.off, Reason: r.what + ": " + fmt.Sprintf(format, args...)}
	}
}

func (r *ehReader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > r.end-r.off {
		r.fail("%d bytes needed, %d left", n, r.end-r.off)
		return nil
	}
	b := r.sec.Data[r.off : r.off+n]
	r.off += n
	return b
}

func (r *ehReader) u8() byte {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *ehReader) u16() uint16 {
	if b := r.bytes(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *ehReader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *ehReader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *ehReader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *ehReader) sleb() int64 {
	var v int64
	shift := uint(0)
	for {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *ehReader) cstring() string {
	for i := r.off; i < r.end; i++ {
		if r.sec.Data[i] == 0 {
			s := string(r.sec.Data[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail("string without its end")
	return ""
}

// addr is the virtual address of the reader's position.
func (r *ehReader) addr() uint64 { return r.sec.Addr + r.off }

// pointer reads a pointer encoded with enc; funcStart is the base of a
// function-relative one (0: not allowed). indirect reports that the value
// is the address of the pointer, not the pointer.
func (r *ehReader) pointer(enc byte, funcStart uint64) (v uint64, indirect bool) {
	if enc == peOmit {
		return 0, false
	}
	at := r.addr()
	if enc&0x70 == peAligned {
		if pad := (8 - at%8) % 8; pad > 0 {
			r.bytes(pad)
			at += pad
		}
	}
	switch enc & 0x0f {
	case pePtr, peUData8, peSigned, peSData8:
		v = r.u64()
	case peULEB:
		v = r.uleb()
	case peUData2:
		v = uint64(r.u16())
	case peUData4:
		v = uint64(r.u32())
	case peSLEB:
		v = uint64(r.sleb())
	case peSData2:
		v = uint64(int64(int16(r.u16())))
	case peSData4:
		v = uint64(int64(int32(r.u32())))
	default:
		r.fail("pointer encoding %#x: unknown format", enc)
		return 0, false
	}
	switch enc & 0x70 {
	case 0, peAligned:
	case pePCRel:
		v += at
	case peFuncRel:
		if funcStart == 0 {
			r.fail("pointer encoding %#x: function-relative outside an LSDA", enc)
			return 0, false
		}
		v += funcStart
	case peTextRel, peDataRel:
		r.fail("pointer encoding %#x: text- or data-relative pointers are not supported", enc)
		return 0, false
	default:
		r.fail("pointer encoding %#x: unknown application", enc)
		return 0, false
	}
	return v, enc&peIndir != 0
}

// skipPointer reads over a pointer encoded with enc, whatever its
// application.
func (r *ehReader) skipPointer(enc byte) {
	if enc == peOmit {
		return
	}
	format := enc & 0x0f
	if enc&0x70 == peAligned {
		format |= peAligned
	}
	r.pointer(format, 0)
}

func (p *ehParser) parse() (*ExceptionTables, error) {
	sec := &p.frame
	size := uint64(len(sec.Data))
	for off := uint64(0); off < size; {
		r := &ehReader{sec: sec, off: off, end: size, what: "entry"}
		length := uint64(r.u32())
		idSize := uint64(4)
		if length == 0xffffffff {
			length, idSize = r.u64(), 8
		}
		if r.err != nil {
			return nil, r.err
		}
		if length == 0 {
			// The terminator: what follows (if anything) is not
			// .eh_frame contents.
			break
		}
		if length > size-r.off {
			return nil, &EHError{Section: sec.Name, Off: off, Reason: fmt.Sprintf("entry of %#x bytes runs past the end of the section", length)}
		}
		next := r.off + length
		r.end = next
		idAt := r.off
		var id uint64
		if idSize == 8 {
			id = r.u64()
		} else {
			id = uint64(r.u32())
		}
		if r.err != nil {
			return nil, r.err
		}
		if id == 0 {
			// A CIE: read it now so that its errors are found, even if
			// no FDE uses it.
			if c := p.cie(off); c.err != nil {
				return nil, c.err
			}
		} else if err := p.fde(off, idAt, id, r); err != nil {
			return nil, err
		}
		off = next
	}
	slices.Sort(p.out.LandingPads)
	p.out.LandingPads = slices.Compact(p.out.LandingPads)
	return &p.out, nil
}

// cie returns the CIE at offset off of .eh_frame (read once).
func (p *ehParser) cie(off uint64) *cie {
	if c := p.cies[off]; c != nil {
		return c
	}
	c := &cie{lsdaEnc: peOmit}
	p.cies[off] = c
	sec := &p.frame
	r := &ehReader{sec: sec, off: off, end: uint64(len(sec.Data)), what: "CIE"}
	length := uint64(r.u32())
	idSize := uint64(4)
	if length == 0xffffffff {
		length, idSize = r.u64(), 8
	}
	if r.err == nil && length > r.end-r.off {
		r.fail("%#x bytes run past the end of the section", length)
	}
	if r.err != nil {
		c.err = r.err
		return c
	}
	r.end = r.off + length
	var id uint64
	if idSize == 8 {
		id = r.u64()
	} else {
		id = uint64(r.u32())
	}
	if id != 0 {
		r.fail("not a CIE (id %#x)", id)
	}
	version := r.u8()
	if r.err == nil && version != 1 && version != 3 && version != 4 {
		r.fail("version %d", version)
	}
	aug := r.cstring()
	if version == 4 {
		r.u8() // address size
		r.u8() // segment selector size
	}
	r.uleb() // code alignment
	r.sleb() // data alignment
	if version == 1 {
		r.u8() // return address register
	} else {
		r.uleb()
	}
	if r.err == nil && len(aug) > 0 {
		if aug[0] != 'z' {
			r.fail("augmentation %q without its size", aug)
		} else {
			c.aug = true
			n := r.uleb()
			if r.err == nil && n > r.end-r.off {
				r.fail("augmentation data of %d bytes runs past the entry", n)
			}
			end := r.off + n
		letters:
			for i := 1; i < len(aug); i++ {
				switch aug[i] {
				case 'L':
					c.lsdaEnc = r.u8()
				case 'R':
					c.fdeEnc = r.u8()
				case 'P':
					r.skipPointer(r.u8())
				case 'S', 'B', 'G':
				default:
					// A letter this parser does not know: as for
					// the unwinder, the data after it cannot be
					// read. That matters only when the LSDA
					// encoding is among it.
					if strings.IndexByte(aug[i+1:], 'L') >= 0 {
						r.fail("augmentation %q: unknown %q before the LSDA encoding", aug, aug[i])
					}
					break letters
				}
			}
			if r.err == nil && r.off > end {
				r.fail("augmentation data longer than its size")
			}
		}
	}
	c.err = r.err
	return c
}

// fde reads the FDE at offset off; r is positioned after its CIE pointer,
// which was id, read at idAt. An error in the LSDA goes into the FDE's Err;
// one that leaves its range unknown is returned.
func (p *ehParser) fde(off, idAt, id uint64, r *ehReader) error {
	r.what = "FDE"
	if id > idAt {
		return &EHError{Section: p.frame.Name, Off: off, Reason: fmt.Sprintf("FDE: CIE pointer %#x points before the section", id)}
	}
	c := p.cie(idAt - id)
	if c.err != nil {
		return c.err
	}
	begin, _ := r.pointer(c.fdeEnc, 0)
	rng, _ := r.pointer(c.fdeEnc&0x0f, 0)
	if r.err != nil {
		return r.err
	}
	fde := FDE{PCBegin: begin, PCEnd: begin + rng}
	if fde.PCEnd < begin {
		fde.PCEnd = ^uint64(0)
	}
	if c.aug {
		n := r.uleb()
		if r.err == nil && n > r.end-r.off {
			r.fail("augmentation data of %d bytes runs past the entry", n)
		}
		end := r.off + n
		if c.lsdaEnc != peOmit && r.err == nil {
			lsda, indirect := r.pointer(c.lsdaEnc, 0)
			switch {
			case r.err != nil:
			case r.off > end:
				r.fail("LSDA pointer longer than the augmentation data")
			case indirect && lsda != 0:
				r.fail("LSDA pointer through memory at %#x is not supported", lsda)
			case lsda != 0:
				fde.LSDA = lsda
				fde.Err = p.lsda(lsda, begin)
			}
		}
		if fde.Err == nil {
			fde.Err = r.err
		}
	}
	p.out.FDEs = append(p.out.FDEs, fde)
	return nil
}

// lsda reads the call-site table of the LSDA at addr, of the function that
// starts at funcStart, and adds its landing pads.
func (p *ehParser) lsda(addr, funcStart uint64) error {
	var sec *EHSection
	for i := range p.data {
		s := &p.data[i]
		if addr >= s.Addr && addr-s.Addr < uint64(len(s.Data)) {
			sec = s
			break
		}
	}
	if sec == nil {
		return &EHError{Section: p.frame.Name, Reason: fmt.Sprintf("LSDA at %#x (of the code at %#x) is in no section given", addr, funcStart)}
	}
	r := &ehReader{sec: sec, off: addr - sec.Addr, end: uint64(len(sec.Data)), what: fmt.Sprintf("LSDA of the code at %#x", funcStart)}
	lpStart := funcStart
	if enc := r.u8(); enc != peOmit {
		v, indirect := r.pointer(enc, funcStart)
		if indirect {
			r.fail("landing-pad base through memory is not supported")
		}
		lpStart = v
	}
	if enc := r.u8(); enc != peOmit {
		r.uleb() // type table offset
	}
	csEnc := r.u8()
	n := r.uleb()
	if r.err != nil {
		return r.err
	}
	if n > r.end-r.off {
		r.fail("call-site table of %d bytes runs past the section", n)
		return r.err
	}
	r.end = r.off + n
	// The fields are offsets from lpStart, read as the unwinder reads
	// them: with no base (a function-relative encoding is refused).
	for r.off < r.end && r.err == nil {
		r.pointer(csEnc, 0) // start
		r.pointer(csEnc, 0) // length
		lp, _ := r.pointer(csEnc, 0)
		r.uleb() // action
		if r.err == nil && lp != 0 {
			p.out.LandingPads = append(p.out.LandingPads, lpStart+lp)
		}
	}
	return r.err
}

// ExceptionTables returns what the exception tables of the file say: the
// FDEs of .eh_frame and the landing pads their LSDAs (in
// .gcc_except_table) list, parsed by ParseExceptionTables on the first
// call and kept. A file without .eh_frame has none (an empty result, no
// error). An error in the structure of .eh_frame is an *EHError.
func (f *File) ExceptionTables() (*ExceptionTables, error) {
	f.ehOnce.Do(func() { f.eh, f.ehErr = f.readExceptionTables() })
	return f.eh, f.ehErr
}

func (f *File) readExceptionTables() (*ExceptionTables, error) {
	secs, err := f.Sections()
	if err != nil {
		return nil, err
	}
	var frame EHSection
	var data []EHSection
	for _, s := range secs {
		switch s.Name {
		case ".eh_frame":
			frame = EHSection{Name: s.Name, Addr: s.Addr, Data: s.Data}
		case ".gcc_except_table":
			data = append(data, EHSection{Name: s.Name, Addr: s.Addr, Data: s.Data})
		}
	}
	if len(frame.Data) == 0 {
		return &ExceptionTables{}, nil
	}
	return ParseExceptionTables(frame, data)
}
