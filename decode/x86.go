package decode

//go:generate go run ./internal/x86gen -in x86map.txt -out x86tables.go

// X86Decoder decodes x86-64 instructions in 64-bit mode. The zero value
// decodes as an AMD64 CPU (and objdump) does; set Vendor to follow an Intel
// CPU where the two differ.
type X86Decoder struct {
	Vendor Vendor
}

// DecodeX86 decodes the first instruction in b, located at address addr,
// with the default (AMD) vendor rules.
func DecodeX86(b []byte, addr uint64) (X86Inst, error) {
	var inst X86Inst
	err := X86Decoder{}.Decode(b, addr, &inst)
	return inst, err
}

// Entry flags (see x86map.txt for the attributes they come from).
const (
	fInvalid  = 1 << iota // undefined in 64-bit mode
	fModRM                // has a ModRM byte
	fD64                  // operand size defaults to 64 bits
	fF64                  // near branch: 64-bit operand size (Intel), 66 gives 16 (AMD)
	fString               // string instruction
	fVSIB                 // vector-index memory operand
	fNoREX2               // undefined with REX2
	fAMD                  // AMD-only encoding
	fMemOnly              // ModRM.mod must not be 3
	fDefault              // a map's default form, not described one by one
	fMand66               // the 66 prefix selects this form (it is not an operand-size prefix)
	fLockable             // accepts LOCK with a memory destination
	fRegForm              // ModRM.mod is ignored: always register operands
)

// Selector kinds of decision-tree nodes.
const (
	selLeaf   = iota
	selPrefix // 4 children by mandatory prefix: none, 66, F3, F2
	selModRM  // 16 children by (mod == 3)*8 + reg
	selRM     // 8 children by rm (register forms)
	withModRM // 1 child, reached through a ModRM byte its operands do not name
)

// Immediate kinds.
const (
	immNone = iota
	immB
	immW
	immD
	immZ     // 16 or 32 bits by operand size
	immV     // 16, 32 or 64 bits by operand size
	immRelB  // rel8
	immRelZ  // rel16 or rel32
	immMoffs // 32 or 64 bits by address size
)

// Operand kinds.
const (
	opNone = iota
	opE
	opG
	opR
	opM
	opB
	opZ
	opX
	opY
	opO
	opImm
	opRel
	opIs4
	opFixed
	opConst1
	opSeg
	opVReg
	opVRM
	opVRMReg
	opVVVV
)

// Operand sizes.
const (
	szNone = iota
	szB
	szBH // a high byte register (ah ch dh bh)
	szW
	szD
	szQ
	szV
	szY
	szZ
)

// Operand access.
const (
	accR = iota
	accW
	accRW
	accNone
)

type x86Operand struct {
	kind, size, access, reg uint8
}

// x86Entry is a node of an opcode decision tree: a selector (sel != 0)
// whose children start at x86Children[child], or a leaf describing one
// instruction form.
type x86Entry struct {
	sel    uint8
	child  uint16
	flags  uint16
	imm    [2]uint8
	branch BranchKind
	nops   uint8
	ops    [4]x86Operand
	impR   uint32
	impW   uint32
	mnem   string
}

// prefixClass classifies a byte in the legacy-prefix position.
var prefixClass = func() (t [256]X86Prefixes) {
	t[0xF0] = PrefixLock
	t[0xF2] = PrefixREPNE
	t[0xF3] = PrefixREP
	t[0x2E] = PrefixCS
	t[0x36] = PrefixSS
	t[0x3E] = PrefixDS
	t[0x26] = PrefixES
	t[0x64] = PrefixFS
	t[0x65] = PrefixGS
	t[0x66] = PrefixData
	t[0x67] = PrefixAddr
	return t
}()

// need reports whether bytes up to end (exclusive) can be read.
func need(b []byte, end int) error {
	if end > 15 {
		return ErrTooLong
	}
	if end > len(b) {
		return ErrTruncated
	}
	return nil
}

