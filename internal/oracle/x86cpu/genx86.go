package x86cpu

import "math/rand/v2"

// X86Shape names the kind of encoding a generated x86-64 case imitates.
type X86Shape uint8

const (
	// ShapeRandom is 15 uniformly random bytes.
	ShapeRandom X86Shape = iota
	// ShapeLegacy is legacy prefixes, an optional REX and a one-byte opcode.
	ShapeLegacy
	// ShapeLegacy0F is the same with a 0F xx opcode.
	ShapeLegacy0F
	// ShapeLegacy0F38 is the same with a 0F 38 xx opcode.
	ShapeLegacy0F38
	// ShapeLegacy0F3A is the same with a 0F 3A xx opcode.
	ShapeLegacy0F3A
	// Shape3DNow is 0F 0F ModRM [SIB] [disp] with a trailing opcode byte.
	Shape3DNow
	// ShapeVEX2 is a two-byte VEX (C5) instruction.
	ShapeVEX2
	// ShapeVEX3 is a three-byte VEX (C4) instruction, maps 1-3 mostly.
	ShapeVEX3
	// ShapeEVEX is an EVEX (62) instruction, maps 1, 2, 3, 5 and 6 mostly.
	ShapeEVEX
	// ShapeXOP is an AMD XOP (8F) instruction, maps 8, 9 and A mostly.
	ShapeXOP
	// ShapeREX2 is an APX REX2 (D5) instruction, maps 0 and 1.
	ShapeREX2

	numX86Shapes
)

var x86ShapeNames = [...]string{
	ShapeRandom:     "random",
	ShapeLegacy:     "legacy",
	ShapeLegacy0F:   "legacy-0f",
	ShapeLegacy0F38: "legacy-0f38",
	ShapeLegacy0F3A: "legacy-0f3a",
	Shape3DNow:      "3dnow",
	ShapeVEX2:       "vex2",
	ShapeVEX3:       "vex3",
	ShapeEVEX:       "evex",
	ShapeXOP:        "xop",
	ShapeREX2:       "rex2",
}

// String returns a short lowercase name for the shape.
func (s X86Shape) String() string {
	if int(s) < len(x86ShapeNames) {
		return x86ShapeNames[s]
	}
	return "unknown"
}

// X86Shapes returns every shape, ShapeRandom first.
func X86Shapes() []X86Shape {
	s := make([]X86Shape, numX86Shapes)
	for i := range s {
		s[i] = X86Shape(i)
	}
	return s
}

// structuredWeights is how often Structured picks each shape, in parts of
// the sum; ShapeRandom is not picked.
var structuredWeights = [numX86Shapes]int{
	ShapeLegacy:     24,
	ShapeLegacy0F:   20,
	ShapeLegacy0F38: 8,
	ShapeLegacy0F3A: 8,
	Shape3DNow:      3,
	ShapeVEX2:       6,
	ShapeVEX3:       10,
	ShapeEVEX:       12,
	ShapeXOP:        4,
	ShapeREX2:       5,
}

// X86Gen generates candidate x86-64 byte strings, each 15 bytes long. The
// sequence is fully determined by the seed. An X86Gen is not safe for
// concurrent use.
type X86Gen struct {
	r *rand.Rand
}

// NewX86Gen returns a generator seeded with seed.
func NewX86Gen(seed uint64) *X86Gen {
	return &X86Gen{r: rand.New(rand.NewPCG(seed, 0x70726f62656f7074))}
}

// Random fills dst with uniformly random bytes.
func (g *X86Gen) Random(dst *[MaxX86Len]byte) {
	a, b := g.r.Uint64(), g.r.Uint64()
	for i := range 8 {
		dst[i] = byte(a >> (8 * i))
	}
	for i := range MaxX86Len - 8 {
		dst[8+i] = byte(b >> (8 * i))
	}
}

