// Command arm64vec writes the arm64 decoder test vectors:
//
//	go run ./decode/internal/arm64vec > decode/testdata/arm64.txt
//
// Every instruction is written here as assembly source together with what it
// must decode to (class, mnemonic, branch kind, PC-relative offset, registers
// read and written, flags), derived from that source and the Arm
// architecture's definition of the instruction. llvm-mc (LLVM 14 or later)
// assembles the source and supplies the encoding, so the expected values
// never come from the decoder under test. As a guard against a mistyped
// entry, the mnemonic llvm-mc prints back must match the expected one (or
// the alias it is known to print instead).
//
// Branch offsets, adr/adrp and literal offsets are written as immediates,
// which llvm-mc takes as byte offsets from the instruction; the absolute
// target is computed from the decode address (baseAddr unless the entry
// gives another one).
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// baseAddr is the address every vector is decoded at unless it says addr=.
const baseAddr = 0x400000

// mattr enables every extension the vectors use (names as LLVM 14 spells them).
const mattr = "+v8.8a,+lse,+pauth,+bti,+hbc,+mte,+rcpc,+sb,+wfxt,+xs,+ls64,+lor,+spe,+tracev8.4," +
	"+ssbs,+flagm,+altnzcv,+predres,+neon,+fp-armv8,+rand,+sve,+sme,+mops,+tme"

type vec struct {
	asm   string   // one instruction for llvm-mc
	llvm  string   // mnemonic llvm-mc prints when it is not mn's first word; "*" skips the check
	addr  uint64   // decode address; 0 means baseAddr
	class string   // expected class
	mn    string   // expected mnemonic ("" for class other)
	br    string   // expected branch kind
	rel   bool     // PC-relative
	off   int64    // PC-relative offset in bytes
	adrp  bool     // target is computed from the page of the address
	cond  string   // b.cond / bc.cond condition
	r, w  []string // registers read and written, as written in the source
	flags []string // boolean fields that must be set (all others must be clear)
	kv    []string // further key=value expectations
	err   string   // expected error instead of a decode
}

var vecs []vec

func add(v vec) { vecs = append(vecs, v) }

