package plan

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/probeopt/probeopt/decode"
)

// JumpTable is a jump table recovered for one indirect jump of a function:
// the compiler's dispatch of a switch statement, read from the file.
type JumpTable struct {
	// Jump is the address of the indirect jmp.
	Jump uint64
	// Start is the address of the first instruction of the straight-line
	// code the recovery read (the bound check and the table's address are
	// in it): no other path enters it after Start.
	Start uint64
	// Table is the virtual address of the table.
	Table uint64
	// Entries is the number of entries the bound check allows.
	Entries int
	// EntrySize is 4 for a table of 32-bit offsets from Table (PIC code)
	// and 8 for a table of absolute addresses.
	EntrySize int
	// Targets are the distinct addresses the entries lead to, sorted: all
	// instruction starts of the function.
	Targets []uint64
}

// IndirectJump is an indirect jump of a function that is not a recovered
// jump table, and why.
type IndirectJump struct {
	Addr uint64
	Why  string
	// Pointer is set when the jump goes through a pointer loaded from
	// memory as it is (jmp *8(%rax), or a register loaded by a mov from
	// an operand without index, based on neither %rsp nor %rbp): a tail
	// call, whose target is a code address the program took (see
	// BranchIndex.TakenIn), not one it computed.
	Pointer bool
}

// TableReader reads up to n bytes of a file's contents at virtual address
// addr (code or data, as the file holds them: elfscan.File.Data).
type TableReader func(addr uint64, n uint64) ([]byte, error)

// maxTableEntries bounds a table the recovery reads: a larger bound is
// taken for a pattern it misread.
const maxTableEntries = 1 << 16

// chainLimit is how many instructions before an indirect jump the
// recovery reads at most.
const chainLimit = 32

// JumpTables returns the jump tables recovered for the function's
// indirect jumps (ResolveJumpTables), in address order.
func (fn *Function) JumpTables() []JumpTable { return fn.tables }

// UnresolvedJumps returns the function's indirect jumps that are not
// recovered jump tables, with the reason, in address order: every indirect
// jump when ResolveJumpTables was not called.
func (fn *Function) UnresolvedJumps() []IndirectJump {
	if !fn.resolved {
		out := make([]IndirectJump, len(fn.indirect))
		for i, off := range fn.indirect {
			out[i] = IndirectJump{Addr: fn.Addr + uint64(off), Why: "the function was swept without its file's data, so no jump table was read"}
		}
		return out
	}
	return fn.unresolved
}

// TableTargetIn returns the lowest target of a recovered jump table in
// (lo, hi), and the table.
func (fn *Function) TableTargetIn(lo, hi uint64) (uint64, *JumpTable, bool) {
	var best uint64
	var bt *JumpTable
	for i := range fn.tables {
		jt := &fn.tables[i]
		j, _ := slices.BinarySearch(jt.Targets, lo+1)
		if j < len(jt.Targets) && jt.Targets[j] < hi && (bt == nil || jt.Targets[j] < best) {
			best, bt = jt.Targets[j], jt
		}
	}
	return best, bt, bt != nil
}

