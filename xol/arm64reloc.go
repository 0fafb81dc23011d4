package xol

import (
	"errors"
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/reason"
)

// Refusal codes of the arm64 relocation, in addition to those of
// CheckARM64 (RefuseExclusive, RefuseSyscall, RefuseTrap,
// RefusePrivileged).
const (
	// RefuseExclusiveWindow: the site lies inside a load/store-exclusive
	// sequence: scanning back from it (at most 32 instructions, or to the
	// start of the code given), a load-exclusive comes before any
	// store-exclusive. A trap or a detour there clears the exclusive
	// monitor, so the store-exclusive fails every time.
	RefuseExclusiveWindow reason.Code = "exclusive-window"
	// RefuseCallInRun: a call (bl, blr and their PAC forms) that is not the
	// last instruction of a relocated run: the call would return into the
	// displaced range.
	RefuseCallInRun reason.Code = "call-in-run"
	// RefuseSyscallInRun: in a live detour, an svc that is not the last
	// displaced instruction: a thread blocked in that system call would
	// resume inside the displaced range.
	RefuseSyscallInRun reason.Code = "syscall-in-run"
	// RefuseNoScratch: a target is beyond the reach of a direct branch or
	// PC-relative form from the new address, and the jump through x16 or
	// x17 it takes is not allowed (NoScratch) or both registers are used by
	// the relocated instructions.
	RefuseNoScratch reason.Code = "no-scratch"
	// RefuseBTI: a target is beyond the reach of a direct branch, and the
	// indirect jump it takes would land in a BTI-guarded page on an
	// instruction that may not be a landing pad.
	RefuseBTI reason.Code = "bti-guarded"
	// RefuseLinkRegister: a PAC call through x30 or modified by x30, whose
	// return address cannot be set before it.
	RefuseLinkRegister reason.Code = "link-register"
	// RefuseUnknown: the word is not a valid instruction, or is an encoding
	// this decoder does not know in a group where instructions can be
	// PC-relative (branches, system, literal loads): its meaning at another
	// address is unknown.
	RefuseUnknown reason.Code = "unknown-encoding"
)

// ARM64RelocOptions control RelocateARM64. A nil *ARM64RelocOptions means
// the zero value: a single-step block ending with brk #5, scratch
// registers allowed, not live, no scan back.
type ARM64RelocOptions struct {
	// Return ends the block with a jump back to the address after the
	// relocated instructions (a detour). Otherwise the block ends with
	// Trap, and a caller that single-steps the copy maps a PC of To+End
	// back to From+4*N.
	Return bool
	// Trap is the word that ends a block without Return; 0 means brk #5
	// (0xD42000A0), the breakpoint Linux uprobes use after an
	// out-of-line step.
	Trap uint32
	// NoScratch forbids the jumps through x16 or x17 that reach a target
	// beyond a direct branch: such targets are refused instead. When
	// scratch registers are allowed, the block may overwrite x16 or x17
	// (whichever the relocated instructions do not use, see
	// ARM64Relocation.Scratch); by the procedure call standard they are
	// free at function entry, elsewhere only if the compiler left them dead.
	NoScratch bool
	// BTIGuarded says the code branched to lies in pages guarded by BTI
	// (PROT_BTI): an indirect jump there needs a landing pad, so far
	// targets are refused rather than reached through x16/x17, and blr is
	// rewritten into a jump through x16/x17 (accepted by "bti c" like blr).
	BTIGuarded bool
	// Live says the instructions are displaced in a running process: a
	// system call other than the last displaced instruction is refused,
	// since a thread may be blocked in it with its PC inside the range.
	Live bool
	// Before holds the instructions that precede From in memory (ending
	// right before From), ideally from the start of the function. The
	// last 32 are scanned back for an open load/store-exclusive sequence.
	Before []byte
}

// ARM64RelocForm says how one instruction was relocated.
type ARM64RelocForm uint8

