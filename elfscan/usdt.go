package elfscan

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// The USDT note: section .note.stapsdt, owner "stapsdt", type 3.
const (
	usdtNoteSection = ".note.stapsdt"
	usdtBaseSection = ".stapsdt.base"
	usdtNoteOwner   = "stapsdt"
	usdtNoteType    = 3
)

// SiteInsn names the instruction at a USDT site.
type SiteInsn string

const (
	SiteNop      SiteInsn = "nop"       // x86-64 90, arm64 d503201f: what <sys/sdt.h> emits
	SiteNop5     SiteInsn = "nop5"      // a 5-byte x86-64 NOP
	SiteNop10    SiteInsn = "nop10"     // a 10-byte x86-64 NOP
	SiteNopNop5  SiteInsn = "nop+nop5"  // nop followed by a 5-byte NOP (newer <sys/sdt.h>)
	SiteNopNop10 SiteInsn = "nop+nop10" // nop followed by a 10-byte NOP
	SiteOther    SiteInsn = "other"     // anything else (or unreadable)
)

// USDTProbe is one USDT probe: a .note.stapsdt note.
type USDTProbe struct {
	Provider, Name string
	// Location, Base and Semaphore are the three addresses of the note, as
	// written (what readelf -n prints).
	Location, Base, Semaphore uint64
	// Addr is the probe's virtual address: Location corrected for
	// prelinking (+ the address of .stapsdt.base - Base) when the file has
	// a .stapsdt.base section and Base is not 0, as libbpf does.
	Addr uint64
	// Offset is the file offset of Addr through its executable segment:
	// what a uprobe takes. OffsetErr says why there is none.
	Offset    uint64
	OffsetErr error
	// SemaphoreAddr is Semaphore with the same correction (0: no
	// semaphore), and SemaphoreOffset its file offset, through its
	// (writable, non-executable) segment: the kernel increments the 16-bit
	// counter there while the probe is attached. SemaphoreErr says why
	// there is no offset.
	SemaphoreAddr   uint64
	SemaphoreOffset uint64
	SemaphoreErr    error
	// Args is the argument string as written; Arguments is its parsed
	// form, nil with ArgsErr set when it does not parse.
	Args      string
	Arguments []USDTArg
	ArgsErr   error
	// Site is the kind of instruction at Addr.
	Site SiteInsn
}

// USDT returns the USDT probes of the file in note order. A file without
// .note.stapsdt has none; a malformed note section gives a *FormatError.
func (f *File) USDT() ([]USDTProbe, error) {
	f.usdtOnce.Do(func() {
		f.usdt, f.usdtErr = f.loadUSDT()
	})
	return f.usdt, f.usdtErr
}

func (f *File) loadUSDT() ([]USDTProbe, error) {
	var probes []USDTProbe
	var baseAddr uint64
	if s := f.section(usdtBaseSection); s != nil {
		baseAddr = s.Addr
	}
	for _, s := range f.ef.Sections {
		if s.Name != usdtNoteSection || s.Type != elf.SHT_NOTE {
			continue
		}
		data, err := f.sectionData(s)
		if err != nil {
			return nil, err
		}
		notes, err := ParseUSDTNotes(data, int64(s.Offset))
		if err != nil {
			return nil, err
		}
		for i := range notes {
			f.resolveUSDT(&notes[i], baseAddr)
		}
		probes = append(probes, notes...)
	}
	return probes, nil
}

// resolveUSDT applies the base correction, computes file offsets, parses
// the arguments and classifies the site.
func (f *File) resolveUSDT(p *USDTProbe, baseAddr uint64) {
	p.Addr, p.SemaphoreAddr = p.Location, p.Semaphore
	if baseAddr != 0 && p.Base != 0 {
		p.Addr += baseAddr - p.Base
		if p.Semaphore != 0 {
			p.SemaphoreAddr += baseAddr - p.Base
		}
	}
	p.Offset, p.OffsetErr = f.TextOffset(p.Addr)
	if p.SemaphoreAddr != 0 {
		if s := f.segmentFor(p.SemaphoreAddr, false); s == nil {
			p.SemaphoreErr = fmt.Errorf("semaphore %#x: %w", p.SemaphoreAddr, ErrNotMapped)
		} else if s.Exec() {
			p.SemaphoreErr = fmt.Errorf("semaphore %#x is in an executable segment", p.SemaphoreAddr)
		} else {
			p.SemaphoreOffset = p.SemaphoreAddr - s.Vaddr + s.Off
		}
	}
	p.Arguments, p.ArgsErr = ParseUSDTArgs(f.Arch, p.Args)
	p.Site = SiteOther
	if code, err := f.Code(p.Addr, 16); err == nil {
		p.Site = ClassifySite(f.Arch, code)
	}
}

