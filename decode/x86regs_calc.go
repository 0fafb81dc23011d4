package decode

// Register sources of an entry's srcR/srcW/srcByte masks (generated from
// the operands by internal/x86map).
const (
	srcReg  = 1 << iota // ModRM.reg
	srcRM               // ModRM.rm when mod == 3
	srcVVVV             // VEX/EVEX/XOP vvvv
	srcZ                // the opcode's low three bits
	srcMem              // base and index of the memory operand (read)
)

// regCtx holds the register numbers an instruction's fields name, with
// their extension bits applied; base and index are -1 when absent.
type regCtx struct {
	reg, rm, z, vvvv int
	base, index      int
	mod3, hasMem     bool
	noREX            bool // byte registers 4-7 are ah ch dh bh
	xchgR8           bool // 90 with REX.B: xchg r8, rax
	rep              bool // a REP or REPNE prefix is present
}

// srcBit returns the register set holding the register of one source,
// mapping byte registers 4-7 to ah..bh when the entry says so.
func srcBit(e *x86Entry, src uint8, r int, noREX bool) RegSet {
	if e.srcByte&src != 0 && noREX && r >= 4 && r < 8 {
		r -= 4
	}
	return RegSet(1) << uint(r)
}

// regs returns the general-purpose registers read and written, from the
// entry's precomputed masks.
func (c regCtx) regs(e *x86Entry) (rd, wr RegSet) {
	rd, wr = RegSet(e.impR), RegSet(e.impW)
	all := e.srcR | e.srcW
	if all == 0 && !c.xchgR8 && e.flags&fString == 0 {
		return rd, wr
	}
	if all&srcReg != 0 {
		m := srcBit(e, srcReg, c.reg, c.noREX)
		if e.srcR&srcReg != 0 {
			rd |= m
		}
		if e.srcW&srcReg != 0 {
			wr |= m
		}
	}
	if c.mod3 && all&srcRM != 0 {
		m := srcBit(e, srcRM, c.rm, c.noREX)
		if e.srcR&srcRM != 0 {
			rd |= m
		}
		if e.srcW&srcRM != 0 {
			wr |= m
		}
	}
	if c.hasMem && e.srcR&srcMem != 0 {
		if c.base >= 0 {
			rd |= RegSet(1) << uint(c.base)
		}
		if c.index >= 0 {
			rd |= RegSet(1) << uint(c.index)
		}
	}
	if all&srcVVVV != 0 {
		m := RegSet(1) << uint(c.vvvv)
		if e.srcR&srcVVVV != 0 {
			rd |= m
		}
		if e.srcW&srcVVVV != 0 {
			wr |= m
		}
	}
	if all&srcZ != 0 {
		m := srcBit(e, srcZ, c.z, c.noREX)
		if e.srcR&srcZ != 0 {
			rd |= m
		}
		if e.srcW&srcZ != 0 {
			wr |= m
		}
	}
	if c.xchgR8 {
		m := RegSet(1)<<uint(c.z) | 1<<RAX
		rd |= m
		wr |= m
	}
	if e.flags&fString != 0 && c.rep {
		rd |= 1 << RCX
		wr |= 1 << RCX
	}
	return rd, wr
}
