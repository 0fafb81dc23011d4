package trampoline

import (
	"encoding/binary"
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// An arm64 assembler for the few forms the slot generator emits. Every
// word it writes carries the text the decoder must print for it; finish
// decodes the code again and compares (ErrEncode on a difference).

// a64Reg is a general-purpose register number; 31 is sp or xzr by
// operand.
type a64Reg = uint32

const (
	a64SP  a64Reg = 31 // as a base or add operand
	a64ZR  a64Reg = 31 // as a data operand
	a64X12 a64Reg = 12
	a64X13 a64Reg = 13
	a64X14 a64Reg = 14
	a64X15 a64Reg = 15
	a64X16 a64Reg = 16 // ip0
	a64X17 a64Reg = 17 // ip1
)

// Word kinds of the check.
const (
	a64Own     = iota // emitted here: text compared
	a64Foreign        // relocated by xol: must decode
	a64Data           // a literal: not decoded
)

// a64Label is a position in the code, bound later.
type a64Label int

// a64Fix is a branch to a label, encoded when the code is finished.
type a64Fix struct {
	at    int // word index
	label a64Label
	kind  int    // a64FixB, a64FixImm19
	text  string // the text before the target, e.g. "cbnz w15, "
}

const (
	a64FixB = iota
	a64FixImm19
)

// a64Emitter collects words for code at base.
type a64Emitter struct {
	base   uint64
	words  []uint32
	kinds  []int
	texts  []string
	labels []int // word index, -1 while unbound
	fixes  []a64Fix
	err    error
}

func newA64Emitter(base uint64) *a64Emitter { return &a64Emitter{base: base} }

// pc returns the address of the next word.
func (e *a64Emitter) pc() uint64 { return e.base + 4*uint64(len(e.words)) }

func (e *a64Emitter) emit(w uint32, text string) {
	e.words = append(e.words, w)
	e.kinds = append(e.kinds, a64Own)
	e.texts = append(e.texts, text)
}

func xn(r a64Reg) string {
	if r == 31 {
		return "sp"
	}
	return fmt.Sprintf("x%d", r)
}

func xt(r a64Reg) string {
	if r == 31 {
		return "xzr"
	}
	return fmt.Sprintf("x%d", r)
}

func wt(r a64Reg) string {
	if r == 31 {
		return "wzr"
	}
	return fmt.Sprintf("w%d", r)
}

func (e *a64Emitter) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("%w: "+format, append([]any{ErrEncode}, args...)...)
	}
}

// stpPre: stp t1, t2, [n, #off]!
func (e *a64Emitter) stpPre(t1, t2, n a64Reg, off int64) {
	if off%8 != 0 || off < -512 || off > 504 {
		e.fail("stp offset %d", off)
	}
	e.emit(0xA9800000|uint32(off/8)&0x7F<<15|t2<<10|n<<5|t1, fmt.Sprintf("stp %s, %s, [%s,#%d]!", xt(t1), xt(t2), xn(n), off))
}

// ldpPost: ldp t1, t2, [n], #off
func (e *a64Emitter) ldpPost(t1, t2, n a64Reg, off int64) {
	if off%8 != 0 || off < -512 || off > 504 {
		e.fail("ldp offset %d", off)
	}
	e.emit(0xA8C00000|uint32(off/8)&0x7F<<15|t2<<10|n<<5|t1, fmt.Sprintf("ldp %s, %s, [%s],#%d", xt(t1), xt(t2), xn(n), off))
}

func memOff(n a64Reg, off int64) string {
	if off == 0 {
		return "[" + xn(n) + "]"
	}
	return fmt.Sprintf("[%s,#%d]", xn(n), off)
}

// stp / ldp with a signed offset and no writeback.
func (e *a64Emitter) stp(t1, t2, n a64Reg, off int64) {
	if off%8 != 0 || off < -512 || off > 504 {
		e.fail("stp offset %d", off)
	}
	e.emit(0xA9000000|uint32(off/8)&0x7F<<15|t2<<10|n<<5|t1, fmt.Sprintf("stp %s, %s, %s", xt(t1), xt(t2), memOff(n, off)))
}