// ParseUSDTNotes parses the contents of a .note.stapsdt section (ELF64,
// little-endian) found at file offset base (for error messages). Notes of
// other owners or types are skipped. Addresses are returned as written; Addr
// and the offsets are left zero.
func ParseUSDTNotes(data []byte, base int64) ([]USDTProbe, error) {
	le := binary.LittleEndian
	var probes []USDTProbe
	for off := 0; off < len(data); {
		if len(data)-off < 12 {
			// Trailing padding is allowed; anything else is a cut header.
			if allZero(data[off:]) {
				break
			}
			return nil, truncErr(usdtNoteSection, base+int64(off), "note header cut after %d bytes", len(data)-off)
		}
		namesz, descsz, typ := uint64(le.Uint32(data[off:])), uint64(le.Uint32(data[off+4:])), le.Uint32(data[off+8:])
		nameOff := uint64(off) + 12
		descOff := nameOff + align4(namesz)
		next := descOff + align4(descsz)
		if next > uint64(len(data)) {
			return nil, truncErr(usdtNoteSection, base+int64(off), "note of %d+%d bytes runs past the section end", namesz, descsz)
		}
		name := data[nameOff : nameOff+namesz]
		desc := data[descOff : descOff+descsz]
		if typ == usdtNoteType && string(bytes.TrimRight(name, "\x00")) == usdtNoteOwner {
			p, err := parseUSDTDesc(desc)
			if err != nil {
				return nil, formatErr(usdtNoteSection, base+int64(descOff), "%v", err)
			}
			probes = append(probes, p)
		}
		off = int(next)
	}
	return probes, nil
}

// parseUSDTDesc parses a note's descriptor: three 8-byte addresses, then
// provider, name and arguments as NUL-terminated strings.
func parseUSDTDesc(desc []byte) (USDTProbe, error) {
	le := binary.LittleEndian
	if len(desc) < 24 {
		return USDTProbe{}, fmt.Errorf("descriptor of %d bytes, want at least 24", len(desc))
	}
	p := USDTProbe{Location: le.Uint64(desc), Base: le.Uint64(desc[8:]), Semaphore: le.Uint64(desc[16:])}
	rest := desc[24:]
	var fields [3]string
	for i := range fields {
		n := bytes.IndexByte(rest, 0)
		if n < 0 {
			return USDTProbe{}, fmt.Errorf("string %d of the descriptor is not NUL-terminated", i+1)
		}
		fields[i] = string(rest[:n])
		rest = rest[n+1:]
	}
	p.Provider, p.Name, p.Args = fields[0], fields[1], fields[2]
	if p.Provider == "" || p.Name == "" {
		return USDTProbe{}, fmt.Errorf("empty provider or name")
	}
	return p, nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// ClassifySite names the instruction at the start of code, as a USDT site:
// nop, nop5, nop10, nop+nop5, nop+nop10 or other (decode.NopLen says what
// a NOP is).
func ClassifySite(arch decode.Arch, code []byte) SiteInsn {
	n := decode.NopLen(arch, code)
	if arch == decode.ARM64 {
		if n > 0 {
			return SiteNop
		}
		return SiteOther
	}
	switch n {
	case 1:
		switch decode.NopLen(arch, code[1:]) {
		case 5:
			return SiteNopNop5
		case 10:
			return SiteNopNop10
		}
		return SiteNop
	case 5:
		return SiteNop5
	case 10:
		return SiteNop10
	}
	return SiteOther
}