// Structured fills dst with a case of a randomly chosen structured shape
// (never ShapeRandom) and returns the shape.
func (g *X86Gen) Structured(dst *[MaxX86Len]byte) X86Shape {
	total := 0
	for _, w := range structuredWeights {
		total += w
	}
	n := g.r.IntN(total)
	s := ShapeLegacy
	for i, w := range structuredWeights {
		if n < w {
			s = X86Shape(i)
			break
		}
		n -= w
	}
	g.Shape(dst, s)
	return s
}

// Shape fills dst with a case of shape s. Bytes after the generated
// instruction start (prefixes, escape, opcode, ModRM, SIB) are random, so
// displacements, immediates and whatever follows are random too.
func (g *X86Gen) Shape(dst *[MaxX86Len]byte, s X86Shape) {
	g.Random(dst)
	if s == ShapeRandom {
		return
	}
	w := &caseWriter{dst: dst}
	switch s {
	case ShapeLegacy, ShapeLegacy0F, ShapeLegacy0F38, ShapeLegacy0F3A, Shape3DNow:
		g.legacyPrefixes(w)
		if g.r.IntN(100) < 35 {
			w.put(0x40 | byte(g.r.IntN(16)))
		}
	default:
		g.vexPrefixes(w)
	}
	switch s {
	case ShapeLegacy:
		op := byte(g.r.IntN(256))
		if g.r.IntN(100) < 25 {
			op = interestingOneByte[g.r.IntN(len(interestingOneByte))]
		}
		w.put(op)
		g.modRM(w)
	case ShapeLegacy0F:
		w.put(0x0f, byte(g.r.IntN(256)))
		g.modRM(w)
	case ShapeLegacy0F38:
		w.put(0x0f, 0x38, g.opcode(legacy0F38Rows))
		g.modRM(w)
	case ShapeLegacy0F3A:
		w.put(0x0f, 0x3a, g.opcode(legacy0F3ARows))
		g.modRM(w)
	case Shape3DNow:
		w.put(0x0f, 0x0f)
		g.modRM(w)
		op := byte(g.r.IntN(256))
		if g.r.IntN(100) < 75 {
			op = threeDNowOpcodes[g.r.IntN(len(threeDNowOpcodes))]
		}
		w.put(op)
	case ShapeVEX2:
		// R vvvv L pp.
		w.put(0xc5, byte(g.r.IntN(2))<<7|g.vexVvvvLpp(), g.opcode(vexRows[1]))
		g.modRM(w)
	case ShapeVEX3:
		mmmmm := byte(1 + g.r.IntN(3))
		if g.r.IntN(100) < 10 {
			mmmmm = byte(g.r.IntN(32))
		}
		// R X B mmmmm, then W vvvv L pp.
		var rows []opcodeRange
		if int(mmmmm) < len(vexRows) {
			rows = vexRows[mmmmm]
		}
		w.put(0xc4, byte(g.r.IntN(8))<<5|mmmmm, byte(g.r.IntN(2))<<7|g.vexVvvvLpp(), g.opcode(rows))
		g.modRM(w)
	case ShapeEVEX:
		p0 := g.evexP0()
		w.put(0x62, p0, g.evexP1(), g.evexP2(), g.opcode(evexRows[p0&7]))
		g.modRM(w)
	case ShapeXOP:
		mmmmm := byte(8 + g.r.IntN(3))
		if g.r.IntN(100) < 10 {
			mmmmm = byte(g.r.IntN(32))
		}
		w.put(0x8f, byte(g.r.IntN(8))<<5|mmmmm, byte(g.r.IntN(2))<<7|g.vexVvvvLpp(), byte(g.r.IntN(256)))
		g.modRM(w)
	case ShapeREX2:
		// M0 R4 X4 B4 W R X B: M0 selects map 0 or map 1 (0F).
		w.put(0xd5, byte(g.r.IntN(256)), byte(g.r.IntN(256)))
		g.modRM(w)
	}
}