func (e *a64Emitter) ldp(t1, t2, n a64Reg, off int64) {
	if off%8 != 0 || off < -512 || off > 504 {
		e.fail("ldp offset %d", off)
	}
	e.emit(0xA9400000|uint32(off/8)&0x7F<<15|t2<<10|n<<5|t1, fmt.Sprintf("ldp %s, %s, %s", xt(t1), xt(t2), memOff(n, off)))
}

// str / ldr of a doubleword with an unsigned scaled offset.
func (e *a64Emitter) str(t, n a64Reg, off int64) {
	if off%8 != 0 || off < 0 || off > 32760 {
		e.fail("str offset %d", off)
	}
	e.emit(0xF9000000|uint32(off/8)<<10|n<<5|t, fmt.Sprintf("str %s, %s", xt(t), memOff(n, off)))
}

func (e *a64Emitter) ldr(t, n a64Reg, off int64) {
	if off%8 != 0 || off < 0 || off > 32760 {
		e.fail("ldr offset %d", off)
	}
	e.emit(0xF9400000|uint32(off/8)<<10|n<<5|t, fmt.Sprintf("ldr %s, %s", xt(t), memOff(n, off)))
}

// strPre: str t, [n, #off]!  ldrPost: ldr t, [n], #off
func (e *a64Emitter) strPre(t, n a64Reg, off int64) {
	if off < -256 || off > 255 {
		e.fail("str offset %d", off)
	}
	e.emit(0xF8000C00|uint32(off)&0x1FF<<12|n<<5|t, fmt.Sprintf("str %s, [%s,#%d]!", xt(t), xn(n), off))
}

func (e *a64Emitter) ldrPost(t, n a64Reg, off int64) {
	if off < -256 || off > 255 {
		e.fail("ldr offset %d", off)
	}
	e.emit(0xF8400400|uint32(off)&0x1FF<<12|n<<5|t, fmt.Sprintf("ldr %s, [%s],#%d", xt(t), xn(n), off))
}

// ldrLike loads from [n] what the literal load w (ldr w/x, ldrsw, or
// the FP/SIMD ldr s/d/q) loads, into its register.
func (e *a64Emitter) ldrLike(w uint32, n a64Reg) {
	opc, v, t := w>>30, w>>26&1 != 0, w&31
	var base uint32
	var text string
	switch {
	case v && opc == 0:
		base, text = 0xBD400000, fmt.Sprintf("ldr s%d", t)
	case v && opc == 1:
		base, text = 0xFD400000, fmt.Sprintf("ldr d%d", t)
	case v && opc == 2:
		base, text = 0x3DC00000, fmt.Sprintf("ldr q%d", t)
	case !v && opc == 0:
		base, text = 0xB9400000, "ldr "+wt(t)
	case !v && opc == 1:
		base, text = 0xF9400000, "ldr "+xt(t)
	case !v && opc == 2:
		base, text = 0xB9800000, "ldrsw "+xt(t)
	default:
		e.fail("not a literal load: %#08x", w)
		return
	}
	e.emit(base|n<<5|t, fmt.Sprintf("%s, [%s]", text, xn(n)))
}

// ldxr t, [n]; stxr ws, t, [n]; ldar t, [n]; stlr t, [n]
func (e *a64Emitter) ldxr(t, n a64Reg) {
	e.emit(0xC85F7C00|n<<5|t, fmt.Sprintf("ldxr %s, [%s]", xt(t), xn(n)))
}

func (e *a64Emitter) stxr(s, t, n a64Reg) {
	if s == t || s == n {
		e.fail("stxr status register x%d overlaps", s)
	}
	e.emit(0xC8007C00|s<<16|n<<5|t, fmt.Sprintf("stxr %s, %s, [%s]", wt(s), xt(t), xn(n)))
}

func (e *a64Emitter) ldar(t, n a64Reg) {
	e.emit(0xC8DFFC00|n<<5|t, fmt.Sprintf("ldar %s, [%s]", xt(t), xn(n)))
}

