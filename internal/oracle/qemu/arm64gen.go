package qemu

import (
	"github.com/probeopt/probeopt/emulate"
)

// ARM64EmuClasses are the generator classes of the arm64 emulator
// campaign, one per emulated instruction group, plus "random" (any word).
var ARM64EmuClasses = []string{
	"b", "bcond", "cb", "tb", "br", "adr", "literal", "literal-fp",
	"addimm", "addshift", "addext", "logimm", "logshift", "movwide",
	"bitfield", "extr", "csel", "ccmp", "mul", "div", "shiftv", "bitop",
	"ldst", "ldst-fp", "pair", "pair-fp", "hint", "random",
}

// a64ClassWeights gives each class's share of a mixed campaign.
var a64ClassWeights = map[string]int{
	"b": 4, "bcond": 6, "cb": 5, "tb": 5, "br": 5, "adr": 5, "literal": 6, "literal-fp": 3,
	"addimm": 8, "addshift": 7, "addext": 6, "logimm": 6, "logshift": 7, "movwide": 5,
	"bitfield": 6, "extr": 2, "csel": 4, "ccmp": 4, "mul": 4, "div": 3, "shiftv": 3, "bitop": 3,
	"ldst": 12, "ldst-fp": 5, "pair": 9, "pair-fp": 4, "hint": 3, "random": 4,
}

// a64Gen generates arm64 instructions and machine states for the oracle's
// address space.
type a64Gen struct {
	r     *a64Rand
	class []string // weighted class table
}

func newA64Gen(seed uint64, class string) *a64Gen {
	g := &a64Gen{r: newA64Rand(seed)}
	if class != "" {
		g.class = []string{class}
		return g
	}
	for _, c := range ARM64EmuClasses {
		for k := 0; k < a64ClassWeights[c]; k++ {
			g.class = append(g.class, c)
		}
	}
	return g
}

// a64Edges are values at the edges of arithmetic; as addresses they all
// fall where nothing is mapped.
var a64Edges = [...]uint64{
	0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
	0x1_0000_0000, 0x1_0000_0001, 0x7FFF_FFFF_FFFF_FFFF, 0x8000_0000_0000_0000, 0x8000_0000_0000_0001,
	0xFFFF_FFFF_FFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFE, 0xFFFF_FFFF_0000_0000, 0xFFFF_FFFF_8000_0000,
	0x0000_0000_FFFF_FFFE, 0x7FFF_FFFF_0000_0000, 0x8000_0000_FFFF_FFFF,
}

// value returns a register value. Every value, used as a data address,
// lands in the oracle's windows, in a reservation around them, or where
// neither the guest nor qemu maps anything (low memory, 2-4 GiB, the
// kernel half), so that qemu's answers are deterministic.
func (g *a64Gen) value() uint64 {
	r := g.r
	switch r.n(12) {
	case 0:
		return uint64(r.n(4096))
	case 1:
		return -uint64(1 + r.n(4096))
	case 2, 3:
		return ARM64RWAddr + uint64(r.n(ARM64RWSize))
	case 4:
		return ARM64ROAddr + uint64(r.n(ARM64ROSize))
	case 5:
		return ARM64CodeAddr + uint64(r.n(ARM64CodeSize))
	case 6:
		return g.edgeAddr()
	case 7, 8:
		return a64Edges[r.n(len(a64Edges))]
	case 9:
		return r.u64() | 1<<55 // the kernel half once the tag is ignored
	case 10:
		return uint64(r.bits(8))<<56 | ARM64RWAddr + uint64(r.n(ARM64RWSize)) // tagged
	}
	return uint64(r.u64()) | 0x8000_0000 // 2-4 GiB or above 2^32
}

// edgeAddr returns an address near the edge of a window.
func (g *a64Gen) edgeAddr() uint64 {
	edges := [...]uint64{ARM64RWAddr + ARM64RWSize, ARM64RWAddr, ARM64ROAddr, ARM64CodeAddr, ARM64CodeAddr + ARM64CodeSize}
	return edges[g.r.n(len(edges))] + uint64(int64(g.r.n(64)-32))
}

// dataAddr returns an address for a load or store of size bytes: mostly
// inside the read-write window, sometimes elsewhere or across an edge.
func (g *a64Gen) dataAddr(size int) uint64 {
	r := g.r
	align := uint64(size)
	if r.chance(4) {
		align = 1
	}
	switch r.n(10) {
	case 0:
		return (ARM64ROAddr + uint64(r.n(ARM64ROSize))) &^ (align - 1)
	case 1:
		return (ARM64CodeAddr + uint64(r.n(ARM64CodeSize))) &^ (align - 1)
	case 2:
		return g.edgeAddr() &^ (align - 1)
	case 3:
		return g.value()
	}
	return (ARM64RWAddr + uint64(r.n(ARM64RWSize))) &^ (align - 1)
}