// ResolveJumpTables recovers the jump tables of an x86-64 function swept by
// AnalyzeX86, reading their entries with read. For each indirect jump it
// reads the straight-line code before it (from the last place another path
// may enter: a direct branch target of the function, or the instruction
// after one that does not fall through; at most 32 instructions) and
// recognises the forms gcc and clang emit for a switch:
//
//	cmp $N,%eI; ja L (or jae)            the bound: entries 0..N
//	lea T(%rip),%rB                     PIC: a table of int32 offsets from T
//	movslq (%rB,%rI,4),%rX
//	add %rB,%rX (or add %rX,%rB)
//	[notrack] jmp *%rX
//
//	cmp $N,%eI; ja L                    non-PIC: a table of addresses
//	jmp *T(,%rI,8) (or mov T(,%rI,8),%rX; jmp *%rX)
//
// with the index copied between registers (mov, movzx, movsxd) in between,
// and other instructions interleaved as long as they do not write the
// registers the pattern holds. The lea may also lie before the chain
// (outside a loop) when it is the only instruction of the function that
// writes its register. The bound must come from a cmp against an
// immediate directly followed by ja or jae, whose fall-through leads to the
// jump. A table is recovered only when every entry leads to an instruction
// start of the function; any other jump stays unresolved, with the reason
// (UnresolvedJumps): a tail call through a pointer, a computed goto, a
// table whose entries leave the function (to its .cold part) or a form not
// recognised.
//
// It does nothing for an arm64 function (one instruction is displaced
// there: no table can land inside it) or when called again.
func (fn *Function) ResolveJumpTables(dec decode.X86Decoder, read TableReader) {
	if fn.Arch != decode.X86_64 || fn.resolved {
		return
	}
	fn.resolved = true
	bases := fn.tableBases(dec)
	// Twice: the targets of the tables of the first pass are places other
	// paths enter, where the second pass's chains begin.
	var entered map[uint64]bool
	for pass := 0; pass < 2; pass++ {
		fn.tables, fn.unresolved = nil, nil
		for _, off := range fn.indirect {
			jt, why := fn.recoverTable(dec, uint64(off), read, bases, entered)
			if why != "" {
				fn.unresolved = append(fn.unresolved, IndirectJump{Addr: fn.Addr + uint64(off), Why: why, Pointer: why == pointerWhy})
				continue
			}
			fn.tables = append(fn.tables, jt)
		}
		if len(fn.tables) == 0 {
			break
		}
		entered = map[uint64]bool{}
		for _, jt := range fn.tables {
			for _, t := range jt.Targets {
				entered[t-fn.Addr] = true
			}
		}
	}
	// A table target inside another table's straight-line code would be
	// a path the recovery did not see: that table is not trusted.
	kept := fn.tables[:0]
	for _, jt := range fn.tables {
		if t, other, ok := fn.TableTargetIn(jt.Start, jt.Jump+1); ok {
			fn.unresolved = append(fn.unresolved, IndirectJump{Addr: jt.Jump, Why: fmt.Sprintf("the jump table of the jmp at %#x leads to %#x, inside the code that computes this jump's target", other.Jump, t)})
			continue
		}
		kept = append(kept, jt)
	}
	fn.tables = kept
	slices.SortFunc(fn.unresolved, func(a, b IndirectJump) int { return cmp.Compare(a.Addr, b.Addr) })
}

// Abstract values of registers in the recovery.
const (
	valUnknown   = iota
	valConst     // a known address (lea T(%rip))
	valBounded   // an index below n
	valRelEntry  // a sign-extended int32 entry of the table at addr, n entries
	valRelTarget // addr plus such an entry
	valAbsTarget // an 8-byte entry of the table at addr, n entries
	valLoaded    // a word loaded from memory as it is (IndirectJump.Pointer)
)

type absVal struct {
	kind uint8
	addr uint64
	n    int
}