const (
	// ARM64FormCopy: copied unchanged (it does not depend on its address).
	ARM64FormCopy ARM64RelocForm = iota
	// ARM64FormRetarget: the same instruction with its offset re-encoded
	// for the new address.
	ARM64FormRetarget
	// ARM64FormNear: a conditional branch inverted over a direct b to the
	// target.
	ARM64FormNear
	// ARM64FormFar: a jump through x16 or x17 (ldr literal; br), after an
	// inverted short branch for a conditional one.
	ARM64FormFar
	// ARM64FormMaterialize: adr, adrp or a literal load whose address is
	// set by movz/movk (then loaded from).
	ARM64FormMaterialize
	// ARM64FormLink: a call whose return address (x30) is set by movz/movk
	// before a jump.
	ARM64FormLink
	// ARM64FormNop: an instruction without effect at the new address (adr
	// to xzr, prfm literal out of reach), replaced by a nop.
	ARM64FormNop
)

var arm64FormNames = [...]string{"copy", "retarget", "near", "far", "materialize", "link", "nop"}

// String returns the form's name ("copy", "retarget"...).
func (f ARM64RelocForm) String() string {
	if int(f) < len(arm64FormNames) {
		return arm64FormNames[f]
	}
	return "unknown"
}

// ARM64RelocInst describes where one original instruction went.
type ARM64RelocInst struct {
	// Addr is the original address of the instruction.
	Addr uint64
	// Off and Len are the byte offset and length of its code in the block.
	Off, Len int
	// Form says how it was relocated.
	Form ARM64RelocForm
	// Clobbers are the registers its code writes beyond what the original
	// writes: the scratch register of a far jump or of a materialized
	// FP/SIMD literal load, and the data register of a materialized
	// literal load, which holds the literal's address if the load faults.
	Clobbers decode.RegSet
}

// ARM64Relocation is a block of code at To that does what the instructions
// at From did.
type ARM64Relocation struct {
	// From and To are the original address and the block's address.
	From, To uint64
	// Code is the block, little-endian words: the relocated instructions,
	// then the end (a jump back, or the trap word), then any literal
	// words the jump back needs.
	Code []byte
	// Insts has one entry per relocated instruction, in order.
	Insts []ARM64RelocInst
	// End is the byte offset in Code where the relocated instructions end:
	// the jump back with Return, the trap word without.
	End int
	// Scratch holds x16 or x17 when the block overwrites it (far jumps,
	// literal loads into FP/SIMD registers beyond reach); their value
	// after the block is not the original's.
	Scratch decode.RegSet
}

// OrigPC maps a PC inside the block to the original address of the
// instruction whose code holds it: the address a fault there must report.
// PC To+End maps to the address after the run. ok is false outside the
// relocated code.
func (r *ARM64Relocation) OrigPC(pc uint64) (uint64, bool) {
	if pc < r.To {
		return 0, false
	}
	off := pc - r.To
	if off == uint64(r.End) {
		return r.From + 4*uint64(len(r.Insts)), true
	}
	for _, in := range r.Insts {
		if off >= uint64(in.Off) && off < uint64(in.Off+in.Len) {
			return in.Addr, true
		}
	}
	return 0, false
}

// ErrBadRun is returned (wrapped) by RelocateARM64 for arguments that are
// not a run of arm64 instructions: empty, not a multiple of 4 bytes, too
// long, or an address that is not a multiple of 4.
var ErrBadRun = errors.New("not a relocatable run of arm64 instructions")

// arm64MaxRun is the longest run RelocateARM64 accepts, in instructions.
const arm64MaxRun = 64

// a64Kind is how an instruction is relocated.
type a64Kind uint8

const (
	a64KCopy   a64Kind = iota
	a64KB              // b
	a64KBL             // bl
	a64KCond           // b.cond, bc.cond, cbz, cbnz, tbz, tbnz
	a64KAdr            // adr, adrp
	a64KLit            // ldr, ldrsw, prfm (literal), FP/SIMD ldr (literal)
	a64KBLR            // blr
	a64KBLRPAC         // blraa, blrab, blraaz, blrabz
)

// a64Code is the code generated for one instruction.
type a64Code struct {
	words []uint32 // nil: the level does not reach
	form  ARM64RelocForm
	clob  decode.RegSet // see ARM64RelocInst.Clobbers
	scr   bool          // writes the scratch register
}

// a64Item is one instruction being relocated.
type a64Item struct {
	inst  decode.ARM64Inst
	kind  a64Kind
	level int // 0 compact, higher = longer form
	code  a64Code
}

