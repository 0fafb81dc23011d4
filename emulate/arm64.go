package emulate

import (
	"fmt"
	"math/bits"

	"github.com/probeopt/probeopt/decode"
)

// EmulateARM64 executes inst with the zero ARM64 (a CPU that may have
// pointer authentication).
func EmulateARM64(inst *decode.ARM64Inst, st *ARM64State, mem Memory) error {
	return ARM64{}.Step(inst, st, mem)
}

// Step executes inst, located at st.PC, on st and mem. inst.Addr is not
// used: branches, adr, adrp and literal loads are taken relative to st.PC,
// so an instruction decoded at one address can be executed as if it were
// at another.
//
// On success st holds the state after the instruction (PC is the next
// instruction or the branch target). On failure st is unchanged and mem
// has not been changed: the error wraps ErrNotEmulated when inst is outside
// the emulated set or the state is one the emulator does not reproduce (see
// ARM64), and is a *Fault (Kind FaultPage: a data abort, SIGSEGV on Linux)
// when a memory access faults.
//
// Memory accesses are made in the CPU's order, each of at most 8 bytes: a
// 16-byte access is two 8-byte ones, lower address first, and a pair is
// the first register's access then the second's. A store first checks
// every location it will write (with CheckWrite when mem is a
// WriteChecker, else by reading it), then writes them in order; if a later
// Write fails anyway, the earlier ones are written back with the values
// read, so that a faulting store leaves memory as it was. (The
// architecture lets a faulting multi-access store leave some locations
// written, and a faulting load leave its destination registers UNKNOWN;
// the CPU may do either.)
func (a ARM64) Step(inst *decode.ARM64Inst, st *ARM64State, mem Memory) error {
	op, err := a.classify(inst)
	if err != nil {
		return err
	}
	e := a64Exec{in: inst, w: inst.Word, s: *st, mem: mem}
	e.next = st.PC + 4
	if err := e.run(op); err != nil {
		return err
	}
	e.s.PC = e.next
	*st = e.s
	return nil
}

// a64Exec is one execution: the instruction, a scratch copy of the state
// that is committed only on success, and the memory.
type a64Exec struct {
	in   *decode.ARM64Inst
	w    uint32
	s    ARM64State
	mem  Memory
	next uint64 // the new PC
}

// field returns bits hi:lo of the instruction word.
func (e *a64Exec) field(hi, lo uint) uint32 { return a64Field(e.w, hi, lo) }

// a64Cond evaluates condition code cond (0-15) on the NZCV flags.
func a64Cond(cond uint32, nzcv uint64) bool {
	n, z, c, v := nzcv&NZCVN != 0, nzcv&NZCVZ != 0, nzcv&NZCVC != 0, nzcv&NZCVV != 0
	var r bool
	switch cond >> 1 {
	case 0:
		r = z // eq
	case 1:
		r = c // cs
	case 2:
		r = n // mi
	case 3:
		r = v // vs
	case 4:
		r = c && !z // hi
	case 5:
		r = n == v // ge
	case 6:
		r = n == v && !z // gt
	default:
		return true // al, nv
	}
	if cond&1 != 0 {
		return !r
	}
	return r
}