// Decode decodes the first instruction in b, located at address addr, into
// inst. On error inst.Len is 0 and the error is one of ErrTruncated,
// ErrInvalid, ErrTooLong or ErrUnknown. Decode does not allocate.
func (d X86Decoder) Decode(b []byte, addr uint64, inst *X86Inst) error {
	*inst = X86Inst{}
	err := d.decode(b, addr, inst)
	if err != nil {
		*inst = X86Inst{}
	}
	return err
}

func (d X86Decoder) decode(b []byte, addr uint64, inst *X86Inst) error {
	inst.Addr = addr
	i := 0
	var rex byte
	var rep byte // last of F2/F3
	// Legacy prefixes and REX. A REX followed by a legacy prefix is ignored.
	for {
		if err := need(b, i+1); err != nil {
			return err
		}
		c := b[i]
		if p := prefixClass[c]; p != 0 {
			inst.Prefixes |= p
			inst.NumPrefixes++
			switch c {
			case 0xF2, 0xF3:
				rep = c
			case 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65:
				inst.LastSeg = c
			}
			rex = 0
			i++
			continue
		}
		if c&0xF0 == 0x40 {
			rex = c
			i++
			continue
		}
		break
	}
	inst.REX = rex
	if rex != 0 {
		inst.W, inst.R, inst.X, inst.B = rex&8 != 0, rex&4 != 0, rex&2 != 0, rex&1 != 0
	}
	has66 := inst.Prefixes&PrefixData != 0
	tbl := tbl1byte
	c := b[i]
	vexLike := false
	switch c {
	case 0xD5: // REX2
		if rex != 0 {
			return ErrInvalid
		}
		if err := need(b, i+2); err != nil {
			return err
		}
		p := b[i+1]
		inst.Encoding = EncREX2
		inst.W, inst.R, inst.X, inst.B = p&8 != 0, p&4 != 0, p&2 != 0, p&1 != 0
		inst.R4, inst.X4, inst.B4 = p&0x40 != 0, p&0x20 != 0, p&0x10 != 0
		i += 2
		if p&0x80 != 0 {
			tbl = tbl0f
			inst.Map = Map0F
		}
	case 0xC4, 0xC5, 0x62:
		if rex != 0 || inst.Prefixes&(PrefixData|PrefixREP|PrefixREPNE|PrefixLock) != 0 {
			return ErrInvalid
		}
		vexLike = true
		switch c {
		case 0xC5:
			if err := need(b, i+2); err != nil {
				return err
			}
			p := b[i+1]
			inst.Encoding = EncVEX2
			inst.R = p&0x80 == 0
			inst.VVVV = (^p >> 3) & 0xF
			inst.L = (p >> 2) & 1
			inst.PP = p & 3
			inst.Map = Map0F
			i += 2
		case 0xC4:
			if err := need(b, i+3); err != nil {
				return err
			}
			p1, p2 := b[i+1], b[i+2]
			inst.Encoding = EncVEX3
			inst.R, inst.X, inst.B = p1&0x80 == 0, p1&0x40 == 0, p1&0x20 == 0
			switch p1 & 0x1F {
			case 1, 2, 3:
				inst.Map = X86Map(p1 & 0x1F)
			default:
				return ErrInvalid
			}
			inst.W = p2&0x80 != 0
			inst.VVVV = (^p2 >> 3) & 0xF
			inst.L = (p2 >> 2) & 1
			inst.PP = p2 & 3
			i += 3
		case 0x62:
			if err := need(b, i+4); err != nil {
				return err
			}
			p0, p1, p2 := b[i+1], b[i+2], b[i+3]
			inst.Encoding = EncEVEX
			inst.R, inst.X, inst.B, inst.R4 = p0&0x80 == 0, p0&0x40 == 0, p0&0x20 == 0, p0&0x10 == 0
			inst.B4 = p0&0x08 != 0
			switch p0 & 7 {
			case 1, 2, 3, 5, 6:
				inst.Map = X86Map(p0 & 7)
			case 0:
				return ErrInvalid
			default:
				return ErrUnknown
			}
			if p1&0x04 == 0 {
				return ErrInvalid
			}
			inst.W = p1&0x80 != 0
			inst.VVVV = (^p1 >> 3) & 0xF
			inst.PP = p1 & 3
			inst.EVEXz = p2&0x80 != 0
			inst.L = (p2 >> 5) & 3
			inst.EVEXb = p2&0x10 != 0
			inst.V4 = p2&0x08 == 0
			inst.EVEXaaa = p2 & 7
			i += 4
		}
	case 0x8F:
		if err := need(b, i+2); err != nil {
			return err
		}
		p1 := b[i+1]
		if p1&0x38 == 0 {
			break // pop Ev
		}
		if rex != 0 || inst.Prefixes&(PrefixData|PrefixREP|PrefixREPNE|PrefixLock) != 0 {
			return ErrInvalid
		}
		if err := need(b, i+3); err != nil {
			return err
		}
		p2 := b[i+2]
		vexLike = true
		inst.Encoding = EncXOP
		inst.R, inst.X, inst.B = p1&0x80 == 0, p1&0x40 == 0, p1&0x20 == 0
		switch p1 & 0x1F {
		case 8:
			inst.Map = MapXOP8
		case 9:
			inst.Map = MapXOP9
		case 10:
			inst.Map = MapXOPA
		default:
			return ErrInvalid
		}
		inst.W = p2&0x80 != 0
		inst.VVVV = (^p2 >> 3) & 0xF
		inst.L = (p2 >> 2) & 1
		inst.PP = p2 & 3
		i += 3
	}

	// Opcode.
	if err := need(b, i+1); err != nil {
		return err
	}
	op := b[i]
	i++
	if vexLike {
		switch inst.Encoding {
		case EncVEX2, EncVEX3:
			tbl = tblVex1 + int(inst.Map) - 1
		case EncEVEX:
			switch inst.Map {
			case Map0F, Map0F38, Map0F3A:
				tbl = tblEvex1 + int(inst.Map) - 1
			case MapEVEX5:
				tbl = tblEvex5
			case MapEVEX6:
				tbl = tblEvex6
			}
		case EncXOP:
			tbl = tblXop8 + int(inst.Map-MapXOP8)
		}
		inst.MandPrefix = [4]byte{0, 0x66, 0xF3, 0xF2}[inst.PP]
	} else {
		if inst.Encoding == EncREX2 {
			if tbl == tbl1byte {
				switch {
				case op == 0x0F || prefixClass[op] != 0 || op&0xF0 == 0x40 ||
					op == 0xC4 || op == 0xC5 || op == 0x62 || op == 0xD5:
					return ErrInvalid
				case op == 0xA1 && !inst.W:
					return d.jmpabs(b, i, op, inst)
				}
			} else if op == 0x38 || op == 0x3A || op == 0x0F {
				return ErrInvalid
			}
		} else if op == 0x0F {
			if err := need(b, i+1); err != nil {
				return err
			}
			op = b[i]
			i++
			tbl = tbl0f
			inst.Map = Map0F
			switch op {
			case 0x38, 0x3A:
				if err := need(b, i+1); err != nil {
					return err
				}
				if op == 0x38 {
					tbl, inst.Map = tbl0f38, Map0F38
				} else {
					tbl, inst.Map = tbl0f3a, Map0F3A
				}
				op = b[i]
				i++
			case 0x0F:
				tbl, inst.Map = tbl3dnow, Map3DNow
			}
		}
		switch rep {
		case 0xF3:
			inst.MandPrefix = 0xF3
		case 0xF2:
			inst.MandPrefix = 0xF2
		default:
			if has66 {
				inst.MandPrefix = 0x66
			}
		}
	}
	inst.Opcode = op

	// Walk the decision tree.
	id := x86Index[tbl][op]
	if id == 0 {
		return ErrUnknown
	}
	e := &x86Entries[id]
	if e.sel == selPrefix {
		pi := 0
		switch inst.MandPrefix {
		case 0x66:
			pi = 1
		case 0xF3:
			pi = 2
		case 0xF2:
			pi = 3
		}
		id = x86Children[int(e.child)+pi]
		if id == 0 {
			return ErrInvalid
		}
		e = &x86Entries[id]
	}
	hasModRM := e.sel != selLeaf || e.flags&fModRM != 0
	if inst.Encoding == EncEVEX || inst.Encoding == EncXOP || tbl == tbl3dnow {
		hasModRM = true
	}
	if hasModRM {
		if err := need(b, i+1); err != nil {
			return err
		}
		m := b[i]
		inst.HasModRM = true
		inst.ModRM = m
		inst.Mod, inst.Reg, inst.RM = m>>6, (m>>3)&7, m&7
		i++
		switch e.sel {
		case selModRM:
			slot := int(inst.Reg)
			if inst.Mod == 3 {
				slot += 8
			}
			id = x86Children[int(e.child)+slot]
			if id == 0 {
				return ErrInvalid
			}
			e = &x86Entries[id]
			if e.sel == selRM {
				id = x86Children[int(e.child)+int(inst.RM)]
				if id == 0 {
					return ErrInvalid
				}
				e = &x86Entries[id]
			}
		case withModRM:
			id = x86Children[e.child]
			e = &x86Entries[id]
		}
		if e.sel == withModRM {
			id = x86Children[e.child]
			e = &x86Entries[id]
		}
		if e.flags&fRegForm != 0 {
			inst.Mod = 3
		}
		// SIB and displacement.
		if inst.Mod != 3 {
			if inst.RM == 4 {
				if err := need(b, i+1); err != nil {
					return err
				}
				inst.HasSIB = true
				inst.SIB = b[i]
				i++
			}
			switch inst.Mod {
			case 0:
				if inst.RM == 5 {
					inst.RIPRel = true
					inst.DispSize = 4
				} else if inst.HasSIB && inst.SIB&7 == 5 {
					inst.DispSize = 4
				}
			case 1:
				inst.DispSize = 1
			case 2:
				inst.DispSize = 4
			}
			if inst.DispSize != 0 {
				if err := need(b, i+inst.DispSize); err != nil {
					return err
				}
				inst.DispOff = i
				if inst.DispSize == 1 {
					inst.Disp = int64(int8(b[i]))
				} else {
					inst.Disp = int64(int32(le32(b[i:])))
				}
				i += inst.DispSize
			}
		}
	}
	if tbl == tbl3dnow {
		// The opcode is the byte after the operands.
		if err := need(b, i+1); err != nil {
			return err
		}
		inst.Opcode = b[i]
		inst.Encoding = Enc3DNow
		i++
	}
	if e.flags&fInvalid != 0 {
		return ErrInvalid
	}
	if e.flags&fMemOnly != 0 && inst.Mod == 3 {
		return ErrInvalid
	}
	if inst.Encoding == EncREX2 && e.flags&fNoREX2 != 0 {
		return ErrInvalid
	}
	if inst.Prefixes&PrefixLock != 0 && (e.flags&fLockable == 0 || inst.Mod == 3 || !inst.HasModRM) {
		return ErrInvalid
	}

	// Operand and address size.
	mand66 := e.flags&fMand66 != 0
	switch {
	case inst.W && !vexLike:
		inst.OpSize = 64
	case inst.W && vexLike:
		inst.OpSize = 64
	case has66 && !mand66 && !vexLike:
		inst.OpSize = 16
		if e.flags&fF64 != 0 && d.Vendor == VendorIntel {
			inst.OpSize = 64
		}
	case e.flags&(fD64|fF64) != 0:
		inst.OpSize = 64
	default:
		inst.OpSize = 32
	}
	if e.flags&fF64 != 0 && has66 && !vexLike {
		inst.VendorDependent = true
	}
	if e.flags&fAMD != 0 {
		inst.VendorDependent = true
	}
	inst.AddrSize = 64
	if inst.Prefixes&PrefixAddr != 0 {
		inst.AddrSize = 32
	}

	// Immediates.
	for k := 0; k < 2; k++ {
		var size int
		rel := false
		switch e.imm[k] {
		case immNone:
			continue
		case immB:
			size = 1
		case immW:
			size = 2
		case immD:
			size = 4
		case immZ:
			size = 4
			if inst.OpSize == 16 {
				size = 2
			}
		case immV:
			size = inst.OpSize / 8
		case immRelB:
			size, rel = 1, true
		case immRelZ:
			size, rel = 4, true
			if inst.OpSize == 16 {
				size = 2
			}
		case immMoffs:
			size = inst.AddrSize / 8
		}
		if err := need(b, i+size); err != nil {
			return err
		}
		v := readLE(b[i:], size)
		switch {
		case rel:
			inst.RelOff, inst.RelSize = i, size
			inst.Imm, inst.ImmOff, inst.ImmSize = v, i, size
		case e.imm[k] == immMoffs:
			inst.DispOff, inst.DispSize, inst.Disp = i, size, int64(v)
		case inst.ImmSize == 0:
			inst.Imm, inst.ImmOff, inst.ImmSize = v, i, size
		default:
			inst.Imm2, inst.Imm2Off, inst.Imm2Size = v, i, size
		}
		i += size
	}

	inst.Len = i
	copy(inst.Bytes[:], b[:i])
	inst.Branch = e.branch
	inst.Mnemonic = e.mnem
	inst.RegsApprox = e.flags&fDefault != 0
	next := addr + uint64(i)
	if inst.RelSize != 0 {
		var rel int64
		switch inst.RelSize {
		case 1:
			rel = int64(int8(inst.Imm))
		case 2:
			rel = int64(int16(inst.Imm))
		default:
			rel = int64(int32(inst.Imm))
		}
		inst.Target = next + uint64(rel)
		if inst.RelSize == 2 {
			inst.Target &= 0xFFFF
		}
	} else if inst.RIPRel {
		inst.Target = next + uint64(inst.Disp)
		if inst.AddrSize == 32 {
			inst.Target &= 0xFFFFFFFF
		}
	}
	if op == 0x90 && tbl == tbl1byte {
		switch {
		case inst.B:
			inst.Mnemonic = "xchg"
		case rep == 0xF3:
			inst.Mnemonic = "pause"
		}
	}
	d.regs(inst, e, op)
	return nil
}

// jmpabs decodes APX JMPABS: REX2 (M0=0, W=0), A1, imm64.
func (d X86Decoder) jmpabs(b []byte, i int, op byte, inst *X86Inst) error {
	if err := need(b, i+8); err != nil {
		return err
	}
	inst.Opcode = op
	inst.Imm, inst.ImmOff, inst.ImmSize = le64(b[i:]), i, 8
	inst.Len = i + 8
	copy(inst.Bytes[:], b[:inst.Len])
	inst.Branch = BranchJmpAbs
	inst.Target = inst.Imm
	inst.Mnemonic = "jmpabs"
	inst.OpSize, inst.AddrSize = 64, 64
	return nil
}

func le32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(le32(b)) | uint64(le32(b[4:]))<<32
}

func readLE(b []byte, n int) uint64 {
	switch n {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(b[0]) | uint64(b[1])<<8
	case 4:
		return uint64(le32(b))
	case 8:
		return le64(b)
	}
	return 0
}
