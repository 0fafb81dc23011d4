package decode

// X86Layout is where the parts of an x86-64 instruction lie, with the
// attributes a linear sweep needs (a function's instruction boundaries, its
// branches and their targets, its RIP-relative operands). It is what
// X86Decoder.Layout computes, several times faster than Decode, which adds
// every prefix and encoding field, the immediates' values and the register
// sets. Offsets are from the instruction's first byte; 0 means absent (no
// part of an instruction but a prefix or the opcode sits at offset 0).
type X86Layout struct {
	Len      uint8 // 1..15
	Encoding X86Encoding
	Map      X86Map
	Opcode   byte
	ModRMOff uint8 // offset of the ModRM byte, 0 if none
	DispOff  uint8 // offset of the displacement (or moffs), 0 if none
	DispSize uint8
	ImmOff   uint8 // offset of the first immediate, 0 if none
	ImmSize  uint8
	RelOff   uint8 // offset of a relative branch displacement, 0 if none
	RelSize  uint8
	RIPRel   bool // a memory operand is RIP-relative; its disp32 is at DispOff
	// VendorDependent is set when Intel and AMD decode these bytes
	// differently (see X86Inst.VendorDependent).
	VendorDependent bool
	Branch          BranchKind
	// Target is the target of a relative branch or the address a
	// RIP-relative operand refers to, 0 otherwise.
	Target uint64
}

// modrmDisp gives, per ModRM byte, the displacement size (low bits) and
// whether a SIB byte follows (bit 7); mod == 0 with rm == 5 is RIP-relative.
var modrmDisp = func() (t [256]uint8) {
	for m := 0; m < 256; m++ {
		mod, rm := m>>6, m&7
		var n uint8
		switch mod {
		case 0:
			if rm == 5 {
				n = 4
			}
		case 1:
			n = 1
		case 2:
			n = 4
		}
		if mod != 3 && rm == 4 {
			n |= 0x80
		}
		t[m] = n
	}
	return t
}()

// Layout decodes the layout of the first instruction in b, located at
// address addr, into l. It gives the same results as Decode (and the same
// errors), through a fast path for the common legacy encodings and Decode
// itself for the rest. Layout does not allocate.
func (d X86Decoder) Layout(b []byte, addr uint64, l *X86Layout) error {
	if len(b) >= 16 && (hotLayout(b, addr, l) || d.fastLayout(b, addr, l)) {
		return nil
	}
	var inst X86Inst
	if err := d.Decode(b, addr, &inst); err != nil {
		*l = X86Layout{}
		return err
	}
	inst.layout(l)
	return nil
}

// layout fills l from a fully decoded instruction.
func (inst *X86Inst) layout(l *X86Layout) {
	l.Len = uint8(inst.Len)
	l.Encoding = inst.Encoding
	l.Map = inst.Map
	l.Opcode = inst.Opcode
	l.ModRMOff = inst.modrmOff
	l.DispOff, l.DispSize = uint8(inst.DispOff), uint8(inst.DispSize)
	l.ImmOff, l.ImmSize = uint8(inst.ImmOff), uint8(inst.ImmSize)
	l.RelOff, l.RelSize = uint8(inst.RelOff), uint8(inst.RelSize)
	l.RIPRel = inst.RIPRel
	l.VendorDependent = inst.VendorDependent
	l.Branch = inst.Branch
	l.Target = inst.Target
}

