package x86cpu

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/xol"
)

// XOLX86Classes are the instruction classes of the x86-64 relocation
// campaign: RIP-relative memory operands of every encoding family,
// relative branches of every kind, calls, indirect and far branches,
// pushf/popf, string instructions, plain instructions, and random encodings
// the relocator accepts.
var XOLX86Classes = []string{
	"riprel-load", "riprel-store", "riprel-sse", "riprel-vex", "riprel-evex", "riprel-x87", "riprel-misc",
	"jmp", "jcc", "loop", "call", "call-indirect", "jmp-indirect", "ret", "far", "pushf-popf", "rep", "plain", "random",
}

var xoWeights = map[string]int{
	"riprel-load": 10, "riprel-store": 10, "riprel-sse": 8, "riprel-vex": 8, "riprel-evex": 8, "riprel-x87": 4, "riprel-misc": 6,
	"jmp": 5, "jcc": 8, "loop": 5, "call": 5, "call-indirect": 5, "jmp-indirect": 4, "ret": 3, "far": 3, "pushf-popf": 3,
	"rep": 4, "plain": 4, "random": 12,
}

// XOLX86Case is one case of the relocation campaign: an instruction at its
// original address (Regs.RIP, in the originals' window), the slot its copy
// goes to, the options of the relocation and the registers it starts with.
// The memory is the image made from the seed Image (NewXOLX86Image).
type XOLX86Case struct {
	Class string
	Bytes []byte
	Slot  uint64
	Opts  xol.X86Options
	Regs  xol.X86Regs
	Image uint64
}

// Layout of the windows for a batch: originals at 32-byte strides in the
// first half of their window, slots at 64-byte strides (the originals'
// window: its second half), the last 4 KiB of every window reserved for
// branch targets stored in the data.
const (
	xoOrigStride = 32
	xoOrigCount  = 0x8000 / xoOrigStride
	xoSlotStride = 64
	xoZoneOff    = 0xF000
	// XOLX86BatchCases is the largest batch of cases (three runs each).
	XOLX86BatchCases = xoMaxRuns / 3
)

// Data layout: the read-only page starts with code pointers and far
// pointers; the read-write window holds return frames for lret at
// xoRetFrames and the stack around its middle.
const (
	xoCodePtrs  = XOLX86ROAddr         // 64 quadwords: code addresses (mostly the target zones)
	xoFarPtrs   = XOLX86ROAddr + 0x200 // 16-byte entries: far pointers m16:32, m16:16, m16:64
	xoRetFrames = XOLX86RWAddr + 0x1800
	xoStackMid  = XOLX86RWAddr + 0x1000
)

// xoRand wraps the generator's random source.
type xoRand struct{ *rand.Rand }

func (r xoRand) n(k int) int        { return r.IntN(k) }
func (r xoRand) chance(k int) bool  { return r.IntN(k) == 0 }
func (r xoRand) pick(b []byte) byte { return b[r.IntN(len(b))] }

// or returns v, or a random number below k when v is negative (a form's
// "any" field).
func (r xoRand) or(v, k int) int {
	if v < 0 {
		return r.IntN(k)
	}
	return v
}

// NewXOLX86Image returns the memory image of seed: code windows filled
// with int3, and data with code pointers, far pointers, return frames,
// addresses of the data windows and random and edge values.
func NewXOLX86Image(seed uint64) *XOLX86Image {
	img := &XOLX86Image{VecSeed: seed}
	r := xoRand{rand.New(rand.NewPCG(seed, 0x786f6c696d616765))}
	for w := range img.Code {
		for i := range img.Code[w] {
			img.Code[w][i] = 0xCC
		}
	}
	le := binary.LittleEndian
	for i := 0; i < len(img.RO); i += 8 {
		le.PutUint64(img.RO[i:], xoDataWord(r))
	}
	for i := 0; i < len(img.RW); i += 8 {
		le.PutUint64(img.RW[i:], xoDataWord(r))
	}
	for i := 0; i < 64; i++ {
		le.PutUint64(img.RO[i*8:], xoCodePtr(r))
	}
	// Far pointers: offset then selector; 0x33 is the 64-bit user code
	// segment, the others fault. The 32-bit code segment 0x23 is left out:
	// on the machine the oracle was developed on (a KVM guest), the
	// single-step trap after a far transfer into compatibility mode was
	// never delivered (the child looped in the kernel's debug-exception
	// exit).
	sels := []uint16{0x33, 0x33, 0x33, 0x2b, 0x0, 0x37}
	bad := []uint16{0x2b, 0x0, 0x37, 0x13}
	for i := 0; i < 32; i++ {
		e := img.RO[0x200+16*i:]
		sel := sels[r.n(len(sels))]
		switch i % 3 {
		case 0: // m16:32, never below 64 KiB (see xoLowIP)
			le.PutUint32(e, 0x10000+uint32(r.Uint64()%(1<<32-0x10000)))
			le.PutUint16(e[4:], sel)
		case 1: // m16:16: a 16-bit offset is always below 64 KiB, so only selectors that fault
			le.PutUint16(e, uint16(r.Uint64()))
			le.PutUint16(e[2:], bad[r.n(len(bad))])
		default: // m16:64
			le.PutUint64(e, xoCodePtr(r))
			le.PutUint16(e[8:], sel)
		}
	}
	for i := 0; i < 16; i++ {
		f := img.RW[xoRetFrames-XOLX86RWAddr+16*i:]
		le.PutUint64(f, xoCodePtr(r))
		le.PutUint64(f[8:], uint64(sels[r.n(len(sels))]))
	}
	return img
}

// xoLowIP: no generated branch lands below this address. On the machine
// the oracle was developed on (a KVM guest), a single-step trap after a
// far jump to an instruction pointer below 64 KiB was never delivered: the
// child looped in the kernel's debug-exception exit.
const xoLowIP = 0x10000

// xoCodePtr returns a code address: in a window's target zone mostly,
// sometimes 32-bit, non-canonical or random, never below xoLowIP.
func xoCodePtr(r xoRand) uint64 {
	switch n := r.n(16); {
	case n < 12:
		return XOLX86Windows[r.n(xoCodeCount)] + xoZoneOff + uint64(r.n(0x1000))
	case n < 13:
		return xoLowIP + uint64(r.Uint32())
	case n < 14:
		return 0x0000_8000_0000_0000 + uint64(r.n(0x1000))
	default:
		return r.Uint64() | xoLowIP
	}
}

// xoDataWord returns a quadword for the data windows.
func xoDataWord(r xoRand) uint64 {
	switch n := r.n(12); {
	case n < 5:
		return r.Uint64()
	case n < 7:
		return xoEdge(r)
	case n < 9:
		return xoCodePtr(r)
	case n < 11:
		return XOLX86RWAddr + uint64(r.n(XOLX86RWSize))
	default:
		return uint64(r.n(256))
	}
}

// xoEdge returns an edge value.
func xoEdge(r xoRand) uint64 {
	v := []uint64{0, 1, 2, ^uint64(0), 1 << 63, 1<<63 - 1, 1 << 31, 1<<31 - 1, 0xFFFF_FFFF, 1 << 32, 0x80, 0x7F, 0xFF, 0x8000, 0xFFFF}
	return v[r.n(len(v))]
}