// a64Reloc is the state of one relocation.
type a64Reloc struct {
	opt     ARM64RelocOptions
	from    uint64
	to      uint64
	items   []a64Item
	offs    []int // byte offset of each item, then the end
	retLvl  int
	scratch int // 16, 17, or -1 when none may be used
	used    decode.RegSet
}

// RelocateARM64 relocates the run of instructions code, located at from, to
// a block of code at to, which does the same when executed there: direct
// branches are re-targeted when their target is in reach of the new
// address and otherwise become an inverted short branch over a jump
// through x16/x17; bl and blr set x30 to the original return address
// before jumping; adr and adrp are re-encoded or materialized with
// movz/movk; literal loads are re-encoded or load from a materialized
// address. Branches to an instruction of the run other than the first go
// to its relocated code; a branch to from itself goes to from.
//
// A refusal is a *RefusalError (errors.Is ErrNotRelocatable) wrapped with
// the address of the instruction concerned; see the Refuse* codes. Other
// argument errors wrap ErrBadRun.
func RelocateARM64(code []byte, from, to uint64, opt *ARM64RelocOptions) (*ARM64Relocation, error) {
	n := len(code) / 4
	switch {
	case len(code) == 0 || len(code)%4 != 0:
		return nil, fmt.Errorf("%d bytes: %w", len(code), ErrBadRun)
	case n > arm64MaxRun:
		return nil, fmt.Errorf("%d instructions, at most %d: %w", n, arm64MaxRun, ErrBadRun)
	case from%4 != 0 || to%4 != 0:
		return nil, fmt.Errorf("from %#x to %#x: %w", from, to, ErrBadRun)
	}
	r := &a64Reloc{from: from, to: to, scratch: -1}
	if opt != nil {
		r.opt = *opt
	}
	if r.opt.Trap == 0 {
		r.opt.Trap = a64BRK5
	}
	if err := r.scanBack(); err != nil {
		return nil, err
	}
	r.items = make([]a64Item, n)
	for i := range r.items {
		addr := from + 4*uint64(i)
		inst, err := decode.DecodeARM64(code[4*i:], addr)
		if err != nil {
			return nil, fmt.Errorf("relocate %#x: %w", addr, refuse(RefuseUnknown, "the word does not decode: "+err.Error()))
		}
		kind, err := r.classify(&inst, i == n-1)
		if err != nil {
			return nil, fmt.Errorf("relocate %#x (%s): %w", addr, inst.Text(), err)
		}
		r.items[i] = a64Item{inst: inst, kind: kind}
		r.used |= a64Uses(&inst)
	}
	if !r.opt.NoScratch {
		switch {
		case !r.used.Has(a64Scratch0):
			r.scratch = a64Scratch0
		case !r.used.Has(a64Scratch1):
			r.scratch = a64Scratch1
		}
	}
	if err := r.layout(); err != nil {
		return nil, err
	}
	return r.emit(), nil
}

// scanBack refuses a site inside an open load/store-exclusive sequence.
func (r *a64Reloc) scanBack() error {
	b := r.opt.Before
	for k := 1; k <= 32 && 4*k <= len(b); k++ {
		addr := r.from - 4*uint64(k)
		inst, err := decode.DecodeARM64(b[len(b)-4*k:], addr)
		if err != nil {
			continue
		}
		switch inst.Exclusive {
		case decode.ARM64ExclStore:
			return nil
		case decode.ARM64ExclLoad:
			return fmt.Errorf("relocate %#x: %w", r.from, refuse(RefuseExclusiveWindow,
				fmt.Sprintf("inside the load/store-exclusive sequence that starts at %#x: a trap or detour clears the exclusive monitor and the store-exclusive would fail every time", addr)))
		}
	}
	return nil
}