// stackAddr returns an sp value in the read-write window, 16-byte
// aligned nearly always.
func (g *a64Gen) stackAddr() uint64 {
	sp := ARM64RWAddr + 0x200 + uint64(g.r.n(ARM64RWSize-0x400))
	if g.r.chance(16) {
		return sp
	}
	return sp &^ 15
}

// state returns a random register file with PC pc.
func (g *a64Gen) state(pc uint64, vec bool) emulate.ARM64State {
	var s emulate.ARM64State
	for i := range s.X {
		s.X[i] = g.value()
	}
	s.SP = g.stackAddr()
	s.PC = pc
	s.NZCV = uint64(g.r.bits(4)) << 28
	if vec {
		for i := range s.V {
			s.V[i] = [2]uint64{g.r.u64(), g.r.u64()}
		}
	}
	return s
}

// codeAddr returns an instruction address in the main code window, away
// from its edges.
func (g *a64Gen) codeAddr() uint64 {
	return ARM64CodeAddr + 0x400 + 4*uint64(g.r.n((ARM64CodeSize-0x800)/4))
}

// branchOff returns a byte offset for a branch with an imm field of bits
// bits: near, in reach of the other code windows, or anywhere.
func (g *a64Gen) branchOff(bits uint) int64 {
	r := g.r
	lim := int64(1) << (bits + 1) // bytes
	var off int64
	switch r.n(4) {
	case 0, 1:
		off = int64(r.n(2048)-1024) * 4
	case 2:
		targets := [...]int64{ARM64NearAddr - ARM64CodeAddr, ARM64MidAddr - ARM64CodeAddr, ARM64ROAddr - ARM64CodeAddr, ARM64RWAddr - ARM64CodeAddr}
		off = targets[r.n(len(targets))] + int64(r.n(1024))*4
	default:
		off = int64(int32(r.u64()))
	}
	off &^= 3
	off %= lim
	if off == 0 {
		off = 4
	}
	return off
}

// a64Imm encodes a byte offset into an imm field of bits bits (words).
func a64Imm(off int64, bits uint) uint32 { return uint32(off>>2) & (1<<bits - 1) }

// reg returns a random register number 0-31.
func (g *a64Gen) reg() uint32 { return g.r.bits(5) }

// emuCase generates one case of class cl for the emulator campaign.
func (g *a64Gen) emuCase(cl string) (ARM64Case, string) {
	if cl == "" {
		cl = g.class[g.r.n(len(g.class))]
	}
	r := g.r
	pc := g.codeAddr()
	vec := cl == "literal-fp" || cl == "ldst-fp" || cl == "pair-fp" || cl == "random"
	s := g.state(pc, vec)
	var w uint32
	switch cl {
	case "b", "bcond", "cb", "tb", "br", "adr", "literal", "literal-fp":
		w = g.branchWord(cl, &s, pc)
	case "addimm", "addshift", "addext", "logimm", "logshift", "movwide", "bitfield", "extr", "csel", "ccmp", "mul", "div", "shiftv", "bitop":
		w = g.dataWord(cl, &s)
	case "ldst", "ldst-fp":
		w = g.ldst(&s, cl == "ldst-fp")
	case "pair", "pair-fp":
		w = g.pair(&s, cl == "pair-fp")
	case "hint":
		hints := [...]uint32{0, 0, 1, 32, 34, 36, 38, 7, 8, 10, 12, 14, 24, 25, 26, 27, 28, 29, 30, 31, 2, 4, 5, 6, 16, 20, 127}
		w = 0xD503201F | hints[r.n(len(hints))]<<5
	default:
		w = uint32(r.u64())
	}
	return ARM64Case{State: s, Vec: vec, Code: []ARM64Patch{{pc, w}}}, cl
}