func (e *a64Emitter) stlr(t, n a64Reg) {
	e.emit(0xC89FFC00|n<<5|t, fmt.Sprintf("stlr %s, [%s]", xt(t), xn(n)))
}

// stadd s, [n]: ldadd s, xzr, [n] (LSE).
func (e *a64Emitter) stadd(s, n a64Reg) {
	e.emit(0xF8200000|s<<16|n<<5|a64ZR, fmt.Sprintf("stadd %s, [%s]", xt(s), xn(n)))
}

// clrex
func (e *a64Emitter) clrex() { e.emit(0xD5033F5F, "clrex") }

// ldaxr t, [n]
func (e *a64Emitter) ldaxr(t, n a64Reg) {
	e.emit(0xC85FFC00|n<<5|t, fmt.Sprintf("ldaxr %s, [%s]", xt(t), xn(n)))
}

// cas s, t, [n]; casa s, t, [n] (LSE): if [n] == s, store t; s = the
// old value.
func (e *a64Emitter) cas(s, t, n a64Reg, acquire bool) {
	op, name := uint32(0xC8A07C00), "cas"
	if acquire {
		op, name = 0xC8E07C00, "casa"
	}
	e.emit(op|s<<16|n<<5|t, fmt.Sprintf("%s %s, %s, [%s]", name, xt(s), xt(t), xn(n)))
}

// movReg: mov d, m (orr d, xzr, m)
func (e *a64Emitter) movReg(d, m a64Reg) {
	e.emit(0xAA0003E0|m<<16|d, fmt.Sprintf("mov %s, %s", xt(d), xt(m)))
}

// isb
func (e *a64Emitter) isb() { e.emit(0xD5033FDF, "isb") }

// subImm: sub d, n, #v.
func (e *a64Emitter) subImm(d, n a64Reg, v uint32) {
	if v > 0xFFF {
		e.fail("sub immediate %#x", v)
	}
	e.emit(0xD1000000|v<<10|n<<5|d, fmt.Sprintf("sub %s, %s, #%#x", xn(d), xn(n), v))
}

// mul d, n, m (madd d, n, m, xzr)
func (e *a64Emitter) mul(d, n, m a64Reg) {
	e.emit(0x9B007C00|m<<16|n<<5|d, fmt.Sprintf("mul %s, %s, %s", xt(d), xt(n), xt(m)))
}

// lsl d, n, #sh (ubfm d, n, #(64-sh), #(63-sh))
func (e *a64Emitter) lsl(d, n a64Reg, sh uint32) {
	if sh == 0 || sh > 63 {
		e.fail("lsl by %d", sh)
	}
	e.emit(0xD3400000|(64-sh)<<16|(63-sh)<<10|n<<5|d, fmt.Sprintf("lsl %s, %s, #%d", xt(d), xt(n), sh))
}

// lowBits: d = n & (1<<width - 1) (ubfx d, n, #0, #width).
func (e *a64Emitter) lowBits(d, n a64Reg, width uint32) {
	if width == 0 || width > 63 {
		e.fail("ubfx #0, #%d", width)
	}
	e.emit(0xD3400000|(width-1)<<10|n<<5|d, fmt.Sprintf("ubfx %s, %s, #0, #%d", xt(d), xt(n), width))
}

// bfi d, n, #lsb, #width
func (e *a64Emitter) bfi(d, n a64Reg, lsb, width uint32) {
	if width == 0 || lsb == 0 || lsb+width > 64 {
		e.fail("bfi #%d, #%d", lsb, width)
	}
	e.emit(0xB3400000|((64-lsb)&63)<<16|(width-1)<<10|n<<5|d, fmt.Sprintf("bfi %s, %s, #%d, #%d", xt(d), xt(n), lsb, width))
}

// addImm: add d, n, #v (n and d may be sp).
func (e *a64Emitter) addImm(d, n a64Reg, v uint32) {
	if v > 0xFFF {
		e.fail("add immediate %#x", v)
	}
	text := fmt.Sprintf("add %s, %s, #%#x", xn(d), xn(n), v)
	if v == 0 && (d == a64SP || n == a64SP) {
		text = fmt.Sprintf("mov %s, %s", xn(d), xn(n))
	}
	e.emit(0x91000000|v<<10|n<<5|d, text)
}