// run executes the classified instruction.
func (e *a64Exec) run(op a64Op) error {
	pc := e.s.PC
	switch op.kind {
	case a64Nop:
	case a64B:
		if e.w>>31 != 0 {
			e.s.X[30] = pc + 4
		}
		e.next = pc + uint64(a64SignExt(uint64(e.field(25, 0)), 26)<<2)
	case a64BCond:
		if a64Cond(e.field(3, 0), e.s.NZCV) {
			e.next = pc + uint64(a64SignExt(uint64(e.field(23, 5)), 19)<<2)
		}
	case a64CB:
		v := e.s.reg(e.field(4, 0))
		if op.width == 32 {
			v = uint64(uint32(v))
		}
		if (v == 0) == (e.w>>24&1 == 0) {
			e.next = pc + uint64(a64SignExt(uint64(e.field(23, 5)), 19)<<2)
		}
	case a64TB:
		bit := e.w>>31<<5 | e.field(23, 19)
		set := e.s.reg(e.field(4, 0))>>bit&1 != 0
		if set == (e.w>>24&1 != 0) {
			e.next = pc + uint64(a64SignExt(uint64(e.field(18, 5)), 14)<<2)
		}
	case a64BR:
		target := e.s.reg(e.field(9, 5))
		if target>>56 != 0 {
			return a64NotEmulated(e.in, fmt.Sprintf("branch to %#x: with a non-zero top byte the target depends on TCR_EL1.TBID0", target))
		}
		if e.field(22, 21) == 1 { // blr
			e.s.X[30] = pc + 4
		}
		e.next = target
	case a64Adr:
		imm := a64SignExt(uint64(e.field(23, 5)<<2|e.field(30, 29)), 21)
		var v uint64
		if e.w>>31 == 0 {
			v = pc + uint64(imm)
		} else {
			v = pc&^0xFFF + uint64(imm<<12)
		}
		e.s.setReg(e.field(4, 0), v, 64)
	case a64LdrLit:
		addr := pc + uint64(a64SignExt(uint64(e.field(23, 5)), 19)<<2)
		return e.loadReg(op, e.field(4, 0), addr)
	case a64AddImm:
		e.addImm(op)
	case a64AddShift:
		e.addShift(op)
	case a64AddExt:
		e.addExt(op)
	case a64LogImm:
		e.logImm(op)
	case a64LogShift:
		e.logShift(op)
	case a64MovWide:
		e.movWide(op)
	case a64Bitfield:
		e.bitfield(op)
	case a64Extr:
		e.extr(op)
	case a64CSel:
		e.csel(op)
	case a64CCmp:
		e.ccmp(op)
	case a64Mul:
		e.mul(op)
	case a64Div:
		e.div(op)
	case a64ShiftV:
		e.shiftV(op)
	case a64BitOp:
		e.bitOp(op)
	case a64LdSt:
		return e.ldst(op)
	case a64LdStPair:
		return e.ldstPair(op)
	default:
		return a64NotEmulated(e.in, "instruction not in the emulated set")
	}
	return nil
}

// a64AddWithCarry adds x, y and carry in width bits and returns the result
// and the NZCV flags, as the architecture's AddWithCarry.
func a64AddWithCarry(x, y, carry uint64, width int) (uint64, uint64) {
	var res, flags uint64
	if width == 32 {
		x, y = uint64(uint32(x)), uint64(uint32(y))
		sum := x + y + carry
		res = uint64(uint32(sum))
		if sum>>32 != 0 {
			flags |= NZCVC
		}
		ss := int64(int32(x)) + int64(int32(y)) + int64(carry)
		if ss != int64(int32(res)) {
			flags |= NZCVV
		}
		if res>>31 != 0 {
			flags |= NZCVN
		}
	} else {
		res = x + y + carry
		// Unsigned carry: the true sum exceeds 64 bits.
		if res < x || (carry != 0 && res == x) {
			flags |= NZCVC
		}
		// Signed overflow: operands of equal sign, result of the other.
		if (x^res)&(y^res)>>63 != 0 {
			flags |= NZCVV
		}
		if res>>63 != 0 {
			flags |= NZCVN
		}
	}
	if res == 0 {
		flags |= NZCVZ
	}
	return res, flags
}

// addSub computes Rn op operand for the add/sub forms (bit 30: sub; bit
// 29: set flags) and returns the result.
func (e *a64Exec) addSub(x, y uint64, width int) uint64 {
	carry := uint64(0)
	if e.w>>30&1 != 0 {
		y, carry = ^y, 1
	}
	res, flags := a64AddWithCarry(x, y, carry, width)
	if e.w>>29&1 != 0 {
		e.s.NZCV = e.s.NZCV&^NZCVMask | flags
	}
	return res
}

