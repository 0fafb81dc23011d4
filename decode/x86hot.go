package decode

// The hot path of Layout: most instructions of compiled code have no legacy
// prefix, at most one REX byte, and an opcode of the one-byte or 0F map
// whose form does not depend on the ModRM byte or on a mandatory prefix.
// For those, one table entry (x86Hot) gives everything fastLayout would
// find by walking the opcode tree: whether a ModRM byte follows, the
// immediate's size with and without REX.W, and the branch kind.

// x86Hot entry bits.
const (
	hotOK      = 1 << 0 // the entry applies
	hotModRM   = 1 << 1 // a ModRM byte follows the opcode
	hotRegForm = 1 << 2 // ModRM.mod is ignored: register operands
	hotRel     = 1 << 3 // the immediate is a relative branch displacement

	hotImmShift  = 4  // immediate size without REX.W, 4 bits
	hotImmWShift = 8  // immediate size with REX.W, 4 bits
	hotBrShift   = 12 // BranchKind, 8 bits
	hotSlotShift = 20 // ModRM slots ((mod == 3)*8 + reg) left to the general paths, 16 bits
)

// x86Hot holds the hot-path entry of each opcode of the one-byte map (index
// 0) and the 0F map (index 1), or 0 where fastLayout must decide.
var x86Hot = func() (t [2][256]uint64) {
	for m, tbl := range [2]int{tbl1byte, tbl0f} {
		for op := 0; op < 256; op++ {
			if m == 0 && (op == 0x0F || pfxTab[op] != 0) {
				continue
			}
			if m == 1 && (op == 0x0F || op == 0x38 || op == 0x3A) {
				continue
			}
			t[m][op] = hotEntry(tbl, byte(op))
		}
	}
	return t
}()

// hotEntry returns the hot-path entry of an opcode decoded without legacy
// prefixes, or 0 when the opcode needs the general paths (invalid,
// vendor-dependent, AMD-only, a second immediate, moffs, the escape bytes).
// When the form depends on the ModRM byte, the entry describes the form
// that the most ModRM slots (mod == 3, reg) share, and its slot mask says
// which slots those are; the others take the general paths.
func hotEntry(tbl int, op byte) uint64 {
	id := x86Index[tbl][op]
	if id == 0 {
		return 0
	}
	e := &x86Entries[id]
	if e.sel == selPrefix {
		id = x86Children[int(e.child)+mandIndex[0]]
		if id == 0 {
			return 0
		}
		e = &x86Entries[id]
	}
	modrm := e.sel != selLeaf || e.flags&fModRM != 0
	leaf, mask := e, uint32(0xFFFF)
	if modrm {
		leaf, mask = hotCommonLeaf(e)
		if leaf == nil {
			return 0
		}
	}
	flags := leaf.flags
	if flags&(fInvalid|fAMD) != 0 || leaf.imm[1] != immNone || leaf.imm[0] == immMoffs {
		return 0
	}
	if flags&fMemOnly != 0 {
		mask &= 0x00FF // mod == 3 is invalid
	}
	v := uint64(hotOK) | uint64(leaf.branch)<<hotBrShift
	if modrm {
		v |= hotModRM
		if flags&fRegForm != 0 {
			v |= hotRegForm
		}
		if flags&fRegForm != 0 {
			// mod is ignored: a slot's reg form stands for every mod.
			mask = mask>>8 | mask&0xFF00
		}
		v |= uint64(mask^0xFFFF) << hotSlotShift
	}
	if kind := leaf.imm[0]; kind != immNone {
		v |= uint64(immSizes[kind][legacyOpSize(false, false, flags)])<<hotImmShift |
			uint64(immSizes[kind][legacyOpSize(true, false, flags)])<<hotImmWShift
		if kind == immRelB || kind == immRelZ {
			v |= hotRel
		}
	}
	return v
}

// hotCommonLeaf returns the leaf form that the most ModRM slots of node e
// reach (slot (mod == 3)*8 + reg, every rm of a slot giving the same form),
// and the mask of those slots; nil when no slot reaches a leaf.
func hotCommonLeaf(e *x86Entry) (*x86Entry, uint32) {
	var leaves [16]*x86Entry
	for slot := 0; slot < 16; slot++ {
		var f *x86Entry
		for rm := 0; rm < 8; rm++ {
			m := (slot&8)<<3*3 | (slot&7)<<3 | rm // mod 0 or 3
			g := hotResolve(e, m)
			if rm == 0 {
				f = g
			} else if g == nil || f == nil || !hotSame(f, g) {
				f = nil
				break
			}
		}
		leaves[slot] = f
	}
	var best *x86Entry
	var bestMask uint32
	for _, f := range leaves {
		if f == nil {
			continue
		}
		var mask uint32
		for slot, g := range leaves {
			if g != nil && hotSame(f, g) {
				mask |= 1 << slot
			}
		}
		if best == nil || popcount16(mask) > popcount16(bestMask) {
			best, bestMask = f, mask
		}
	}
	return best, bestMask
}