// branchWord generates the word of a branch or PC-relative class (b,
// bcond, cb, tb, br, adr, literal) at pc, biasing s for it.
func (g *a64Gen) branchWord(cl string, s *emulate.ARM64State, pc uint64) uint32 {
	r := g.r
	var w uint32
	switch cl {
	case "b":
		w = 0x14000000 | r.bits(1)<<31 | a64Imm(g.branchOff(26), 26)
	case "bcond":
		w = 0x54000000 | a64Imm(g.branchOff(19), 19)<<5 | r.bits(4)
	case "cb":
		rt := g.reg()
		w = 0x34000000 | r.bits(1)<<31 | r.bits(1)<<24 | a64Imm(g.branchOff(19), 19)<<5 | rt
		if rt != 31 {
			switch r.n(3) {
			case 0:
				s.X[rt] = 0
			case 1:
				s.X[rt] = uint64(r.bits(32)) << 32 // zero as a w register
			}
		}
	case "tb":
		rt, bit := g.reg(), r.bits(6)
		w = 0x36000000 | bit>>5<<31 | r.bits(1)<<24 | (bit&31)<<19 | a64Imm(g.branchOff(14), 14)<<5 | rt
	case "br":
		rn := g.reg()
		w = [...]uint32{0xD61F0000, 0xD63F0000, 0xD65F0000}[r.n(3)] | rn<<5
		if rn != 31 {
			switch r.n(4) {
			case 0:
				s.X[rn] = ARM64CodeWindows[r.n(len(ARM64CodeWindows))] + uint64(r.n(ARM64CodeSize))&^3
			case 1:
				s.X[rn] = ARM64CodeAddr + uint64(r.n(ARM64CodeSize)) // maybe misaligned
			}
			if s.X[rn] == pc {
				s.X[rn] += 4
			}
		}
	case "adr":
		w = 0x10000000 | r.bits(1)<<31 | r.bits(2)<<29 | r.bits(19)<<5 | g.reg()
	case "literal", "literal-fp":
		opc := r.bits(2)
		v := uint32(0)
		if cl == "literal-fp" {
			v, opc = 1, uint32(r.n(3))
		}
		off := int64(r.n(0x8000)-0x2000) * 4
		if r.chance(4) {
			off = int64(int32(r.bits(19)<<13)) >> 11
		}
		w = 0x18000000 | opc<<30 | v<<26 | a64Imm(off, 19)<<5 | g.reg()
	}
	return w
}

// dataWord generates the word of a data-processing class (add, logic,
// moves, bitfields, conditional select and compare, multiply, divide,
// shifts, bit operations), biasing s for it.
func (g *a64Gen) dataWord(cl string, s *emulate.ARM64State) uint32 {
	r := g.r
	var w uint32
	switch cl {
	case "addimm":
		w = 0x11000000 | r.bits(3)<<29 | r.bits(1)<<22 | r.bits(12)<<10 | g.reg()<<5 | g.reg()
	case "addshift":
		sf := r.bits(1)
		w = 0x0B000000 | sf<<31 | r.bits(2)<<29 | uint32(r.n(3))<<22 | g.reg()<<16 | r.bits(5+uint(sf))<<10 | g.reg()<<5 | g.reg()
	case "addext":
		w = 0x0B200000 | r.bits(3)<<29 | g.reg()<<16 | r.bits(3)<<13 | uint32(r.n(5))<<10 | g.reg()<<5 | g.reg()
	case "logimm":
		sf := r.bits(1)
		n := uint32(0)
		if sf == 1 {
			n = r.bits(1)
		}
		w = 0x12000000 | sf<<31 | r.bits(2)<<29 | n<<22 | r.bits(6)<<16 | r.bits(6)<<10 | g.reg()<<5 | g.reg()
	case "logshift":
		sf := r.bits(1)
		w = 0x0A000000 | sf<<31 | r.bits(2)<<29 | r.bits(2)<<22 | r.bits(1)<<21 | g.reg()<<16 | r.bits(5+uint(sf))<<10 | g.reg()<<5 | g.reg()
	case "movwide":
		sf := r.bits(1)
		w = 0x12800000 | sf<<31 | [...]uint32{0, 2, 3}[r.n(3)]<<29 | r.bits(1+uint(sf))<<21 | r.bits(16)<<5 | g.reg()
	case "bitfield":
		sf := r.bits(1)
		w = 0x13000000 | sf<<31 | uint32(r.n(3))<<29 | sf<<22 | r.bits(5+uint(sf))<<16 | r.bits(5+uint(sf))<<10 | g.reg()<<5 | g.reg()
	case "extr":
		sf := r.bits(1)
		w = 0x13800000 | sf<<31 | sf<<22 | g.reg()<<16 | r.bits(5+uint(sf))<<10 | g.reg()<<5 | g.reg()
	case "csel":
		w = 0x1A800000 | r.bits(1)<<31 | r.bits(1)<<30 | g.reg()<<16 | r.bits(4)<<12 | r.bits(1)<<10 | g.reg()<<5 | g.reg()
	case "ccmp":
		w = 0x1A400000 | r.bits(1)<<31 | r.bits(1)<<30 | 1<<29 | g.reg()<<16 | r.bits(4)<<12 | r.bits(1)<<11 | g.reg()<<5 | r.bits(4)
	case "mul":
		ops := [...]uint32{0, 0, 1, 2, 3, 4, 10, 11, 12} // op31<<1 | o0
		op := ops[r.n(len(ops))]
		sf := uint32(1)
		if op < 2 {
			sf = r.bits(1)
		}
		ra := g.reg()
		if op == 4 || op == 12 {
			ra = 31
		}
		w = 0x1B000000 | sf<<31 | (op>>1)<<21 | g.reg()<<16 | (op&1)<<15 | ra<<10 | g.reg()<<5 | g.reg()
		if r.chance(3) {
			rm := w >> 16 & 31
			if rm != 31 {
				s.X[rm] = a64Edges[r.n(len(a64Edges))]
			}
		}
	case "div", "shiftv":
		opc := 2 + r.bits(1)
		if cl == "shiftv" {
			opc = 8 + r.bits(2)
		}
		rm := g.reg()
		w = 0x1AC00000 | r.bits(1)<<31 | rm<<16 | opc<<10 | g.reg()<<5 | g.reg()
		if rm != 31 && cl == "div" {
			switch r.n(4) {
			case 0:
				s.X[rm] = 0
			case 1:
				s.X[rm] = ^uint64(0)
			}
		}
	case "bitop":
		w = 0x5AC00000 | r.bits(1)<<31 | uint32(r.n(6))<<10 | g.reg()<<5 | g.reg()
	}
	return w
}