func (e *a64Exec) addImm(op a64Op) {
	imm := uint64(e.field(21, 10))
	if e.w>>22&1 != 0 {
		imm <<= 12
	}
	rd, rn := e.field(4, 0), e.field(9, 5)
	res := e.addSub(e.s.regSP(rn), imm, op.width)
	if e.w>>29&1 != 0 { // adds/subs: Rd 31 is the zero register
		e.s.setReg(rd, res, op.width)
	} else {
		e.s.setRegSP(rd, res, op.width)
	}
}

// a64Shift shifts v (width bits) by amount with shift type typ (0 lsl, 1
// lsr, 2 asr, 3 ror). amount is less than width.
func a64Shift(v uint64, typ uint32, amount uint, width int) uint64 {
	if width == 32 {
		v = uint64(uint32(v))
		switch typ {
		case 0:
			return uint64(uint32(v << amount))
		case 1:
			return v >> amount
		case 2:
			return uint64(uint32(int32(uint32(v)) >> amount))
		}
		if amount == 0 {
			return v
		}
		return uint64(uint32(v)>>amount | uint32(v)<<(32-amount))
	}
	switch typ {
	case 0:
		return v << amount
	case 1:
		return v >> amount
	case 2:
		return uint64(int64(v) >> amount)
	}
	if amount == 0 {
		return v
	}
	return v>>amount | v<<(64-amount)
}

func (e *a64Exec) addShift(op a64Op) {
	rd, rn, rm := e.field(4, 0), e.field(9, 5), e.field(20, 16)
	y := a64Shift(e.s.reg(rm), e.field(23, 22), uint(e.field(15, 10)), op.width)
	res := e.addSub(e.s.reg(rn), y, op.width)
	e.s.setReg(rd, res, op.width)
}

// a64Extend extends v by the extend type option (0 uxtb ... 7 sxtx) and
// shifts it left by shift (0-4).
func a64Extend(v uint64, option uint32, shift uint) uint64 {
	switch option {
	case 0:
		v = uint64(uint8(v))
	case 1:
		v = uint64(uint16(v))
	case 2:
		v = uint64(uint32(v))
	case 4:
		v = uint64(int64(int8(v)))
	case 5:
		v = uint64(int64(int16(v)))
	case 6:
		v = uint64(int64(int32(v)))
	}
	return v << shift
}

func (e *a64Exec) addExt(op a64Op) {
	rd, rn, rm := e.field(4, 0), e.field(9, 5), e.field(20, 16)
	y := a64Extend(e.s.reg(rm), e.field(15, 13), uint(e.field(12, 10)))
	res := e.addSub(e.s.regSP(rn), y, op.width)
	if e.w>>29&1 != 0 {
		e.s.setReg(rd, res, op.width)
	} else {
		e.s.setRegSP(rd, res, op.width)
	}
}

// a64Logic applies the logical operation opc (0 and, 1 orr, 2 eor, 3
// ands) and returns the result and, for ands, the flags (N and Z from the
// result, C and V clear).
func a64Logic(opc uint32, x, y uint64, width int) (uint64, uint64) {
	var res uint64
	switch opc {
	case 0, 3:
		res = x & y
	case 1:
		res = x | y
	case 2:
		res = x ^ y
	}
	if width == 32 {
		res = uint64(uint32(res))
	}
	var flags uint64
	if res == 0 {
		flags |= NZCVZ
	}
	if res>>(width-1)&1 != 0 {
		flags |= NZCVN
	}
	return res, flags
}

func (e *a64Exec) logImm(op a64Op) {
	imm, _ := a64DecodeBitMasks(e.w>>22&1, e.field(15, 10), e.field(21, 16), op.width)
	opc, rd, rn := e.field(30, 29), e.field(4, 0), e.field(9, 5)
	res, flags := a64Logic(opc, e.s.reg(rn), imm, op.width)
	if opc == 3 {
		e.s.NZCV = e.s.NZCV&^NZCVMask | flags
		e.s.setReg(rd, res, op.width)
		return
	}
	e.s.setRegSP(rd, res, op.width)
}