// classify decides how an instruction is relocated, or refuses it.
func (r *a64Reloc) classify(inst *decode.ARM64Inst, last bool) (a64Kind, error) {
	w := inst.Word
	if inst.Class == decode.ARM64ClassOther && (w&0x1C000000 == 0x14000000 || w&0x3B000000 == 0x18000000) {
		return 0, refuse(RefuseUnknown, "an encoding this decoder does not know, in a group where instructions can be PC-relative")
	}
	if inst.Class == decode.ARM64ClassException && inst.Mnemonic == "svc" {
		switch {
		case !r.opt.Return:
			// Single-stepped: the same refusal as CheckARM64.
		case r.opt.Live && !last:
			return 0, refuse(RefuseSyscallInRun, "a thread blocked in this system call would resume inside the displaced instructions")
		default:
			// In a detour the call returns into the block, which goes on.
			return a64KCopy, nil
		}
	}
	if _, err := CheckARM64(inst); err != nil {
		return 0, err
	}
	switch inst.Branch {
	case decode.BranchCall, decode.BranchCallIndirect:
		if !last {
			return 0, refuse(RefuseCallInRun, "the call would return into the displaced instructions")
		}
	}
	switch inst.Class {
	case decode.ARM64ClassAdr:
		return a64KAdr, nil
	case decode.ARM64ClassLiteral:
		return a64KLit, nil
	case decode.ARM64ClassBranch:
		switch inst.Branch {
		case decode.BranchJmp:
			return a64KB, nil
		case decode.BranchCall:
			return a64KBL, nil
		case decode.BranchJcc, decode.BranchCompare, decode.BranchTest:
			return a64KCond, nil
		case decode.BranchCallIndirect:
			if !inst.PAC {
				return a64KBLR, nil
			}
			if inst.Rn == 30 || inst.Rm == 30 {
				return 0, refuse(RefuseLinkRegister, "a PAC call through x30 or modified by x30: x30 must hold the return address before the jump")
			}
			if r.opt.BTIGuarded && inst.Rn != a64Scratch0 && inst.Rn != a64Scratch1 {
				return 0, refuse(RefuseBTI, "the PAC call would become a jump through a register other than x16/x17, which a BTI landing pad for calls does not accept")
			}
			return a64KBLRPAC, nil
		}
	}
	return a64KCopy, nil
}

// a64Uses returns the registers an instruction may read or write, with a
// conservative guess from the register fields when the decoder only
// approximates them.
func a64Uses(inst *decode.ARM64Inst) decode.RegSet {
	if !inst.RegsApprox {
		return inst.Read | inst.Written
	}
	var s decode.RegSet
	for _, lo := range [...]uint{0, 5, 10, 16} {
		s = s.Add(int(inst.Word >> lo & 31))
	}
	return s &^ (1 << 31)
}

// target returns where a branch of item i must go: the relocated code of
// an instruction of the run (other than the first), else the original
// target.
func (r *a64Reloc) target(t uint64) uint64 {
	if t > r.from && t < r.from+4*uint64(len(r.items)) && (t-r.from)%4 == 0 {
		return r.to + uint64(r.offs[(t-r.from)/4])
	}
	return t
}

// far returns the words of a jump to t through the scratch register, or
// a refusal when such a jump is not allowed.
func (r *a64Reloc) far(t uint64) ([]uint32, error) {
	if r.opt.BTIGuarded {
		return nil, refuse(RefuseBTI, fmt.Sprintf("%#x is beyond the reach of a direct branch, and an indirect jump would need a landing pad there", t))
	}
	if err := r.needScratch(fmt.Sprintf("%#x is beyond the reach of a direct branch", t)); err != nil {
		return nil, err
	}
	s := uint32(r.scratch)
	return []uint32{a64LdrLit8(s), a64BR(s), uint32(t), uint32(t >> 32)}, nil
}

// needScratch refuses when no scratch register may be used.
func (r *a64Reloc) needScratch(what string) error {
	if r.scratch >= 0 {
		return nil
	}
	why := "x16/x17 may not be used"
	if !r.opt.NoScratch {
		why = "the relocated instructions use both x16 and x17"
	}
	return refuse(RefuseNoScratch, what+", and the code that reaches it needs x16 or x17: "+why)
}

// scratchSet is the scratch register as a set.
func (r *a64Reloc) scratchSet() decode.RegSet {
	if r.scratch < 0 {
		return 0
	}
	return decode.RegSet(0).Add(r.scratch)
}

// farCode wraps far(t) after the words before.
func (r *a64Reloc) farCode(before []uint32, t uint64, form ARM64RelocForm) (a64Code, error) {
	f, err := r.far(t)
	if err != nil {
		return a64Code{}, err
	}
	return a64Code{words: append(before, f...), form: form, clob: r.scratchSet(), scr: true}, nil
}

