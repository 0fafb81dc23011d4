package x86cpu

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
)

// emuEdgeValues are register and memory values that sit on the edges of
// arithmetic: zero, one, all ones, the sign bits and their neighbours at
// every operand size.
var emuEdgeValues = [...]uint64{
	0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0x10000,
	0x7fffffff, 0x80000000, 0xffffffff, 0x100000000,
	0x7fffffffffffffff, 0x8000000000000000, 0xffffffffffffffff,
	0xfffffffffffffffe, 0x8000000000000001, 0xffffffff80000000,
	0xffffffffffff8000, 0xffffffffffffff80,
}

// emuShiftCounts are shift counts around the operand widths.
var emuShiftCounts = [...]uint64{0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 0xff, 0x80, 0x1f, 0x3f, 0x21, 0x41}

// emuEdgeValue returns an edge value, sometimes with random bits above an
// edge in the low byte, word or doubleword.
func emuEdgeValue(r *rand.Rand) uint64 {
	v := emuEdgeValues[r.IntN(len(emuEdgeValues))]
	if r.IntN(4) == 0 {
		sh := uint(8 << r.IntN(3)) // 8, 16 or 32
		v = r.Uint64()<<sh | v&(1<<sh-1)
	}
	return v
}

// emuSpec describes one opcode form of a generator class.
type emuSpec struct {
	map0F bool
	op    byte
	z     bool   // a register in the low three bits of the opcode
	modrm int8   // -1: no ModRM; 0-7: fixed reg field; 8: any reg field; 9: the exact byte fixed
	fixed byte   // the ModRM byte when modrm == 9
	mem   int8   // 0: any mod; 1: memory only; 2: register only
	pfx   []byte // prefixes the form may carry besides the usual ones (F2, F3)
	must  []byte // prefixes always present, right before REX (F3 of pause, endbr)
	plain bool   // no other prefix and no REX
}

// emuClass is a named set of forms.
type emuClass struct {
	name  string
	specs []emuSpec
}

// Shorthands for the class table.
func emuOneByte(ops ...byte) []emuSpec {
	s := make([]emuSpec, len(ops))
	for i, op := range ops {
		s[i] = emuSpec{op: op, modrm: -1}
	}
	return s
}

func emuWithModRM(map0F bool, reg int8, ops ...byte) []emuSpec {
	s := make([]emuSpec, len(ops))
	for i, op := range ops {
		s[i] = emuSpec{map0F: map0F, op: op, modrm: reg}
	}
	return s
}

func emuGroup(op byte, regs ...int8) []emuSpec {
	s := make([]emuSpec, len(regs))
	for i, r := range regs {
		s[i] = emuSpec{op: op, modrm: r}
	}
	return s
}

func emuOpRange(lo, hi byte) []byte {
	var b []byte
	for c := int(lo); c <= int(hi); c++ {
		b = append(b, byte(c))
	}
	return b
}

func emuCat(lists ...[]emuSpec) []emuSpec {
	var s []emuSpec
	for _, l := range lists {
		s = append(s, l...)
	}
	return s
}

func emuWithPfx(s []emuSpec, pfx ...byte) []emuSpec {
	for i := range s {
		s[i].pfx = pfx
	}
	return s
}