func (e *a64Exec) logShift(op a64Op) {
	opc, rd, rn, rm := e.field(30, 29), e.field(4, 0), e.field(9, 5), e.field(20, 16)
	y := a64Shift(e.s.reg(rm), e.field(23, 22), uint(e.field(15, 10)), op.width)
	if e.w>>21&1 != 0 {
		y = ^y
	}
	res, flags := a64Logic(opc, e.s.reg(rn), y, op.width)
	if opc == 3 {
		e.s.NZCV = e.s.NZCV&^NZCVMask | flags
	}
	e.s.setReg(rd, res, op.width)
}

func (e *a64Exec) movWide(op a64Op) {
	opc, rd := e.field(30, 29), e.field(4, 0)
	pos := 16 * uint(e.field(22, 21))
	imm := uint64(e.field(20, 5))
	var res uint64
	switch opc {
	case 0: // movn
		res = ^(imm << pos)
	case 2: // movz
		res = imm << pos
	case 3: // movk
		res = e.s.reg(rd)&^(0xFFFF<<pos) | imm<<pos
	}
	e.s.setReg(rd, res, op.width)
}

// a64DataAddr applies Linux's top-byte-ignore rule for EL0 data accesses:
// the top byte is replaced by copies of bit 55.
func a64DataAddr(a uint64) uint64 {
	if a>>55&1 != 0 {
		return a | 0xFF<<56
	}
	return a &^ (0xFF << 56)
}

// a64Access is one memory access of at most 8 bytes.
type a64Access struct {
	addr uint64
	size int
}

// split returns the accesses of a size-byte access at addr: one, or two
// 8-byte ones for 16 bytes.
func a64Split(addr uint64, size int) []a64Access {
	if size == 16 {
		return []a64Access{{addr, 8}, {addr + 8, 8}}
	}
	return []a64Access{{addr, size}}
}

// read reads size bytes (1-8) at the untagged address a.
func (e *a64Exec) read(a uint64, size int) (uint64, error) {
	v, err := e.mem.Read(a, size)
	if err != nil {
		return 0, memFault(err, a, size, AccessRead)
	}
	if size < 8 {
		v &= 1<<(8*uint(size)) - 1
	}
	return v, nil
}

// loadVal reads a size-byte value (1-16) at addr as two quadwords.
func (e *a64Exec) loadVal(addr uint64, size int) ([2]uint64, error) {
	var v [2]uint64
	for i, acc := range a64Split(a64DataAddr(addr), size) {
		x, err := e.read(acc.addr, acc.size)
		if err != nil {
			return v, err
		}
		v[i] = x
	}
	return v, nil
}

// a64Store is a pending write.
type a64Store struct {
	addr uint64
	size int
	val  uint64
	old  uint64
}

// storeVals makes the writes in order. It first checks every location:
// with the Memory's CheckWrite when it is a WriteChecker, else by reading
// it; then if a write still fails, the earlier ones are undone with the
// values read.
func (e *a64Exec) storeVals(st []a64Store) error {
	wc, _ := e.mem.(WriteChecker)
	for i := range st {
		if wc != nil {
			if err := wc.CheckWrite(st[i].addr, st[i].size); err != nil {
				return memFault(err, st[i].addr, st[i].size, AccessWrite)
			}
			continue
		}
		old, err := e.mem.Read(st[i].addr, st[i].size)
		if err != nil {
			return memFault(err, st[i].addr, st[i].size, AccessWrite)
		}
		st[i].old = old
	}
	for i := range st {
		if err := e.mem.Write(st[i].addr, st[i].size, st[i].val); err != nil {
			if wc == nil {
				for j := i - 1; j >= 0; j-- {
					// Best effort: the location was just written, so it
					// takes its old value back.
					_ = e.mem.Write(st[j].addr, st[j].size, st[j].old)
				}
			}
			return memFault(err, st[i].addr, st[i].size, AccessWrite)
		}
	}
	return nil
}