// ldst generates a one-register load or store and points its base at a
// chosen address.
func (g *a64Gen) ldst(s *emulate.ARM64State, fp bool) uint32 {
	r := g.r
	var size, opc uint32
	var bytes int
	if fp {
		if r.chance(5) {
			size, opc, bytes = 0, 2+r.bits(1), 16
		} else {
			size, opc = r.bits(2), r.bits(1)
			bytes = 1 << size
		}
	} else {
		size, opc = r.bits(2), r.bits(2)
		bytes = 1 << size
	}
	v := uint32(0)
	if fp {
		v = 1
	}
	rn, rt := g.reg(), g.reg()
	if r.chance(4) {
		rn = 31
	}
	addr := g.dataAddr(bytes)
	var w, disp uint32
	var base uint64
	mode := r.n(6)
	switch mode {
	case 0, 1: // unsigned offset
		imm := uint32(r.n(64))
		if r.chance(8) {
			imm = r.bits(12)
		}
		w = 0x39000000 | imm<<10
		base = addr - uint64(imm)*uint64(bytes)
	case 2, 3, 4: // unscaled, post, unprivileged, pre
		imm := int64(r.n(512) - 256)
		disp = uint32(imm) & 0x1FF
		kind := r.bits(2)
		if fp && kind == 2 {
			kind = 0
		}
		w = 0x38000000 | disp<<12 | kind<<10
		if kind == 1 {
			base = addr // post-index: the access is at the base
		} else {
			base = addr - uint64(imm)
		}
	default: // register offset
		rm := g.reg()
		option := [...]uint32{2, 3, 6, 7}[r.n(4)]
		sbit := r.bits(1)
		w = 0x38200800 | rm<<16 | option<<13 | sbit<<12
		idx := uint64(r.n(64))
		if r.chance(4) {
			idx = -idx
		}
		if rm != 31 {
			s.X[rm] = idx
		}
		if rm == 31 {
			idx = 0
		}
		shift := uint(0)
		if sbit == 1 {
			for n := bytes; n > 1; n >>= 1 {
				shift++
			}
		}
		var ext uint64
		switch option {
		case 2:
			ext = uint64(uint32(idx))
		case 6:
			ext = uint64(int64(int32(idx)))
		default:
			ext = idx
		}
		base = addr - ext<<shift
	}
	w |= size<<30 | v<<26 | opc<<22 | rn<<5 | rt
	if rn == 31 {
		s.SP = base
		if !r.chance(16) {
			s.SP &^= 15
		}
	} else {
		s.X[rn] = base
	}
	return w
}

// pair generates ldp, stp, ldnp, stnp or ldpsw and points its base at a
// chosen address.
func (g *a64Gen) pair(s *emulate.ARM64State, fp bool) uint32 {
	r := g.r
	var opc uint32
	var bytes int
	if fp {
		opc = uint32(r.n(3))
		bytes = 4 << opc
	} else {
		opc = [...]uint32{0, 1, 2, 2}[r.n(4)]
		bytes = [...]int{4, 4, 8}[opc]
	}
	v := uint32(0)
	if fp {
		v = 1
	}
	typ, l := r.bits(2), r.bits(1)
	imm := int64(r.n(128) - 64)
	if r.chance(2) {
		imm = int64(r.n(16) - 8)
	}
	rn := g.reg()
	if r.chance(2) {
		rn = 31 // sp, as in prologues
	}
	w := 0x28000000 | opc<<30 | v<<26 | typ<<23 | l<<22 | (uint32(imm)&0x7F)<<15 | g.reg()<<10 | rn<<5 | g.reg()
	addr := g.dataAddr(bytes)
	base := addr - uint64(imm*int64(bytes))
	if typ == 1 { // post-index
		base = addr
	}
	if rn == 31 {
		s.SP = base &^ 15
		if r.chance(16) {
			s.SP = base
		}
	} else {
		s.X[rn] = base
	}
	return w
}