// xoBatchGen lays out and generates the cases of one batch.
type xoBatchGen struct {
	r     xoRand
	dec   decode.X86Decoder
	x86   *X86Gen
	img   uint64
	origN int
	slotN [xoCodeCount]int
	cases []XOLX86Case
	class string
	table []string
}

// newXOLBatchGen returns the generator of a batch made from seed.
func newXOLBatchGen(seed uint64, class string, vendor decode.Vendor) *xoBatchGen {
	g := &xoBatchGen{
		r:     xoRand{rand.New(rand.NewPCG(seed, 0x786f6c67656e))},
		dec:   decode.X86Decoder{Vendor: vendor},
		x86:   NewX86Gen(seed ^ 0x5851),
		img:   seed,
		class: class,
	}
	for _, c := range XOLX86Classes {
		for k := 0; k < xoWeights[c]; k++ {
			g.table = append(g.table, c)
		}
	}
	return g
}

// slotCap is the number of slots of window w.
func slotCap(w int) int {
	if w == 0 {
		return (xoZoneOff - 0x8000) / xoSlotStride
	}
	return xoZoneOff / xoSlotStride
}

// next generates one case, or false when the batch is full.
func (g *xoBatchGen) next() (XOLX86Case, bool) {
	if g.origN >= xoOrigCount || len(g.cases) >= XOLX86BatchCases {
		return XOLX86Case{}, false
	}
	r := g.r
	orig := XOLX86OrigAddr + uint64(g.origN*xoOrigStride+r.n(xoOrigStride-15))
	g.origN++
	w := r.n(xoCodeCount)
	for k := 0; k < xoCodeCount && g.slotN[w] >= slotCap(w); k++ {
		w = (w + 1) % xoCodeCount
	}
	if g.slotN[w] >= slotCap(w) {
		return XOLX86Case{}, false
	}
	base := XOLX86Windows[w] + uint64(g.slotN[w]*xoSlotStride)
	if w == 0 {
		base += 0x8000
	}
	g.slotN[w]++
	slot := base + uint64(r.n(8))
	class := g.class
	if class == "" {
		class = g.table[r.n(len(g.table))]
	}
	c := XOLX86Case{Class: class, Slot: slot, Image: g.img, Opts: xol.X86Options{ForceScratch: r.chance(8)}}
	c.Regs = g.regs(orig)
	for tries := 0; ; tries++ {
		b := g.gen(class, &c, base)
		if b != nil {
			c.Bytes = b
			break
		}
		if tries > 100 {
			// A class that cannot make an instruction here: a nop.
			c.Bytes = []byte{0x90}
			break
		}
	}
	g.cases = append(g.cases, c)
	return c, true
}

// regs returns initial registers: pointers into the read-write window,
// code addresses, small and edge values; rsp in the read-write window.
func (g *xoBatchGen) regs(orig uint64) xol.X86Regs {
	r := g.r
	var s xol.X86Regs
	for i := range s.GPR {
		switch n := r.n(10); {
		case n < 4:
			s.GPR[i] = XOLX86RWAddr + 0x200 + uint64(r.n(XOLX86RWSize-0x400))
		case n < 6:
			s.GPR[i] = r.Uint64()
		case n < 8:
			s.GPR[i] = uint64(r.n(64))
		case n < 9:
			s.GPR[i] = xoEdge(r)
		default:
			s.GPR[i] = xoCodePtr(r)
		}
	}
	s.GPR[decode.RSP] = g.stack()
	s.RIP = orig
	s.RFLAGS = uint64(r.Uint32()) & 0x8d5
	if r.chance(8) {
		s.RFLAGS |= 0x400 // DF
	}
	return s
}

// stack returns a stack pointer: in the middle of the read-write window,
// 8- or 16-aligned mostly, sometimes misaligned or at its lower edge (a
// push faults on the read-only page).
func (g *xoBatchGen) stack() uint64 {
	r := g.r
	sp := xoStackMid + uint64(r.n(0x400)) - 0x200
	switch n := r.n(16); {
	case n < 10:
		sp &^= 15
	case n < 14:
		sp &^= 7
	case n < 15:
		sp = XOLX86RWAddr + uint64(r.n(16))
	}
	return sp
}

// gen makes the instruction of class for case c whose slot stride starts
// at base; nil asks for another try.
func (g *xoBatchGen) gen(class string, c *XOLX86Case, base uint64) []byte {
	switch class {
	case "riprel-load":
		return g.ripLoad(c)
	case "riprel-store":
		return g.ripStore(c)
	case "riprel-sse":
		return g.ripSSE(c)
	case "riprel-vex":
		return g.ripVEX(c)
	case "riprel-evex":
		return g.ripEVEX(c)
	case "riprel-x87":
		return g.ripX87(c)
	case "riprel-misc":
		return g.ripMisc(c)
	case "jmp", "jcc", "loop", "call":
		return g.relBranch(class, c, base)
	case "call-indirect", "jmp-indirect":
		return g.indirect(class, c)
	case "ret":
		return g.ret(c)
	case "far":
		return g.far(c)
	case "pushf-popf":
		return g.pushfPopf(c)
	case "rep":
		return g.rep(c)
	case "plain":
		return g.plain(c)
	case "random":
		return g.random(c, base)
	}
	return nil
}

// xoEnc is an instruction being built: bytes with a RIP-relative disp32
// (placeholder) at dispAt, or none (dispAt < 0).
type xoEnc struct {
	b      []byte
	dispAt int
}

// segPrefixes are prefixes without effect on a RIP-relative operand here
// (the fs and gs bases of the oracle's child are 0).
var segPrefixes = []byte{0x2E, 0x3E, 0x26, 0x36, 0x64, 0x65}

// legacyRIP builds [prefixes] [mand] [REX] esc op ModRM(mod=00, reg, rm=101)
// disp32 imm. reg < 0 means a random reg field; rexW: 0 random, 1 set,
// 2 clear. A random operand-size prefix is added when opsize and no
// mandatory prefix.
func (g *xoBatchGen) legacyRIP(mand byte, esc []byte, op byte, reg, imm, rexW int, opsize, lock bool) xoEnc {
	r := g.r
	var e xoEnc
	for k := r.n(3); k > 0; k-- {
		if r.chance(2) {
			e.b = append(e.b, r.pick(segPrefixes))
		}
	}
	if lock && r.chance(3) {
		e.b = append(e.b, 0xF0)
	}
	o16 := opsize && mand == 0 && r.chance(5)
	if o16 {
		e.b = append(e.b, 0x66)
	}
	if mand != 0 {
		e.b = append(e.b, mand)
	}
	if reg < 0 {
		reg = r.n(16)
	}
	rex := byte(0x40)
	switch rexW {
	case 0:
		if r.chance(3) {
			rex |= 8
		}
	case 1:
		rex |= 8
	}
	if reg >= 8 {
		rex |= 4
	}
	rex |= byte(r.n(4)) & byte(r.n(4)) // X, B: ignored for a RIP-relative operand
	if rex != 0x40 || r.chance(8) {
		e.b = append(e.b, rex)
	}
	e.b = append(e.b, esc...)
	e.b = append(e.b, op, byte(reg&7)<<3|5)
	e.dispAt = len(e.b)
	e.b = append(e.b, 0, 0, 0, 0)
	if imm == 4 && o16 && rex&8 == 0 {
		imm = 2 // iz with a 16-bit operand size
	}
	for k := 0; k < imm; k++ {
		e.b = append(e.b, byte(r.Uint32()))
	}
	return e
}