// storeList appends the writes of a size-byte value v (1-16) at addr.
func a64StoreList(list []a64Store, addr uint64, size int, v [2]uint64) []a64Store {
	for i, acc := range a64Split(a64DataAddr(addr), size) {
		val := v[i]
		if acc.size < 8 {
			val &= 1<<(8*uint(acc.size)) - 1
		}
		list = append(list, a64Store{addr: acc.addr, size: acc.size, val: val})
	}
	return list
}

// loadReg loads register rt from addr as op says (literal loads and
// one-register loads).
func (e *a64Exec) loadReg(op a64Op, rt uint32, addr uint64) error {
	v, err := e.loadVal(addr, op.size)
	if err != nil {
		return err
	}
	e.setData(op, rt, v)
	return nil
}

// setData writes a loaded value into data register rt.
func (e *a64Exec) setData(op a64Op, rt uint32, v [2]uint64) {
	if op.vec {
		e.s.V[rt] = v
		return
	}
	x := v[0]
	if op.signed {
		x = uint64(a64SignExt(x, uint(8*op.size)))
	}
	e.s.setReg(rt, x, op.width)
}

// dataVal returns the value a store takes from data register rt.
func (e *a64Exec) dataVal(op a64Op, rt uint32) [2]uint64 {
	if op.vec {
		return e.s.V[rt]
	}
	return [2]uint64{e.s.reg(rt)}
}

// base reads the base register of a load or store (31 is sp) and checks
// the alignment of sp.
func (e *a64Exec) base() (uint64, error) {
	rn := e.field(9, 5)
	if rn == 31 {
		if e.s.SP&15 != 0 {
			return 0, a64NotEmulated(e.in, fmt.Sprintf("sp %#x is not 16-byte aligned: the CPU raises an SP alignment fault", e.s.SP))
		}
		return e.s.SP, nil
	}
	return e.s.X[rn], nil
}

// address computes the access address and the written-back base of a
// load or store.
func (e *a64Exec) address(op a64Op) (addr, wb uint64, err error) {
	b, err := e.base()
	if err != nil {
		return 0, 0, err
	}
	switch op.mode {
	case a64AddrOffset:
		return b + uint64(op.imm), 0, nil
	case a64AddrPre:
		a := b + uint64(op.imm)
		return a, a, nil
	case a64AddrPost:
		return b, b + uint64(op.imm), nil
	}
	// Register offset: the index is extended and shifted by log2(size)
	// when S is set.
	shift := uint(0)
	if e.w>>12&1 != 0 {
		for n := op.size; n > 1; n >>= 1 {
			shift++
		}
	}
	return b + a64Extend(e.s.reg(e.field(20, 16)), e.field(15, 13), shift), 0, nil
}

// writeBack updates the base register of a pre- or post-indexed form.
func (e *a64Exec) writeBack(op a64Op, wb uint64) {
	if op.mode == a64AddrPre || op.mode == a64AddrPost {
		e.s.setRegSP(e.field(9, 5), wb, 64)
	}
}

func (e *a64Exec) ldst(op a64Op) error {
	addr, wb, err := e.address(op)
	if err != nil {
		return err
	}
	rt := e.field(4, 0)
	if op.load {
		v, err := e.loadVal(addr, op.size)
		if err != nil {
			return err
		}
		e.writeBack(op, wb)
		e.setData(op, rt, v)
		return nil
	}
	var buf [2]a64Store
	if err := e.storeVals(a64StoreList(buf[:0], addr, op.size, e.dataVal(op, rt))); err != nil {
		return err
	}
	e.writeBack(op, wb)
	return nil
}

func (e *a64Exec) ldstPair(op a64Op) error {
	addr, wb, err := e.address(op)
	if err != nil {
		return err
	}
	rt, rt2 := e.field(4, 0), e.field(14, 10)
	addr2 := addr + uint64(op.size)
	if op.load {
		v1, err := e.loadVal(addr, op.size)
		if err != nil {
			return err
		}
		v2, err := e.loadVal(addr2, op.size)
		if err != nil {
			return err
		}
		e.writeBack(op, wb)
		e.setData(op, rt, v1)
		e.setData(op, rt2, v2)
		return nil
	}
	var buf [4]a64Store
	list := a64StoreList(buf[:0], addr, op.size, e.dataVal(op, rt))
	list = a64StoreList(list, addr2, op.size, e.dataVal(op, rt2))
	if err := e.storeVals(list); err != nil {
		return err
	}
	e.writeBack(op, wb)
	return nil
}

