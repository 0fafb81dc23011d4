package elfscan

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
)

// goFuncs reads the functions of a Go binary from its function table,
// .gopclntab, which stays when the symbol table is stripped.
func (f *File) goFuncs() ([]rawSym, error) {
	data, textStart, err := f.pclntab()
	if data == nil || err != nil {
		return nil, err
	}
	tab, err := newGoTable(data, textStart)
	if err != nil {
		return nil, err
	}
	out := make([]rawSym, 0, len(tab.Funcs))
	for i := range tab.Funcs {
		fn := &tab.Funcs[i]
		if fn.End <= fn.Entry {
			continue
		}
		out = append(out, rawSym{name: fn.Name, addr: fn.Entry, size: fn.End - fn.Entry, bind: elf.STB_GLOBAL, typ: elf.STT_FUNC, src: FromPclntab, section: -1})
	}
	return out, nil
}

// pclntab returns the Go function table (nil for a file without one) and
// the address its function entries count from (goTextStart).
func (f *File) pclntab() (data []byte, textStart uint64, err error) {
	pcln, text := f.section(".gopclntab"), f.section(".text")
	if pcln == nil || text == nil {
		return nil, 0, nil
	}
	if data, err = f.sectionData(pcln); err != nil {
		return nil, 0, err
	}
	return data, f.goTextStart(data, pcln.Addr, text.Addr), nil
}

// newGoTable parses a Go function table, turning a parser panic on a
// damaged table into a *FormatError. The header is checked first: debug/gosym
// trusts its counts, and a damaged count would make it allocate without
// bound.
func newGoTable(data []byte, textStart uint64) (tab *gosym.Table, err error) {
	if err := checkPclntab(data); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			tab, err = nil, formatErr(".gopclntab", -1, "%v", p)
		}
	}()
	tab, err = gosym.NewTable(nil, gosym.NewLineTable(data, textStart))
	if err != nil {
		return nil, &FormatError{Where: ".gopclntab", Off: -1, Err: err}
	}
	return tab, nil
}

// Magic numbers of the Go function table, by Go version.
const (
	pclnGo12  = 0xfffffffb
	pclnGo116 = 0xfffffffa
	pclnGo118 = 0xfffffff0
	pclnGo120 = 0xfffffff1
)

// checkPclntab checks that the header of a Go function table is one debug/gosym
// knows and that its function table fits in the section.
func checkPclntab(data []byte) error {
	bad := func(format string, args ...any) error { return formatErr(".gopclntab", -1, format, args...) }
	if len(data) < 16 {
		return truncErr(".gopclntab", -1, "%d bytes, shorter than a header", len(data))
	}
	magic := binary.LittleEndian.Uint32(data)
	if data[4] != 0 || data[5] != 0 {
		return bad("bad header padding")
	}
	if lc := data[6]; lc != 1 && lc != 2 && lc != 4 {
		return bad("instruction size quantum %d", lc)
	}
	ptr := uint64(data[7])
	if ptr != 4 && ptr != 8 {
		return bad("pointer size %d", ptr)
	}
	word := func(i uint64) (uint64, error) {
		off := 8 + i*ptr
		if off+ptr > uint64(len(data)) {
			return 0, truncErr(".gopclntab", -1, "header cut")
		}
		if ptr == 4 {
			return uint64(binary.LittleEndian.Uint32(data[off:])), nil
		}
		return binary.LittleEndian.Uint64(data[off:]), nil
	}
	nfunc, err := word(0)
	if err != nil {
		return err
	}
	var tabOff, entry uint64
	switch magic {
	case pclnGo12:
		tabOff, entry = 8+ptr, 2*ptr
	case pclnGo116:
		if tabOff, err = word(6); err != nil {
			return err
		}
		entry = 2 * ptr
	case pclnGo118, pclnGo120:
		if tabOff, err = word(7); err != nil {
			return err
		}
		entry = 8
	default:
		return bad("unknown magic %#x", magic)
	}
	if nfunc > uint64(len(data))/entry || tabOff > uint64(len(data)) || (nfunc+1)*entry > uint64(len(data))-tabOff {
		return truncErr(".gopclntab", -1, "%d functions do not fit in %d bytes", nfunc, len(data))
	}
	return nil
}