// vexVvvvLpp returns the low seven bits shared by the last VEX/XOP payload
// byte: vvvv (inverted; 1111, meaning no register, half of the time, since
// many forms require it), L (0 more often than 1) and pp.
func (g *X86Gen) vexVvvvLpp() byte {
	vvvv := byte(0xf)
	if g.r.IntN(2) == 0 {
		vvvv = byte(g.r.IntN(16))
	}
	var l byte
	if g.r.IntN(100) < 40 {
		l = 1
	}
	return vvvv<<3 | l<<2 | byte(g.r.IntN(4))
}

// evexP0 returns EVEX payload byte P0: R X B R' (inverted, random), bit 3
// zero (it must be on a CPU without APX), and the map mmm: 1, 2, 3, 5 or 6
// mostly, any value sometimes, and rarely bit 3 set to see it rejected.
func (g *X86Gen) evexP0() byte {
	maps := [...]byte{1, 2, 3, 5, 6}
	m := maps[g.r.IntN(len(maps))]
	if g.r.IntN(100) < 10 {
		m = byte(g.r.IntN(8))
	}
	p := byte(g.r.IntN(16))<<4 | m
	if g.r.IntN(100) < 3 {
		p |= 0x08
	}
	return p
}

// evexP1 returns EVEX payload byte P1: W vvvv 1 pp, with vvvv (inverted)
// 1111 half of the time and the fixed bit 2 set (rarely clear, to see it
// rejected).
func (g *X86Gen) evexP1() byte {
	p := byte(g.r.IntN(256)) | 0x04
	if g.r.IntN(2) == 0 {
		p |= 0x78
	}
	if g.r.IntN(100) < 3 {
		p &^= 0x04
	}
	return p
}

// evexP2 returns EVEX payload byte P2: z L'L b V' aaa. Half of the time it
// is the plain form (z=0, b=0, V'=1 meaning no high register, aaa=0) with a
// random vector length; L'L = 3 (reserved) is rare.
func (g *X86Gen) evexP2() byte {
	p := byte(g.r.IntN(256))
	if g.r.IntN(2) == 0 {
		p = p&0x60 | 0x08
	}
	if p>>5&3 == 3 && g.r.IntN(100) < 80 {
		p &^= 0x40
	}
	return p
}

// legacyPrefixes writes a run of legacy prefixes: none about a third of
// the time, usually one to three, sometimes enough to pass 15 bytes. Any
// order and repeats are allowed; a REX byte may appear inside the run,
// where the CPU ignores it.
func (g *X86Gen) legacyPrefixes(w *caseWriter) {
	n := 0
	switch r := g.r.IntN(100); {
	case r < 35:
	case r < 70:
		n = 1
	case r < 85:
		n = 2 + g.r.IntN(2)
	case r < 94:
		n = 4 + g.r.IntN(5)
	default:
		n = 9 + g.r.IntN(8)
	}
	for range n {
		if g.r.IntN(100) < 3 {
			w.put(0x40 | byte(g.r.IntN(16)))
			continue
		}
		w.put(g.legacyPrefix())
	}
}

// vexPrefixes writes the prefixes before a VEX-like escape: mostly none;
// otherwise segment overrides and 67 (allowed) and now and then 66, F2,
// F3, F0 or a REX (which make the instruction #UD).
func (g *X86Gen) vexPrefixes(w *caseWriter) {
	if g.r.IntN(100) < 70 {
		return
	}
	n := 1 + g.r.IntN(3)
	if g.r.IntN(100) < 5 {
		n = 8 + g.r.IntN(8)
	}
	allowed := [...]byte{0x67, 0x67, 0x67, 0x2e, 0x3e, 0x26, 0x36, 0x64, 0x65}
	for range n {
		switch r := g.r.IntN(100); {
		case r < 80:
			w.put(allowed[g.r.IntN(len(allowed))])
		case r < 90:
			w.put(g.legacyPrefix())
		default:
			w.put(0x40 | byte(g.r.IntN(16)))
		}
	}
}

