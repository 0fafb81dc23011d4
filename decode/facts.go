package decode

import "encoding/binary"

// Facts about short instruction sequences that other packages recognise in
// code they read (USDT sites, PLT stubs, NOP sites). They live here so that
// no other package decodes instructions itself.

// arm64NopWord is the arm64 NOP (hint #0).
const arm64NopWord uint32 = 0xD503201F

// IsNop reports whether in is an x86-64 NOP: 90 without REX.B (not xchg
// with r8) and without an F3 (pause), F2 or LOCK prefix, or 0F 1F /0 (the
// multi-byte NOP), in the legacy encoding.
func (in *X86Inst) IsNop() bool {
	if in.Encoding != EncLegacy || in.Prefixes&(PrefixLock|PrefixREP|PrefixREPNE) != 0 {
		return false
	}
	switch in.Map {
	case Map1Byte:
		return in.Opcode == 0x90 && !in.B
	case Map0F:
		return in.Opcode == 0x1F && in.HasModRM && in.Reg == 0
	}
	return false
}

// NopLen returns the length in bytes of the NOP at the start of code, or 0
// when code does not start with one (see X86Inst.IsNop; on arm64 the one
// NOP word, d503201f, never another hint).
func NopLen(arch Arch, code []byte) int {
	switch arch {
	case X86_64:
		var in X86Inst
		if (X86Decoder{}).Decode(code, 0, &in) != nil || !in.IsNop() {
			return 0
		}
		return in.Len
	case ARM64:
		if len(code) >= 4 && binary.LittleEndian.Uint32(code) == arm64NopWord {
			return 4
		}
	}
	return 0
}

// StubSlot returns the address of the memory word that the stub at the
// start of code (linked at addr) jumps through, as a PLT stub does: on
// x86-64 an indirect jmp through a RIP-relative operand (jmp
// *disp(%rip), with an optional bnd prefix), after an optional endbr64; on
// arm64 adrp x16 followed by ldr x17, [x16, #off] without writeback. ok is
// false for anything else.
func StubSlot(arch Arch, code []byte, addr uint64) (slot uint64, ok bool) {
	switch arch {
	case X86_64:
		var in X86Inst
		var dec X86Decoder
		for off := 0; off < len(code); off += in.Len {
			if err := dec.Decode(code[off:], addr+uint64(off), &in); err != nil {
				return 0, false
			}
			switch {
			case in.Map == Map0F && in.Opcode == 0x1E && in.MandPrefix == 0xF3:
				continue // endbr64
			case in.Map == Map1Byte && in.Opcode == 0xFF && in.Reg == 4 && in.RIPRel:
				return in.Target, true
			}
			return 0, false
		}
	case ARM64:
		if len(code) < 8 {
			return 0, false
		}
		adrp, err1 := DecodeARM64(code, addr)
		ldr, err2 := DecodeARM64(code[4:], addr+4)
		if err1 != nil || err2 != nil || adrp.Mnemonic != "adrp" || !ldr.Load || ldr.Rn != adrp.Rd || ldr.Writeback {
			return 0, false
		}
		return adrp.Target + uint64(ldr.Disp), true
	}
	return 0, false
}
