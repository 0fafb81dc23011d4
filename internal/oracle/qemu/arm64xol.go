package qemu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/xol"
)

// ARM64XOLClasses are the instruction classes the relocation campaign
// draws runs from: the PC-relative forms, calls and indirect branches, and
// ordinary instructions that are copied (structured loads, stores and
// arithmetic, and random data-processing and FP/SIMD words).
var ARM64XOLClasses = []string{
	"b", "bl", "bcond", "cb", "tb", "adr", "adrp", "literal", "literal-fp", "prfm",
	"blr", "br", "addimm", "movwide", "logshift", "ldst", "ldst-fp", "pair", "dp",
}

var a64XOLWeights = map[string]int{
	"b": 6, "bl": 5, "bcond": 8, "cb": 6, "tb": 6, "adr": 5, "adrp": 5, "literal": 7, "literal-fp": 4, "prfm": 1,
	"blr": 4, "br": 2, "addimm": 4, "movwide": 2, "logshift": 3, "ldst": 5, "ldst-fp": 2, "pair": 3, "dp": 6,
}

// ARM64XOLCampaign is a differential campaign of the arm64 relocator: a
// generated run of one to four instructions is relocated by
// xol.RelocateARM64 to another address (in the same code window, 2 MiB,
// 256 MiB or 6 GiB away), and the oracle runs the original at its address
// and the block at the new one from the same state; the two final states
// must agree, but for the scratch register the block reports and the PC of
// a fault inside the block, which must map back to the original
// instruction.
type ARM64XOLCampaign struct {
	// Cases is how many runs to generate.
	Cases int
	// Seed determines every run.
	Seed uint64
	// Class, when set, makes the first instruction of every run of that
	// class (see ARM64XOLClasses).
	Class string
	// BatchSize is the number of runs per round trip to the oracle (each
	// run is two oracle cases); 0 means 1024.
	BatchSize int
	// OnMismatch and Progress are as in ARM64EmuCampaign.
	OnMismatch func(*ARM64Mismatch) bool
	Progress   func(done int)
}

// a64XOLItem is one generated run with its relocation.
type a64XOLItem struct {
	class string
	index int
	words []uint32
	opt   xol.ARM64RelocOptions
	rel   *xol.ARM64Relocation
	orig  ARM64Case // the original at its address
}

// xolRun generates a run, its placement and options. first, if set, is
// the class of the first instruction.
func (g *a64Gen) xolRun(first string) ([]uint32, uint64, uint64, xol.ARM64RelocOptions, emulate.ARM64State, string) {
	r := g.r
	n := 1
	switch r.n(8) {
	case 0, 1:
		n = 2
	case 2:
		n = 3
	case 3:
		n = 4
	}
	var table []string
	for _, c := range ARM64XOLClasses {
		for k := 0; k < a64XOLWeights[c]; k++ {
			table = append(table, c)
		}
	}
	from := ARM64CodeAddr + 0x2000 + 4*uint64(r.n((ARM64CodeSize-0x4000)/4))
	s := g.state(from, true)
	words := make([]uint32, n)
	class := first
	for i := range words {
		cl := first
		if i > 0 || cl == "" {
			cl = table[r.n(len(table))]
		}
		if i == 0 {
			class = cl
		}
		words[i] = g.xolWord(cl, &s, from, i, n)
	}
	// The block goes elsewhere in the main window (not over the run) or
	// to another code window.
	var to uint64
	switch r.n(4) {
	case 0:
		to = ARM64CodeAddr + 4*uint64(r.n(0x1800/4))
		if r.chance(2) {
			to = ARM64CodeAddr + ARM64CodeSize - 0x200 - 4*uint64(r.n(0x1000/4))
		}
	default:
		to = ARM64CodeWindows[1+r.n(3)] + 0x100 + 4*uint64(r.n((ARM64CodeSize-0x400)/4))
	}
	opt := xol.ARM64RelocOptions{
		Return:     !r.chance(4),
		NoScratch:  r.chance(6),
		BTIGuarded: r.chance(10),
		Live:       r.chance(2),
	}
	if r.chance(8) {
		// A few instructions before the run, perhaps an open exclusive.
		pre := []uint32{0xD503201F, 0x91000421, 0xC85F7C20, 0xC8027C20, 0x885F7C41}
		opt.Before = make([]byte, 4*(1+r.n(6)))
		for k := 0; k < len(opt.Before); k += 4 {
			binary.LittleEndian.PutUint32(opt.Before[k:], pre[r.n(len(pre))])
		}
	}
	return words, from, to, opt, s, class
}

