package elfscan

import (
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// pltStubs names the PLT stubs of the file after the functions they jump
// to, as objdump does ("puts@plt"). A stub is recognized by the GOT slot it
// jumps through (decode.StubSlot: on x86-64 jmp *disp(%rip) after an
// optional endbr64, on arm64 adrp x16 + ldr x17, [x16, #off]). The GOT
// slot is then looked up in the JUMP_SLOT and GLOB_DAT relocations. Stubs
// that cannot be named (the PLT header, lazy-binding entries of an IBT PLT)
// are skipped.
func (f *File) pltStubs() []rawSym {
	slots := f.gotSlots()
	if len(slots) == 0 {
		return nil
	}
	var out []rawSym
	for i, s := range f.ef.Sections {
		switch s.Name {
		case ".plt", ".plt.sec", ".plt.got":
		default:
			continue
		}
		if s.Flags&elf.SHF_EXECINSTR == 0 || s.Type == elf.SHT_NOBITS {
			continue
		}
		data, err := f.sectionData(s)
		if err != nil {
			continue
		}
		step := s.Entsize
		if step != 8 && step != 16 {
			step = 16
		}
		if f.Arch == decode.ARM64 {
			step = 16
		}
		for off := uint64(0); off+step <= uint64(len(data)); off += step {
			addr := s.Addr + off
			slot, ok := decode.StubSlot(f.Arch, data[off:off+step], addr)
			if !ok {
				continue
			}
			name, ok := slots[slot]
			if !ok {
				continue
			}
			out = append(out, rawSym{name: name + "@plt", addr: addr, size: step, bind: elf.STB_LOCAL, typ: elf.STT_FUNC, src: FromPLT, section: i, plt: true})
		}
	}
	return out
}

// gotSlots maps the GOT slots of JUMP_SLOT and GLOB_DAT relocations (and
// IRELATIVE ones, named like objdump: "*ABS*+0xADDEND") to symbol names.
func (f *File) gotSlots() map[uint64]string {
	var jumpSlot, globDat, irelative uint32
	switch f.Machine {
	case elf.EM_X86_64:
		jumpSlot, globDat, irelative = uint32(elf.R_X86_64_JMP_SLOT), uint32(elf.R_X86_64_GLOB_DAT), uint32(elf.R_X86_64_IRELATIVE)
	case elf.EM_AARCH64:
		jumpSlot, globDat, irelative = uint32(elf.R_AARCH64_JUMP_SLOT), uint32(elf.R_AARCH64_GLOB_DAT), uint32(elf.R_AARCH64_IRELATIVE)
	}
	var dynsyms []elf.Symbol
	loaded := false
	slots := map[uint64]string{}
	for _, s := range f.ef.Sections {
		if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		data, err := f.sectionData(s)
		if err != nil {
			continue
		}
		if !loaded {
			dynsyms, _ = f.readSymbols(true)
			loaded = true
		}
		le := binary.LittleEndian
		for off := 0; off+relaSize <= len(data); off += relaSize {
			roff, info, addend := le.Uint64(data[off:]), le.Uint64(data[off+8:]), le.Uint64(data[off+16:])
			typ, sym := uint32(info), info>>32
			switch {
			case typ == irelative:
				slots[roff] = fmt.Sprintf("*ABS*+%#x", addend)
			case typ == jumpSlot || typ == globDat:
				// debug/elf drops the null symbol: index i is dynsyms[i-1].
				if sym >= 1 && sym <= uint64(len(dynsyms)) && dynsyms[sym-1].Name != "" {
					slots[roff] = dynsyms[sym-1].Name
				}
			}
		}
	}
	return slots
}