// a64Mask returns the low width bits set.
func a64Mask(width int) uint64 {
	if width == 64 {
		return ^uint64(0)
	}
	return 1<<uint(width) - 1
}

// a64Ror rotates the low width bits of v right by r (< width).
func a64Ror(v uint64, r uint, width int) uint64 {
	v &= a64Mask(width)
	if r == 0 {
		return v
	}
	return (v>>r | v<<(uint(width)-r)) & a64Mask(width)
}

// a64Ones returns n low bits set (n <= 64).
func a64Ones(n uint) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// bitfield executes sbfm, bfm and ubfm as the architecture's pseudocode
// does with DecodeBitMasks(N, imms, immr, FALSE).
func (e *a64Exec) bitfield(op a64Op) {
	width := op.width
	opc, rd, rn := e.field(30, 29), e.field(4, 0), e.field(9, 5)
	s, r := uint(e.field(15, 10)), uint(e.field(21, 16))
	d := (s - r) & uint(width-1)
	wmask := a64Ror(a64Ones(s+1), r, width)
	tmask := a64Ones(d + 1)
	src := e.s.reg(rn)
	bot := a64Ror(src, r, width) & wmask
	var res uint64
	switch opc {
	case 0: // sbfm
		top := uint64(0)
		if src>>s&1 != 0 {
			top = a64Mask(width)
		}
		res = top&^tmask | bot&tmask
	case 1: // bfm
		dst := e.s.reg(rd)
		bot = dst&^wmask | a64Ror(src, r, width)&wmask
		res = dst&^tmask | bot&tmask
	default: // ubfm
		res = bot & tmask
	}
	e.s.setReg(rd, res&a64Mask(width), width)
}

func (e *a64Exec) extr(op a64Op) {
	rd, rn, rm, lsb := e.field(4, 0), e.field(9, 5), e.field(20, 16), uint(e.field(15, 10))
	hi, lo := e.s.reg(rn)&a64Mask(op.width), e.s.reg(rm)&a64Mask(op.width)
	res := lo
	if lsb != 0 {
		res = (lo>>lsb | hi<<(uint(op.width)-lsb)) & a64Mask(op.width)
	}
	e.s.setReg(rd, res, op.width)
}

func (e *a64Exec) csel(op a64Op) {
	rd, rn, rm := e.field(4, 0), e.field(9, 5), e.field(20, 16)
	var res uint64
	if a64Cond(e.field(15, 12), e.s.NZCV) {
		res = e.s.reg(rn)
	} else {
		res = e.s.reg(rm)
		if e.w>>30&1 != 0 {
			res = ^res
		}
		if e.w>>10&1 != 0 {
			res++
		}
	}
	e.s.setReg(rd, res, op.width)
}

func (e *a64Exec) ccmp(op a64Op) {
	if !a64Cond(e.field(15, 12), e.s.NZCV) {
		e.s.NZCV = e.s.NZCV&^NZCVMask | uint64(e.field(3, 0))<<28
		return
	}
	y := uint64(e.field(20, 16))
	if e.w>>11&1 == 0 {
		y = e.s.reg(e.field(20, 16))
	}
	carry := uint64(0)
	if e.w>>30&1 != 0 { // ccmp: subtract
		y, carry = ^y, 1
	}
	_, flags := a64AddWithCarry(e.s.reg(e.field(9, 5)), y, carry, op.width)
	e.s.NZCV = e.s.NZCV&^NZCVMask | flags
}