// finish fills the disp32 so that the operand is at target, for the
// instruction at orig.
func (e xoEnc) finish(orig, target uint64) []byte {
	if e.dispAt >= 0 {
		binary.LittleEndian.PutUint32(e.b[e.dispAt:], uint32(target-(orig+uint64(len(e.b)))))
	}
	return e.b
}

// dataTarget returns where a RIP-relative operand of size bytes points:
// into the read-write window (aligned to align mostly), the read-only page,
// a code window, the edges of the data (partly unmapped), or anywhere in
// reach.
func (g *xoBatchGen) dataTarget(size, align int) uint64 {
	r := g.r
	if align < 1 {
		align = 1
	}
	pick := func(base uint64, span int) uint64 {
		if span < size {
			span = size
		}
		t := base + uint64(r.n(span-size+1))
		if !r.chance(8) {
			t &^= uint64(align - 1)
		}
		return t
	}
	switch n := r.n(32); {
	case n < 18:
		return pick(XOLX86RWAddr, XOLX86RWSize)
	case n < 23:
		return pick(XOLX86ROAddr, XOLX86ROSize)
	case n < 25:
		return pick(XOLX86OrigAddr+xoZoneOff, 0x1000)
	case n < 27:
		return XOLX86RWAddr + XOLX86RWSize - uint64(r.n(size+1)) // crosses into the unmapped page
	case n < 28:
		return XOLX86ROAddr - uint64(r.n(size+8)) // before the read-only page
	case n < 30:
		return pick(XOLX86ROAddr+XOLX86ROSize-uint64(size), 2*size) // read-only to read-write
	default:
		return XOLX86OrigAddr + uint64(int64(int32(r.Uint32()))) // anywhere in reach
	}
}

// ripLoad: loads, ALU, lea, multiply and divide with a RIP-relative source.
func (g *xoBatchGen) ripLoad(c *XOLX86Case) []byte {
	r := g.r
	type form struct {
		mand byte
		esc  []byte
		op   byte
		reg  int // -1: any
		imm  int
	}
	forms := []form{
		{0, nil, 0x8A, -1, 0}, {0, nil, 0x8B, -1, 0}, {0, nil, 0x02, -1, 0}, {0, nil, 0x03, -1, 0},
		{0, nil, 0x0B, -1, 0}, {0, nil, 0x13, -1, 0}, {0, nil, 0x1B, -1, 0}, {0, nil, 0x23, -1, 0},
		{0, nil, 0x2B, -1, 0}, {0, nil, 0x33, -1, 0}, {0, nil, 0x3A, -1, 0}, {0, nil, 0x3B, -1, 0},
		{0, nil, 0x84, -1, 0}, {0, nil, 0x85, -1, 0}, {0, nil, 0x8D, -1, 0}, {0, nil, 0x8D, -1, 0},
		{0, nil, 0x63, -1, 0}, {0, nil, 0x69, -1, 4}, {0, nil, 0x6B, -1, 1},
		{0, []byte{0x0F}, 0xB6, -1, 0}, {0, []byte{0x0F}, 0xB7, -1, 0}, {0, []byte{0x0F}, 0xBE, -1, 0},
		{0, []byte{0x0F}, 0xBF, -1, 0}, {0, []byte{0x0F}, 0xAF, -1, 0}, {0, []byte{0x0F}, 0x44, -1, 0},
		{0, []byte{0x0F}, 0x4F, -1, 0}, {0, []byte{0x0F}, 0xBC, -1, 0}, {0, []byte{0x0F}, 0xA3, -1, 0},
		{0, []byte{0x0F}, 0xBA, 4, 1}, {0xF3, []byte{0x0F}, 0xB8, -1, 0}, {0xF3, []byte{0x0F}, 0xBD, -1, 0},
		{0, []byte{0x0F, 0x38}, 0xF0, -1, 0}, {0xF2, []byte{0x0F, 0x38}, 0xF1, -1, 0},
		{0x66, []byte{0x0F, 0x38}, 0xF6, -1, 0}, {0xF3, []byte{0x0F, 0x38}, 0xF6, -1, 0},
		{0, nil, 0xF6, 0, 1}, {0, nil, 0xF7, 0, 4},
		{0, nil, 0xF6, 4, 0}, {0, nil, 0xF7, 4, 0}, {0, nil, 0xF7, 5, 0}, {0, nil, 0xF7, 6, 0}, {0, nil, 0xF7, 7, 0},
		{0, nil, 0x80, 7, 1}, {0, nil, 0x81, 7, 4}, {0, nil, 0x83, 7, 1}, {0, nil, 0x39, -1, 0},
	}
	f := forms[r.n(len(forms))]
	reg := f.reg
	if reg >= 0 && r.chance(4) {
		reg += 8 // REX.R on an opcode extension is ignored
	}
	e := g.legacyRIP(f.mand, f.esc, f.op, reg, f.imm, 0, f.mand == 0, false)
	return e.finish(c.Regs.RIP, g.dataTarget(8, 8))
}

// ripStore: stores and read-modify-write instructions to a RIP-relative
// destination, some with LOCK.
func (g *xoBatchGen) ripStore(c *XOLX86Case) []byte {
	r := g.r
	type form struct {
		esc  []byte
		op   byte
		reg  int
		imm  int
		lock bool
	}
	forms := []form{
		{nil, 0x88, -1, 0, false}, {nil, 0x89, -1, 0, false}, {nil, 0xC6, 0, 1, false}, {nil, 0xC7, 0, 4, false},
		{nil, 0x00, -1, 0, true}, {nil, 0x01, -1, 0, true}, {nil, 0x09, -1, 0, true}, {nil, 0x11, -1, 0, true},
		{nil, 0x19, -1, 0, true}, {nil, 0x21, -1, 0, true}, {nil, 0x29, -1, 0, true}, {nil, 0x31, -1, 0, true},
		{nil, 0x80, -2, 1, true}, {nil, 0x81, -2, 4, true}, {nil, 0x83, -2, 1, true},
		{nil, 0xFE, 0, 0, true}, {nil, 0xFE, 1, 0, true}, {nil, 0xFF, 0, 0, true}, {nil, 0xFF, 1, 0, true},
		{nil, 0xF6, 2, 0, true}, {nil, 0xF7, 3, 0, true}, {nil, 0xC0, -3, 1, false}, {nil, 0xC1, -3, 1, false},
		{nil, 0xD1, -3, 0, false}, {nil, 0xD3, -3, 0, false}, {nil, 0x86, -1, 0, true}, {nil, 0x87, -1, 0, true},
		{[]byte{0x0F}, 0xB0, -1, 0, true}, {[]byte{0x0F}, 0xB1, -1, 0, true}, {[]byte{0x0F}, 0xC1, -1, 0, true},
		{[]byte{0x0F}, 0x94, 0, 0, false}, {[]byte{0x0F}, 0x9F, 0, 0, false}, {[]byte{0x0F}, 0xAB, -1, 0, true},
		{[]byte{0x0F}, 0xBA, -4, 1, true}, {[]byte{0x0F}, 0xA4, -1, 1, false}, {[]byte{0x0F}, 0xAD, -1, 0, false},
		{[]byte{0x0F, 0x38}, 0xF1, -1, 0, false}, {[]byte{0x0F}, 0xC3, -1, 0, false}, {nil, 0x8C, -5, 0, false},
	}
	f := forms[r.n(len(forms))]
	reg := f.reg
	switch reg {
	case -2: // ALU group: /0-/7 (/7 is cmp, which does not write)
		reg = r.n(8)
	case -3: // shifts and rotates: /0-/7
		reg = r.n(8)
	case -4: // bts, btr, btc
		reg = 5 + r.n(3)
	case -5: // a segment register that exists
		reg = r.n(6)
	}
	lock := f.lock && !(f.esc == nil && f.op >= 0x80 && f.op <= 0x83 && reg == 7) // no lock cmp
	e := g.legacyRIP(0, f.esc, f.op, reg, f.imm, 0, true, lock)
	return e.finish(c.Regs.RIP, g.dataTarget(8, 8))
}