// gen returns the code of item i at address pc in the given level; nil
// words when that level does not reach.
func (r *a64Reloc) gen(i int, pc uint64, level int) (a64Code, error) {
	it := &r.items[i]
	in := &it.inst
	w := in.Word
	switch it.kind {
	case a64KB:
		t := r.target(in.Target)
		if level == 0 {
			if off := int64(t - pc); a64Fits(off, a64RangeB) {
				return a64Code{words: []uint32{a64B(off, false)}, form: ARM64FormRetarget}, nil
			}
			return a64Code{}, nil
		}
		return r.farCode(nil, t, ARM64FormFar)
	case a64KBL:
		t := r.target(in.Target)
		link := a64MovImm(30, in.Addr+4)
		if level == 0 {
			at := pc + 4*uint64(len(link))
			if off := int64(t - at); a64Fits(off, a64RangeB) {
				return a64Code{words: append(link, a64B(off, false)), form: ARM64FormLink}, nil
			}
			return a64Code{}, nil
		}
		return r.farCode(link, t, ARM64FormLink)
	case a64KCond:
		return r.genCond(in, pc, level)
	case a64KAdr:
		rd := w & 31
		if rd == 31 {
			return a64Code{words: []uint32{a64Nop}, form: ARM64FormNop}, nil
		}
		if level == 0 {
			if w>>31 != 0 {
				d := int64(in.Target - pc&^0xFFF)
				if d%4096 == 0 && d >= -a64RangePage && d < a64RangePage {
					return a64Code{words: []uint32{a64Adr(rd, d>>12, true)}, form: ARM64FormRetarget}, nil
				}
			} else if d := int64(in.Target - pc); d >= -a64RangeCond && d < a64RangeCond {
				return a64Code{words: []uint32{a64Adr(rd, d, false)}, form: ARM64FormRetarget}, nil
			}
			return a64Code{}, nil
		}
		return a64Code{words: a64MovImm(rd, in.Target), form: ARM64FormMaterialize}, nil
	case a64KLit:
		if level == 0 {
			if off := int64(in.Target - pc); a64Fits(off, a64RangeCond) {
				return a64Code{words: []uint32{a64Imm19(w, off)}, form: ARM64FormRetarget}, nil
			}
			return a64Code{}, nil
		}
		v, t := w>>26&1 != 0, w&31
		switch {
		case !v && w>>30 == 3: // prfm: a hint without architectural effect
			return a64Code{words: []uint32{a64Nop}, form: ARM64FormNop}, nil
		case !v && t != 31:
			words := append(a64MovImm(t, in.Target), a64LdrBase(w, t, t))
			return a64Code{words: words, form: ARM64FormMaterialize, clob: decode.RegSet(0).Add(int(t))}, nil
		}
		if err := r.needScratch(fmt.Sprintf("the literal at %#x is beyond the reach of a literal load", in.Target)); err != nil {
			return a64Code{}, err
		}
		s := uint32(r.scratch)
		words := append(a64MovImm(s, in.Target), a64LdrBase(w, t, s))
		return a64Code{words: words, form: ARM64FormMaterialize, clob: r.scratchSet(), scr: true}, nil
	case a64KBLR:
		n := w >> 5 & 31
		link := a64MovImm(30, in.Addr+4)
		if n == a64Scratch0 || n == a64Scratch1 || (n != 30 && !r.opt.BTIGuarded) {
			return a64Code{words: append(link, a64BR(n)), form: ARM64FormLink}, nil
		}
		if err := r.needScratch("blr must keep its target elsewhere while x30 is set"); err != nil {
			return a64Code{}, err
		}
		s := uint32(r.scratch)
		words := append(append([]uint32{a64MovReg(s, n)}, link...), a64BR(s))
		return a64Code{words: words, form: ARM64FormLink, clob: r.scratchSet(), scr: true}, nil
	case a64KBLRPAC:
		// blraa... becomes braa...: bit 21 is the link bit.
		return a64Code{words: append(a64MovImm(30, in.Addr+4), w&^(1<<21)), form: ARM64FormLink}, nil
	}
	return a64Code{words: []uint32{w}, form: ARM64FormCopy}, nil
}