// xolWord generates instruction i of a run of n at from, of class cl,
// and sets the registers it uses.
func (g *a64Gen) xolWord(cl string, s *emulate.ARM64State, from uint64, i, n int) uint32 {
	r := g.r
	pc := from + 4*uint64(i)
	// branch returns an offset from pc: forward inside the run, to the
	// code just after it, near, in another window, or anywhere in reach;
	// never back into the run (a loop).
	branch := func(bits uint) int64 {
		for {
			var off int64
			switch r.n(6) {
			case 0:
				if i+1 < n {
					off = 4 * int64(1+i+r.n(n-i-1))
					break
				}
				fallthrough
			case 1:
				off = 4 * int64(n-i)
			default:
				off = g.branchOff(bits)
			}
			t := pc + uint64(off)
			if t >= from && t <= pc {
				continue
			}
			return off
		}
	}
	switch cl {
	case "b":
		return 0x14000000 | a64Imm(branch(26), 26)
	case "bl":
		return 0x94000000 | a64Imm(branch(26), 26)
	case "bcond":
		return 0x54000000 | a64Imm(branch(19), 19)<<5 | r.bits(4)
	case "cb":
		rt := g.reg()
		if rt != 31 && r.chance(2) {
			s.X[rt] = 0
		}
		return 0x34000000 | r.bits(1)<<31 | r.bits(1)<<24 | a64Imm(branch(19), 19)<<5 | rt
	case "tb":
		bit := r.bits(6)
		return 0x36000000 | bit>>5<<31 | r.bits(1)<<24 | (bit&31)<<19 | a64Imm(branch(14), 14)<<5 | g.reg()
	case "adr":
		return 0x10000000 | r.bits(2)<<29 | r.bits(19)<<5 | g.reg()
	case "adrp":
		return 0x90000000 | r.bits(2)<<29 | r.bits(19)<<5 | g.reg()
	case "literal", "literal-fp", "prfm":
		opc, v := r.bits(2)%3, uint32(0)
		switch cl {
		case "literal-fp":
			v = 1
		case "prfm":
			opc = 3
		}
		off := int64(r.n(0x8000)-0x2000) * 4
		return 0x18000000 | opc<<30 | v<<26 | a64Imm(off, 19)<<5 | g.reg()
	case "blr", "br":
		rn := g.reg()
		if rn == 31 && r.chance(2) {
			rn = 30
		}
		if rn != 31 {
			for {
				s.X[rn] = ARM64CodeWindows[r.n(len(ARM64CodeWindows))] + 4*uint64(r.n(ARM64CodeSize/4))
				if s.X[rn] < from || s.X[rn] > from+4*uint64(n) {
					break
				}
			}
		}
		if cl == "br" {
			return 0xD61F0000 | rn<<5
		}
		return 0xD63F0000 | rn<<5
	case "ldst", "ldst-fp":
		return g.ldst(s, cl == "ldst-fp")
	case "pair":
		return g.pair(s, false)
	case "dp":
		// A random data-processing (register or immediate) or FP/SIMD
		// word: copied unchanged; it must behave the same at both
		// addresses.
		for {
			w := uint32(r.u64())
			if w&0x5FE00000 == 0x1AC00000 && w>>31 != 0 {
				switch a64Field(w, 15, 10) {
				case 0, 4, 5: // subp, irg (a random tag), gmi: memory tagging
					continue
				}
			}
			switch {
			case w&0x1C000000 == 0x10000000 && w&0x1F000000 != 0x10000000, // data processing (immediate), not adr
				w&0x0E000000 == 0x0A000000, // data processing (register)
				w&0x0E000000 == 0x0E000000: // FP/SIMD data processing
				return w
			}
		}
	}
	c, _ := g.emuCase(cl)
	return c.Code[0].Word
}

// Run runs the campaign on r.
func (c *ARM64XOLCampaign) Run(r ARM64Runner) (*ARM64Report, error) {
	size := c.BatchSize
	if size <= 0 {
		size = 1024
	}
	rep := newARM64Report()
	rep.Forms = map[string]int{}
	start := time.Now()
	defer rep.finish(start)
	g := newA64Gen(c.Seed, "")
	gen := func(idx int, cases []ARM64Case) (a64XOLItem, []ARM64Case, bool) {
		words, from, to, opt, st, class := g.xolRun(c.Class)
		it, skip := a64Relocate(words, from, to, opt, st, class, idx)
		if skip != "" {
			rep.Refused[skip]++
			return it, cases, false
		}
		for _, in := range it.rel.Insts {
			rep.Forms[in.Form.String()]++
		}
		b := it.orig
		b.State.PC = to
		return it, append(cases, it.orig, b), true
	}
	check := func(it *a64XOLItem, i int, out []ARM64Result) (string, a64Verdict, string, *ARM64Mismatch) {
		v, why := checkA64XOL(it, &out[2*i], &out[2*i+1])
		var m *ARM64Mismatch
		if v == a64Mismatch {
			m = &ARM64Mismatch{Kind: "xol", Class: it.class, Case: it.orig, Text: a64RunText(it),
				Want: "original: " + a64ResultText(&out[2*i]), Got: "relocated: " + a64ResultText(&out[2*i+1]), Diff: why, Seed: c.Seed, Index: it.index}
		}
		return it.class, v, why, m
	}
	return rep, a64Batches(r, c.Cases, size, rep, gen, check, c.OnMismatch, c.Progress)
}

