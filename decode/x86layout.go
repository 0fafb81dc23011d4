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

// setLegacy fills l for a legacy instruction of n bytes found by the hot
// or the fast path (field by field: a composite literal made the hot path
// slower).
func (l *X86Layout) setLegacy(n int, mp X86Map, op byte, modrmOff, dispOff, dispSize, immOff, immSize, relOff, relSize uint8, ripRel bool, br BranchKind, target uint64) {
	l.Len = uint8(n)
	l.Encoding = EncLegacy
	l.Map = mp
	l.Opcode = op
	l.ModRMOff = modrmOff
	l.DispOff, l.DispSize = dispOff, dispSize
	l.ImmOff, l.ImmSize = immOff, immSize
	l.RelOff, l.RelSize = relOff, relSize
	l.RIPRel = ripRel
	l.VendorDependent = false
	l.Branch = br
	l.Target = target
}

// legacyOpSize returns the operand-size column of immSizes (0: 16 bits,
// 1: 32, 2: 64) of a legacy instruction with the given flags: REX.W and
// the default-64 forms make it 64 bits, else a 66 prefix that is not
// mandatory makes it 16.
func legacyOpSize(rexW, has66 bool, flags uint16) int {
	switch {
	case rexW:
		return 2
	case has66 && flags&fMand66 == 0:
		return 0
	case flags&(fD64|fF64) != 0:
		return 2
	}
	return 1
}

// fastPfx is what fastLayout needs of the legacy and REX prefixes: their
// number, 66 and 67, REX.W of a REX prefix that comes last, and the last
// of F2 and F3.
type fastPfx struct {
	n                  int
	has66, has67, rexW bool
	rep                byte
}

// fastPrefixes reads the prefixes at the start of b (16 bytes). It
// reports false for LOCK and for 15 bytes of prefixes: the general path
// decides those.
func fastPrefixes(b []byte) (p fastPfx, ok bool) {
	for {
		c := b[p.n&15]
		k := pfxTab[c]
		if k == 0 {
			return p, true
		}
		if k == pfxREX {
			p.rexW = c&8 != 0
		} else {
			p.rexW = false
			switch c {
			case 0x66:
				p.has66 = true
			case 0x67:
				p.has67 = true
			case 0xF2, 0xF3:
				p.rep = c
			case 0xF0:
				return p, false
			}
		}
		p.n++
		if p.n >= 15 {
			return p, false
		}
	}
}

// fastLayout handles legacy instructions whose every part the tables give
// directly: no VEX/EVEX/XOP/REX2/3DNow!, no LOCK, no second immediate, no
// moffs, nothing vendor-dependent and nothing invalid (all of those take
// the general path, which also produces the exact error). It needs 16
// bytes at hand so that no bound is checked byte by byte. It reports false
// when the general path must decide.
func (d X86Decoder) fastLayout(b []byte, addr uint64, l *X86Layout) bool {
	b = b[:16]
	p, ok := fastPrefixes(b)
	if !ok {
		return false
	}
	i, has66, has67, rexW, rep := p.n, p.has66, p.has67, p.rexW, p.rep
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
		if e = hotResolve(e, int(m)); e == nil {
			return false
		}
		if e.flags&fRegForm != 0 {
			m |= 0xC0
		}
		var sib int
		dispSize, sib, ripRel = legacyDisp(m, b[i&15])
		if i += sib; i > 15 {
			return false
		}
		if dispSize != 0 {
			dispOff = uint8(i)
			i += int(dispSize)
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
		immOff, immSize = uint8(i), immSizes[kind][legacyOpSize(rexW, has66, flags)]
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
	l.setLegacy(i, mp, op, modrmOff, dispOff, dispSize, immOff, immSize, relOff, relSize, ripRel, e.branch, target)
	return true
}
