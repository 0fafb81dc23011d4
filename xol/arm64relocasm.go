package xol

// Encoders for the few arm64 instruction forms the relocator emits.

const (
	a64Nop      uint32 = 0xD503201F
	a64BRK5     uint32 = 0xD42000A0 // brk #5, the uprobes out-of-line breakpoint
	a64Scratch0        = 16         // x16 (ip0)
	a64Scratch1        = 17         // x17 (ip1)
)

// Branch ranges, in bytes: the encodable offsets are [-r, r-4].
const (
	a64RangeB    = 1 << 27 // b, bl: imm26 words
	a64RangeCond = 1 << 20 // b.cond, cbz, ldr literal, adr: imm19/imm21
	a64RangeTB   = 1 << 15 // tbz: imm14 words
	a64RangePage = 1 << 32 // adrp: imm21 pages
)

// a64Fits reports whether off is a multiple of 4 within [-r, r-4].
func a64Fits(off int64, r int64) bool {
	return off&3 == 0 && off >= -r && off < r
}

// a64B encodes b (link false) or bl to off bytes away.
func a64B(off int64, link bool) uint32 {
	w := 0x14000000 | uint32(off>>2)&0x3FFFFFF
	if link {
		w |= 0x80000000
	}
	return w
}

// a64Imm19 replaces the imm19 field (bits 23:5) of w with off/4.
func a64Imm19(w uint32, off int64) uint32 {
	return w&^(0x7FFFF<<5) | (uint32(off>>2)&0x7FFFF)<<5
}

// a64Imm14 replaces the imm14 field (bits 18:5) of w with off/4.
func a64Imm14(w uint32, off int64) uint32 {
	return w&^(0x3FFF<<5) | (uint32(off>>2)&0x3FFF)<<5
}

// a64Adr encodes adr (page false) or adrp with the 21-bit immediate imm
// (bytes for adr, pages for adrp) into register rd.
func a64Adr(rd uint32, imm int64, page bool) uint32 {
	u := uint32(imm) & 0x1FFFFF
	w := 0x10000000 | (u&3)<<29 | (u>>2)<<5 | rd
	if page {
		w |= 0x80000000
	}
	return w
}

// a64LdrLit8 encodes "ldr xt, #8": load the quadword two words on.
func a64LdrLit8(rt uint32) uint32 { return 0x58000040 | rt }

// a64BR encodes br xn.
func a64BR(n uint32) uint32 { return 0xD61F0000 | n<<5 }

// a64MovReg encodes mov xd, xm (orr xd, xzr, xm).
func a64MovReg(d, m uint32) uint32 { return 0xAA0003E0 | m<<16 | d }

// a64MovImm returns the movz/movk sequence that sets xd to v (one to four
// words).
func a64MovImm(d uint32, v uint64) []uint32 {
	var out []uint32
	for hw := uint32(0); hw < 4; hw++ {
		h := uint32(v>>(16*hw)) & 0xFFFF
		if h == 0 {
			continue
		}
		if len(out) == 0 {
			out = append(out, 0xD2800000|hw<<21|h<<5|d) // movz
		} else {
			out = append(out, 0xF2800000|hw<<21|h<<5|d) // movk
		}
	}
	if len(out) == 0 {
		out = append(out, 0xD2800000|d) // movz xd, #0
	}
	return out
}

// a64LdrBase encodes a load of the literal's kind from [xn] (unsigned
// offset 0) into register t, for a literal load word w (ldr w/x, ldrsw,
// FP/SIMD s, d, q).
func a64LdrBase(w uint32, t, n uint32) uint32 {
	opc, v := w>>30, w>>26&1 != 0
	var base uint32
	switch {
	case v && opc == 0:
		base = 0xBD400000 // ldr s
	case v && opc == 1:
		base = 0xFD400000 // ldr d
	case v:
		base = 0x3DC00000 // ldr q
	case opc == 0:
		base = 0xB9400000 // ldr w
	case opc == 1:
		base = 0xF9400000 // ldr x
	default:
		base = 0xB9800000 // ldrsw
	}
	return base | n<<5 | t
}