// ripSSE: legacy-encoded SSE, MMX and related forms, loads and stores.
func (g *xoBatchGen) ripSSE(c *XOLX86Case) []byte {
	r := g.r
	type form struct {
		mand  byte
		esc   []byte
		op    byte
		reg   int
		imm   int
		size  int
		align int
	}
	f0 := []byte{0x0F}
	f38 := []byte{0x0F, 0x38}
	f3a := []byte{0x0F, 0x3A}
	forms := []form{
		{0, f0, 0x10, -1, 0, 16, 1}, {0, f0, 0x11, -1, 0, 16, 1}, {0x66, f0, 0x10, -1, 0, 16, 1}, {0xF3, f0, 0x10, -1, 0, 4, 1},
		{0xF2, f0, 0x11, -1, 0, 8, 1}, {0, f0, 0x28, -1, 0, 16, 16}, {0, f0, 0x29, -1, 0, 16, 16},
		{0x66, f0, 0x6F, -1, 0, 16, 16}, {0x66, f0, 0x7F, -1, 0, 16, 16}, {0xF3, f0, 0x6F, -1, 0, 16, 1},
		{0xF3, f0, 0x7F, -1, 0, 16, 1}, {0x66, f0, 0xFE, -1, 0, 16, 16}, {0x66, f0, 0xEF, -1, 0, 16, 16},
		{0x66, f0, 0x70, -1, 1, 16, 16}, {0x66, f3a, 0x0F, -1, 1, 16, 16}, {0x66, f3a, 0x61, -1, 1, 16, 1},
		{0x66, f3a, 0x63, -1, 1, 16, 1}, {0x66, f3a, 0x16, -1, 1, 8, 1}, {0x66, f3a, 0x22, -1, 1, 8, 1},
		{0x66, f3a, 0x14, -1, 1, 1, 1}, {0x66, f0, 0x6E, -1, 0, 8, 1}, {0x66, f0, 0x7E, -1, 0, 8, 1},
		{0xF3, f0, 0x7E, -1, 0, 8, 1}, {0x66, f0, 0xD6, -1, 0, 8, 1}, {0, f0, 0x6F, -1, 0, 8, 1},
		{0, f0, 0x7F, -1, 0, 8, 1}, {0, f0, 0xFE, -1, 0, 8, 1}, {0, f0, 0x2E, -1, 0, 4, 1}, {0x66, f0, 0x2F, -1, 0, 8, 1},
		{0xF2, f0, 0x2C, -1, 0, 8, 1}, {0xF3, f0, 0x2D, -1, 0, 4, 1}, {0xF2, f0, 0x2A, -1, 0, 8, 1},
		{0, f0, 0xAE, 2, 0, 4, 4}, {0, f0, 0xAE, 3, 0, 4, 4}, {0, f0, 0xAE, 0, 0, 512, 16}, {0, f0, 0xAE, 1, 0, 512, 16},
		{0x66, f38, 0x00, -1, 0, 16, 16}, {0x66, f38, 0x17, -1, 0, 16, 16}, {0x66, f3a, 0x44, -1, 1, 16, 16},
		{0x66, f38, 0xDC, -1, 0, 16, 16}, {0, f38, 0xC8, -1, 0, 16, 16}, {0x66, f0, 0xE7, -1, 0, 16, 16},
		{0, f0, 0x2B, -1, 0, 16, 16}, {0x66, f0, 0x58, -1, 0, 16, 16}, {0xF2, f0, 0x59, -1, 0, 8, 1},
		{0x66, f38, 0x2A, -1, 0, 16, 16}, {0x66, f0, 0xC4, -1, 1, 2, 1}, {0x66, f3a, 0x20, -1, 1, 1, 1},
	}
	f := forms[r.n(len(forms))]
	e := g.legacyRIP(f.mand, f.esc, f.op, f.reg, f.imm, 0, false, false)
	return e.finish(c.Regs.RIP, g.dataTarget(f.size, f.align))
}

// vexForm is a VEX-encoded form: pp (0 none, 1 66, 2 F3, 3 F2), map, opcode,
// /n (or -1), immediate, W (-1 any), L (-1 any), whether vvvv is used, and
// the operand's size and alignment.
type vexForm struct {
	pp, mm    byte
	op        byte
	reg       int
	imm       int
	w, l      int
	vvvv      bool
	size, aln int
}

var vexForms = []vexForm{
	{2, 1, 0x6F, -1, 0, -1, -1, false, 32, 1}, {2, 1, 0x7F, -1, 0, -1, -1, false, 32, 1},
	{1, 1, 0x6F, -1, 0, -1, 0, false, 16, 16}, {1, 1, 0x7F, -1, 0, -1, 1, false, 32, 32},
	{0, 1, 0x10, -1, 0, -1, -1, false, 32, 1}, {0, 1, 0x11, -1, 0, -1, -1, false, 32, 1},
	{1, 1, 0xFE, -1, 0, -1, -1, true, 32, 1}, {1, 1, 0xEF, -1, 0, -1, -1, true, 32, 1},
	{1, 1, 0x70, -1, 1, -1, -1, false, 32, 1}, {1, 2, 0x18, -1, 0, 0, -1, false, 4, 1},
	{1, 2, 0x58, -1, 0, 0, -1, false, 4, 1}, {1, 3, 0x38, -1, 1, 0, 1, true, 16, 1},
	{1, 3, 0x39, -1, 1, 0, 1, false, 16, 1}, {1, 2, 0x8C, -1, 0, -1, -1, true, 32, 1},
	{1, 2, 0x8E, -1, 0, -1, -1, true, 32, 1}, {1, 1, 0x6E, -1, 0, -1, 0, false, 8, 1},
	{1, 1, 0x7E, -1, 0, -1, 0, false, 8, 1}, {3, 1, 0x2A, -1, 0, -1, 0, true, 8, 1},
	{3, 1, 0x2C, -1, 0, -1, 0, false, 8, 1}, {1, 3, 0x61, -1, 1, -1, 0, false, 16, 1},
	{1, 2, 0x17, -1, 0, 0, -1, false, 32, 1}, {1, 2, 0xB8, -1, 0, -1, -1, true, 32, 1},
	{1, 2, 0xDC, -1, 0, 0, -1, true, 32, 1}, {1, 3, 0x44, -1, 1, 0, -1, true, 32, 1},
	{0, 1, 0xAE, 2, 0, 0, 0, false, 4, 4}, {0, 1, 0xAE, 3, 0, 0, 0, false, 4, 4},
	// BMI1/BMI2: general-purpose registers in reg, vvvv and rm.
	{0, 2, 0xF2, -1, 0, -1, 0, true, 8, 1}, {0, 2, 0xF7, -1, 0, -1, 0, true, 8, 1},
	{0, 2, 0xF5, -1, 0, -1, 0, true, 8, 1}, {1, 2, 0xF7, -1, 0, -1, 0, true, 8, 1},
	{2, 2, 0xF7, -1, 0, -1, 0, true, 8, 1}, {3, 2, 0xF7, -1, 0, -1, 0, true, 8, 1},
	{3, 2, 0xF5, -1, 0, -1, 0, true, 8, 1}, {2, 2, 0xF5, -1, 0, -1, 0, true, 8, 1},
	{3, 2, 0xF6, -1, 0, -1, 0, true, 8, 1}, {3, 3, 0xF0, -1, 1, -1, 0, false, 8, 1},
	{0, 2, 0xF3, 1, 0, -1, 0, true, 8, 1}, {0, 2, 0xF3, 2, 0, -1, 0, true, 8, 1}, {0, 2, 0xF3, 3, 0, -1, 0, true, 8, 1},
}