// fastLayout handles legacy instructions whose every part the tables give
// directly: no VEX/EVEX/XOP/REX2/3DNow!, no LOCK, no second immediate, no
// moffs, nothing vendor-dependent and nothing invalid (all of those take
// the general path, which also produces the exact error). It needs 16
// bytes at hand so that no bound is checked byte by byte. It reports false
// when the general path must decide.
func (d X86Decoder) fastLayout(b []byte, addr uint64, l *X86Layout) bool {
	b = b[:16]
	i := 0
	var has66, has67, rexW bool
	var rep byte
	for {
		c := b[i]
		k := pfxTab[c]
		if k == 0 {
			break
		}
		if k == pfxREX {
			rexW = c&8 != 0
		} else {
			rexW = false
			switch c {
			case 0x66:
				has66 = true
			case 0x67:
				has67 = true
			case 0xF2, 0xF3:
				rep = c
			case 0xF0:
				return false
			}
		}
		i++
		if i >= 15 {
			return false
		}
	}
	op := b[i]
	tbl, mp := tbl1byte, Map1Byte
	switch op {
	case 0xC4, 0xC5, 0x62, 0x8F, 0xD5:
		return false
	case 0x0F:
		i++
		op = b[i]
		tbl, mp = tbl0f, Map0F
		switch op {
		case 0x0F:
			return false
		case 0x38, 0x3A:
			if i >= 14 {
				return false
			}
			if op == 0x38 {
				tbl, mp = tbl0f38, Map0F38
			} else {
				tbl, mp = tbl0f3a, Map0F3A
			}
			i++
			op = b[i]
		}
	}
	i++
	id := x86Index[tbl][op]
	if id == 0 {
		return false
	}
	e := &x86Entries[id]
	if e.sel == selPrefix {
		mand := rep
		if mand == 0 && has66 {
			mand = 0x66
		}
		id = x86Children[int(e.child)+mandIndex[mand&0x1F]]
		if id == 0 {
			return false
		}
		e = &x86Entries[id]
	}
	var modrmOff, dispOff, dispSize uint8
	ripRel := false
	if e.sel != selLeaf || e.flags&fModRM != 0 {
		if i >= 15 {
			return false
		}
		m := b[i]
		modrmOff = uint8(i)
		i++
		switch e.sel {
		case selModRM:
			slot := int(m >> 3 & 7)
			if m >= 0xC0 {
				slot += 8
			}
			id = x86Children[int(e.child)+slot]
			if id == 0 {
				return false
			}
			e = &x86Entries[id]
			if e.sel == selRM {
				id = x86Children[int(e.child)+int(m&7)]
				if id == 0 {
					return false
				}
				e = &x86Entries[id]
			}
		case withModRM:
			id = x86Children[e.child]
			e = &x86Entries[id]
		}
		if e.sel == withModRM {
			id = x86Children[e.child]
			e = &x86Entries[id]
		}
		if e.flags&fRegForm != 0 {
			m |= 0xC0
		}
		dd := modrmDisp[m]
		if dd&0x80 != 0 {
			if i >= 15 {
				return false
			}
			if b[i]&7 == 5 && m < 0x40 {
				dd = 4
			} else {
				dd &= 0x7F
			}
			i++
		} else if dd == 4 && m < 0x40 {
			ripRel = true
		}
		if dd != 0 {
			dispOff, dispSize = uint8(i), dd
			i += int(dd)
		}
		if ripRel && has67 {
			return false // EIP-relative: the target wraps at 32 bits
		}
	}
	flags := e.flags
	if flags&(fInvalid|fAMD|fMemOnly) != 0 || e.imm[1] != immNone {
		return false
	}
	if flags&fF64 != 0 && has66 {
		return false // vendor-dependent
	}
	var immOff, immSize, relOff, relSize uint8
	var target uint64
	if kind := e.imm[0]; kind != immNone {
		if kind == immMoffs {
			return false
		}
		os := 1
		switch {
		case rexW:
			os = 2
		case has66 && flags&fMand66 == 0:
			os = 0
		case flags&(fD64|fF64) != 0:
			os = 2
		}
		immOff, immSize = uint8(i), immSizes[kind][os]
		i += int(immSize)
		if i > 15 {
			return false
		}
		if kind == immRelB || kind == immRelZ {
			relOff, relSize = immOff, immSize
			var rel int64
			switch immSize {
			case 1:
				rel = int64(int8(b[immOff]))
			case 2:
				return false // rel16 truncates the target: general path
			default:
				rel = int64(int32(le32(b[immOff:])))
			}
			target = addr + uint64(i) + uint64(rel)
		}
	}
	if i > 15 {
		return false
	}
	if ripRel {
		target = addr + uint64(i) + uint64(int64(int32(le32(b[dispOff:]))))
	}
	l.Len = uint8(i)
	l.Encoding = EncLegacy
	l.Map = mp
	l.Opcode = op
	l.ModRMOff = modrmOff
	l.DispOff, l.DispSize = dispOff, dispSize
	l.ImmOff, l.ImmSize = immOff, immSize
	l.RelOff, l.RelSize = relOff, relSize
	l.RIPRel = ripRel
	l.VendorDependent = false
	l.Branch = e.branch
	l.Target = target
	return true
}