// genCond relocates a conditional branch: re-targeted, then inverted over
// a direct b, then inverted over a far jump.
func (r *a64Reloc) genCond(in *decode.ARM64Inst, pc uint64, level int) (a64Code, error) {
	w := in.Word
	t := r.target(in.Target)
	retarget, rng := a64Imm19, int64(a64RangeCond)
	var inv uint32
	switch in.Branch {
	case decode.BranchJcc:
		if in.Cond >= 14 { // al, nv: always taken
			if level == 0 {
				if off := int64(t - pc); a64Fits(off, a64RangeB) {
					return a64Code{words: []uint32{a64B(off, false)}, form: ARM64FormRetarget}, nil
				}
				return a64Code{}, nil
			}
			return r.farCode(nil, t, ARM64FormFar)
		}
		inv = w ^ 1
	case decode.BranchCompare:
		inv = w ^ (1 << 24)
	default: // tbz, tbnz
		retarget, inv, rng = a64Imm14, w^(1<<24), a64RangeTB
	}
	switch level {
	case 0:
		if off := int64(t - pc); a64Fits(off, rng) {
			return a64Code{words: []uint32{retarget(w, off)}, form: ARM64FormRetarget}, nil
		}
		return a64Code{}, nil
	case 1:
		if off := int64(t - (pc + 4)); a64Fits(off, a64RangeB) {
			return a64Code{words: []uint32{retarget(inv, 8), a64B(off, false)}, form: ARM64FormNear}, nil
		}
		return a64Code{}, nil
	}
	// The inverted branch skips itself and the four words of the jump.
	return r.farCode([]uint32{retarget(inv, 20)}, t, ARM64FormFar)
}

// genReturn returns the words that end the block at address pc.
func (r *a64Reloc) genReturn(pc uint64, level int) ([]uint32, error) {
	if !r.opt.Return {
		return []uint32{r.opt.Trap}, nil
	}
	t := r.from + 4*uint64(len(r.items))
	if level == 0 {
		if off := int64(t - pc); a64Fits(off, a64RangeB) {
			return []uint32{a64B(off, false)}, nil
		}
		return nil, nil
	}
	return r.far(t)
}

// layout chooses the shortest form of every instruction that reaches its
// target from where it lands, growing forms until no length changes.
func (r *a64Reloc) layout() error {
	n := len(r.items)
	r.offs = make([]int, n+1)
	for pass := 0; ; pass++ {
		off := 0
		for i := range r.items {
			r.offs[i] = off
			off += 4 * max(len(r.items[i].code.words), 1)
		}
		r.offs[n] = off
		changed := pass == 0
		for i := range r.items {
			it := &r.items[i]
			pc := r.to + uint64(r.offs[i])
			for {
				c, err := r.gen(i, pc, it.level)
				if err != nil {
					return fmt.Errorf("relocate %#x (%s): %w", it.inst.Addr, it.inst.Text(), err)
				}
				if c.words != nil {
					changed = changed || len(c.words) != len(it.code.words)
					it.code = c
					break
				}
				it.level++
			}
		}
		if changed {
			continue
		}
		end := r.to + uint64(r.offs[n])
		for {
			words, err := r.genReturn(end, r.retLvl)
			if err != nil {
				return fmt.Errorf("relocate the return to %#x: %w", r.from+4*uint64(n), err)
			}
			if words != nil {
				return nil
			}
			r.retLvl++
		}
	}
}

// emit assembles the block from the final layout.
func (r *a64Reloc) emit() *ARM64Relocation {
	n := len(r.items)
	rel := &ARM64Relocation{From: r.from, To: r.to, End: r.offs[n], Insts: make([]ARM64RelocInst, n)}
	var words []uint32
	for i := range r.items {
		c := &r.items[i].code
		words = append(words, c.words...)
		rel.Insts[i] = ARM64RelocInst{Addr: r.items[i].inst.Addr, Off: r.offs[i], Len: 4 * len(c.words), Form: c.form, Clobbers: c.clob}
		if c.scr {
			rel.Scratch |= r.scratchSet()
		}
	}
	ret, _ := r.genReturn(r.to+uint64(r.offs[n]), r.retLvl)
	if r.retLvl > 0 {
		rel.Scratch |= r.scratchSet()
	}
	words = append(words, ret...)
	rel.Code = decode.ARM64Code(words...)
	return rel
}