func f(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// xr and wr name general-purpose register n (31 = the zero register).
func xr(n int) string {
	if n == 31 {
		return "xzr"
	}
	return f("x%d", n)
}

func wr(n int) string {
	if n == 31 {
		return "wzr"
	}
	return f("w%d", n)
}

func rr(n int, x bool) string {
	if x {
		return xr(n)
	}
	return wr(n)
}

// xsp names register n where 31 is the stack pointer.
func xsp(n int) string {
	if n == 31 {
		return "sp"
	}
	return f("x%d", n)
}

var condNames = []string{"eq", "ne", "cs", "cc", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al", "nv"}

// llvmCond is how llvm-mc prints a condition.
func llvmCond(c string) string {
	switch c {
	case "cs":
		return "hs"
	case "cc":
		return "lo"
	}
	return c
}

func branches() {
	offs26 := []int64{0, 4, -4, 8, 0x100, -0x100, 0x123450, -0x2468ac, 0x7fffffc, -0x8000000}
	for _, o := range offs26 {
		add(vec{asm: f("b #%d", o), class: "branch", mn: "b", br: "jmp", rel: true, off: o})
		add(vec{asm: f("bl #%d", o), class: "branch", mn: "bl", br: "call", rel: true, off: o, w: []string{"x30"}})
	}
	// Targets that wrap around the ends of the address space.
	add(vec{asm: "b #-134217728", addr: 0x1000, class: "branch", mn: "b", br: "jmp", rel: true, off: -134217728})
	add(vec{asm: "bl #134217724", addr: 0xfffffffffffff000, class: "branch", mn: "bl", br: "call", rel: true, off: 134217724, w: []string{"x30"}})

	offs19 := []int64{8, -8, 0, 0xffffc, -0x100000, 0x1234, -0x4444, 4, 0x7fff0, -0x80000}
	for c, name := range condNames {
		for k := 0; k < 2; k++ {
			o := offs19[(2*c+k)%len(offs19)]
			add(vec{asm: f("b.%s #%d", name, o), llvm: "b." + llvmCond(name), class: "branch", mn: "b." + name, br: "jcc", rel: true, off: o, cond: name})
		}
		o := offs19[(c+3)%len(offs19)]
		add(vec{asm: f("bc.%s #%d", name, o), llvm: "bc." + llvmCond(name), class: "branch", mn: "bc." + name, br: "jcc", rel: true, off: o, cond: name})
	}
	add(vec{asm: "bc.eq #-1048576", class: "branch", mn: "bc.eq", br: "jcc", rel: true, off: -1048576, cond: "eq"})
	add(vec{asm: "bc.ne #1048572", class: "branch", mn: "bc.ne", br: "jcc", rel: true, off: 1048572, cond: "ne"})

	type regw struct {
		n int
		x bool
	}
	cbRegs := []regw{{0, false}, {7, true}, {30, true}, {31, false}, {31, true}, {15, false}}
	k := 0
	for _, op := range []string{"cbz", "cbnz"} {
		for _, r := range cbRegs {
			o := offs19[k%len(offs19)]
			k++
			width := "32"
			if r.x {
				width = "64"
			}
			add(vec{asm: f("%s %s, #%d", op, rr(r.n, r.x), o), class: "branch", mn: op, br: "cbz", rel: true, off: o,
				r: []string{rr(r.n, r.x)}, kv: []string{"rt=" + xr(r.n), "width=" + width}})
		}
	}
	offs14 := []int64{8, -8, 0x7ffc, -0x8000, 0x100, -0x1000, 0}
	type tb struct{ n, bit int }
	k = 0
	for _, op := range []string{"tbz", "tbnz"} {
		for _, t := range []tb{{0, 0}, {5, 31}, {6, 32}, {30, 63}, {31, 7}, {31, 40}, {17, 1}} {
			o := offs14[k%len(offs14)]
			k++
			x := t.bit >= 32
			width := "32"
			if x {
				width = "64"
			}
			add(vec{asm: f("%s %s, #%d, #%d", op, rr(t.n, x), t.bit, o), class: "branch", mn: op, br: "tbz", rel: true, off: o,
				r: []string{rr(t.n, x)}, kv: []string{"rt=" + xr(t.n), f("bit=%d", t.bit), "width=" + width}})
		}
	}
	add(vec{asm: "tbnz w1, #3, #-32768", class: "branch", mn: "tbnz", br: "tbz", rel: true, off: -32768, r: []string{"w1"}, kv: []string{"bit=3"}})
	add(vec{asm: "tbz x2, #60, #32764", class: "branch", mn: "tbz", br: "tbz", rel: true, off: 32764, r: []string{"x2"}, kv: []string{"bit=60"}})

	// Register branches. Register 31 is xzr here.
	for _, n := range []int{0, 1, 16, 17, 29, 30, 31} {
		add(vec{asm: "br " + xr(n), class: "branch", mn: "br", br: "jmp-indirect", r: []string{xr(n)}, kv: []string{"rn=" + xr(n)}})
		add(vec{asm: "blr " + xr(n), class: "branch", mn: "blr", br: "call-indirect", r: []string{xr(n)}, w: []string{"x30"}, kv: []string{"rn=" + xr(n)}})
		add(vec{asm: "ret " + xr(n), class: "branch", mn: "ret", br: "ret", r: []string{xr(n)}, kv: []string{"rn=" + xr(n)}})
	}
	add(vec{asm: "ret", class: "branch", mn: "ret", br: "ret", r: []string{"x30"}, kv: []string{"rn=x30"}})
	// PAC branches: the modifier register is Xm|SP.
	type pr struct{ n, m int }
	for _, p := range []pr{{0, 1}, {16, 31}, {30, 17}, {31, 0}, {5, 30}} {
		for _, op := range []string{"braa", "brab"} {
			add(vec{asm: f("%s %s, %s", op, xr(p.n), xsp(p.m)), class: "branch", mn: op, br: "jmp-indirect",
				r: []string{xr(p.n), xsp(p.m)}, flags: []string{"pac"}, kv: []string{"rn=" + xr(p.n), "rm=" + xsp(p.m)}})
		}
		for _, op := range []string{"blraa", "blrab"} {
			add(vec{asm: f("%s %s, %s", op, xr(p.n), xsp(p.m)), class: "branch", mn: op, br: "call-indirect",
				r: []string{xr(p.n), xsp(p.m)}, w: []string{"x30"}, flags: []string{"pac"}, kv: []string{"rn=" + xr(p.n), "rm=" + xsp(p.m)}})
		}
	}
	for _, n := range []int{0, 30, 31} {
		for _, op := range []string{"braaz", "brabz"} {
			add(vec{asm: f("%s %s", op, xr(n)), class: "branch", mn: op, br: "jmp-indirect", r: []string{xr(n)}, flags: []string{"pac"}, kv: []string{"rn=" + xr(n)}})
		}
		for _, op := range []string{"blraaz", "blrabz"} {
			add(vec{asm: f("%s %s", op, xr(n)), class: "branch", mn: op, br: "call-indirect", r: []string{xr(n)}, w: []string{"x30"}, flags: []string{"pac"}, kv: []string{"rn=" + xr(n)}})
		}
	}
	add(vec{asm: "retaa", class: "branch", mn: "retaa", br: "ret", r: []string{"x30", "sp"}, flags: []string{"pac"}})
	add(vec{asm: "retab", class: "branch", mn: "retab", br: "ret", r: []string{"x30", "sp"}, flags: []string{"pac"}})
	add(vec{asm: "eret", class: "branch", mn: "eret", br: "iret"})
	add(vec{asm: "eretaa", class: "branch", mn: "eretaa", br: "iret", r: []string{"sp"}, flags: []string{"pac"}})
	add(vec{asm: "eretab", class: "branch", mn: "eretab", br: "iret", r: []string{"sp"}, flags: []string{"pac"}})
}

func adrs() {
	k := 0
	regs := []int{0, 17, 30, 31}
	for _, o := range []int64{0, 1, -1, 0xfffff, -0x100000, 12345, -54321, 4} {
		n := regs[k%len(regs)]
		k++
		add(vec{asm: f("adr %s, #%d", xr(n), o), class: "adr", mn: "adr", br: "none", rel: true, off: o, w: []string{xr(n)}, kv: []string{"rd=" + xr(n)}})
	}
	for _, o := range []int64{0, 4096, -4096, 0xfffff000, -0x100000000, 0x12345000, -0x7654000} {
		n := regs[k%len(regs)]
		k++
		add(vec{asm: f("adrp %s, #%d", xr(n), o), class: "adr", mn: "adrp", br: "none", rel: true, adrp: true, off: o, w: []string{xr(n)}, kv: []string{"rd=" + xr(n)}})
	}
	// Addresses that are not page aligned.
	for _, a := range []uint64{0x400ffc, 0x12345678, 0x7ffff7a3bd04} {
		add(vec{asm: "adrp x1, #8192", addr: a, class: "adr", mn: "adrp", br: "none", rel: true, adrp: true, off: 8192, w: []string{"x1"}})
		add(vec{asm: "adrp x2, #-4096", addr: a, class: "adr", mn: "adrp", br: "none", rel: true, adrp: true, off: -4096, w: []string{"x2"}})
		add(vec{asm: "adr x3, #-3", addr: a, class: "adr", mn: "adr", br: "none", rel: true, off: -3, w: []string{"x3"}})
	}
}

func literals() {
	offs := []int64{0, 4, -4, 0xffffc, -0x100000, 0x2468, -0x1358}
	regs := []int{0, 30, 31, 9}
	k := 0
	for _, o := range offs {
		n := regs[k%len(regs)]
		k++
		add(vec{asm: f("ldr %s, #%d", wr(n), o), class: "literal", mn: "ldr", br: "none", rel: true, off: o, w: []string{wr(n)},
			flags: []string{"ld"}, kv: []string{"rt=" + xr(n), "width=32", "size=4"}})
		add(vec{asm: f("ldr %s, #%d", xr(n), o), class: "literal", mn: "ldr", br: "none", rel: true, off: o, w: []string{xr(n)},
			flags: []string{"ld"}, kv: []string{"rt=" + xr(n), "width=64", "size=8"}})
	}
	for _, o := range []int64{8, -0x100000, 0xffffc} {
		n := regs[k%len(regs)]
		k++
		add(vec{asm: f("ldrsw %s, #%d", xr(n), o), class: "literal", mn: "ldrsw", br: "none", rel: true, off: o, w: []string{xr(n)},
			flags: []string{"ld"}, kv: []string{"rt=" + xr(n), "width=64", "size=4"}})
	}
	type pf struct {
		op  string
		imm int
		o   int64
	}
	for _, p := range []pf{{"pldl1keep", 0, 8}, {"pstl3strm", 21, -0x100000}, {"plil2keep", 10, 0xffffc}, {"pldl3strm", 5, -16}, {"#31", 31, 0}, {"#24", 24, 4}} {
		add(vec{asm: f("prfm %s, #%d", p.op, p.o), class: "literal", mn: "prfm", br: "none", rel: true, off: p.o, kv: []string{f("imm=%d", p.imm)}})
	}
	// FP/SIMD literal loads (the V bit set).
	for i, sz := range []struct {
		p    string
		size int
	}{{"s", 4}, {"d", 8}, {"q", 16}} {
		for j, o := range []int64{-4, 0xffffc, -0x100000, 16} {
			n := []int{0, 31, 7, 15}[(i+j)%4]
			add(vec{asm: f("ldr %s%d, #%d", sz.p, n, o), class: "literal", mn: "ldr", br: "none", rel: true, off: o,
				flags: []string{"ld", "vec"}, kv: []string{f("size=%d", sz.size), f("rt=v%d", n)}})
		}
	}
}

func exclusives() {
	type sz struct {
		suf  string
		x    bool
		size int
	}
	sizes := []sz{{"b", false, 1}, {"h", false, 2}, {"", false, 4}, {"", true, 8}}
	type tn struct{ s, t, n int }
	combos := []tn{{2, 0, 1}, {5, 31, 31}, {31, 30, 2}, {17, 16, 31}}
	k := 0
	for _, s := range sizes {
		width := "32"
		if s.x {
			width = "64"
		}
		for _, acq := range []bool{false, true} {
			c := combos[k%len(combos)]
			k++
			mn, fl := "ldxr"+s.suf, []string{"ld"}
			if acq {
				mn, fl = "ldaxr"+s.suf, []string{"ld", "acq"}
			}
			add(vec{asm: f("%s %s, [%s]", mn, rr(c.t, s.x), xsp(c.n)), class: "exclusive", mn: mn, br: "none",
				r: []string{xsp(c.n)}, w: []string{rr(c.t, s.x)}, flags: fl,
				kv: []string{"excl=load", "rt=" + xr(c.t), "rn=" + xsp(c.n), f("size=%d", s.size), "width=" + width}})
			c = combos[k%len(combos)]
			k++
			mn, fl = "stxr"+s.suf, []string{"st"}
			if acq {
				mn, fl = "stlxr"+s.suf, []string{"st", "rel"}
			}
			add(vec{asm: f("%s %s, %s, [%s]", mn, wr(c.s), rr(c.t, s.x), xsp(c.n)), class: "exclusive", mn: mn, br: "none",
				r: []string{rr(c.t, s.x), xsp(c.n)}, w: []string{wr(c.s)}, flags: fl,
				kv: []string{"excl=store", "rs=" + xr(c.s), "rt=" + xr(c.t), "rn=" + xsp(c.n), f("size=%d", s.size), "width=" + width}})
		}
	}
	for _, x := range []bool{false, true} {
		width, size := "32", "4"
		if x {
			width, size = "64", "8"
		}
		for _, acq := range []bool{false, true} {
			mn, fl := "ldxp", []string{"ld", "pair"}
			if acq {
				mn, fl = "ldaxp", []string{"ld", "pair", "acq"}
			}
			add(vec{asm: f("%s %s, %s, [%s]", mn, rr(0, x), rr(1, x), xsp(31)), class: "exclusive", mn: mn, br: "none",
				r: []string{"sp"}, w: []string{rr(0, x), rr(1, x)}, flags: fl,
				kv: []string{"excl=load", "rt=x0", "rt2=x1", "size=" + size, "width=" + width}})
			add(vec{asm: f("%s %s, %s, [%s]", mn, rr(29, x), rr(30, x), xsp(2)), class: "exclusive", mn: mn, br: "none",
				r: []string{"x2"}, w: []string{rr(29, x), rr(30, x)}, flags: fl,
				kv: []string{"excl=load", "rt=x29", "rt2=x30", "size=" + size, "width=" + width}})
			mn, fl = "stxp", []string{"st", "pair"}
			if acq {
				mn, fl = "stlxp", []string{"st", "pair", "rel"}
			}
			add(vec{asm: f("%s w5, %s, %s, [x2]", mn, rr(31, x), rr(1, x)), class: "exclusive", mn: mn, br: "none",
				r: []string{rr(1, x), "x2"}, w: []string{"w5"}, flags: fl,
				kv: []string{"excl=store", "rs=x5", "rt=xzr", "rt2=x1", "size=" + size, "width=" + width}})
			add(vec{asm: f("%s w16, %s, %s, [sp]", mn, rr(3, x), rr(4, x)), class: "exclusive", mn: mn, br: "none",
				r: []string{rr(3, x), rr(4, x), "sp"}, w: []string{"w16"}, flags: fl,
				kv: []string{"excl=store", "rs=x16", "rt=x3", "rt2=x4", "size=" + size, "width=" + width}})
		}
	}
	// Load-acquire / store-release (ordered, not exclusive).
	for _, s := range sizes {
		width := "32"
		if s.x {
			width = "64"
		}
		for _, op := range []string{"ldar", "ldlar", "ldapr"} {
			add(vec{asm: f("%s %s, [%s]", op+s.suf, rr(3, s.x), "x4"), class: "ldst", mn: op + s.suf, br: "none",
				r: []string{"x4"}, w: []string{rr(3, s.x)}, flags: []string{"ld", "acq"},
				kv: []string{"rt=x3", "rn=x4", f("size=%d", s.size), "width=" + width}})
		}
		for _, op := range []string{"stlr", "stllr"} {
			add(vec{asm: f("%s %s, [%s]", op+s.suf, rr(31, s.x), "sp"), class: "ldst", mn: op + s.suf, br: "none",
				r: []string{"sp"}, flags: []string{"st", "rel"},
				kv: []string{"rt=xzr", "rn=sp", f("size=%d", s.size), "width=" + width}})
		}
	}
}

func atomics() {
	type sz struct {
		suf  string
		x    bool
		size int
	}
	sizes := []sz{{"b", false, 1}, {"h", false, 2}, {"", false, 4}, {"", true, 8}}
	ops := []string{"add", "clr", "eor", "set", "smax", "smin", "umax", "umin"}
	rsList := []int{0, 3, 16, 30, 31, 9}
	rtList := []int{1, 4, 17, 29, 12}
	rnList := []int{2, 31, 18, 5, 31, 20, 8}
	k := 0
	next := func() (int, int, int) {
		s, t, n := rsList[k%len(rsList)], rtList[k%len(rtList)], rnList[k%len(rnList)]
		k++
		return s, t, n
	}
	for _, op := range ops {
		for _, ar := range []string{"", "a", "l", "al"} {
			for _, s := range sizes {
				rs, rt, rn := next()
				mn := "ld" + op + ar + s.suf
				add(atomicVec(mn, ar, s.x, s.size, rs, rt, rn))
			}
		}
		// st<op> aliases: ld<op> without acquire and with the zero register as destination.
		for _, ar := range []string{"", "l"} {
			for _, s := range sizes {
				rs, _, rn := next()
				mn := "st" + op + ar + s.suf
				width := "32"
				if s.x {
					width = "64"
				}
				fl := []string{"lse", "ld", "st"}
				if ar == "l" {
					fl = append(fl, "rel")
				}
				add(vec{asm: f("%s %s, [%s]", mn, rr(rs, s.x), xsp(rn)), class: "atomic", mn: mn, br: "none",
					r: []string{rr(rs, s.x), xsp(rn)}, flags: fl,
					kv: []string{"rs=" + xr(rs), "rt=xzr", "rn=" + xsp(rn), f("size=%d", s.size), "width=" + width}})
			}
		}
	}
	// With acquire the zero-register form keeps its ld<op>a name.
	add(atomicVec("ldadda", "a", false, 4, 0, 31, 1))
	add(atomicVec("ldsetal", "al", true, 8, 2, 31, 31))
	for _, ar := range []string{"", "a", "l", "al"} {
		for _, s := range sizes {
			rs, rt, rn := next()
			add(atomicVec("swp"+ar+s.suf, ar, s.x, s.size, rs, rt, rn))
		}
	}
	add(atomicVec("swp", "", true, 8, 0, 31, 1))
	for _, ar := range []string{"", "a", "l", "al"} {
		for _, s := range sizes {
			rs, rt, rn := next()
			mn := "cas" + ar + s.suf
			width := "32"
			if s.x {
				width = "64"
			}
			fl := append([]string{"lse", "ld", "st"}, arFlags(ar)...)
			add(vec{asm: f("%s %s, %s, [%s]", mn, rr(rs, s.x), rr(rt, s.x), xsp(rn)), class: "atomic", mn: mn, br: "none",
				r: []string{rr(rs, s.x), rr(rt, s.x), xsp(rn)}, w: []string{rr(rs, s.x)}, flags: fl,
				kv: []string{"rs=" + xr(rs), "rt=" + xr(rt), "rn=" + xsp(rn), f("size=%d", s.size), "width=" + width}})
		}
	}
	type cp struct{ s, t, n int }
	cps := []cp{{0, 2, 4}, {30, 0, 2}, {2, 30, 31}, {16, 18, 31}}
	k = 0
	for _, ar := range []string{"", "a", "l", "al"} {
		for _, x := range []bool{false, true} {
			c := cps[k%len(cps)]
			k++
			mn := "casp" + ar
			width, size := "32", "4"
			if x {
				width, size = "64", "8"
			}
			fl := append([]string{"lse", "ld", "st", "pair"}, arFlags(ar)...)
			s1, t1 := rr(c.s+1, x), rr(c.t+1, x)
			add(vec{asm: f("%s %s, %s, %s, %s, [%s]", mn, rr(c.s, x), s1, rr(c.t, x), t1, xsp(c.n)), class: "atomic", mn: mn, br: "none",
				r: []string{rr(c.s, x), s1, rr(c.t, x), t1, xsp(c.n)}, w: []string{rr(c.s, x), s1}, flags: fl,
				kv: []string{"rs=" + xr(c.s), "rt=" + xr(c.t), "rt2=" + xr(c.t+1), "rn=" + xsp(c.n), "size=" + size, "width=" + width}})
		}
	}
}

func arFlags(ar string) []string {
	var fl []string
	if strings.Contains(ar, "a") {
		fl = append(fl, "acq")
	}
	if strings.Contains(ar, "l") {
		fl = append(fl, "rel")
	}
	return fl
}

// atomicVec is an ld<op>/swp entry: Rs is the source, Rt receives the old value.
func atomicVec(mn, ar string, x bool, size, rs, rt, rn int) vec {
	width := "32"
	if x {
		width = "64"
	}
	return vec{asm: f("%s %s, %s, [%s]", mn, rr(rs, x), rr(rt, x), xsp(rn)), class: "atomic", mn: mn, br: "none",
		r: []string{rr(rs, x), xsp(rn)}, w: []string{rr(rt, x)}, flags: append([]string{"lse", "ld", "st"}, arFlags(ar)...),
		kv: []string{"rs=" + xr(rs), "rt=" + xr(rt), "rn=" + xsp(rn), f("size=%d", size), "width=" + width}}
}

func hints() {
	type h struct {
		asm, mn, llvm string
		imm           int
		r, w          []string
		pac           bool
	}
	lr := []string{"x30"}
	lrsp := []string{"x30", "sp"}
	hs := []h{
		{"nop", "nop", "", 0, nil, nil, false},
		{"yield", "yield", "", 1, nil, nil, false},
		{"wfe", "wfe", "", 2, nil, nil, false},
		{"wfi", "wfi", "", 3, nil, nil, false},
		{"sev", "sev", "", 4, nil, nil, false},
		{"sevl", "sevl", "", 5, nil, nil, false},
		{"dgh", "dgh", "", 6, nil, nil, false},
		{"xpaclri", "xpaclri", "", 7, lr, lr, true},
		{"pacia1716", "pacia1716", "", 8, []string{"x16", "x17"}, []string{"x17"}, true},
		{"pacib1716", "pacib1716", "", 10, []string{"x16", "x17"}, []string{"x17"}, true},
		{"autia1716", "autia1716", "", 12, []string{"x16", "x17"}, []string{"x17"}, true},
		{"autib1716", "autib1716", "", 14, []string{"x16", "x17"}, []string{"x17"}, true},
		{"esb", "esb", "", 16, nil, nil, false},
		{"psb csync", "psb csync", "", 17, nil, nil, false},
		{"tsb csync", "tsb csync", "", 18, nil, nil, false},
		// gcsb dsync, clrbhb and chkfeat x16 are newer than LLVM 14: written as hint #n.
		{"hint #19", "gcsb dsync", "hint", 19, nil, nil, false},
		{"csdb", "csdb", "", 20, nil, nil, false},
		{"hint #22", "clrbhb", "hint", 22, nil, nil, false},
		{"paciaz", "paciaz", "", 24, lr, lr, true},
		{"paciasp", "paciasp", "", 25, lrsp, lr, true},
		{"pacibz", "pacibz", "", 26, lr, lr, true},
		{"pacibsp", "pacibsp", "", 27, lrsp, lr, true},
		{"autiaz", "autiaz", "", 28, lr, lr, true},
		{"autiasp", "autiasp", "", 29, lrsp, lr, true},
		{"autibz", "autibz", "", 30, lr, lr, true},
		{"autibsp", "autibsp", "", 31, lrsp, lr, true},
		{"bti", "bti", "", 32, nil, nil, false},
		{"bti c", "bti c", "", 34, nil, nil, false},
		{"bti j", "bti j", "", 36, nil, nil, false},
		{"bti jc", "bti jc", "", 38, nil, nil, false},
		{"hint #40", "chkfeat", "hint", 40, []string{"x16"}, []string{"x16"}, false},
		// The same instructions written by number.
		// (llvm-mc prints these back as written, hint #n, or by name.)
		{"hint #0", "nop", "*", 0, nil, nil, false},
		{"hint #25", "paciasp", "*", 25, lrsp, lr, true},
		{"hint #34", "bti c", "*", 34, nil, nil, false},
		{"hint #7", "xpaclri", "*", 7, lr, lr, true},
	}
	for _, x := range hs {
		var fl []string
		if x.pac {
			fl = []string{"pac"}
		}
		add(vec{asm: x.asm, llvm: x.llvm, class: "hint", mn: x.mn, br: "none", r: x.r, w: x.w, flags: fl, kv: []string{f("imm=%d", x.imm)}})
	}
	for _, n := range []int{9, 11, 13, 15, 21, 23, 33, 35, 37, 39, 41, 63, 64, 100, 127} {
		add(vec{asm: f("hint #%d", n), class: "hint", mn: "hint", br: "none", kv: []string{f("imm=%d", n)}})
	}
}

func barriers() {
	opts := []string{"", "oshld", "oshst", "osh", "", "nshld", "nshst", "nsh", "", "ishld", "ishst", "ish", "", "ld", "st", "sy"}
	for crm, o := range opts {
		switch {
		case crm == 0:
			add(vec{asm: "ssbb", class: "barrier", mn: "ssbb", br: "none", kv: []string{"imm=0"}})
		case crm == 4:
			add(vec{asm: "pssbb", class: "barrier", mn: "pssbb", br: "none", kv: []string{"imm=4"}})
		case o == "":
			add(vec{asm: f("dsb #%d", crm), class: "barrier", mn: "dsb", br: "none", kv: []string{f("imm=%d", crm)}})
		default:
			add(vec{asm: "dsb " + o, class: "barrier", mn: "dsb", br: "none", kv: []string{f("imm=%d", crm)}})
		}
		a := "dmb " + o
		if o == "" {
			a = f("dmb #%d", crm)
		}
		add(vec{asm: a, class: "barrier", mn: "dmb", br: "none", kv: []string{f("imm=%d", crm)}})
	}
	for _, n := range []int{0, 3, 14} {
		add(vec{asm: f("isb #%d", n), class: "barrier", mn: "isb", br: "none", kv: []string{f("imm=%d", n)}})
	}
	add(vec{asm: "isb", class: "barrier", mn: "isb", br: "none", kv: []string{"imm=15"}})
	add(vec{asm: "sb", class: "barrier", mn: "sb", br: "none"})
	add(vec{asm: "clrex", class: "barrier", mn: "clrex", br: "none", kv: []string{"imm=15"}})
	add(vec{asm: "clrex #0", class: "barrier", mn: "clrex", br: "none", kv: []string{"imm=0"}})
	add(vec{asm: "clrex #5", class: "barrier", mn: "clrex", br: "none", kv: []string{"imm=5"}})
	for i, o := range []string{"oshnxs", "nshnxs", "ishnxs", "synxs"} {
		add(vec{asm: "dsb " + o, class: "barrier", mn: "dsb", br: "none", kv: []string{f("imm=%d", i<<2|2)}})
	}
}

// sysregs lists system registers with their encodings (op0, op1, CRn, CRm,
// op2 from the Arm architecture) and whether user code may write them.
var sysregs = []struct {
	name                    string
	op0, op1, crn, crm, op2 int
	writable                bool
}{
	{"nzcv", 3, 3, 4, 2, 0, true},
	{"daif", 3, 3, 4, 2, 1, true},
	{"dit", 3, 3, 4, 2, 5, true},
	{"ssbs", 3, 3, 4, 2, 6, true},
	{"tco", 3, 3, 4, 2, 7, true},
	{"fpcr", 3, 3, 4, 4, 0, true},
	{"fpsr", 3, 3, 4, 4, 1, true},
	{"dspsr_el0", 3, 3, 4, 5, 0, true},
	{"dlr_el0", 3, 3, 4, 5, 1, true},
	{"tpidr_el0", 3, 3, 13, 0, 2, true},
	{"tpidrro_el0", 3, 3, 13, 0, 3, true},
	{"ctr_el0", 3, 3, 0, 0, 1, false},
	{"dczid_el0", 3, 3, 0, 0, 7, false},
	{"cntfrq_el0", 3, 3, 14, 0, 0, true},
	{"cntpct_el0", 3, 3, 14, 0, 1, false},
	{"cntvct_el0", 3, 3, 14, 0, 2, false},
	{"cntp_tval_el0", 3, 3, 14, 2, 0, true},
	{"cntp_ctl_el0", 3, 3, 14, 2, 1, true},
	{"cntp_cval_el0", 3, 3, 14, 2, 2, true},
	{"cntv_tval_el0", 3, 3, 14, 3, 0, true},
	{"cntv_ctl_el0", 3, 3, 14, 3, 1, true},
	{"cntv_cval_el0", 3, 3, 14, 3, 2, true},
	{"pmcr_el0", 3, 3, 9, 12, 0, true},
	{"pmccntr_el0", 3, 3, 9, 13, 0, true},
	{"pmuserenr_el0", 3, 3, 9, 14, 0, true},
	{"rndr", 3, 3, 2, 4, 0, false},
	{"rndrrs", 3, 3, 2, 4, 1, false},
	{"midr_el1", 3, 0, 0, 0, 0, false},
	{"mpidr_el1", 3, 0, 0, 0, 5, false},
	{"revidr_el1", 3, 0, 0, 0, 6, false},
	{"id_aa64pfr0_el1", 3, 0, 0, 4, 0, false},
	{"id_aa64pfr1_el1", 3, 0, 0, 4, 1, false},
	{"id_aa64dfr0_el1", 3, 0, 0, 5, 0, false},
	{"id_aa64isar0_el1", 3, 0, 0, 6, 0, false},
	{"id_aa64isar1_el1", 3, 0, 0, 6, 1, false},
	{"id_aa64mmfr0_el1", 3, 0, 0, 7, 0, false},
	{"id_aa64mmfr1_el1", 3, 0, 0, 7, 1, false},
	{"id_aa64mmfr2_el1", 3, 0, 0, 7, 2, false},
	{"sctlr_el1", 3, 0, 1, 0, 0, true},
	{"cpacr_el1", 3, 0, 1, 0, 2, true},
	{"ttbr0_el1", 3, 0, 2, 0, 0, true},
	{"ttbr1_el1", 3, 0, 2, 0, 1, true},
	{"tcr_el1", 3, 0, 2, 0, 2, true},
	{"spsr_el1", 3, 0, 4, 0, 0, true},
	{"elr_el1", 3, 0, 4, 0, 1, true},
	{"sp_el0", 3, 0, 4, 1, 0, true},
	{"spsel", 3, 0, 4, 2, 0, true},
	{"currentel", 3, 0, 4, 2, 2, false},
	{"pan", 3, 0, 4, 2, 3, true},
	{"uao", 3, 0, 4, 2, 4, true},
	{"esr_el1", 3, 0, 5, 2, 0, true},
	{"far_el1", 3, 0, 6, 0, 0, true},
	{"mair_el1", 3, 0, 10, 2, 0, true},
	{"vbar_el1", 3, 0, 12, 0, 0, true},
	{"contextidr_el1", 3, 0, 13, 0, 1, true},
	{"tpidr_el1", 3, 0, 13, 0, 4, true},
	{"ccsidr_el1", 3, 1, 0, 0, 0, false},
	{"clidr_el1", 3, 1, 0, 0, 1, false},
	{"csselr_el1", 3, 2, 0, 0, 0, true},
	{"hcr_el2", 3, 4, 1, 1, 0, true},
	{"mdscr_el1", 2, 0, 0, 2, 2, true},
	// Registers without a name in the decoder's table print by number.
	{"s3_3_c15_c2_0", 3, 3, 15, 2, 0, true},
	{"s3_0_c15_c0_0", 3, 0, 15, 0, 0, true},
	{"s2_3_c0_c4_0", 2, 3, 0, 4, 0, true},
}

func system() {
	k := 0
	for _, s := range sysregs {
		n := []int{0, 5, 30, 31}[k%4]
		k++
		kv := []string{"sysreg=" + s.name, "rt=" + xr(n)}
		var fl []string
		if s.name == "daif" {
			fl = []string{"daif"}
		}
		add(vec{asm: f("mrs %s, %s", xr(n), s.name), llvm: "mrs", class: "system", mn: "mrs", br: "none", w: []string{xr(n)}, flags: fl, kv: kv})
		if s.writable {
			n = []int{1, 31, 17}[k%3]
			kv = []string{"sysreg=" + s.name, "rt=" + xr(n)}
			add(vec{asm: f("msr %s, %s", s.name, xr(n)), llvm: "msr", class: "system", mn: "msr", br: "none", r: []string{xr(n)}, flags: fl, kv: kv})
		}
	}
	// msr (immediate): PSTATE fields.
	type ps struct {
		name string
		imm  int
		daif bool
	}
	for _, p := range []ps{{"daifset", 2, true}, {"daifset", 15, true}, {"daifset", 0, true}, {"daifclr", 2, true}, {"daifclr", 7, true},
		{"spsel", 1, false}, {"spsel", 0, false}, {"pan", 1, false}, {"uao", 0, false}, {"dit", 1, false}, {"ssbs", 1, false}, {"tco", 0, false}, {"tco", 1, false}} {
		var fl []string
		if p.daif {
			fl = []string{"daif"}
		}
		add(vec{asm: f("msr %s, #%d", p.name, p.imm), class: "system", mn: "msr", br: "none", flags: fl, kv: []string{"pstate=" + p.name, f("imm=%d", p.imm)}})
	}
	for _, m := range []string{"cfinv", "xaflag", "axflag"} {
		add(vec{asm: m, class: "system", mn: m, br: "none"})
	}
	// SME mode switches: msr svcr<sm|za|smza>, #imm (CRm = field<<1 | imm).
	for _, m := range []struct {
		asm, mn string
		crm     int
	}{{"smstart", "smstart", 7}, {"smstop", "smstop", 6}, {"smstart sm", "smstart", 3}, {"smstop sm", "smstop", 2}, {"smstart za", "smstart", 5}, {"smstop za", "smstop", 4}} {
		add(vec{asm: m.asm, class: "system", mn: m.mn, br: "none", kv: []string{f("imm=%d", m.crm)}})
	}
	// PSTATE fields without a name: op1=1 op2=1 and op1=3 op2=5.
	add(vec{asm: "msr s0_1_c4_c0_1, xzr", class: "system", mn: "msr", br: "none", kv: []string{"imm=0"}})
	add(vec{asm: "msr s0_3_c4_c9_5, xzr", class: "system", mn: "msr", br: "none", kv: []string{"imm=9"}})
	// sys/sysl and their aliases (op1, CRn, CRm, op2 of each alias from the architecture).
	type sy struct {
		asm, llvm string
		sysreg    string
		rt        int
	}
	for _, s := range []sy{
		{"dc civac, x0", "dc", "s1_3_c7_c14_1", 0},
		{"dc zva, x1", "dc", "s1_3_c7_c4_1", 1},
		{"dc cvau, x2", "dc", "s1_3_c7_c11_1", 2},
		{"dc cvac, x30", "dc", "s1_3_c7_c10_1", 30},
		{"dc ivac, x9", "dc", "s1_0_c7_c6_1", 9},
		{"ic ivau, x3", "ic", "s1_3_c7_c5_1", 3},
		{"ic iallu", "ic", "s1_0_c7_c5_0", 31},
		{"ic ialluis", "ic", "s1_0_c7_c1_0", 31},
		{"tlbi vmalle1", "tlbi", "s1_0_c8_c7_0", 31},
		{"tlbi vae1, x4", "tlbi", "s1_0_c8_c7_1", 4},
		{"at s1e0r, x5", "at", "s1_0_c7_c8_2", 5},
		{"sys #3, c7, c5, #1, x6", "ic", "s1_3_c7_c5_1", 6},
		{"sys #7, c15, c15, #7, x7", "sys", "s1_7_c15_c15_7", 7},
		{"sys #0, c0, c0, #0", "sys", "s1_0_c0_c0_0", 31},
	} {
		var r []string
		if s.rt != 31 {
			r = []string{xr(s.rt)}
		}
		add(vec{asm: s.asm, llvm: s.llvm, class: "system", mn: "sys", br: "none", r: r, kv: []string{"sysreg=" + s.sysreg, "rt=" + xr(s.rt)}})
	}
	add(vec{asm: "sysl x0, #1, c2, c3, #4", class: "system", mn: "sysl", br: "none", w: []string{"x0"}, kv: []string{"sysreg=s1_1_c2_c3_4", "rt=x0"}})
	add(vec{asm: "sysl xzr, #7, c15, c0, #0", class: "system", mn: "sysl", br: "none", kv: []string{"sysreg=s1_7_c15_c0_0", "rt=xzr"}})
	for _, n := range []int{0, 3, 31} {
		add(vec{asm: "wfet " + xr(n), class: "system", mn: "wfet", br: "none", r: []string{xr(n)}, kv: []string{"rt=" + xr(n)}})
		add(vec{asm: "wfit " + xr(n), class: "system", mn: "wfit", br: "none", r: []string{xr(n)}, kv: []string{"rt=" + xr(n)}})
	}
}

func exceptions() {
	type ex struct {
		asm, mn, br string
		imm         int
	}
	for _, e := range []ex{
		{"svc #0", "svc", "syscall", 0}, {"svc #0xffff", "svc", "syscall", 0xffff}, {"svc #0x80", "svc", "syscall", 0x80},
		{"hvc #0", "hvc", "syscall", 0}, {"hvc #1", "hvc", "syscall", 1},
		{"smc #0", "smc", "syscall", 0}, {"smc #0xffff", "smc", "syscall", 0xffff},
		{"brk #0", "brk", "int", 0}, {"brk #1", "brk", "int", 1}, {"brk #0x3e8", "brk", "int", 0x3e8},
		{"brk #5", "brk", "int", 5}, {"brk #0xf000", "brk", "int", 0xf000}, {"brk #0xffff", "brk", "int", 0xffff},
		{"hlt #0", "hlt", "int", 0}, {"hlt #0xf000", "hlt", "int", 0xf000},
		{"dcps1", "dcps1", "none", 0}, {"dcps2", "dcps2", "none", 0}, {"dcps3", "dcps3", "none", 0}, {"dcps1 #5", "dcps1", "none", 5},
	} {
		add(vec{asm: e.asm, class: "exception", mn: e.mn, br: e.br, kv: []string{f("imm=%d", e.imm)}})
	}
}

// ls describes a load/store from its source operands: data registers as
// written, the base (xN or sp), an optional index register, writeback and
// the byte displacement. kind is "ld", "st" or "prf".
func ls(asm, mn, kind string, data []string, base, index string, wb bool, disp int64, size int, extra ...string) vec {
	v := vec{asm: asm, class: "ldst", mn: mn, br: "none"}
	v.r = append(v.r, base)
	if index != "" {
		v.r = append(v.r, index)
		v.kv = append(v.kv, "rm="+x64(index))
	}
	if wb {
		v.w = append(v.w, base)
		v.flags = append(v.flags, "wb")
	}
	vecReg := false
	for _, d := range data {
		if d[0] != 'x' && d[0] != 'w' {
			vecReg = true
		}
	}
	switch kind {
	case "ld":
		v.flags = append(v.flags, "ld")
		if !vecReg {
			v.w = append(v.w, data...)
		}
	case "st":
		v.flags = append(v.flags, "st")
		if !vecReg {
			v.r = append(v.r, data...)
		}
	}
	if vecReg {
		v.flags = append(v.flags, "vec")
	}
	if len(data) == 2 {
		v.flags = append(v.flags, "pair")
	}
	for i, r := range data {
		name := x64(r)
		if vecReg {
			name = "v" + r[1:]
		}
		v.kv = append(v.kv, []string{"rt=", "rt2="}[i]+name)
	}
	v.kv = append(v.kv, "rn="+base, f("disp=%d", disp), f("size=%d", size))
	for _, e := range extra {
		if e == "pac" {
			v.flags = append(v.flags, e)
		} else {
			v.kv = append(v.kv, e)
		}
	}
	return v
}

// x64 gives the 64-bit name of a general-purpose register.
func x64(r string) string {
	switch r {
	case "wzr":
		return "xzr"
	case "wsp":
		return "sp"
	}
	if r[0] == 'w' {
		return "x" + r[1:]
	}
	return r
}

func loadStores() {
	d := func(r ...string) []string { return r }
	// Unsigned offset.
	add(ls("ldr x0, [x1]", "ldr", "ld", d("x0"), "x1", "", false, 0, 8, "width=64"))
	add(ls("ldr x0, [x1, #8]", "ldr", "ld", d("x0"), "x1", "", false, 8, 8, "width=64"))
	add(ls("ldr x0, [sp, #32760]", "ldr", "ld", d("x0"), "sp", "", false, 32760, 8))
	add(ls("ldr w2, [x3, #16380]", "ldr", "ld", d("w2"), "x3", "", false, 16380, 4, "width=32"))
	add(ls("ldr xzr, [x0, #16]", "ldr", "ld", d("xzr"), "x0", "", false, 16, 8))
	add(ls("ldrb w0, [x1, #4095]", "ldrb", "ld", d("w0"), "x1", "", false, 4095, 1, "width=32"))
	add(ls("ldrh w0, [x1, #8190]", "ldrh", "ld", d("w0"), "x1", "", false, 8190, 2, "width=32"))
	add(ls("ldrsb x0, [x1, #1]", "ldrsb", "ld", d("x0"), "x1", "", false, 1, 1, "width=64"))
	add(ls("ldrsb w0, [x1]", "ldrsb", "ld", d("w0"), "x1", "", false, 0, 1, "width=32"))
	add(ls("ldrsh x2, [sp, #4094]", "ldrsh", "ld", d("x2"), "sp", "", false, 4094, 2, "width=64"))
	add(ls("ldrsh w2, [x3, #2]", "ldrsh", "ld", d("w2"), "x3", "", false, 2, 2, "width=32"))
	add(ls("ldrsw x4, [x5, #16380]", "ldrsw", "ld", d("x4"), "x5", "", false, 16380, 4, "width=64"))
	add(ls("str x0, [sp, #8]", "str", "st", d("x0"), "sp", "", false, 8, 8, "width=64"))
	add(ls("str wzr, [x1, #4]", "str", "st", d("wzr"), "x1", "", false, 4, 4, "width=32"))
	add(ls("str xzr, [sp]", "str", "st", d("xzr"), "sp", "", false, 0, 8))
	add(ls("strb w0, [sp]", "strb", "st", d("w0"), "sp", "", false, 0, 1))
	add(ls("strh w1, [x2, #2]", "strh", "st", d("w1"), "x2", "", false, 2, 2))
	add(ls("str x30, [x29, #24]", "str", "st", d("x30"), "x29", "", false, 24, 8))
	add(ls("prfm pldl1keep, [x1, #32760]", "prfm", "prf", nil, "x1", "", false, 32760, 0, "imm=0"))
	add(ls("prfm pstl2strm, [sp]", "prfm", "prf", nil, "sp", "", false, 0, 0, "imm=19"))
	add(ls("ldr b0, [x1, #4095]", "ldr", "ld", d("b0"), "x1", "", false, 4095, 1))
	add(ls("ldr h1, [x2, #2]", "ldr", "ld", d("h1"), "x2", "", false, 2, 2))
	add(ls("ldr s2, [x3, #4]", "ldr", "ld", d("s2"), "x3", "", false, 4, 4))
	add(ls("ldr d3, [x4, #32760]", "ldr", "ld", d("d3"), "x4", "", false, 32760, 8))
	add(ls("ldr q4, [sp, #65520]", "ldr", "ld", d("q4"), "sp", "", false, 65520, 16))
	add(ls("str q0, [x1, #16]", "str", "st", d("q0"), "x1", "", false, 16, 16))
	add(ls("str d31, [sp, #8]", "str", "st", d("d31"), "sp", "", false, 8, 8))
	add(ls("str b5, [x6]", "str", "st", d("b5"), "x6", "", false, 0, 1))
	// Pre- and post-index.
	add(ls("ldr x0, [x1, #8]!", "ldr", "ld", d("x0"), "x1", "", true, 8, 8))
	add(ls("ldr x0, [x1], #-256", "ldr", "ld", d("x0"), "x1", "", true, -256, 8))
	add(ls("str x30, [sp, #-16]!", "str", "st", d("x30"), "sp", "", true, -16, 8))
	add(ls("str w0, [x1], #255", "str", "st", d("w0"), "x1", "", true, 255, 4))
	add(ls("ldrb w0, [x1, #1]!", "ldrb", "ld", d("w0"), "x1", "", true, 1, 1))
	add(ls("ldrsw x0, [x1], #4", "ldrsw", "ld", d("x0"), "x1", "", true, 4, 4))
	add(ls("strh w2, [sp, #-2]!", "strh", "st", d("w2"), "sp", "", true, -2, 2))
	add(ls("ldrsb w0, [x1], #-1", "ldrsb", "ld", d("w0"), "x1", "", true, -1, 1))
	add(ls("ldrsh x3, [x4, #-256]!", "ldrsh", "ld", d("x3"), "x4", "", true, -256, 2))
	add(ls("ldr q0, [x1, #16]!", "ldr", "ld", d("q0"), "x1", "", true, 16, 16))
	add(ls("str d0, [sp], #-8", "str", "st", d("d0"), "sp", "", true, -8, 8))
	add(ls("ldr s7, [x8], #4", "ldr", "ld", d("s7"), "x8", "", true, 4, 4))
	// Unscaled.
	add(ls("ldur x0, [x1, #-8]", "ldur", "ld", d("x0"), "x1", "", false, -8, 8))
	add(ls("ldur w0, [sp, #255]", "ldur", "ld", d("w0"), "sp", "", false, 255, 4))
	add(ls("stur x0, [x29, #-16]", "stur", "st", d("x0"), "x29", "", false, -16, 8))
	add(ls("ldurb w0, [x1, #-256]", "ldurb", "ld", d("w0"), "x1", "", false, -256, 1))
	add(ls("ldursw x0, [x1, #1]", "ldursw", "ld", d("x0"), "x1", "", false, 1, 4))
	add(ls("ldursh w0, [x1, #3]", "ldursh", "ld", d("w0"), "x1", "", false, 3, 2))
	add(ls("ldursb x5, [x6, #7]", "ldursb", "ld", d("x5"), "x6", "", false, 7, 1))
	add(ls("sturh w0, [x1, #-1]", "sturh", "st", d("w0"), "x1", "", false, -1, 2))
	add(ls("sturb wzr, [sp, #-3]", "sturb", "st", d("wzr"), "sp", "", false, -3, 1))
	add(ls("ldur q0, [x1, #-256]", "ldur", "ld", d("q0"), "x1", "", false, -256, 16))
	add(ls("stur s0, [sp, #4]", "stur", "st", d("s0"), "sp", "", false, 4, 4))
	add(ls("prfum pldl2keep, [x3, #-1]", "prfum", "prf", nil, "x3", "", false, -1, 0, "imm=2"))
	// Unprivileged.
	add(ls("ldtr x0, [x1]", "ldtr", "ld", d("x0"), "x1", "", false, 0, 8))
	add(ls("ldtr w0, [x1, #255]", "ldtr", "ld", d("w0"), "x1", "", false, 255, 4))
	add(ls("sttr x0, [sp, #-256]", "sttr", "st", d("x0"), "sp", "", false, -256, 8))
	add(ls("ldtrb w0, [x1]", "ldtrb", "ld", d("w0"), "x1", "", false, 0, 1))
	add(ls("ldtrsw x0, [x1, #255]", "ldtrsw", "ld", d("x0"), "x1", "", false, 255, 4))
	add(ls("ldtrsh x0, [x1]", "ldtrsh", "ld", d("x0"), "x1", "", false, 0, 2))
	add(ls("ldtrsb w0, [x1, #-1]", "ldtrsb", "ld", d("w0"), "x1", "", false, -1, 1))
	add(ls("sttrh w0, [x1]", "sttrh", "st", d("w0"), "x1", "", false, 0, 2))
	add(ls("sttrb w0, [x1, #8]", "sttrb", "st", d("w0"), "x1", "", false, 8, 1))
	// Register offset.
	add(ls("ldr x0, [x1, x2]", "ldr", "ld", d("x0"), "x1", "x2", false, 0, 8))
	add(ls("ldr x0, [x1, x2, lsl #3]", "ldr", "ld", d("x0"), "x1", "x2", false, 0, 8))
	add(ls("ldr w0, [x1, w2, uxtw]", "ldr", "ld", d("w0"), "x1", "w2", false, 0, 4))
	add(ls("ldr w0, [x1, w2, sxtw #2]", "ldr", "ld", d("w0"), "x1", "w2", false, 0, 4))
	add(ls("ldr x0, [sp, x2, sxtx #3]", "ldr", "ld", d("x0"), "sp", "x2", false, 0, 8))
	add(ls("str x0, [x1, xzr]", "str", "st", d("x0"), "x1", "xzr", false, 0, 8))
	add(ls("ldrb w0, [x1, x2]", "ldrb", "ld", d("w0"), "x1", "x2", false, 0, 1))
	add(ls("ldrb w0, [x1, x2, lsl #0]", "ldrb", "ld", d("w0"), "x1", "x2", false, 0, 1))
	add(ls("ldrsh x0, [x1, w2, sxtw #1]", "ldrsh", "ld", d("x0"), "x1", "w2", false, 0, 2))
	add(ls("strh w0, [x1, x2, lsl #1]", "strh", "st", d("w0"), "x1", "x2", false, 0, 2))
	add(ls("ldrsw x0, [x1, x2, lsl #2]", "ldrsw", "ld", d("x0"), "x1", "x2", false, 0, 4))
	add(ls("prfm pldl1keep, [x1, x2, lsl #3]", "prfm", "prf", nil, "x1", "x2", false, 0, 0))
	add(ls("prfm pldl1keep, [x1, w2, uxtw]", "prfm", "prf", nil, "x1", "w2", false, 0, 0))
	add(ls("ldr q1, [x2, x3, lsl #4]", "ldr", "ld", d("q1"), "x2", "x3", false, 0, 16))
	add(ls("ldr b1, [x2, x3]", "ldr", "ld", d("b1"), "x2", "x3", false, 0, 1))
	add(ls("ldr h1, [x2, x3, sxtx #1]", "ldr", "ld", d("h1"), "x2", "x3", false, 0, 2))
	add(ls("str d0, [sp, w3, sxtw #3]", "str", "st", d("d0"), "sp", "w3", false, 0, 8))
	// Pairs.
	add(ls("stp x29, x30, [sp, #-16]!", "stp", "st", d("x29", "x30"), "sp", "", true, -16, 8))
	add(ls("ldp x29, x30, [sp], #16", "ldp", "ld", d("x29", "x30"), "sp", "", true, 16, 8))
	add(ls("stp x0, x1, [sp, #16]", "stp", "st", d("x0", "x1"), "sp", "", false, 16, 8))
	add(ls("ldp w0, w1, [x2, #-256]", "ldp", "ld", d("w0", "w1"), "x2", "", false, -256, 4))
	add(ls("ldp x0, x1, [x2, #504]", "ldp", "ld", d("x0", "x1"), "x2", "", false, 504, 8))
	add(ls("stp x0, x1, [sp, #-512]!", "stp", "st", d("x0", "x1"), "sp", "", true, -512, 8))
	add(ls("stp w3, wzr, [x4], #252", "stp", "st", d("w3", "wzr"), "x4", "", true, 252, 4))
	add(ls("ldpsw x0, x1, [x2, #-256]!", "ldpsw", "ld", d("x0", "x1"), "x2", "", true, -256, 4))
	add(ls("ldpsw x0, x1, [x2]", "ldpsw", "ld", d("x0", "x1"), "x2", "", false, 0, 4))
	add(ls("ldpsw x3, x4, [sp], #8", "ldpsw", "ld", d("x3", "x4"), "sp", "", true, 8, 4))
	add(ls("stp q0, q1, [sp, #-1024]!", "stp", "st", d("q0", "q1"), "sp", "", true, -1024, 16))
	add(ls("ldp d0, d1, [x0], #16", "ldp", "ld", d("d0", "d1"), "x0", "", true, 16, 8))
	add(ls("ldp s0, s1, [x0, #4]", "ldp", "ld", d("s0", "s1"), "x0", "", false, 4, 4))
	add(ls("ldnp w0, w1, [x2, #252]", "ldnp", "ld", d("w0", "w1"), "x2", "", false, 252, 4))
	add(ls("stnp d0, d1, [x2, #-512]", "stnp", "st", d("d0", "d1"), "x2", "", false, -512, 8))
	add(ls("ldnp x0, x1, [sp]", "ldnp", "ld", d("x0", "x1"), "sp", "", false, 0, 8))
	add(ls("stnp q0, q1, [x1, #1008]", "stnp", "st", d("q0", "q1"), "x1", "", false, 1008, 16))
	add(ls("stp xzr, xzr, [sp, #16]", "stp", "st", d("xzr", "xzr"), "sp", "", false, 16, 8))
	add(ls("stgp x0, x1, [sp, #16]", "stgp", "st", d("x0", "x1"), "sp", "", false, 16, 8))
	add(ls("stgp x2, x3, [x4], #-16", "stgp", "st", d("x2", "x3"), "x4", "", true, -16, 8))
	add(ls("stgp x2, x3, [x4, #32]!", "stgp", "st", d("x2", "x3"), "x4", "", true, 32, 8))
	// Pointer-authenticated loads.
	add(ls("ldraa x0, [x1]", "ldraa", "ld", d("x0"), "x1", "", false, 0, 8, "pac"))
	add(ls("ldraa x0, [x1, #-4096]!", "ldraa", "ld", d("x0"), "x1", "", true, -4096, 8, "pac"))
	add(ls("ldrab x2, [sp, #4088]", "ldrab", "ld", d("x2"), "sp", "", false, 4088, 8, "pac"))
	add(ls("ldraa x0, [x1, #-8]!", "ldraa", "ld", d("x0"), "x1", "", true, -8, 8, "pac"))
	add(ls("ldrab x3, [x4, #8]!", "ldrab", "ld", d("x3"), "x4", "", true, 8, 8, "pac"))
}

// others are instructions the classifier leaves alone.
func others() {
	for _, a := range []string{
		"mov x0, x1", "add sp, sp, #16", "sub x0, x1, #1", "madd x0, x1, x2, x3", "mul w0, w1, w2",
		"fadd d0, d1, d2", "add v0.4s, v1.4s, v2.4s", "movz x0, #0x1234, lsl #16", "movk x0, #1, lsl #48",
		"csel w0, w1, w2, eq", "cmp x0, #0", "orr x0, x1, #0xff", "and w0, w1, w2", "lsl x0, x1, #3",
		"udiv x0, x1, x2", "ldapur w0, [x1, #-4]", "ld1 {v0.16b}, [x0]", "st1 {v1.2d}, [sp]",
		"irg x0, x1", "stg x0, [x1]", "ld64b x0, [x1]", "st64b x0, [x1]", "drps", "tcancel #0", "tstart x0",
		"cpyfp [x0]!, [x1]!, x2!", "add z0.d, z1.d, z2.d", "fmov d0, #1.0", "rev x0, x1", "clz w0, w1",
		"cset w0, ne", "mov x0, sp", "eor x0, x0, x0", "ubfx x0, x1, #4, #8", "sdiv w0, w1, w2",
		"fcvtzs w0, s1", "scvtf d0, x1", "dup v0.4s, w1", "ext v0.16b, v1.16b, v2.16b, #3",
		"crc32x w0, w1, x2", "pacia x0, x1", "autda x2, sp", "xpaci x3", "rbit x0, x1",
	} {
		add(vec{asm: a, llvm: "*", class: "other", br: "none"})
	}
}

func invalids() {
	for _, n := range []int{0, 1, 0xffff} {
		add(vec{asm: f("udf #%d", n), llvm: "udf", err: "invalid"})
	}
}

// regSet renders a register list as the canonical set: x0..x30 then sp,
// without the zero register.
func regSet(regs []string) string {
	seen := map[int]bool{}
	for _, r := range regs {
		switch r {
		case "xzr", "wzr":
			continue
		case "sp", "wsp":
			seen[31] = true
			continue
		}
		n, err := strconv.Atoi(r[1:])
		if err != nil || (r[0] != 'x' && r[0] != 'w') || n > 30 {
			fatalf("bad register %q", r)
		}
		seen[n] = true
	}
	var nums []int
	for n := range seen {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	var out []string
	for _, n := range nums {
		out = append(out, xsp(n))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "arm64vec: "+format+"\n", args...)
	os.Exit(1)
}

// assemble runs llvm-mc over all sources and returns, per source line, the
// encoding bytes and the text llvm-mc printed.
func assemble(src []string) ([][]byte, []string) {
	cmd := exec.Command("llvm-mc", "--triple=aarch64", "-mattr="+mattr, "-show-encoding")
	cmd.Stdin = strings.NewReader(strings.Join(src, "\n") + "\n")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		fatalf("llvm-mc: %v\n%s", err, errb.String())
	}
	if strings.Contains(errb.String(), "error") {
		fatalf("llvm-mc reported errors:\n%s", errb.String())
	}
	var encs [][]byte
	var texts []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "// encoding: [")
		if i < 0 {
			continue
		}
		hex := strings.TrimSuffix(line[i+len("// encoding: ["):], "]")
		var enc []byte
		for _, b := range strings.Split(hex, ",") {
			v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(b), "0x"), 16, 8)
			if err != nil {
				fatalf("cannot parse encoding in %q", line)
			}
			enc = append(enc, byte(v))
		}
		if len(enc) != 4 {
			fatalf("encoding of %d bytes in %q", len(enc), line)
		}
		encs = append(encs, enc)
		texts = append(texts, strings.Join(strings.Fields(line[:i]), " "))
	}
	if len(encs) != len(src) {
		fatalf("llvm-mc produced %d encodings for %d instructions", len(encs), len(src))
	}
	return encs, texts
}