// recoverTable recognises the jump at offset off; why is "" when it did.
func (fn *Function) recoverTable(dec decode.X86Decoder, off uint64, read TableReader, bases [16]absVal, entered map[uint64]bool) (JumpTable, string) {
	jumpAddr := fn.Addr + off
	// The chain: instruction starts before the jump, back to the first
	// that another path may enter.
	var chain []uint64 // offsets, last first
	for o := off; ; {
		chain = append(chain, o)
		if o == 0 || len(chain) > chainLimit || fn.isTarget(o) || entered[o] {
			break
		}
		p, ok := fn.prevStart(o)
		if !ok {
			break
		}
		var l decode.X86Layout
		if dec.Layout(fn.Code[p:], fn.Addr+p, &l) != nil {
			break
		}
		switch l.Branch {
		case decode.BranchJmp, decode.BranchJmpIndirect, decode.BranchRet, decode.BranchRetImm, decode.BranchJmpAbs, decode.BranchFarJmp, decode.BranchFarRet, decode.BranchIret:
			p = o // the code before cannot fall through to o
		}
		if p == o {
			break
		}
		o = p
	}
	slices.Reverse(chain)

	regs := bases
	var inst decode.X86Inst
	// The last cmp against an immediate whose flags are still live, and
	// the memory operand a bound check covers (a load of it is bounded).
	var cmp *cmpFact
	var mem *memBound
	for _, o := range chain {
		if err := dec.Decode(fn.Code[o:], fn.Addr+o, &inst); err != nil {
			return JumpTable{}, fmt.Sprintf("the code before it does not decode at %#x", fn.Addr+o)
		}
		if o == off {
			return fn.finishTable(&inst, &regs, jumpAddr, fn.Addr+chain[0], read)
		}
		if inst.Encoding != decode.EncLegacy {
			clobber(&regs, inst.Written)
			cmp, mem = nil, nil
			continue
		}
		if c, ok := cmpImmediate(&inst); ok {
			cmp = &c
			continue
		}
		if inst.Branch == decode.BranchJcc && cmp != nil {
			// The fall-through is the next instruction of the chain.
			n := 0
			switch jccCond(&inst) {
			case 0x7: // ja: the fall-through has I <= N
				if cmp.imm < maxTableEntries {
					n = int(cmp.imm) + 1
				}
			case 0x3: // jae: I < N
				if cmp.imm < maxTableEntries {
					n = int(cmp.imm)
				}
			}
			if n > 0 {
				if cmp.reg >= 0 {
					regs[cmp.reg] = absVal{kind: valBounded, n: n}
				} else {
					mem = &memBound{op: cmp.mem, n: n}
				}
			}
			cmp = nil
			continue
		}
		if mem != nil {
			// A load of the operand the bound check read.
			if r, ok := loadOf(&inst, mem.op); ok {
				regs[r] = absVal{kind: valBounded, n: mem.n}
				continue
			}
			if inst.Written&mem.op.regs != 0 || inst.Branch != decode.BranchNone {
				mem = nil
			}
		}
		if cmp != nil && (!flagsKept(&inst) || cmp.reg >= 0 && inst.Written.Has(cmp.reg) || inst.Written&cmp.mem.regs != 0) {
			cmp = nil
		}
		step(&inst, &regs)
	}
	return JumpTable{}, "not reached" // the chain ends at the jump
}

// cmpFact is a cmp of a register (reg >= 0) or a memory operand with an
// immediate.
type cmpFact struct {
	reg int
	mem memOperand
	imm uint64
}

// memOperand identifies a memory operand by its encoding: two instructions
// with equal ones read the same address while its registers (regs) keep
// their values.
type memOperand struct {
	mod, rm, sib uint8
	b, x         bool
	disp         int64
	rip          uint64 // the address of a RIP-relative operand
	size         int    // operand size in bits
	regs         decode.RegSet
}

// memBound is a memory operand whose value a bound check limited to n.
type memBound struct {
	op memOperand
	n  int
}

func memOf(inst *decode.X86Inst, size int) memOperand {
	m := memOperand{mod: inst.Mod, rm: inst.RM, sib: inst.SIB, b: inst.B, x: inst.X, disp: inst.Disp, size: size, regs: inst.Read}
	if inst.RIPRel {
		m.disp, m.rip = 0, inst.Target
	}
	return m
}

// loadOf recognises a load of the whole operand m into a register (mov,
// or movzx of a byte or word operand).
func loadOf(inst *decode.X86Inst, m memOperand) (int, bool) {
	if inst.Mod == 3 || !inst.HasModRM || inst.OpSize < 32 {
		return 0, false
	}
	var size int
	switch {
	case inst.Map == decode.Map1Byte && inst.Opcode == 0x8b:
		size = inst.OpSize
	case inst.Map == decode.Map0F && inst.Opcode == 0xb6:
		size = 8
	case inst.Map == decode.Map0F && inst.Opcode == 0xb7:
		size = 16
	default:
		return 0, false
	}
	got := memOf(inst, size)
	got.regs = m.regs
	if got != m {
		return 0, false
	}
	return regReg(inst), true
}

// flagsKept reports whether the instruction leaves the flags alone: the
// moves, lea, movsxd and movzx/movsx a compiler puts between a cmp and its
// jcc.
func flagsKept(inst *decode.X86Inst) bool {
	switch inst.Map {
	case decode.Map1Byte:
		o := inst.Opcode
		return o >= 0x88 && o <= 0x8b || o == 0x8d || o == 0x63 || o == 0xc6 || o == 0xc7 || o >= 0xb0 && o <= 0xbf || o == 0x90
	case decode.Map0F:
		o := inst.Opcode
		return o == 0xb6 || o == 0xb7 || o == 0xbe || o == 0xbf || o == 0x1f
	}
	return false
}