// emuClasses is the structured generator: every opcode form the emulator
// claims, by class.
var emuClasses = func() []emuClass {
	var alu []emuSpec
	for op := byte(0); op < 8; op++ {
		alu = append(alu, emuWithModRM(false, 8, op<<3, op<<3|1, op<<3|2, op<<3|3)...)
		alu = append(alu, emuOneByte(op<<3|4, op<<3|5)...)
		alu = append(alu, emuGroup(0x80, int8(op))...)
		alu = append(alu, emuGroup(0x81, int8(op))...)
		alu = append(alu, emuGroup(0x83, int8(op))...)
	}
	var shift []emuSpec
	for _, op := range []byte{0xc0, 0xc1, 0xd0, 0xd1, 0xd2, 0xd3} {
		shift = append(shift, emuGroup(op, 0, 1, 4, 5, 7)...)
	}
	return []emuClass{
		{"nop", emuCat(
			emuOneByte(0x90),
			[]emuSpec{{op: 0x90, modrm: -1, must: []byte{0xf3}}},
			emuWithModRM(true, 8, 0x19, 0x1d, 0x1e, 0x1f, 0x1f, 0x1f),
		)},
		{"endbr", []emuSpec{
			{map0F: true, op: 0x1e, modrm: 9, fixed: 0xfa, must: []byte{0xf3}, plain: true},
			{map0F: true, op: 0x1e, modrm: 9, fixed: 0xfb, must: []byte{0xf3}, plain: true},
		}},
		{"push", emuCat([]emuSpec{{op: 0x50, z: true, modrm: -1}}, emuOneByte(0x68, 0x6a), emuGroup(0xff, 6))},
		{"pop", emuCat([]emuSpec{{op: 0x58, z: true, modrm: -1}}, emuGroup(0x8f, 0))},
		{"mov", emuCat(
			emuWithModRM(false, 8, 0x88, 0x89, 0x8a, 0x8b),
			emuGroup(0xc6, 0), emuGroup(0xc7, 0),
			[]emuSpec{{op: 0xb0, z: true, modrm: -1}, {op: 0xb8, z: true, modrm: -1}},
			emuOneByte(0xa0, 0xa1, 0xa2, 0xa3),
		)},
		{"movx", emuCat(emuWithModRM(true, 8, 0xb6, 0xb7, 0xbe, 0xbf), emuWithModRM(false, 8, 0x63))},
		{"lea", []emuSpec{{op: 0x8d, modrm: 8, mem: 1}}},
		{"alu", alu},
		{"test", emuCat(emuWithModRM(false, 8, 0x84, 0x85), emuOneByte(0xa8, 0xa9), emuGroup(0xf6, 0), emuGroup(0xf7, 0))},
		{"incdec", emuCat(emuGroup(0xfe, 0, 1), emuGroup(0xff, 0, 1))},
		{"negnot", emuCat(emuGroup(0xf6, 2, 3), emuGroup(0xf7, 2, 3))},
		{"shift", shift},
		{"imul", emuCat(emuWithModRM(true, 8, 0xaf), emuWithModRM(false, 8, 0x69, 0x6b))},
		{"xchg", emuCat(emuWithModRM(false, 8, 0x86, 0x87), []emuSpec{{op: 0x90, z: true, modrm: -1}})},
		{"cmov", emuWithModRM(true, 8, emuOpRange(0x40, 0x4f)...)},
		{"setcc", emuWithModRM(true, 8, emuOpRange(0x90, 0x9f)...)},
		{"convert", emuOneByte(0x98, 0x99)},
		{"jcc", emuWithPfx(emuCat(emuOneByte(emuOpRange(0x70, 0x7f)...), emuWithModRM(true, -1, emuOpRange(0x80, 0x8f)...)), 0xf2)},
		{"jmp", emuWithPfx(emuOneByte(0xe9, 0xeb), 0xf2)},
		{"call", emuWithPfx(emuOneByte(0xe8), 0xf2)},
		{"indirect", emuWithPfx(emuGroup(0xff, 2, 4), 0xf2)},
		{"ret", emuWithPfx(emuOneByte(0xc3, 0xc2), 0xf2, 0xf3)},
		{"leave", emuOneByte(0xc9)},
		{"loop", emuOneByte(0xe0, 0xe1, 0xe2, 0xe3)},
	}
}()

// EmuClassRandom names the generator of random bytes filtered by the
// decoder and the emulator.
const EmuClassRandom = "random"

// EmuClasses returns the names of the generator classes: the structured
// classes (one per family of emulated instructions), then "random".
func EmuClasses() []string {
	names := make([]string, 0, len(emuClasses)+1)
	for _, c := range emuClasses {
		names = append(names, c.name)
	}
	return append(names, EmuClassRandom)
}