// a64Relocate relocates a generated run and builds the oracle case; skip
// is the refusal code when the relocator refused.
func a64Relocate(words []uint32, from, to uint64, opt xol.ARM64RelocOptions, st emulate.ARM64State, class string, idx int) (a64XOLItem, string) {
	code := decode.ARM64Code(words...)
	it := a64XOLItem{class: class, index: idx, words: words, opt: opt}
	rel, err := xol.RelocateARM64(code, from, to, &opt)
	if err != nil {
		var re *xol.RefusalError
		if errors.As(err, &re) {
			return it, string(re.Code)
		}
		return it, "error: " + err.Error()
	}
	it.rel = rel
	blockEnd := to + uint64(len(rel.Code))
	if to < from+4*uint64(len(words)) && blockEnd > from {
		return it, "overlap"
	}
	var patches []ARM64Patch
	for i, w := range words {
		patches = append(patches, ARM64Patch{from + 4*uint64(i), w})
	}
	for k := 0; k < len(rel.Code); k += 4 {
		patches = append(patches, ARM64Patch{to + uint64(k), binary.LittleEndian.Uint32(rel.Code[k:])})
	}
	if len(patches) > 64 {
		return it, "block too long for the oracle"
	}
	it.orig = ARM64Case{State: st, Vec: true, Code: patches}
	return it, ""
}

// checkA64XOL compares the original run (a) with the relocated block (b).
func checkA64XOL(it *a64XOLItem, a, b *ARM64Result) (a64Verdict, string) {
	if a.Signo == sigVTALRM || b.Signo == sigVTALRM {
		return a64Skip, "oracle timed out"
	}
	rel := it.rel
	n := uint64(len(it.words))
	var diffs []string
	// Map the block's PC back to the original addresses.
	bpc := b.State.PC
	var clob decode.RegSet
	// A stop inside the block maps back to the original instruction,
	// unless the original stopped at the same address (a branch whose
	// target happens to lie in the block).
	inBlock := bpc >= rel.To && bpc < rel.To+uint64(len(rel.Code)) && bpc != a.State.PC
	if inBlock {
		orig, ok := rel.OrigPC(bpc)
		if !ok {
			diffs = append(diffs, fmt.Sprintf("stopped at %#x inside the block, in no instruction's code", bpc))
		} else {
			if orig != rel.From+4*n {
				for _, in := range rel.Insts {
					if in.Addr == orig {
						clob = in.Clobbers
					}
				}
			}
			bpc = orig
		}
	}
	if a.Signo != b.Signo || a.Code != b.Code {
		diffs = append(diffs, fmt.Sprintf("signal %d code %d, original %d code %d", b.Signo, b.Code, a.Signo, a.Code))
	}
	switch {
	case a.Addr == b.Addr:
		// The same address: also a store into the block's own code, whose
		// fault address is then the relocated pc.
	case b.Addr == b.State.PC:
		if a.Addr != a.State.PC {
			diffs = append(diffs, fmt.Sprintf("signal at the pc, original's at %#x (pc %#x)", a.Addr, a.State.PC))
		}
	default:
		diffs = append(diffs, fmt.Sprintf("signal address %#x, original's %#x", b.Addr, a.Addr))
	}
	got := b.State
	got.PC = bpc
	skip := decode.RegSet(rel.Scratch) | clob
	diffs = append(diffs, a64StateDiff(&a.State, &got, true, skip, 0)...)
	if d := a64WritesDiff(a.Writes, b); d != "" {
		diffs = append(diffs, d)
	}
	if len(diffs) > 0 {
		return a64Mismatch, strings.Join(diffs, "; ")
	}
	if a.Signo == sigTRAP {
		return a64Completed, ""
	}
	return a64Faulted, ""
}

// a64RunText renders a run and its relocation.
func a64RunText(it *a64XOLItem) string {
	var parts []string
	for i, w := range it.words {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], w)
		addr := it.rel.From + 4*uint64(i)
		inst, err := decode.DecodeARM64(b[:], addr)
		t := fmt.Sprintf(".inst %#08x", w)
		if err == nil {
			t = inst.Text()
		}
		parts = append(parts, fmt.Sprintf("%#x: %s [%s]", addr, t, it.rel.Insts[i].Form))
	}
	var blk []string
	for k := 0; k < len(it.rel.Code); k += 4 {
		blk = append(blk, fmt.Sprintf("%08x", binary.LittleEndian.Uint32(it.rel.Code[k:])))
	}
	return fmt.Sprintf("%s -> %#x {%s} options %+v", strings.Join(parts, "; "), it.rel.To, strings.Join(blk, " "), it.opt)
}