// tableBases returns, for each register, the address a lea T(%rip) loads
// into it when that lea is the only instruction of the function that
// writes the register (a table's address kept in a register across a
// loop): wherever the compiled code reads the register as a table's base,
// it holds T. A pop does not count: it restores the caller's value in an
// epilogue, which compiled code does not read as a table's base. Other
// registers are unknown.
func (fn *Function) tableBases(dec decode.X86Decoder) [16]absVal {
	var out [16]absVal
	var writes [16]int
	var inst decode.X86Inst
	for a := range fn.Starts() {
		off := a - fn.Addr
		if dec.Decode(fn.Code[off:], a, &inst) != nil {
			return [16]absVal{}
		}
		pop := inst.Encoding == decode.EncLegacy && inst.Map == decode.Map1Byte && inst.Opcode >= 0x58 && inst.Opcode <= 0x5f
		for r := range writes {
			if inst.Written.Has(r) && !(pop && r != 4) {
				writes[r]++
				out[r] = absVal{}
			}
		}
		if inst.Encoding == decode.EncLegacy && inst.Map == decode.Map1Byte && inst.Opcode == 0x8d && inst.Mod != 3 && inst.RIPRel && inst.W {
			out[regReg(&inst)] = absVal{kind: valConst, addr: inst.Target}
		}
	}
	for r := range out {
		if writes[r] != 1 {
			out[r] = absVal{}
		}
	}
	return out
}

// finishTable reads the table the jump's operand leads to.
func (fn *Function) finishTable(inst *decode.X86Inst, regs *[16]absVal, jumpAddr, start uint64, read TableReader) (JumpTable, string) {
	var v absVal
	switch {
	case inst.Encoding != decode.EncLegacy || inst.Map != decode.Map1Byte || inst.Opcode != 0xff || inst.Reg != 4:
		return JumpTable{}, "not a near jmp the recovery knows"
	case inst.Mod == 3:
		v = regs[rmReg(inst)]
	default:
		if t, n, ok := absTableOperand(inst, regs); ok {
			v = absVal{kind: valAbsTarget, addr: t, n: n}
		} else if pointerOperand(inst) {
			return JumpTable{}, pointerWhy
		} else {
			return JumpTable{}, "a jump through memory that is not a bounded table of addresses nor a pointer: a computed goto or a table form not recognised, which could land anywhere"
		}
	}
	if inst.Mod == 3 && v.kind == valLoaded {
		return JumpTable{}, pointerWhy
	}
	jt := JumpTable{Jump: jumpAddr, Start: start, Table: v.addr, Entries: v.n}
	switch v.kind {
	case valRelTarget:
		jt.EntrySize = 4
	case valAbsTarget:
		jt.EntrySize = 8
	default:
		return JumpTable{}, fmt.Sprintf("a jump through %%%s, whose value is not a bounded jump table's entry in the straight-line code before it: a tail call through a pointer, a computed goto, or a table form not recognised", decode.X86RegName(rmReg(inst)))
	}
	size := uint64(jt.Entries * jt.EntrySize)
	b, err := read(jt.Table, size)
	if err != nil || uint64(len(b)) < size {
		if err == nil {
			err = fmt.Errorf("%d of %d bytes in the file", len(b), size)
		}
		return JumpTable{}, fmt.Sprintf("its jump table at %#x (%d entries) cannot be read: %v", jt.Table, jt.Entries, err)
	}
	targets := make([]uint64, 0, jt.Entries)
	for i := range jt.Entries {
		var t uint64
		if jt.EntrySize == 4 {
			t = jt.Table + uint64(int64(int32(binary.LittleEndian.Uint32(b[4*i:]))))
		} else {
			t = binary.LittleEndian.Uint64(b[8*i:])
		}
		ok, known, _ := fn.Boundary(t)
		if !ok {
			where := "outside the function"
			if known {
				where = "inside an instruction of the function"
			}
			return JumpTable{}, fmt.Sprintf("entry %d of its jump table at %#x leads to %#x, %s", i, jt.Table, t, where)
		}
		targets = append(targets, t)
	}
	slices.Sort(targets)
	jt.Targets = slices.Compact(targets)
	return jt, ""
}

// pointerWhy is the reason of a jump through a pointer loaded from memory
// (IndirectJump.Pointer).
const pointerWhy = "a jump through a pointer loaded from memory (a tail call)"