// legacyPrefix returns one legacy prefix byte, 66 and 67 favoured.
func (g *X86Gen) legacyPrefix() byte {
	switch r := g.r.IntN(100); {
	case r < 22:
		return 0x66
	case r < 44:
		return 0x67
	case r < 54:
		return 0xf2
	case r < 64:
		return 0xf3
	case r < 72:
		return 0xf0
	}
	segs := [...]byte{0x2e, 0x36, 0x3e, 0x26, 0x64, 0x65}
	return segs[g.r.IntN(len(segs))]
}

// modRM writes a ModRM byte and, when it calls for one, a SIB byte, and
// skips the displacement (left random). Every mod and rm value is equally
// likely, then rm 4 (SIB) and rm 5 (disp32 or RIP-relative with mod 0) get
// extra weight, and SIB base 5 (disp32 with mod 0) is favoured.
func (g *X86Gen) modRM(w *caseWriter) {
	mod := byte(g.r.IntN(4))
	reg := byte(g.r.IntN(8))
	rm := byte(g.r.IntN(8))
	switch g.r.IntN(8) {
	case 0:
		rm = 4
	case 1:
		rm = 5
	}
	w.put(mod<<6 | reg<<3 | rm)
	if mod == 3 {
		return
	}
	disp := [4]int{0, 1, 4, 0}[mod]
	if rm == 4 {
		base := byte(g.r.IntN(8))
		if g.r.IntN(3) == 0 {
			base = 5
		}
		w.put(byte(g.r.IntN(4))<<6 | byte(g.r.IntN(8))<<3 | base)
		if mod == 0 && base == 5 {
			disp = 4
		}
	} else if mod == 0 && rm == 5 {
		disp = 4
	}
	w.skip(disp)
}

// interestingOneByte lists one-byte opcodes whose length depends on
// prefixes or on the vendor (immediate and displacement sizes, moffs,
// relative branches, group opcodes with an immediate on one form only).
var interestingOneByte = [...]byte{
	0x05, 0x25, 0x3d, 0x68, 0x69, 0x6a, 0x6b,
	0x70, 0x74, 0x75, 0x7f, 0x80, 0x81, 0x83, 0x8f,
	0x9a, 0xa0, 0xa1, 0xa2, 0xa3, 0xa9, 0xb0, 0xb8, 0xbf,
	0xc2, 0xc6, 0xc7, 0xc8, 0xca, 0xcd,
	0xe0, 0xe1, 0xe2, 0xe3, 0xe8, 0xe9, 0xea, 0xeb,
	0xf6, 0xf7, 0xfe, 0xff,
}

// opcodeRange is an inclusive range of opcode bytes.
type opcodeRange struct{ lo, hi byte }

// opcode returns an opcode byte: from rows (ranges where the manuals define
// most opcodes of a map, so that more cases are accepted by the CPU) 60 %
// of the time when rows is not empty, else any byte.
func (g *X86Gen) opcode(rows []opcodeRange) byte {
	if len(rows) == 0 || g.r.IntN(100) >= 60 {
		return byte(g.r.IntN(256))
	}
	r := rows[g.r.IntN(len(rows))]
	return r.lo + byte(g.r.IntN(int(r.hi-r.lo)+1))
}