// addReg: add d, n, m; subReg: sub d, n, m.
func (e *a64Emitter) addReg(d, n, m a64Reg) {
	e.emit(0x8B000000|m<<16|n<<5|d, fmt.Sprintf("add %s, %s, %s", xt(d), xt(n), xt(m)))
}

func (e *a64Emitter) subReg(d, n, m a64Reg) {
	e.emit(0xCB000000|m<<16|n<<5|d, fmt.Sprintf("sub %s, %s, %s", xt(d), xt(n), xt(m)))
}

// lsr d, n, #sh
func (e *a64Emitter) lsr(d, n a64Reg, sh uint32) {
	if sh == 0 || sh > 63 {
		e.fail("lsr by %d", sh)
	}
	e.emit(0xD340FC00|sh<<16|n<<5|d, fmt.Sprintf("lsr %s, %s, #%d", xt(d), xt(n), sh))
}

// ubfiz d, n, #lsb, #width
func (e *a64Emitter) ubfiz(d, n a64Reg, lsb, width uint32) {
	if width == 0 || lsb+width > 64 || lsb == 0 {
		e.fail("ubfiz #%d, #%d", lsb, width)
	}
	immr := (64 - lsb) & 63
	e.emit(0xD3400000|immr<<16|(width-1)<<10|n<<5|d, fmt.Sprintf("ubfiz %s, %s, #%d, #%d", xt(d), xt(n), lsb, width))
}

// movImm sets d to v with movz/movk (one to four words).
func (e *a64Emitter) movImm(d a64Reg, v uint64) {
	first := true
	for hw := uint32(0); hw < 4; hw++ {
		h := uint32(v>>(16*hw)) & 0xFFFF
		if h == 0 && (v != 0 || hw != 0) {
			continue
		}
		if first {
			// movz prints as mov with the shifted value.
			e.emit(0xD2800000|hw<<21|h<<5|d, fmt.Sprintf("mov %s, #%#x", xt(d), uint64(h)<<(16*hw)))
			first = false
			continue
		}
		text := fmt.Sprintf("movk %s, #%#x", xt(d), h)
		if hw > 0 {
			text += fmt.Sprintf(", lsl #%d", 16*hw)
		}
		e.emit(0xF2800000|hw<<21|h<<5|d, text)
	}
}

// addr sets d to the address a: adrp and add when a lies within +-4 GiB
// of the code, movz/movk otherwise.
func (e *a64Emitter) addr(d a64Reg, a uint64) {
	pc := e.pc()
	pages := int64(a>>12) - int64(pc>>12)
	if pages < -(1<<20) || pages >= 1<<20 {
		e.movImm(d, a)
		return
	}
	u := uint32(pages) & 0x1FFFFF
	e.emit(0x90000000|(u&3)<<29|(u>>2)<<5|d, fmt.Sprintf("adrp %s, %#x", xt(d), a&^0xFFF))
	if lo := uint32(a & 0xFFF); lo != 0 {
		e.addImm(d, d, lo)
	}
}

// mrs t, tpidr_el0 / cntvct_el0
func (e *a64Emitter) mrsTPIDR(t a64Reg) {
	e.emit(0xD53BD040|t, fmt.Sprintf("mrs %s, tpidr_el0", xt(t)))
}

func (e *a64Emitter) mrsCNTVCT(t a64Reg) {
	e.emit(0xD53BE040|t, fmt.Sprintf("mrs %s, cntvct_el0", xt(t)))
}

func (e *a64Emitter) newLabel() a64Label {
	e.labels = append(e.labels, -1)
	return a64Label(len(e.labels) - 1)
}

func (e *a64Emitter) bind(l a64Label) { e.labels[l] = len(e.words) }

// bL: b label; cbnzW: cbnz wt, label.
func (e *a64Emitter) bL(l a64Label) {
	e.fixes = append(e.fixes, a64Fix{at: len(e.words), label: l, kind: a64FixB, text: "b "})
	e.emit(0x14000000, "")
}