// pointerOperand reports whether the memory operand of inst reads a
// pointer as a program keeps one: no index register, and a base that is
// neither %rsp nor %rbp (a spill slot may hold a computed address).
func pointerOperand(inst *decode.X86Inst) bool {
	if inst.Mod == 3 || inst.AddrSize != 64 {
		return false
	}
	if inst.RIPRel {
		return true
	}
	base := rmReg(inst)
	if inst.HasSIB {
		if inst.SIB>>3&7 != 4 || inst.X {
			return false // an index
		}
		if inst.Mod == 0 && inst.SIB&7 == 5 {
			return true // an absolute address
		}
		base = int(inst.SIB&7) | b2i(inst.B)<<3
	}
	return base != 4 && base != 5
}

// step applies one instruction to the abstract registers.
func step(inst *decode.X86Inst, regs *[16]absVal) {
	m := inst.Map == decode.Map1Byte
	switch {
	case m && inst.Opcode == 0x8d && inst.Mod != 3 && inst.RIPRel && inst.W:
		// lea T(%rip),%rB
		regs[regReg(inst)] = absVal{kind: valConst, addr: inst.Target}
		return
	case m && inst.Opcode == 0x63 && inst.W && inst.Mod != 3:
		// movslq (%rB,%rI,4),%rX
		if b, idx, ok := memBaseIndex(inst, 4); ok && inst.Disp == 0 && regs[b].kind == valConst && regs[idx].kind == valBounded {
			regs[regReg(inst)] = absVal{kind: valRelEntry, addr: regs[b].addr, n: regs[idx].n}
			return
		}
	case m && (inst.Opcode == 0x01 || inst.Opcode == 0x03) && inst.W && inst.Mod == 3:
		// add %rS,%rD: D is the r/m operand for 01, the reg for 03.
		d, s := rmReg(inst), regReg(inst)
		if inst.Opcode == 0x03 {
			d, s = s, d
		}
		a, b := regs[d], regs[s]
		if a.kind == valConst && b.kind == valRelEntry {
			a, b = b, a
		}
		if a.kind == valRelEntry && b.kind == valConst && a.addr == b.addr {
			regs[d] = absVal{kind: valRelTarget, addr: a.addr, n: a.n}
			return
		}
	case m && inst.Opcode == 0x8b && inst.W && inst.Mod != 3:
		// mov T(,%rI,8),%rX
		if t, n, ok := absTableOperand(inst, regs); ok {
			regs[regReg(inst)] = absVal{kind: valAbsTarget, addr: t, n: n}
			return
		}
		if pointerOperand(inst) {
			regs[regReg(inst)] = absVal{kind: valLoaded}
			return
		}
	case m && (inst.Opcode == 0x8b || inst.Opcode == 0x89 || inst.Opcode == 0x63) && inst.Mod == 3:
		// A register copy (mov, movsxd): a bound goes with it, and a
		// 64-bit copy keeps any value.
		d, s := regReg(inst), rmReg(inst)
		if inst.Opcode == 0x89 {
			d, s = s, d
		}
		v := regs[s]
		if inst.OpSize < 32 || v.kind != valBounded && !(inst.W && inst.Opcode != 0x63) {
			v = absVal{}
		}
		regs[d] = v
		return
	case inst.Map == decode.Map0F && (inst.Opcode == 0xb6 || inst.Opcode == 0xb7) && inst.Mod == 3:
		// movzx of the index.
		s := rmReg(inst)
		if inst.Opcode == 0xb6 && inst.REX == 0 && inst.RM >= 4 {
			s = -1 // ah, ch, dh, bh
		}
		d := regReg(inst)
		if s >= 0 && inst.OpSize >= 32 && regs[s].kind == valBounded {
			regs[d] = regs[s]
		} else {
			regs[d] = absVal{}
		}
		return
	}
	clobber(regs, inst.Written)
}

// clobber forgets what the registers written held.
func clobber(regs *[16]absVal, w decode.RegSet) {
	for r := range regs {
		if w.Has(r) {
			regs[r] = absVal{}
		}
	}
}