func firstWord(s string) string {
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i]
	}
	return s
}

func main() {
	branches()
	adrs()
	literals()
	exclusives()
	atomics()
	hints()
	barriers()
	system()
	exceptions()
	loadStores()
	others()
	invalids()

	src := make([]string, len(vecs))
	for i, v := range vecs {
		src[i] = v.asm
	}
	encs, texts := assemble(src)

	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, `# Code generated by go run ./decode/internal/arm64vec; DO NOT EDIT.
#
# arm64 decoder test vectors. Encodings from llvm-mc --triple=aarch64
# -mattr=%s -show-encoding;
# expected fields from the assembly source (see decode/internal/arm64vec).
#
# Format: instruction bytes in memory order (little-endian), a tab, the
# expected fields, a tab, "# " and the text llvm-mc printed.
# Every word is decoded at address %#x unless the line has addr=.
# Fields: class= mn= (- for none) br= (branch kind); target= and off= exactly
# when PC-relative; cond=; r= and w= registers read and written (- none,
# * every register, approximated); the flags ld st wb pair vec acq rel lse pac
# daif approx are set exactly when listed; excl= (none unless listed);
# rd= rn= rt= rt2= rs= rm= width= size= disp= bit= imm= sysreg= pstate= when
# listed; err= for words that must not decode.
`, mattr, baseAddr)
	n := 0
	for i, v := range vecs {
		got := firstWord(texts[i])
		want := v.llvm
		if want == "" {
			want = firstWord(v.mn)
		}
		// A newer llvm-mc may print the real name where LLVM 14 prints hint #n.
		if want != "*" && got != want && got != firstWord(v.mn) {
			fatalf("%q: llvm-mc printed %q, expected mnemonic %q", v.asm, texts[i], want)
		}
		var fields []string
		if v.err != "" {
			fields = append(fields, "err="+v.err)
		} else {
			mn := v.mn
			if mn == "" {
				mn = "-"
			}
			fields = append(fields, "class="+v.class, "mn="+strings.ReplaceAll(mn, " ", "_"), "br="+v.br)
			addr := uint64(baseAddr)
			if v.addr != 0 {
				addr = v.addr
			}
			if v.rel {
				base := addr
				if v.adrp {
					base &^= 0xfff
				}
				fields = append(fields, f("target=%#x", base+uint64(v.off)), f("off=%d", v.off))
			}
			if v.cond != "" {
				fields = append(fields, "cond="+v.cond)
			}
			if v.class == "other" {
				fields = append(fields, "r=*", "w=*", "approx")
			} else {
				fields = append(fields, "r="+regSet(v.r), "w="+regSet(v.w))
			}
			fields = append(fields, v.flags...)
			fields = append(fields, v.kv...)
		}
		if v.addr != 0 {
			fields = append(fields, f("addr=%#x", v.addr))
		}
		fmt.Fprintf(w, "%x\t%s\t# %s\n", encs[i], strings.Join(fields, " "), texts[i])
		n++
	}
	if err := w.Flush(); err != nil {
		fatalf("%v", err)
	}
	fmt.Fprintf(os.Stderr, "arm64vec: %d vectors\n", n)
}