// ripVEX: VEX2 and VEX3 forms, with the inverted R, X, B bits random (X
// and B are ignored for a RIP-relative operand and must be reset for a
// scratch base).
func (g *xoBatchGen) ripVEX(c *XOLX86Case) []byte {
	r := g.r
	f := vexForms[r.n(len(vexForms))]
	reg := r.or(f.reg, 16)
	w := r.or(f.w, 2)
	l := r.or(f.l, 2)
	vvvv := 0
	if f.vvvv {
		vvvv = r.n(16)
	}
	var e xoEnc
	for k := r.n(2); k > 0; k-- {
		e.b = append(e.b, r.pick(segPrefixes))
	}
	rbit := byte(reg>>3) ^ 1
	if f.mm == 1 && w == 0 && r.chance(2) {
		e.b = append(e.b, 0xC5, rbit<<7|byte(^vvvv&15)<<3|byte(l)<<2|f.pp)
	} else {
		x, b := byte(r.n(2)), byte(r.n(2))
		e.b = append(e.b, 0xC4, rbit<<7|x<<6|b<<5|f.mm, byte(w)<<7|byte(^vvvv&15)<<3|byte(l)<<2|f.pp)
	}
	e.b = append(e.b, f.op, byte(reg&7)<<3|5)
	e.dispAt = len(e.b)
	e.b = append(e.b, 0, 0, 0, 0)
	for k := 0; k < f.imm; k++ {
		e.b = append(e.b, byte(r.Uint32()))
	}
	return e.finish(c.Regs.RIP, g.dataTarget(f.size, f.aln))
}

// evexForm is an EVEX form: pp, map, opcode, /n, imm, W (-1 any), masking
// allowed, zeroing allowed (loads), broadcast allowed, vvvv used, and the
// operand's size (for the full vector length) and alignment need.
type evexForm struct {
	pp, mm    byte
	op        byte
	reg       int
	imm       int
	w         int
	mask, z   bool
	bcast     bool
	vvvv      bool
	size, aln int
}

var evexForms = []evexForm{
	{2, 1, 0x6F, -1, 0, -1, true, true, false, false, 64, 1}, {2, 1, 0x7F, -1, 0, -1, true, false, false, false, 64, 1},
	{1, 1, 0x6F, -1, 0, -1, true, true, false, false, 64, 64}, {1, 1, 0x7F, -1, 0, -1, true, false, false, false, 64, 64},
	{0, 1, 0x10, -1, 0, 0, true, true, false, false, 64, 1}, {0, 1, 0x11, -1, 0, 0, true, false, false, false, 64, 1},
	{1, 1, 0xFE, -1, 0, 0, true, true, true, true, 64, 1}, {1, 1, 0xD4, -1, 0, 1, true, true, true, true, 64, 1},
	{1, 1, 0xEF, -1, 0, -1, true, true, true, true, 64, 1}, {1, 2, 0x58, -1, 0, 0, true, true, false, false, 4, 1},
	{1, 2, 0x8B, -1, 0, -1, true, false, false, false, 64, 1}, {1, 2, 0x89, -1, 0, -1, true, true, false, false, 64, 1},
	{1, 2, 0x36, -1, 0, 0, true, true, true, true, 64, 1}, {1, 3, 0x25, -1, 1, -1, true, true, true, true, 64, 1},
	{2, 2, 0x31, -1, 0, 0, true, false, false, false, 16, 1}, {1, 3, 0x39, -1, 1, 0, true, false, false, false, 16, 1},
	{3, 1, 0x2A, -1, 0, -1, false, false, false, true, 8, 1}, {1, 1, 0x58, -1, 0, 1, true, true, true, true, 64, 1},
	{2, 5, 0x10, -1, 0, 0, true, true, false, false, 2, 1}, {2, 5, 0x11, -1, 0, 0, true, false, false, false, 2, 1},
	{0, 5, 0x58, -1, 0, 0, true, true, true, true, 64, 1}, {1, 6, 0x2C, -1, 0, 0, true, true, true, true, 64, 1},
	{1, 1, 0x7E, -1, 0, 0, false, false, false, false, 4, 1}, {1, 2, 0x18, -1, 0, 0, true, true, false, false, 4, 1},
}

// ripEVEX: EVEX forms with random register extensions (R, R', V', X, B),
// masks, zeroing, broadcast and vector lengths.
func (g *xoBatchGen) ripEVEX(c *XOLX86Case) []byte {
	r := g.r
	f := evexForms[r.n(len(evexForms))]
	reg := r.or(f.reg, 32)
	w := r.or(f.w, 2)
	vvvv := 0
	if f.vvvv {
		vvvv = r.n(32)
	}
	aaa := 0
	if f.mask && r.chance(2) {
		aaa = 1 + r.n(7)
	}
	z := 0
	if f.z && aaa != 0 && r.chance(3) {
		z = 1
	}
	bc := 0
	if f.bcast && r.chance(4) {
		bc = 1
	}
	ll := r.n(3)
	var e xoEnc
	if r.chance(4) {
		e.b = append(e.b, r.pick(segPrefixes))
	}
	rb := byte(reg>>3&1) ^ 1
	rp := byte(reg>>4&1) ^ 1
	x, b := byte(r.n(2)), byte(r.n(2))
	p0 := rb<<7 | x<<6 | b<<5 | rp<<4 | f.mm
	if r.chance(32) {
		p0 |= 8 // APX's B4: #UD without APX, and no scratch register (see xol.CheckX86)
	}
	p1 := byte(w)<<7 | byte(^vvvv&15)<<3 | 4 | f.pp
	p2 := byte(z)<<7 | byte(ll)<<5 | byte(bc)<<4 | byte(^vvvv>>4&1)<<3 | byte(aaa)
	e.b = append(e.b, 0x62, p0, p1, p2, f.op, byte(reg&7)<<3|5)
	e.dispAt = len(e.b)
	e.b = append(e.b, 0, 0, 0, 0)
	for k := 0; k < f.imm; k++ {
		e.b = append(e.b, byte(r.Uint32()))
	}
	size := f.size
	if size == 64 {
		size = 16 << ll
	}
	return e.finish(c.Regs.RIP, g.dataTarget(size, f.aln))
}