// hotResolve walks node e to its leaf for ModRM byte m, nil when invalid
// or when the walk ends on a node that is not a leaf. It builds the hot
// table, and fastLayout takes it at run time.
func hotResolve(e *x86Entry, m int) *x86Entry {
	switch e.sel {
	case selModRM:
		slot := m >> 3 & 7
		if m >= 0xC0 {
			slot += 8
		}
		id := x86Children[int(e.child)+slot]
		if id == 0 {
			return nil
		}
		e = &x86Entries[id]
		if e.sel == selRM {
			id = x86Children[int(e.child)+m&7]
			if id == 0 {
				return nil
			}
			e = &x86Entries[id]
		}
	case withModRM:
		e = &x86Entries[x86Children[e.child]]
	}
	if e.sel == withModRM {
		e = &x86Entries[x86Children[e.child]]
	}
	if e.sel != selLeaf {
		return nil
	}
	return e
}

// hotSame reports whether two leaves have the same layout.
func hotSame(a, b *x86Entry) bool {
	return a.imm == b.imm && a.branch == b.branch && a.flags&hotFlags == b.flags&hotFlags
}

func popcount16(x uint32) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// hotFlags are the flags of a leaf that change its layout.
const hotFlags = fInvalid | fAMD | fMemOnly | fRegForm | fD64 | fF64 | fModRM

// hotLayout is Layout's hot path for b[:16]. It reports false when the
// instruction is not one it handles.
func hotLayout(b []byte, addr uint64, l *X86Layout) bool {
	p := (*[16]byte)(b)
	i := 0
	c := p[0]
	rexW := false
	if c&0xF0 == 0x40 {
		rexW = c&8 != 0
		i = 1
	}
	op := p[i]
	m, mp := 0, Map1Byte
	if op == 0x0F {
		i++
		op = p[i&15]
		m, mp = 1, Map0F
	}
	h := x86Hot[m][op]
	if h == 0 {
		return false
	}
	i++
	var modrmOff, dispOff, dispSize uint8
	ripRel := false
	if h&hotModRM != 0 {
		mb := p[i&15]
		modrmOff = uint8(i)
		i++
		if h&hotRegForm != 0 {
			mb |= 0xC0
		}
		slot := uint64(mb >> 3 & 7)
		if mb >= 0xC0 {
			slot |= 8
		}
		if h>>(hotSlotShift+slot)&1 != 0 {
			return false
		}
		var sib int
		dispSize, sib, ripRel = legacyDisp(mb, p[i&15])
		i += sib
		if dispSize != 0 {
			dispOff = uint8(i)
			i += int(dispSize)
		}
	}
	var immOff, immSize, relOff, relSize uint8
	var target uint64
	shift := uint64(hotImmShift)
	if rexW {
		shift = hotImmWShift
	}
	if n := uint8(h >> shift & 15); n != 0 {
		immOff, immSize = uint8(i), n
		i += int(n)
		if i > 15 {
			return false
		}
		if h&hotRel != 0 {
			relOff, relSize = immOff, immSize
			var rel int64
			if n == 1 {
				rel = int64(int8(p[immOff&15]))
			} else {
				rel = int64(int32(le32(b[immOff&15:])))
			}
			target = addr + uint64(i) + uint64(rel)
		}
	}
	if i > 15 {
		return false
	}
	if ripRel {
		target = addr + uint64(i) + uint64(int64(int32(le32(b[dispOff&15:]))))
	}
	l.setLegacy(i, mp, op, modrmOff, dispOff, dispSize, immOff, immSize, relOff, relSize, ripRel, BranchKind(h>>hotBrShift&0xFF), target)
	return true
}

// legacyDisp returns the displacement size of the memory operand of
// ModRM byte mb (with sib, the byte after it, its SIB byte when it has
// one), the number of SIB bytes (0 or 1) and whether the operand is
// RIP-relative.
func legacyDisp(mb, sib byte) (dispSize uint8, sibLen int, ripRel bool) {
	dd := modrmDisp[mb]
	if dd&0x80 != 0 {
		if sib&7 == 5 && mb < 0x40 {
			return 4, 1, false
		}
		return dd & 0x7F, 1, false
	}
	return dd, 0, dd == 4 && mb < 0x40
}
