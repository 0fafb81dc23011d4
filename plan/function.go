package plan

import (
	"iter"
	"math/bits"
	"sort"

	"github.com/probeopt/probeopt/decode"
)

// Function is what the function-wide checks need to know about one
// function: where its instructions start, as found by decoding it linearly
// from its first byte, where its direct branches land, whether it jumps
// through registers, and (arm64) where its load/store exclusives are.
type Function struct {
	Arch decode.Arch
	// Addr is the address of the first byte; Code the function's bytes
	// (a view, kept for the detour checks).
	Addr uint64
	Code []byte
	// Decoded is the number of bytes the linear sweep covered: len(Code)
	// when every instruction decoded. Err says why it stopped early.
	Decoded int
	Err     error
	// Instructions counts the instructions decoded.
	Instructions int
	// IndirectJumps counts the jumps through a register or memory (jump
	// tables, tail calls through pointers); see JumpTables and
	// UnresolvedJumps for what ResolveJumpTables made of them.
	IndirectJumps int

	starts  []uint64 // bit i set: an instruction starts at offset i
	targets []uint32 // sorted offsets of direct branch targets inside the function
	// exclusives are the offsets of arm64 load (excl[i].store false) and
	// store exclusives, in order.
	exclusives []exclusive
	exits      []Exit
	// indirect are the offsets of the indirect jumps; ResolveJumpTables
	// (resolved) splits them into tables and unresolved.
	indirect   []uint32
	resolved   bool
	tables     []JumpTable
	unresolved []IndirectJump
}

// Exit is an instruction by which a function may leave without a call:
// a return, a direct jump out of the function (a tail call), or an
// indirect jump (a jump table inside it or a tail call: the sweep cannot
// tell).
type Exit struct {
	Addr   uint64
	Kind   decode.BranchKind // BranchRet, BranchRetImm, BranchJmp or BranchJmpIndirect
	Target uint64            // the target of a direct jump, else 0
}

// Exits lists the function's exits in address order, as far as the sweep
// decoded (Decoded).
func (fn *Function) Exits() []Exit { return fn.exits }

// noteExit records the instruction at addr if it is an exit (see Exit).
func (fn *Function) noteExit(addr uint64, kind decode.BranchKind, target uint64) {
	switch kind {
	case decode.BranchRet, decode.BranchRetImm, decode.BranchJmpIndirect:
		fn.exits = append(fn.exits, Exit{Addr: addr, Kind: kind})
	case decode.BranchJmp:
		if target < fn.Addr || target-fn.Addr >= uint64(len(fn.Code)) {
			fn.exits = append(fn.exits, Exit{Addr: addr, Kind: kind, Target: target})
		}
	}
}

type exclusive struct {
	off   uint32
	store bool
}

// Boundary says whether an instruction starts at addr: known is false when
// the sweep stopped before addr, or addr lies outside the function. When
// addr is inside an instruction, start is that instruction's address.
func (fn *Function) Boundary(addr uint64) (ok, known bool, start uint64) {
	if addr < fn.Addr || addr-fn.Addr >= uint64(len(fn.Code)) {
		return false, false, 0
	}
	off := int(addr - fn.Addr)
	if off > fn.Decoded || off == fn.Decoded && fn.Err == nil {
		return false, false, 0
	}
	if fn.starts[off/64]&(1<<(off%64)) != 0 {
		return true, true, addr
	}
	for i := off - 1; i >= 0; i-- {
		if fn.starts[i/64]&(1<<(i%64)) != 0 {
			return false, true, fn.Addr + uint64(i)
		}
	}
	return false, true, fn.Addr
}

// Starts yields the address of every instruction the sweep found, in
// order.
func (fn *Function) Starts() iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		for w, word := range fn.starts {
			for word != 0 {
				off := w*64 + bits.TrailingZeros64(word)
				word &= word - 1
				if off >= fn.Decoded || !yield(fn.Addr+uint64(off)) {
					return
				}
			}
		}
	}
}