// ripX87: x87 memory forms (loads, stores, control and environment).
func (g *xoBatchGen) ripX87(c *XOLX86Case) []byte {
	r := g.r
	type form struct {
		op   byte
		reg  int
		size int
	}
	forms := []form{
		{0xD8, -1, 4}, {0xD9, 0, 4}, {0xD9, 2, 4}, {0xD9, 3, 4}, {0xD9, 4, 28}, {0xD9, 5, 2}, {0xD9, 6, 28}, {0xD9, 7, 2},
		{0xDA, -1, 4}, {0xDB, 0, 4}, {0xDB, 1, 4}, {0xDB, 2, 4}, {0xDB, 3, 4}, {0xDB, 5, 10}, {0xDB, 7, 10},
		{0xDC, -1, 8}, {0xDD, 0, 8}, {0xDD, 1, 8}, {0xDD, 2, 8}, {0xDD, 3, 8}, {0xDD, 4, 108}, {0xDD, 6, 108}, {0xDD, 7, 2},
		{0xDE, -1, 2}, {0xDF, 0, 2}, {0xDF, 1, 2}, {0xDF, 3, 2}, {0xDF, 4, 10}, {0xDF, 5, 8}, {0xDF, 6, 10}, {0xDF, 7, 8},
	}
	f := forms[r.n(len(forms))]
	reg := r.or(f.reg, 8)
	e := g.legacyRIP(0, nil, f.op, reg, 0, 2, false, false)
	return e.finish(c.Regs.RIP, g.dataTarget(f.size, 8))
}

// ripMisc: push and pop of memory, cmpxchg8b/16b, prefetch, nop, clflush,
// xsave, xrstor, segment register loads and stores, lar, lsl, verr, verw.
// (sgdt, sidt, sldt, str and smsw are refused: see xol.RefuseKernelEmulated.)
func (g *xoBatchGen) ripMisc(c *XOLX86Case) []byte {
	r := g.r
	type form struct {
		mand  byte
		esc   []byte
		op    byte
		reg   int
		rexW  int
		size  int
		align int
	}
	f0 := []byte{0x0F}
	forms := []form{
		{0, nil, 0xFF, 6, 0, 8, 8}, {0, nil, 0xFF, 6, 0, 8, 8}, {0, nil, 0x8F, 0, 0, 8, 8}, {0, nil, 0x8F, 0, 0, 8, 8},
		{0, f0, 0xC7, 1, 2, 8, 8}, {0, f0, 0xC7, 1, 1, 16, 16}, {0, f0, 0x18, -8, 0, 64, 1}, {0, f0, 0x1F, 0, 0, 8, 1},
		{0x66, f0, 0x1F, 0, 0, 8, 1}, {0, f0, 0xAE, 7, 0, 64, 1}, {0x66, f0, 0xAE, 7, 0, 64, 1}, {0x66, f0, 0xAE, 6, 0, 64, 1},
		{0, f0, 0xAE, 4, 0, 1024, 64}, {0, f0, 0xAE, 5, 0, 1024, 64}, {0, f0, 0xC7, 4, 0, 1024, 64},
		{0, f0, 0x00, 4, 0, 2, 1}, {0, f0, 0x00, 5, 0, 2, 1}, {0, f0, 0x02, -1, 0, 2, 1},
		{0, f0, 0x03, -1, 0, 2, 1}, {0, nil, 0x8E, -9, 0, 2, 1}, {0, f0, 0x0D, 1, 0, 64, 1}, {0, f0, 0x1C, 0, 0, 64, 1},
		{0, nil, 0x8D, -1, 0, 1, 1}, {0, f0, 0xBA, 4, 0, 8, 1},
	}
	f := forms[r.n(len(forms))]
	reg := f.reg
	imm := 0
	switch reg {
	case -8: // prefetch hints
		reg = r.n(4)
	case -9: // mov to es, ds, fs, gs
		reg = []int{0, 3, 4, 5}[r.n(4)]
	}
	if f.op == 0xBA {
		imm = 1
	}
	e := g.legacyRIP(f.mand, f.esc, f.op, reg, imm, f.rexW, f.mand == 0 && f.op != 0xC7, false)
	if f.op == 0xAE && (reg == 4 || reg == 5) || f.op == 0xC7 && reg == 4 {
		// xsave, xrstor, xsavec: the requested-feature mask in edx:eax.
		c.Regs.GPR[decode.RAX] = []uint64{0x3, 0x7, 0xE7, ^uint64(0), uint64(r.Uint32())}[r.n(5)]
		c.Regs.GPR[decode.RDX] = uint64(r.n(2))
	}
	return e.finish(c.Regs.RIP, g.dataTarget(f.size, f.align))
}

// branchTarget returns the target of a relative branch of the original at
// orig with a displacement of bits bits ending at end: near, at the edges
// of the displacement, near the reach limits of the slot windows, in
// another window; never inside the case's own slot stride.
func (g *xoBatchGen) branchTarget(end uint64, bits int, base uint64) uint64 {
	r := g.r
	for {
		var t uint64
		if bits == 8 {
			t = end + uint64(int64(int8(r.Uint32())))
		} else {
			switch n := r.n(10); {
			case n < 2:
				t = end + uint64(int64(r.n(512))-256)
			case n < 3:
				t = end
			case n < 5: // the edges of rel32
				d := int64(1<<31 - 1 - r.n(0x20000))
				if r.chance(2) {
					d = -d - 1
				}
				t = end + uint64(d)
			case n < 8: // near a window: reachable from some slots only
				w := XOLX86Windows[r.n(3)]
				t = w + uint64(int64(r.n(0x40000))-0x20000)
				if r.chance(2) {
					t = w + 0x8000_0000 + uint64(int64(r.n(0x40000))-0x20000)
				} else if r.chance(2) {
					t = w - 0x8000_0000 + uint64(int64(r.n(0x40000))-0x20000)
				}
			default:
				t = end + uint64(int64(int32(r.Uint32())))
			}
			if d := int64(t - end); d != int64(int32(d)) {
				continue
			}
		}
		if t >= base && t < base+xoSlotStride {
			continue
		}
		return t
	}
}

// harmless returns prefixes that do not change a relative branch:
// branch hints, bnd, REX.
func (g *xoBatchGen) harmless(b []byte) []byte {
	r := g.r
	for k := r.n(3); k > 0; k-- {
		switch r.n(4) {
		case 0:
			b = append(b, 0x2E)
		case 1:
			b = append(b, 0x3E)
		case 2:
			b = append(b, 0xF2)
		default:
			b = append(b, 0x40|byte(r.n(16)))
		}
	}
	// A REX must come last.
	for i := 0; i+1 < len(b); i++ {
		if b[i]&0xF0 == 0x40 {
			b[i] = 0x3E
		}
	}
	return b
}