// emuGen generates cases. It is deterministic for a seed and not safe for
// concurrent use.
type emuGen struct {
	r       *rand.Rand
	classes []*emuClass // nil entry: random bytes
	weights []int       // chance of each class, in parts of total
	total   int
	dec     decode.X86Decoder
	emu     emulate.X86
	// canonicalRSP makes every stack pointer canonical, for a host that
	// cannot start a case with another (EmuCPUResult.NotRun).
	canonicalRSP bool
	// Rejected counts generated byte strings that did not decode or that
	// the emulator refused.
	rejected int
}

// newEmuGen returns a generator for one class (or every class with ""),
// of instructions that vendor's CPU decodes and the emulator of that
// vendor executes.
func newEmuGen(seed uint64, class string, vendor decode.Vendor) (*emuGen, error) {
	g := &emuGen{r: rand.New(rand.NewPCG(seed, 0x656d7520676e6e72)), dec: decode.X86Decoder{Vendor: vendor}, emu: emulate.X86{Vendor: vendor}}
	// A class is chosen in proportion to its number of forms (at least
	// four), so that every form is about as likely; random bytes get the
	// share of sixteen forms.
	for i := range emuClasses {
		if class == "" || class == emuClasses[i].name {
			g.classes = append(g.classes, &emuClasses[i])
			g.weights = append(g.weights, max(4, len(emuClasses[i].specs)))
		}
	}
	if class == "" || class == EmuClassRandom {
		g.classes = append(g.classes, nil)
		g.weights = append(g.weights, 16)
	}
	for _, w := range g.weights {
		g.total += w
	}
	if len(g.classes) == 0 {
		return nil, fmt.Errorf("unknown class %q (classes: %v)", class, EmuClasses())
	}
	return g, nil
}

// gen makes one case at address addr. It gives up (false) after many
// rejected attempts, which only happens for a class whose forms the
// emulator does not accept.
func (g *emuGen) gen(addr uint64, c *EmuCase) bool {
	var cl *emuClass
	for i, n := 0, g.r.IntN(g.total); i < len(g.classes); i++ {
		if n < g.weights[i] {
			cl = g.classes[i]
			break
		}
		n -= g.weights[i]
	}
	for range 200 {
		var b [32]byte
		var n int
		name := EmuClassRandom
		if cl == nil {
			emuFillRandom(g.r, b[:16])
			n = 15
		} else {
			name = cl.name
			n = g.skeleton(&cl.specs[g.r.IntN(len(cl.specs))], b[:])
		}
		var inst decode.X86Inst
		if err := g.dec.Decode(b[:n], addr, &inst); err != nil || g.emu.Supported(&inst) != nil {
			g.rejected++
			continue
		}
		g.patchImmediates(&inst, b[:])
		*c = EmuCase{Class: name}
		g.state(addr, &inst, b[:], c)
		c.Bytes = append([]byte(nil), b[:inst.Len]...)
		return true
	}
	return false
}