// Opcode rows, per map, where most opcodes are defined.
var (
	legacy0F38Rows = []opcodeRange{{0x00, 0x0b}, {0x10, 0x10}, {0x14, 0x17}, {0x1c, 0x1e}, {0x20, 0x25},
		{0x28, 0x2b}, {0x30, 0x35}, {0x37, 0x41}, {0x80, 0x82}, {0xc8, 0xcf}, {0xdb, 0xdf}, {0xf0, 0xf9}, {0xfc, 0xfc}}
	legacy0F3ARows = []opcodeRange{{0x08, 0x0f}, {0x14, 0x17}, {0x20, 0x22}, {0x40, 0x42}, {0x44, 0x44},
		{0x60, 0x63}, {0xcc, 0xcf}, {0xdf, 0xdf}}
	// vexRows is indexed by VEX map (1 = 0F, 2 = 0F38, 3 = 0F3A).
	vexRows = [4][]opcodeRange{
		1: {{0x10, 0x17}, {0x28, 0x2f}, {0x41, 0x4b}, {0x50, 0x7f}, {0x90, 0x93}, {0x98, 0x99}, {0xae, 0xae},
			{0xc2, 0xc2}, {0xc4, 0xc6}, {0xd0, 0xff}},
		2: {{0x00, 0x1e}, {0x20, 0x25}, {0x28, 0x2f}, {0x30, 0x3f}, {0x40, 0x47}, {0x49, 0x4b}, {0x50, 0x53},
			{0x58, 0x5e}, {0x78, 0x79}, {0x8c, 0x8e}, {0x90, 0x9f}, {0xa6, 0xbf}, {0xcf, 0xcf}, {0xdc, 0xdf},
			{0xf2, 0xf7}},
		3: {{0x00, 0x06}, {0x08, 0x0f}, {0x14, 0x19}, {0x1d, 0x1d}, {0x20, 0x22}, {0x30, 0x33}, {0x38, 0x39},
			{0x40, 0x42}, {0x44, 0x44}, {0x46, 0x4c}, {0x60, 0x63}, {0x68, 0x6f}, {0x78, 0x7f}, {0xce, 0xcf},
			{0xdf, 0xdf}, {0xf0, 0xf0}},
	}
	// evexRows is indexed by EVEX map (mmm).
	evexRows = [8][]opcodeRange{
		1: {{0x10, 0x17}, {0x28, 0x2f}, {0x51, 0x7f}, {0xc2, 0xc2}, {0xc4, 0xc6}, {0xd1, 0xfe}},
		2: {{0x00, 0x2f}, {0x30, 0x4f}, {0x50, 0x5b}, {0x62, 0x66}, {0x70, 0x7f}, {0x83, 0x8f}, {0x90, 0xbf},
			{0xc4, 0xcf}, {0xdc, 0xdf}},
		3: {{0x00, 0x27}, {0x38, 0x3f}, {0x42, 0x44}, {0x50, 0x57}, {0x66, 0x67}, {0x70, 0x73}, {0xc2, 0xc2},
			{0xce, 0xcf}},
		5: {{0x10, 0x11}, {0x1d, 0x1d}, {0x2e, 0x2f}, {0x51, 0x51}, {0x58, 0x5f}, {0x6e, 0x6e}, {0x78, 0x7e}},
		6: {{0x13, 0x13}, {0x2c, 0x2d}, {0x42, 0x43}, {0x4c, 0x4f}, {0x56, 0x57}, {0x96, 0xbf}, {0xd6, 0xd7}},
	}
)

// threeDNowOpcodes lists the 3DNow! opcode suffixes AMD defined.
var threeDNowOpcodes = [...]byte{
	0x0c, 0x0d, 0x1c, 0x1d, 0x8a, 0x8e, 0x90, 0x94, 0x96, 0x97, 0x9a, 0x9e,
	0xa0, 0xa4, 0xa6, 0xa7, 0xaa, 0xae, 0xb0, 0xb4, 0xb6, 0xb7, 0xbb, 0xbf,
}

// caseWriter writes bytes into a case from the front; bytes past the end
// are dropped, so a prefix run may push the instruction out of the case.
type caseWriter struct {
	dst *[MaxX86Len]byte
	pos int
}

// put writes bytes at the current position.
func (w *caseWriter) put(bs ...byte) {
	for _, b := range bs {
		if w.pos < len(w.dst) {
			w.dst[w.pos] = b
		}
		w.pos++
	}
}

// skip leaves n bytes as they are.
func (w *caseWriter) skip(n int) { w.pos += n }