// relBranch: jmp, jcc, loop/jrcxz and call with their displacements.
func (g *xoBatchGen) relBranch(class string, c *XOLX86Case, base uint64) []byte {
	r := g.r
	orig := c.Regs.RIP
	var b []byte
	bits := 32
	switch class {
	case "jmp":
		b = g.harmless(nil)
		if r.chance(2) {
			b, bits = append(b, 0xEB), 8
		} else {
			b = append(b, 0xE9)
		}
	case "jcc":
		b = g.harmless(nil)
		cc := byte(r.n(16))
		if r.chance(2) {
			b, bits = append(b, 0x70|cc), 8
		} else {
			b = append(b, 0x0F, 0x80|cc)
		}
		c.Regs.RFLAGS = uint64(r.Uint32()) & 0x8d5
	case "loop":
		if r.chance(3) {
			b = append(b, 0x67)
		}
		if r.chance(4) {
			b = append(b, r.pick([]byte{0x2E, 0x3E, 0xF2, 0xF3, 0x48}))
		}
		b, bits = append(b, 0xE0+byte(r.n(4))), 8
		c.Regs.GPR[decode.RCX] = []uint64{0, 1, 2, 1 << 32, 1<<32 + 1, 0xFFFF_FFFF, ^uint64(0), uint64(r.n(100))}[r.n(8)]
		c.Regs.RFLAGS = uint64(r.Uint32()) & 0x8d5
	case "call":
		if r.chance(3) {
			b = append(b, r.pick([]byte{0xF2, 0x48, 0x3E}))
		}
		b = append(b, 0xE8)
		if r.chance(8) {
			c.Regs.GPR[decode.RSP] = XOLX86RWAddr + uint64(r.n(8)) // the push may fault
		}
	}
	if bits == 8 {
		b = append(b, 0)
	} else {
		b = append(b, 0, 0, 0, 0)
	}
	end := orig + uint64(len(b))
	t := g.branchTarget(end, bits, base)
	if class == "call" && r.chance(10) {
		t = end // call next
	}
	if bits == 8 {
		b[len(b)-1] = byte(t - end)
	} else {
		binary.LittleEndian.PutUint32(b[len(b)-4:], uint32(t-end))
	}
	return b
}

// indirect: call and jmp through a RIP-relative quadword (mostly a code
// pointer), a register or a register-addressed memory operand.
func (g *xoBatchGen) indirect(class string, c *XOLX86Case) []byte {
	r := g.r
	ext := 2
	if class == "jmp-indirect" {
		ext = 4
	}
	switch r.n(4) {
	case 0: // register
		reg := r.n(16)
		var b []byte
		if r.chance(4) {
			b = append(b, 0x3E) // notrack
		}
		if reg >= 8 {
			b = append(b, 0x41)
		}
		c.Regs.GPR[reg] = xoCodePtr(r)
		return append(b, 0xFF, 0xC0|byte(ext)<<3|byte(reg&7))
	case 1: // [reg+disp8]
		reg := r.n(8)
		if reg == decode.RSP || reg == decode.RBP {
			reg = decode.RBX
		}
		c.Regs.GPR[reg] = XOLX86ROAddr + uint64(8*r.n(64)) - 8
		return []byte{0xFF, 0x40 | byte(ext)<<3 | byte(reg), 8}
	}
	var t uint64
	if r.chance(4) {
		t = g.dataTarget(8, 8)
	} else {
		t = xoCodePtrs + uint64(8*r.n(64))
	}
	var pre []byte
	if r.chance(4) {
		pre = []byte{0x3E}
	}
	e := g.legacyRIP(0, pre, 0xFF, ext, 0, 0, false, false)
	return e.finish(c.Regs.RIP, t)
}

// ret: ret, ret imm16, with rep/bnd/REX.W prefixes; the stack holds code
// pointers.
func (g *xoBatchGen) ret(c *XOLX86Case) []byte {
	r := g.r
	var b []byte
	if r.chance(3) {
		b = append(b, r.pick([]byte{0xF3, 0xF2, 0x48}))
	}
	if r.chance(2) {
		c.Regs.GPR[decode.RSP] = xoRetFrames + uint64(16*r.n(16))
	}
	if r.chance(3) {
		return append(b, 0xC2, byte(r.n(64)), byte(r.n(2)))
	}
	return append(b, 0xC3)
}

// far: lcall and ljmp through far pointers, lret.
func (g *xoBatchGen) far(c *XOLX86Case) []byte {
	r := g.r
	switch r.n(5) {
	case 0, 1: // lcall m16:32 or m16:16
		k := 3 * r.n(10)
		opsz := false
		if r.chance(2) {
			k, opsz = k+1, true
		}
		var pre []byte
		if opsz {
			pre = []byte{0x66}
		}
		e := g.legacyRIP(0, nil, 0xFF, 3, 0, 2, false, false)
		e.b = append(pre, e.b...)
		e.dispAt += len(pre)
		return e.finish(c.Regs.RIP, xoFarPtrs+uint64(16*k))
	case 2, 3: // ljmp m16:32, m16:16, m16:64
		k := r.n(32)
		var e xoEnc
		switch k % 3 {
		case 0:
			e = g.legacyRIP(0, nil, 0xFF, 5, 0, 2, false, false)
		case 1:
			e = g.legacyRIP(0x66, nil, 0xFF, 5, 0, 2, false, false)
		default:
			e = g.legacyRIP(0, nil, 0xFF, 5, 0, 1, false, false)
		}
		return e.finish(c.Regs.RIP, xoFarPtrs+uint64(16*k))
	}
	c.Regs.GPR[decode.RSP] = xoRetFrames + uint64(16*r.n(16))
	if r.chance(2) {
		return []byte{0x48, 0xCB}
	}
	return []byte{0x48, 0xCA, byte(r.n(32)), 0}
}

// pushfPopf: pushf and popf in their 16- and 64-bit forms; the quadword
// popf loads has random flags (trap, alignment check, direction...).
func (g *xoBatchGen) pushfPopf(c *XOLX86Case) []byte {
	r := g.r
	var b []byte
	switch r.n(4) {
	case 0:
		b = append(b, 0x66)
	case 1:
		b = append(b, 0x48)
	}
	c.Regs.RFLAGS = uint64(r.Uint32()) & 0xcd5
	if r.chance(2) {
		return append(b, 0x9C)
	}
	return append(b, 0x9D)
}