// cmpImmediate recognises cmp $N,%reg and cmp $N,mem.
func cmpImmediate(inst *decode.X86Inst) (cmpFact, bool) {
	if inst.Map != decode.Map1Byte {
		return cmpFact{}, false
	}
	switch inst.Opcode {
	case 0x3c: // cmp $N,%al
		return cmpFact{reg: 0, imm: inst.Imm & 0xff}, true
	case 0x3d: // cmp $N,%eax / %rax
		return cmpFact{reg: 0, imm: immValue(inst)}, true
	case 0x80, 0x81, 0x83:
		if inst.Reg != 7 {
			return cmpFact{}, false
		}
		imm, size := immValue(inst), inst.OpSize
		if inst.Opcode == 0x80 {
			imm, size = inst.Imm&0xff, 8
		}
		if inst.Mod != 3 {
			return cmpFact{reg: -1, mem: memOf(inst, size), imm: imm}, true
		}
		if inst.Opcode == 0x80 && inst.REX == 0 && inst.RM >= 4 {
			return cmpFact{}, false // ah, ch, dh, bh
		}
		return cmpFact{reg: rmReg(inst), imm: imm}, true
	}
	return cmpFact{}, false
}

// immValue is the immediate of a cmp as the comparison sees it: sign-extended
// to the operand size, as an unsigned number of that size.
func immValue(inst *decode.X86Inst) uint64 {
	v := inst.Imm
	switch inst.ImmSize {
	case 1:
		v = uint64(int64(int8(v)))
	case 2:
		v = uint64(int64(int16(v)))
	case 4:
		v = uint64(int64(int32(v)))
	}
	switch inst.OpSize {
	case 16:
		v &= 0xffff
	case 32:
		v &= 0xffffffff
	}
	return v
}

// jccCond returns the condition code of a jcc (0x7 ja, 0x3 jae, ...).
func jccCond(inst *decode.X86Inst) byte { return inst.Opcode & 0xf }

// absTableOperand recognises T(,%rI,8) with I bounded: the table's address
// (T sign-extended, as the CPU takes a 32-bit displacement without base) and
// its entries.
func absTableOperand(inst *decode.X86Inst, regs *[16]absVal) (uint64, int, bool) {
	if !inst.HasSIB || inst.Mod != 0 || inst.SIB&7 != 5 || inst.B || inst.SIB>>6 != 3 || inst.AddrSize != 64 {
		return 0, 0, false
	}
	idx := int(inst.SIB>>3&7) | b2i(inst.X)<<3
	if idx == 4 || regs[idx].kind != valBounded {
		return 0, 0, false
	}
	return uint64(inst.Disp), regs[idx].n, true
}

// memBaseIndex returns the base and index registers of a memory operand
// (%rB,%rI,scale) with both present.
func memBaseIndex(inst *decode.X86Inst, scale int) (base, index int, ok bool) {
	if !inst.HasSIB || inst.AddrSize != 64 || 1<<(inst.SIB>>6) != scale {
		return 0, 0, false
	}
	base = int(inst.SIB&7) | b2i(inst.B)<<3
	index = int(inst.SIB>>3&7) | b2i(inst.X)<<3
	if inst.Mod == 0 && inst.SIB&7 == 5 || index == 4 {
		return 0, 0, false
	}
	return base, index, true
}

func regReg(inst *decode.X86Inst) int { return int(inst.Reg) | b2i(inst.R)<<3 }
func rmReg(inst *decode.X86Inst) int  { return int(inst.RM) | b2i(inst.B)<<3 }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// inAbsTable reports whether addr lies in one of the function's recovered
// tables of addresses.
func (fn *Function) inAbsTable(addr uint64) bool {
	for _, jt := range fn.tables {
		if jt.EntrySize == 8 && addr >= jt.Table && addr-jt.Table < uint64(8*jt.Entries) {
			return true
		}
	}
	return false
}

// isTarget reports whether a direct branch of the function lands at off.
func (fn *Function) isTarget(off uint64) bool {
	_, found := slices.BinarySearch(fn.targets, uint32(off))
	return found
}

// prevStart returns the offset of the instruction before the one at off.
func (fn *Function) prevStart(off uint64) (uint64, bool) {
	for i := int(off) - 1; i >= 0 && i >= int(off)-15; i-- {
		if fn.starts[i/64]&(1<<(i%64)) != 0 {
			return uint64(i), true
		}
	}
	return 0, false
}