// skeleton writes prefixes, opcode, ModRM, SIB and random bytes for the
// displacement and immediate of one form and returns how many bytes may be
// decoded (the decoder finds the length).
func (g *emuGen) skeleton(s *emuSpec, b []byte) int {
	r := g.r
	n := 0
	if !s.plain && r.IntN(8) == 0 {
		// A REX that a legacy prefix or another REX follows is ignored.
		b[n] = 0x40 | byte(r.IntN(16))
		n++
	}
	if !s.plain && r.IntN(5) >= 2 {
		for k := 1 + r.IntN(3); k > 0; k-- {
			switch x := r.IntN(12); {
			case x < 4:
				b[n] = 0x66
			case x < 6:
				b[n] = 0x67
			case x < 8:
				b[n] = [...]byte{0x2e, 0x3e, 0x26, 0x36}[r.IntN(4)]
			case x < 10:
				b[n] = 0x64 + byte(r.IntN(2))
			default:
				if len(s.pfx) == 0 {
					continue
				}
				b[n] = s.pfx[r.IntN(len(s.pfx))]
			}
			n++
		}
	}
	n += copy(b[n:], s.must)
	if !s.plain && r.IntN(2) == 0 {
		b[n] = 0x40 | byte(r.IntN(16))
		n++
	}
	if s.map0F {
		b[n] = 0x0f
		n++
	}
	b[n] = s.op
	if s.z {
		b[n] |= byte(r.IntN(8))
	}
	n++
	switch {
	case s.modrm == 9:
		b[n] = s.fixed
		n++
	case s.modrm >= 0:
		mod := byte(r.IntN(3))
		switch {
		case s.mem == 2 || (s.mem == 0 && r.IntN(3) == 0):
			mod = 3
		}
		reg := byte(r.IntN(8))
		if s.modrm < 8 {
			reg = byte(s.modrm)
		}
		rm := byte(r.IntN(8))
		if mod != 3 && r.IntN(8) == 0 {
			mod, rm = 0, 5 // RIP-relative
		}
		b[n] = mod<<6 | reg<<3 | rm
		n++
		if mod != 3 && rm == 4 {
			b[n] = byte(r.IntN(256))
			n++
		}
	}
	emuFillRandom(g.r, b[n:n+16])
	return min(n+16, MaxX86Len)
}

// patchImmediates replaces the random immediate and displacement bytes of
// inst with values biased to edges (counts around the widths for shifts,
// short and long branch distances). The length does not change.
func (g *emuGen) patchImmediates(inst *decode.X86Inst, b []byte) {
	r := g.r
	if inst.ImmSize > 0 && r.IntN(4) != 0 {
		var v uint64
		switch {
		case inst.RelSize != 0:
			switch r.IntN(4) {
			case 0:
				v = uint64(r.IntN(33)) - 16
			case 1:
				v = emuEdgeValue(r)
			default:
				v = r.Uint64()
			}
		case inst.Opcode == 0xc0 || inst.Opcode == 0xc1:
			v = emuShiftCounts[r.IntN(len(emuShiftCounts))]
		case inst.Opcode == 0xc2:
			v = [...]uint64{0, 8, 16, 0xfff8, 0xffff, r.Uint64()}[r.IntN(6)]
		default:
			v = emuEdgeValue(r)
		}
		emuPutLE(b[inst.ImmOff:], inst.ImmSize, v)
		inst.Imm = v & (^uint64(0) >> (64 - 8*uint(inst.ImmSize)))
	}
	if (inst.DispSize == 1 || inst.DispSize == 4) && inst.HasModRM && r.IntN(2) == 0 {
		v := [...]uint64{0, 1, 8, ^uint64(0), ^uint64(7), 0x7f, 0x80, 0x7fffffff, 0x80000000, r.Uint64()}[r.IntN(10)]
		emuPutLE(b[inst.DispOff:], inst.DispSize, v)
		inst.Disp = int64(emuSignExtend(v, inst.DispSize))
	}
}

