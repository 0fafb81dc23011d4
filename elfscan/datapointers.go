package elfscan

import (
	"debug/elf"
	"encoding/binary"
	"slices"
)

// DataPointer is an address inside the file's executable sections that
// its data holds: a code address the program may load and jump to.
type DataPointer struct {
	At uint64 // virtual address of the word (or of the relocated place)
	To uint64 // the code address it holds
}

// DataPointers returns every code address the file's data holds, sorted
// by To: each 8-byte aligned word of its allocated data sections
// (PROGBITS and the init and fini arrays, not executable) whose value
// lies in an executable section (a table of
// function pointers, a vtable, a static array of labels' addresses, the
// absolute jump tables of code that is not position-independent), and the
// value each dynamic relocation of x86-64 gives its place (RELATIVE and
// IRELATIVE: the addend; 64, GLOB_DAT and JUMP_SLOT: the symbol's value
// plus the addend) when it lies there, since a linker may leave such a
// place zero in the file. A file without section headers has none.
func (f *File) DataPointers() ([]DataPointer, error) {
	secs, err := f.Sections()
	if err != nil {
		return nil, err
	}
	var lo, hi []uint64
	for _, s := range secs {
		if s.Flags&elf.SHF_EXECINSTR != 0 {
			lo, hi = append(lo, s.Addr), append(hi, s.Addr+uint64(len(s.Data)))
		}
	}
	inCode := func(v uint64) bool {
		for i := range lo {
			if v >= lo[i] && v < hi[i] {
				return true
			}
		}
		return false
	}
	le := binary.LittleEndian
	var out []DataPointer
	for _, s := range f.ef.Sections {
		// The program's data: not the linker's tables (relocations,
		// symbols, .dynamic), whose words name code for the linker.
		switch s.Type {
		case elf.SHT_PROGBITS, elf.SHT_INIT_ARRAY, elf.SHT_FINI_ARRAY, elf.SHT_PREINIT_ARRAY:
		default:
			continue
		}
		if s.Flags&elf.SHF_ALLOC == 0 || s.Flags&elf.SHF_EXECINSTR != 0 {
			continue
		}
		data, err := f.sectionData(s)
		if err != nil {
			return nil, err
		}
		first := (s.Addr + 7) &^ 7
		for a := first; a+8 <= s.Addr+uint64(len(data)); a += 8 {
			if v := le.Uint64(data[a-s.Addr:]); v != 0 && inCode(v) {
				out = append(out, DataPointer{At: a, To: v})
			}
		}
	}
	if f.Machine == elf.EM_X86_64 {
		var dynsyms []elf.Symbol
		loaded := false
		for _, s := range f.ef.Sections {
			if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 {
				continue
			}
			data, err := f.sectionData(s)
			if err != nil {
				return nil, err
			}
			for off := 0; off+relaSize <= len(data); off += relaSize {
				roff, info, addend := le.Uint64(data[off:]), le.Uint64(data[off+8:]), le.Uint64(data[off+16:])
				var v uint64
				switch elf.R_X86_64(uint32(info)) {
				case elf.R_X86_64_RELATIVE, elf.R_X86_64_IRELATIVE:
					v = addend
				case elf.R_X86_64_64, elf.R_X86_64_GLOB_DAT, elf.R_X86_64_JMP_SLOT:
					if !loaded {
						dynsyms, _ = f.readSymbols(true)
						loaded = true
					}
					// debug/elf drops the null symbol: index i is dynsyms[i-1].
					sym := info >> 32
					if sym < 1 || sym > uint64(len(dynsyms)) {
						continue
					}
					v = dynsyms[sym-1].Value + addend
				default:
					continue
				}
				if inCode(v) {
					out = append(out, DataPointer{At: roff, To: v})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b DataPointer) int {
		switch {
		case a.To != b.To:
			if a.To < b.To {
				return -1
			}
			return 1
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	return slices.Compact(out), nil
}