func (e *a64Emitter) cbnzW(t a64Reg, l a64Label) {
	e.fixes = append(e.fixes, a64Fix{at: len(e.words), label: l, kind: a64FixImm19, text: "cbnz " + wt(t) + ", "})
	e.emit(0x35000000|t, "")
}

func (e *a64Emitter) cbzX(t a64Reg, l a64Label) {
	e.fixes = append(e.fixes, a64Fix{at: len(e.words), label: l, kind: a64FixImm19, text: "cbz " + xt(t) + ", "})
	e.emit(0xB4000000|t, "")
}

func (e *a64Emitter) cbnzX(t a64Reg, l a64Label) {
	e.fixes = append(e.fixes, a64Fix{at: len(e.words), label: l, kind: a64FixImm19, text: "cbnz " + xt(t) + ", "})
	e.emit(0xB5000000|t, "")
}

// bTo: b to an absolute address within +-128 MiB; it reports false (and
// emits nothing) when the address is out of reach.
func (e *a64Emitter) bTo(t uint64) bool {
	off := int64(t - e.pc())
	if !a64FitsB(off) {
		return false
	}
	e.emit(0x14000000|uint32(off>>2)&0x3FFFFFF, fmt.Sprintf("b %#x", t))
	return true
}

// farTo: ldr r, #8; br r; the 8-byte address t.
func (e *a64Emitter) farTo(r a64Reg, t uint64) {
	e.emit(0x58000040|r, fmt.Sprintf("ldr %s, %#x", xt(r), e.pc()+8))
	e.emit(0xD61F0000|r<<5, "br "+xt(r))
	e.data(uint32(t))
	e.data(uint32(t >> 32))
}

// data appends a literal word.
func (e *a64Emitter) data(w uint32) {
	e.words = append(e.words, w)
	e.kinds = append(e.kinds, a64Data)
	e.texts = append(e.texts, "")
}

// foreign appends code generated elsewhere (xol); data marks its literal
// words.
func (e *a64Emitter) foreign(code []byte, data func(i int) bool) {
	for i := 0; i+4 <= len(code); i += 4 {
		k := a64Foreign
		if data(i / 4) {
			k = a64Data
		}
		e.words = append(e.words, binary.LittleEndian.Uint32(code[i:]))
		e.kinds = append(e.kinds, k)
		e.texts = append(e.texts, "")
	}
}

// a64FitsB reports whether a byte offset fits b and bl.
func a64FitsB(off int64) bool { return off&3 == 0 && off >= -(1<<27) && off < 1<<27 }

// finish resolves the branches, encodes the code and decodes it again.
func (e *a64Emitter) finish() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	for _, f := range e.fixes {
		to := e.labels[f.label]
		if to < 0 {
			return nil, fmt.Errorf("label %d not bound: %w", f.label, ErrEncode)
		}
		off := int64(to-f.at) * 4
		switch f.kind {
		case a64FixB:
			e.words[f.at] |= uint32(off>>2) & 0x3FFFFFF
		default:
			if off < -(1<<20) || off >= 1<<20 {
				return nil, fmt.Errorf("branch of %d bytes: %w", off, ErrEncode)
			}
			e.words[f.at] |= (uint32(off>>2) & 0x7FFFF) << 5
		}
		e.texts[f.at] = fmt.Sprintf("%s%#x", f.text, e.base+4*uint64(to))
	}
	e.fixes = nil
	b := decode.ARM64Code(e.words...)
	for i := range e.words {
		if e.kinds[i] == a64Data {
			continue
		}
		at := e.base + 4*uint64(i)
		inst, err := decode.DecodeARM64(b[4*i:], at)
		if err != nil {
			return nil, fmt.Errorf("%w: %#08x at %#x: %v", ErrEncode, e.words[i], at, err)
		}
		if e.kinds[i] == a64Own {
			if got := inst.Text(); got != e.texts[i] {
				return nil, fmt.Errorf("%w: %#08x at %#x decodes as %q, want %q", ErrEncode, e.words[i], at, got, e.texts[i])
			}
		}
	}
	return b, nil
}
