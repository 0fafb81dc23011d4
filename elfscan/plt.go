package elfscan

import (
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// pltStubs names the PLT stubs of the file after the functions they jump
// to, as objdump does ("puts@plt"). A stub is recognized by decoding it: on
// x86-64 an indirect jmp through a RIP-relative GOT slot (after an optional
// endbr64 and bnd prefix), on arm64 adrp x16 + ldr x17, [x16, #off]. The GOT
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
			slot, ok := f.stubSlot(data[off:off+step], addr)
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

// stubSlot returns the GOT slot a PLT stub jumps through.
func (f *File) stubSlot(code []byte, addr uint64) (uint64, bool) {
	if f.Arch == decode.ARM64 {
		if len(code) < 8 {
			return 0, false
		}
		adrp, err1 := decode.DecodeARM64(code, addr)
		ldr, err2 := decode.DecodeARM64(code[4:], addr+4)
		if err1 != nil || err2 != nil || adrp.Mnemonic != "adrp" || !ldr.Load || ldr.Rn != adrp.Rd || ldr.Writeback {
			return 0, false
		}
		return adrp.Target + uint64(ldr.Disp), true
	}
	var inst decode.X86Inst
	var dec decode.X86Decoder
	for off := 0; off < len(code); off += inst.Len {
		if err := dec.Decode(code[off:], addr+uint64(off), &inst); err != nil {
			return 0, false
		}
		switch {
		case inst.Map == decode.Map0F && inst.Opcode == 0x1E && inst.MandPrefix == 0xF3:
			continue // endbr64
		case inst.Map == decode.Map1Byte && inst.Opcode == 0xFF && inst.Reg == 4 && inst.RIPRel:
			return inst.Target, true
		}
		return 0, false
	}
	return 0, false
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