// BranchTargetIn reports whether a direct branch of the function lands in
// (lo, hi): strictly after lo and before hi.
func (fn *Function) BranchTargetIn(lo, hi uint64) (uint64, bool) {
	if hi <= fn.Addr {
		return 0, false
	}
	start := uint32(0)
	if lo >= fn.Addr {
		start = uint32(lo-fn.Addr) + 1
	}
	i := sort.Search(len(fn.targets), func(i int) bool { return fn.targets[i] >= start })
	if i < len(fn.targets) && fn.Addr+uint64(fn.targets[i]) < hi {
		return fn.Addr + uint64(fn.targets[i]), true
	}
	return 0, false
}

func (fn *Function) mark(off int) { fn.starts[off/64] |= 1 << (off % 64) }

func (fn *Function) addTarget(target uint64) {
	if target >= fn.Addr && target-fn.Addr < uint64(len(fn.Code)) {
		fn.targets = append(fn.targets, uint32(target-fn.Addr))
	}
}

func (fn *Function) finishTargets() {
	if !sort.SliceIsSorted(fn.targets, func(i, j int) bool { return fn.targets[i] < fn.targets[j] }) {
		sort.Slice(fn.targets, func(i, j int) bool { return fn.targets[i] < fn.targets[j] })
	}
}

// AnalyzeX86 decodes an x86-64 function linearly from its first byte,
// with the decoder's length-and-attributes path.
func AnalyzeX86(addr uint64, code []byte, dec decode.X86Decoder) *Function {
	fn := &Function{Arch: decode.X86_64, Addr: addr, Code: code, starts: make([]uint64, len(code)/64+1)}
	var l decode.X86Layout
	off := 0
	for off < len(code) {
		if err := dec.Layout(code[off:], addr+uint64(off), &l); err != nil {
			fn.Err = err
			break
		}
		fn.mark(off)
		fn.Instructions++
		fn.noteExit(addr+uint64(off), l.Branch, l.Target)
		switch {
		case l.Branch.Relative():
			fn.addTarget(l.Target)
		case l.Branch == decode.BranchJmpIndirect:
			fn.IndirectJumps++
			fn.indirect = append(fn.indirect, uint32(off))
		}
		off += int(l.Len)
	}
	fn.Decoded = min(off, len(code))
	fn.finishTargets()
	return fn
}

// AnalyzeARM64 decodes an arm64 function word by word.
func AnalyzeARM64(addr uint64, code []byte) *Function {
	fn := &Function{Arch: decode.ARM64, Addr: addr, Code: code, starts: make([]uint64, len(code)/64+1)}
	off := 0
	for ; off+4 <= len(code); off += 4 {
		fn.mark(off)
		inst, err := decode.DecodeARM64(code[off:], addr+uint64(off))
		if err != nil {
			// Data in code (udf, literal pools) does not stop an arm64
			// sweep: instructions stay 4-byte aligned.
			continue
		}
		fn.Instructions++
		fn.noteExit(addr+uint64(off), inst.Branch, inst.Target)
		switch {
		case inst.PCRel && inst.Branch.Relative():
			fn.addTarget(inst.Target)
		case inst.Branch == decode.BranchJmpIndirect:
			fn.IndirectJumps++
			fn.indirect = append(fn.indirect, uint32(off))
		}
		if inst.Exclusive != decode.ARM64ExclNone {
			fn.exclusives = append(fn.exclusives, exclusive{off: uint32(off), store: inst.Exclusive == decode.ARM64ExclStore})
		}
	}
	fn.Decoded = off
	if off < len(code) {
		fn.Err = decode.ErrTruncated
	}
	fn.finishTargets()
	return fn
}

// exclusiveWindow reports whether addr lies inside a load/store-exclusive
// sequence, as Linux kprobes judge it: scanning back at most 32
// instructions (or to the function start), a load-exclusive is met before
// any store-exclusive. It returns the load's address.
func (fn *Function) exclusiveWindow(addr uint64) (uint64, bool) {
	if addr < fn.Addr {
		return 0, false
	}
	off := addr - fn.Addr
	for i := len(fn.exclusives) - 1; i >= 0; i-- {
		e := fn.exclusives[i]
		if uint64(e.off) >= off {
			continue
		}
		if off-uint64(e.off) > 32*4 {
			return 0, false
		}
		if e.store {
			return 0, false
		}
		return fn.Addr + uint64(e.off), true
	}
	return 0, false
}