func (e *a64Exec) mul(op a64Op) {
	rd, rn, rm, ra := e.field(4, 0), e.field(9, 5), e.field(20, 16), e.field(14, 10)
	sub := e.w>>15&1 != 0
	x, y, acc := e.s.reg(rn), e.s.reg(rm), e.s.reg(ra)
	var res uint64
	switch e.field(23, 21) {
	case 0: // madd, msub
		res = x * y
	case 1: // smaddl, smsubl
		res = uint64(int64(int32(x)) * int64(int32(y)))
	case 5: // umaddl, umsubl
		res = uint64(uint32(x)) * uint64(uint32(y))
	case 2: // smulh
		e.s.setReg(rd, a64MulHighSigned(x, y), 64)
		return
	default: // umulh
		hi, _ := a64MulHigh(x, y)
		e.s.setReg(rd, hi, 64)
		return
	}
	if sub {
		res = acc - res
	} else {
		res = acc + res
	}
	e.s.setReg(rd, res, op.width)
}

// a64MulHigh returns the high and low 64 bits of the unsigned product.
func a64MulHigh(x, y uint64) (uint64, uint64) {
	x0, x1 := x&0xFFFFFFFF, x>>32
	y0, y1 := y&0xFFFFFFFF, y>>32
	w0 := x0 * y0
	t := x1*y0 + w0>>32
	w1 := t&0xFFFFFFFF + x0*y1
	return x1*y1 + t>>32 + w1>>32, x * y
}

// a64MulHighSigned returns the high 64 bits of the signed product.
func a64MulHighSigned(x, y uint64) uint64 {
	hi, _ := a64MulHigh(x, y)
	if int64(x) < 0 {
		hi -= y
	}
	if int64(y) < 0 {
		hi -= x
	}
	return hi
}

func (e *a64Exec) div(op a64Op) {
	rd, rn, rm := e.field(4, 0), e.field(9, 5), e.field(20, 16)
	x, y := e.s.reg(rn)&a64Mask(op.width), e.s.reg(rm)&a64Mask(op.width)
	var res uint64
	switch {
	case y == 0:
		res = 0 // division by zero gives zero, without a trap
	case e.w>>10&1 == 0: // udiv
		res = x / y
	case op.width == 32:
		a, b := int64(int32(x)), int64(int32(y))
		res = uint64(a / b) // int64: INT32_MIN / -1 does not overflow
	default:
		a, b := int64(x), int64(y)
		if a == -1<<63 && b == -1 {
			res = x // overflow: the result is INT64_MIN
		} else {
			res = uint64(a / b)
		}
	}
	e.s.setReg(rd, res&a64Mask(op.width), op.width)
}

func (e *a64Exec) shiftV(op a64Op) {
	rd, rn, rm := e.field(4, 0), e.field(9, 5), e.field(20, 16)
	amount := uint(e.s.reg(rm) % uint64(op.width))
	e.s.setReg(rd, a64Shift(e.s.reg(rn), e.field(11, 10), amount, op.width), op.width)
}

func (e *a64Exec) bitOp(op a64Op) {
	rd, rn := e.field(4, 0), e.field(9, 5)
	x := e.s.reg(rn) & a64Mask(op.width)
	width := uint(op.width)
	var res uint64
	switch e.field(15, 10) {
	case 0: // rbit
		res = bits.Reverse64(x) >> (64 - width)
	case 1: // rev16: bytes swapped in each halfword
		res = (x&0x00FF00FF00FF00FF)<<8 | (x>>8)&0x00FF00FF00FF00FF
	case 2: // rev32 (64-bit), rev (32-bit): bytes reversed in each word
		res = uint64(bits.ReverseBytes32(uint32(x)))
		if width == 64 {
			res |= uint64(bits.ReverseBytes32(uint32(x>>32))) << 32
		}
	case 3: // rev (64-bit)
		res = bits.ReverseBytes64(x)
	case 4: // clz
		res = uint64(bits.LeadingZeros64(x) - (64 - int(width)))
	default: // cls: leading bits equal to the sign bit, not counting it
		sx := x
		if x>>(width-1)&1 != 0 {
			sx = ^x & a64Mask(op.width)
		}
		res = uint64(bits.LeadingZeros64(sx) - (64 - int(width)) - 1)
	}
	e.s.setReg(rd, res&a64Mask(op.width), op.width)
}