// emuPutLE stores the low size bytes of v at b.
func emuPutLE(b []byte, size int, v uint64) {
	for i := 0; i < size; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

// emuSignExtend sign-extends the low size bytes of v.
func emuSignExtend(v uint64, size int) uint64 {
	sh := 64 - 8*uint(size)
	return uint64(int64(v<<sh) >> sh)
}

// regValue returns a register value biased to edges and to addresses.
func (g *emuGen) regValue() uint64 {
	r := g.r
	switch n := r.IntN(20); {
	case n < 7:
		return emuEdgeValue(r)
	case n < 11:
		return r.Uint64()
	case n < 13:
		return uint64(r.Uint32())
	case n < 15:
		return uint64(r.IntN(72))
	case n < 18:
		return g.target()
	default:
		return uint64(int64(int32(r.Uint32())))
	}
}

// target returns an address for a memory operand or a stack pointer:
// mostly in or around the read-write window, sometimes in the other
// windows, unmapped, or next to the non-canonical hole.
func (g *emuGen) target() uint64 {
	r := g.r
	var a uint64
	switch n := r.IntN(20); {
	case n < 11:
		a = EmuRWAddr - 16 + r.Uint64N(EmuRWSize+32)
	case n < 13:
		a = EmuROAddr + r.Uint64N(EmuROSize)
	case n < 14:
		a = EmuCodeLow + r.Uint64N(EmuCodeSize)
	case n < 15:
		a = EmuCodeHigh + r.Uint64N(EmuCodeSize)
	case n < 16:
		a = r.Uint64() & 0x7fff_ffff_ffff // canonical, user half
	case n < 17:
		// Across the edge of a window: into or out of a missing page, from
		// read-only into read-write, from read-only code into nothing.
		a = [...]uint64{EmuROAddr, EmuRWAddr, EmuRWAddr + EmuRWSize, EmuCodeLow, EmuCodeLow + EmuCodeSize, EmuCodeHigh, EmuCodeHigh + EmuCodeSize}[r.IntN(7)] - 8 + uint64(r.IntN(16))
		return a
	default:
		a = [...]uint64{0x7fff_ffff_fff0, 0xffff_8000_0000_0000 - 8, 0x7fff_ffff_f000 - 8, 0, 0xffff_ffff_ffff_fff8, 0x8000_0000_0000}[r.IntN(6)] + uint64(r.IntN(16))
	}
	if r.IntN(4) != 0 {
		a &^= 7
	}
	return a
}

// state fills the initial state of a case, aiming the stack pointer and
// the memory operand at interesting addresses.
func (g *emuGen) state(addr uint64, inst *decode.X86Inst, b []byte, c *EmuCase) {
	r := g.r
	st := &c.Init
	for i := range st.GPR {
		st.GPR[i] = g.regValue()
	}
	st.RIP = addr
	st.RFLAGS = 0x202 | r.Uint64()&(emulate.FlagsStatus|emulate.FlagDF)
	st.FSBase, st.GSBase = EmuFSBase, EmuGSBase
	if inst.Read.Has(decode.RSP) || inst.Written.Has(decode.RSP) {
		if r.IntN(10) != 0 {
			st.GPR[decode.RSP] = g.target()
		}
	}
	switch inst.Opcode {
	case 0xc9: // leave
		if inst.Map == decode.Map1Byte && r.IntN(10) != 0 {
			st.GPR[decode.RBP] = g.target()
		}
	case 0xe0, 0xe1, 0xe2, 0xe3: // loop, jrcxz
		if inst.Map == decode.Map1Byte && r.IntN(2) == 0 {
			st.GPR[decode.RCX] = [...]uint64{0, 1, 2, 0x1_0000_0000, 0x1_0000_0001, ^uint64(0)}[r.IntN(6)]
		}
	case 0xd2, 0xd3: // shifts by cl
		if inst.Map == decode.Map1Byte && r.IntN(2) == 0 {
			st.GPR[decode.RCX] = st.GPR[decode.RCX]&^0xff | emuShiftCounts[r.IntN(len(emuShiftCounts))]
		}
	case 0xff: // indirect branches through a register
		if inst.Map == decode.Map1Byte && inst.Mod == 3 && (inst.Reg == 2 || inst.Reg == 4) && r.IntN(4) != 0 {
			rm := int(inst.RM) | emuBit3(inst.B)
			st.GPR[rm] = [...]uint64{EmuCodeLow + r.Uint64N(EmuCodeSize), r.Uint64() & 0x7fff_ffff_ffff, 0x8000_0000_0000, 0xffff_8000_0000_0000}[r.IntN(4)]
		}
	}
	if r.IntN(10) != 0 {
		g.aim(inst, b, st)
	}
	for g.canonicalRSP && !canonical48(st.GPR[decode.RSP]) {
		st.GPR[decode.RSP] = g.target()
	}
}

// emuAddrRegs returns the base and index registers (-1 for none) and the
// scale shift of inst's ModRM memory operand, which must not be
// RIP-relative.
func emuAddrRegs(inst *decode.X86Inst) (base, idx int, scale uint) {
	base, idx = -1, -1
	if inst.HasSIB {
		if bb := int(inst.SIB & 7); bb != 5 || inst.Mod != 0 {
			base = bb | emuBit3(inst.B)
		}
		if x := int(inst.SIB>>3&7) | emuBit3(inst.X); x != 4 {
			idx = x
		}
		scale = uint(inst.SIB >> 6)
	} else {
		base = int(inst.RM) | emuBit3(inst.B)
	}
	return base, idx, scale
}

// emuBit3 returns 8 when the extension bit is set.
func emuBit3(x bool) int {
	if x {
		return 8
	}
	return 0
}

// aim makes the memory operand of inst (if any) address a target, by
// choosing the base or index register value and, where needed, the
// displacement; the bytes are patched in b and inst.
func (g *emuGen) aim(inst *decode.X86Inst, b []byte, st *emulate.X86State) {
	r := g.r
	t := g.target()
	var seg uint64
	switch inst.LastSeg {
	case 0x64:
		seg = EmuFSBase
	case 0x65:
		seg = EmuGSBase
	}
	want := t - seg
	if inst.Map == decode.Map1Byte && inst.Opcode >= 0xa0 && inst.Opcode <= 0xa3 {
		emuPutLE(b[inst.DispOff:], inst.DispSize, want)
		inst.Disp = int64(want)
		return
	}
	if !inst.HasModRM || inst.Mod == 3 {
		return
	}
	if inst.RIPRel {
		d := int64(want - (st.RIP + uint64(inst.Len)))
		if d == int64(int32(d)) {
			emuPutLE(b[inst.DispOff:], 4, uint64(d))
			inst.Disp = d
		}
		return
	}
	base, idx, scale := emuAddrRegs(inst)
	hi := r.Uint64() << 32 // ignored with a 67 prefix
	fix := func(v uint64) uint64 {
		if inst.AddrSize == 32 {
			return hi | v&0xffffffff
		}
		return v
	}
	disp := uint64(inst.Disp)
	switch {
	case base >= 0 && idx == base:
		k := uint64(1) + 1<<scale
		rest := want - disp
		st.GPR[base] = fix(rest / k)
		if rem := rest % k; rem != 0 && inst.DispSize > 0 {
			d := disp + rem
			if int64(d) == int64(emuSignExtend(d, inst.DispSize)) {
				emuPutLE(b[inst.DispOff:], inst.DispSize, d)
				inst.Disp = int64(d)
			}
		}
	case base >= 0:
		var iv uint64
		if idx >= 0 {
			iv = st.GPR[idx] << scale
		}
		st.GPR[base] = fix(want - disp - iv)
	case idx >= 0:
		st.GPR[idx] = fix(want >> scale)
		d := want & (1<<scale - 1)
		emuPutLE(b[inst.DispOff:], 4, d)
		inst.Disp = int64(d)
	}
}

// emuSlots hands out instruction slots in the code windows for a batch.
type emuSlots struct {
	low, high int
}

// next returns the address of a free 16-byte slot, mostly in the low
// window, or false when both are full.
func (s *emuSlots) next(r *rand.Rand) (uint64, bool) {
	const n = EmuCodeSize / 16
	if s.high < n && (r.IntN(5) == 0 || s.low >= n) {
		s.high++
		return EmuCodeHigh + uint64(16*(s.high-1)), true
	}
	if s.low < n {
		s.low++
		return EmuCodeLow + uint64(16*(s.low-1)), true
	}
	return 0, false
}

// emuSortWords sorts memory words by address.
func emuSortWords(w []EmuMemWord) {
	sort.Slice(w, func(i, j int) bool { return w[i].Addr < w[j].Addr })
}

// le64 reads a little-endian quadword.
func emuLE64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// canonical48 reports whether a is canonical with 48-bit addresses (and so
// with 57-bit ones too).
func canonical48(a uint64) bool { return int64(a<<16)>>16 == int64(a) }