// rep: string instructions with and without rep prefixes, small counts,
// pointers into the data, either direction.
func (g *xoBatchGen) rep(c *XOLX86Case) []byte {
	r := g.r
	var b []byte
	switch r.n(4) {
	case 0, 1:
		b = append(b, 0xF3)
	case 2:
		b = append(b, 0xF2)
	}
	if r.chance(4) {
		b = append(b, 0x66)
	}
	if r.chance(6) {
		b = append(b, 0x64)
	}
	if r.chance(3) {
		b = append(b, 0x48)
	}
	op := r.pick([]byte{0xA4, 0xA5, 0xAA, 0xAB, 0xA6, 0xA7, 0xAE, 0xAF, 0xAC, 0xAD})
	c.Regs.GPR[decode.RCX] = uint64(r.n(40))
	c.Regs.GPR[decode.RSI] = XOLX86ROAddr + uint64(r.n(XOLX86ROSize+XOLX86RWSize))
	c.Regs.GPR[decode.RDI] = XOLX86RWAddr + 0x100 + uint64(r.n(XOLX86RWSize-0x200))
	if r.chance(2) {
		c.Regs.GPR[decode.RSI] &^= 7
		c.Regs.GPR[decode.RDI] &^= 7
	}
	if r.chance(4) {
		c.Regs.RFLAGS |= 0x400
	} else {
		c.Regs.RFLAGS &^= 0x400
	}
	return append(b, op)
}

// plain: instructions without any address dependence: register and
// register-addressed memory forms.
func (g *xoBatchGen) plain(c *XOLX86Case) []byte {
	r := g.r
	simple := [][]byte{
		{0x90}, {0x48, 0x89, 0xC8 | byte(r.n(8))}, {0x48, 0x01, 0xC0 | byte(r.n(64))}, {0x48, 0x31, 0xC0 | byte(r.n(64))},
		{0x50 | byte(r.n(8))}, {0x41, 0x58 | byte(r.n(8))}, {0x48, 0x0F, 0xC8 | byte(r.n(8))}, {0x48, 0x99},
		{0x0F, 0x1F, 0x44, 0x00, 0x00}, {0xF3, 0x0F, 0x1E, 0xFA}, {0xC9}, {0xC8, byte(r.n(64)), 0, byte(r.n(3))},
		{0x9E}, {0x9F}, {0xF5}, {0xF8}, {0xF9}, {0xFC}, {0xFD}, {0x6A, byte(r.Uint32())}, {0x68, 1, 2, 3, 4},
		{0x48, 0x8B, 0x40 | byte(r.n(8))<<3 | byte([]int{0, 1, 2, 3, 5, 6, 7}[r.n(7)]), byte(r.Uint32())}, {0x48, 0x8D, 0x44, byte(r.n(256)), 8},
		{0x48, 0x0F, 0xAF, 0xC0 | byte(r.n(64))}, {0x0F, 0x94, 0xC0 | byte(r.n(8))}, {0x48, 0x0F, 0x44, 0xC0 | byte(r.n(64))},
		{0x48, 0xD3, 0xE0 | byte(r.n(16))}, {0xD7}, {0x66, 0x0F, 0xFE, 0xC0 | byte(r.n(64))}, {0xC5, 0xFD, 0xFE, 0xC0 | byte(r.n(64))},
		{0x48, 0xF7, 0xF0 | byte(r.n(8))}, {0x48, 0x87, 0xC0 | byte(r.n(64))}, {0x0F, 0xA3, 0xC0 | byte(r.n(64))},
	}
	b := append([]byte(nil), simple[r.n(len(simple))]...)
	if b[0] == 0xD7 { // xlat: [rbx+al]
		c.Regs.GPR[decode.RBX] = XOLX86RWAddr + uint64(r.n(XOLX86RWSize-256))
	}
	return b
}

// random: a structured random encoding that decodes, that CheckX86 accepts
// and that behaves the same on every run (no cpuid, rdtsc, rdrand...; no
// change of the fs or gs base). A RIP-relative operand is pointed at the
// data most of the time.
func (g *xoBatchGen) random(c *XOLX86Case, base uint64) []byte {
	var buf [MaxX86Len]byte
	g.x86.Structured(&buf)
	var inst decode.X86Inst
	if err := g.dec.Decode(buf[:], c.Regs.RIP, &inst); err != nil {
		return nil
	}
	if _, err := xol.CheckX86(&inst); err != nil || xoUnsafe(&inst) {
		return nil
	}
	b := append([]byte(nil), buf[:inst.Len]...)
	if inst.RIPRel && !g.r.chance(4) {
		t := g.dataTarget(16, 1)
		binary.LittleEndian.PutUint32(b[inst.DispOff:], uint32(t-(c.Regs.RIP+uint64(inst.Len))))
	}
	if inst.Branch.Relative() {
		if t := inst.Target; t >= base && t < base+xoSlotStride {
			return nil
		}
	}
	return b
}

// xoUnsafe reports instructions the random class must not generate: their
// results differ between runs (time stamps, random numbers, processor
// numbers), they change state that outlives a run (fs and gs bases), they
// wait (tpause, umwait), or the oracle cannot compare them.
func xoUnsafe(inst *decode.X86Inst) bool {
	op := inst.Opcode
	if inst.Prefixes&(decode.PrefixFS|decode.PrefixGS) != 0 && inst.HasModRM && inst.Mod != 3 {
		return true // the fs/gs base of the child is 0 but may be changed below
	}
	switch inst.Encoding {
	case decode.EncLegacy, decode.EncREX2, decode.Enc3DNow:
	default:
		return false
	}
	switch inst.Map {
	case decode.Map1Byte:
		switch {
		case op == 0x8E: // mov to a segment register (fs, gs: base)
			return true
		case op == 0xC8 && inst.Imm2 != 0: // enter with nesting: slow, no matter
			return false
		}
	case decode.Map0F:
		switch {
		case op == 0xA2, op == 0x31, op == 0x33: // cpuid, rdtsc, rdpmc
			return true
		case op == 0x01 && inst.Mod == 3 && (inst.ModRM == 0xF9 || inst.ModRM == 0xFA || inst.ModRM == 0xFB || inst.ModRM == 0xEE || inst.ModRM == 0xEF):
			return true // rdtscp, monitorx, mwaitx, rdpkru, wrpkru
		case op == 0x01 && inst.Mod != 3 && inst.Reg <= 1: // sgdt, sidt: kernel addresses without UMIP
			return true
		case op == 0xC7 && inst.Mod == 3 && (inst.Reg == 6 || inst.Reg == 7): // rdrand, rdseed, rdpid
			return true
		case op == 0xAE && inst.Mod == 3 && inst.MandPrefix == 0xF3 && inst.Reg <= 3: // rd/wr fs/gs base
			return true
		case op == 0xAE && inst.Mod == 3 && (inst.Reg == 6) && (inst.MandPrefix == 0x66 || inst.MandPrefix == 0xF2): // tpause, umwait
			return true
		case op == 0xAE && inst.Mod != 3 && inst.Reg == 6 && inst.MandPrefix == 0: // xsaveopt: depends on earlier state tracking
			return true
		case op == 0xA1 || op == 0xA9 || op == 0xB2 || op == 0xB4 || op == 0xB5: // pop fs/gs, lfs, lgs, lss
			return true
		case op == 0x00 && inst.Reg <= 1: // sldt, str: no matter, but keep
			return false
		case op == 0xC7 && inst.Mod != 3 && (inst.Reg == 3 || inst.Reg == 5): // xrstors, xsaves: privileged, fine
			return false
		}
	}
	return false
}

// xoClassOK reports whether name is a class of XOLX86Classes or "".
func xoClassOK(name string) bool { return name == "" || slices.Contains(XOLX86Classes, name) }

// errXOLClass is the error for an unknown class.
func errXOLClass(name string) error {
	return fmt.Errorf("unknown relocation class %q", name)
}
