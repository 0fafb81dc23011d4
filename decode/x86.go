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

// X86Len returns the length of the first instruction in b, located at
// address addr, under the default (AMD) vendor rules: the length check
// that generated code is verified with.
func X86Len(b []byte, addr uint64) (int, error) {
	var inst X86Inst
	if err := (X86Decoder{}).Decode(b, addr, &inst); err != nil {
		return 0, err
	}
	return inst.Len, nil
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

// x86Entry is a node of an opcode decision tree: a selector (sel != 0)
// whose children start at x86Children[child], or a leaf describing one
// instruction form.
type x86Entry struct {
	sel    uint8
	child  uint16
	flags  uint16
	imm    [2]uint8
	branch BranchKind
	// srcR, srcW: register fields read and written (src* bits); srcByte:
	// fields that name byte registers.
	srcR, srcW, srcByte uint8
	impR                uint32
	impW                uint32
	mnem                string
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
	err := d.decode(b, addr, inst)
	if err != nil {
		*inst = X86Inst{}
	}
	return err
}

// pfxTab classifies bytes in prefix position: 0 none, pfxLegacy, or pfxREX.
var pfxTab = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		if prefixClass[c] != 0 {
			t[c] = pfxLegacy
		}
		if c&0xF0 == 0x40 {
			t[c] = pfxREX
		}
	}
	return t
}()

const (
	pfxLegacy = 1
	pfxREX    = 2
)

// decode keeps its state in local variables and writes inst once at the
// end: reading back fields of a freshly zeroed struct would stall on
// store forwarding, which costs more than the decoding itself.
func (d X86Decoder) decode(b []byte, addr uint64, inst *X86Inst) error {
	var (
		i        int
		rex, rep byte
		lastSeg  byte
		prefixes X86Prefixes
		nprefix  int
		enc      = EncLegacy
		ext      uint32 // extension fields, packed (see the ext* constants)
		mp       = Map1Byte
		tbl      = tbl1byte
		vexLike  bool
	)
	// Legacy prefixes and REX. A REX followed by a legacy prefix is ignored.
	for {
		if i >= len(b) || i >= 15 {
			return need(b, i+1)
		}
		c := b[i]
		switch pfxTab[c] {
		case pfxLegacy:
			prefixes |= prefixClass[c]
			nprefix++
			switch c {
			case 0xF2, 0xF3:
				rep = c
			case 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65:
				lastSeg = c
			}
			rex = 0
			i++
			continue
		case pfxREX:
			rex = c
			i++
			continue
		}
		break
	}
	if rex != 0 {
		ext = uint32(rex & 0xF) // W R X B are the low bits of REX and of ext
	}
	has66 := prefixes&PrefixData != 0
	switch c := b[i]; c {
	case 0xD5: // REX2
		if rex != 0 {
			return ErrInvalid
		}
		if err := need(b, i+2); err != nil {
			return err
		}
		p := b[i+1]
		enc = EncREX2
		ext = uint32(p&0xF) | uint32(p&0x70) // W R X B, then B4 X4 R4
		i += 2
		if p&0x80 != 0 {
			tbl, mp = tbl0f, Map0F
		}
	case 0xC4, 0xC5, 0x62:
		if rex != 0 || prefixes&(PrefixData|PrefixREP|PrefixREPNE|PrefixLock) != 0 {
			return ErrInvalid
		}
		vexLike = true
		switch c {
		case 0xC5:
			if err := need(b, i+2); err != nil {
				return err
			}
			p := b[i+1]
			enc = EncVEX2
			ext = uint32(^p>>7&1)<<2 | uint32(^p>>3&0xF)<<extVVVVShift | uint32(p>>2&1)<<extLShift | uint32(p&3)<<extPPShift
			mp = Map0F
			i += 2
		case 0xC4:
			if err := need(b, i+3); err != nil {
				return err
			}
			p1, p2 := b[i+1], b[i+2]
			enc = EncVEX3
			ext = uint32(^p1>>7&1)<<2 | uint32(^p1>>6&1)<<1 | uint32(^p1>>5&1)
			switch p1 & 0x1F {
			case 1, 2, 3:
				mp = X86Map(p1 & 0x1F)
			default:
				return ErrInvalid
			}
			ext |= uint32(p2>>7)<<3 | uint32(^p2>>3&0xF)<<extVVVVShift | uint32(p2>>2&1)<<extLShift | uint32(p2&3)<<extPPShift
			i += 3
		case 0x62:
			if err := need(b, i+4); err != nil {
				return err
			}
			p0, p1, p2 := b[i+1], b[i+2], b[i+3]
			enc = EncEVEX
			ext = uint32(^p0>>7&1)<<2 | uint32(^p0>>6&1)<<1 | uint32(^p0>>5&1) | uint32(^p0>>4&1)*extR4 | uint32(p0>>3&1)*extB4
			switch p0 & 7 {
			case 1, 2, 3, 5, 6:
				mp = X86Map(p0 & 7)
			case 0:
				return ErrInvalid
			default:
				return ErrUnknown
			}
			if p1&0x04 == 0 {
				return ErrInvalid
			}
			ext |= uint32(p1>>7)<<3 | uint32(^p1>>3&0xF)<<extVVVVShift | uint32(p1&3)<<extPPShift |
				uint32(p2>>7)*extEZ | uint32(p2>>5&3)<<extLShift | uint32(p2>>4&1)*extEB | uint32(^p2>>3&1)*extV4 |
				uint32(p2&7)<<extAAAShift
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
		if rex != 0 || prefixes&(PrefixData|PrefixREP|PrefixREPNE|PrefixLock) != 0 {
			return ErrInvalid
		}
		if err := need(b, i+3); err != nil {
			return err
		}
		p2 := b[i+2]
		vexLike = true
		enc = EncXOP
		ext = uint32(^p1>>7&1)<<2 | uint32(^p1>>6&1)<<1 | uint32(^p1>>5&1)
		switch p1 & 0x1F {
		case 8:
			mp = MapXOP8
		case 9:
			mp = MapXOP9
		case 10:
			mp = MapXOPA
		default:
			return ErrInvalid
		}
		ext |= uint32(p2>>7)<<3 | uint32(^p2>>3&0xF)<<extVVVVShift | uint32(p2>>2&1)<<extLShift | uint32(p2&3)<<extPPShift
		i += 3
	}

	// Opcode.
	if i >= len(b) || i >= 15 {
		return need(b, i+1)
	}
	op := b[i]
	i++
	var mand byte
	if vexLike {
		switch enc {
		case EncVEX2, EncVEX3:
			tbl = tblVex1 + int(mp) - 1
		case EncEVEX:
			switch mp {
			case Map0F, Map0F38, Map0F3A:
				tbl = tblEvex1 + int(mp) - 1
			case MapEVEX5:
				tbl = tblEvex5
			case MapEVEX6:
				tbl = tblEvex6
			}
		case EncXOP:
			tbl = tblXop8 + int(mp-MapXOP8)
		}
		mand = [4]byte{0, 0x66, 0xF3, 0xF2}[ext>>extPPShift&3]
	} else {
		if enc == EncREX2 {
			if tbl == tbl1byte {
				switch {
				case op == 0x0F || pfxTab[op] != 0 || op == 0xC4 || op == 0xC5 || op == 0x62 || op == 0xD5:
					return ErrInvalid
				case op == 0xA1 && ext&extW == 0:
					return d.jmpabs(b, addr, i, op, inst, prefixes, nprefix, lastSeg, ext)
				}
			} else if op == 0x38 || op == 0x3A || op == 0x0F {
				return ErrInvalid
			}
		} else if op == 0x0F {
			if i >= len(b) || i >= 15 {
				return need(b, i+1)
			}
			op = b[i]
			i++
			tbl, mp = tbl0f, Map0F
			switch op {
			case 0x38, 0x3A:
				if i >= len(b) || i >= 15 {
					return need(b, i+1)
				}
				if op == 0x38 {
					tbl, mp = tbl0f38, Map0F38
				} else {
					tbl, mp = tbl0f3a, Map0F3A
				}
				op = b[i]
				i++
			case 0x0F:
				tbl, mp = tbl3dnow, Map3DNow
			}
		}
		switch {
		case rep != 0:
			mand = rep
		case has66:
			mand = 0x66
		}
	}
	opcode := op

	// Walk the decision tree.
	id := x86Index[tbl][op]
	if id == 0 {
		return ErrUnknown
	}
	e := &x86Entries[id]
	if e.sel == selPrefix {
		id = x86Children[int(e.child)+mandIndex[mand&0x1F]]
		if id == 0 {
			return ErrInvalid
		}
		e = &x86Entries[id]
	}
	var (
		hasModRM, hasSIB, ripRel bool
		modrmOff                 int
		modrm, sib               byte
		mod, reg, rm             uint8
		dispOff, dispSize        int
		disp                     int64
	)
	if e.sel != selLeaf || e.flags&fModRM != 0 || enc == EncEVEX || enc == EncXOP || tbl == tbl3dnow {
		if i >= len(b) || i >= 15 {
			return need(b, i+1)
		}
		modrm = b[i]
		modrmOff = i
		hasModRM = true
		mod, reg, rm = modrm>>6, (modrm>>3)&7, modrm&7
		i++
		switch e.sel {
		case selModRM:
			slot := int(reg)
			if mod == 3 {
				slot += 8
			}
			id = x86Children[int(e.child)+slot]
			if id == 0 {
				return ErrInvalid
			}
			e = &x86Entries[id]
			if e.sel == selRM {
				id = x86Children[int(e.child)+int(rm)]
				if id == 0 {
					return ErrInvalid
				}
				e = &x86Entries[id]
			}
		}
		if e.sel == withModRM {
			id = x86Children[e.child]
			e = &x86Entries[id]
		}
		if e.flags&fRegForm != 0 {
			mod = 3
		}
		// SIB and displacement.
		if mod != 3 {
			if rm == 4 {
				if i >= len(b) || i >= 15 {
					return need(b, i+1)
				}
				hasSIB = true
				sib = b[i]
				i++
			}
			switch mod {
			case 0:
				if rm == 5 {
					ripRel = true
					dispSize = 4
				} else if hasSIB && sib&7 == 5 {
					dispSize = 4
				}
			case 1:
				dispSize = 1
			case 2:
				dispSize = 4
			}
			if dispSize != 0 {
				if err := need(b, i+dispSize); err != nil {
					return err
				}
				dispOff = i
				if dispSize == 1 {
					disp = int64(int8(b[i]))
				} else {
					disp = int64(int32(le32(b[i:])))
				}
				i += dispSize
			}
		}
	}
	if tbl == tbl3dnow {
		// The opcode is the byte after the operands.
		if i >= len(b) || i >= 15 {
			return need(b, i+1)
		}
		opcode = b[i]
		enc = Enc3DNow
		i++
	}
	flags := e.flags
	if flags&fInvalid != 0 ||
		(flags&fAMD != 0 && d.Vendor == VendorIntel) ||
		(enc == Enc3DNow && d.Vendor == VendorIntel) ||
		(flags&fMemOnly != 0 && mod == 3) ||
		(enc == EncREX2 && flags&fNoREX2 != 0) ||
		(prefixes&PrefixLock != 0 && (flags&fLockable == 0 || mod == 3 || !hasModRM)) {
		return ErrInvalid
	}

	// Operand and address size.
	opSize := 32
	switch {
	case ext&extW != 0:
		opSize = 64
	case has66 && flags&fMand66 == 0 && !vexLike:
		opSize = 16
		if flags&fF64 != 0 && d.Vendor == VendorIntel {
			opSize = 64
		}
	case flags&(fD64|fF64) != 0:
		opSize = 64
	}
	vendorDep := flags&fAMD != 0 || enc == Enc3DNow || (flags&fF64 != 0 && has66 && !vexLike)
	addrSize := 64
	if prefixes&PrefixAddr != 0 {
		addrSize = 32
	}

	// Immediates.
	var (
		imm, imm2                        uint64
		immOff, immSize, imm2Off, imm2Sz int
		relOff, relSize                  int
	)
	for k := 0; k < 2; k++ {
		kind := e.imm[k]
		if kind == immNone {
			break
		}
		size := int(immSizes[kind][opSize>>5])
		if kind == immMoffs {
			size = addrSize / 8
		}
		if err := need(b, i+size); err != nil {
			return err
		}
		v := readLE(b[i:], size)
		switch {
		case kind == immRelB || kind == immRelZ:
			relOff, relSize = i, size
			imm, immOff, immSize = v, i, size
		case kind == immMoffs:
			dispOff, dispSize, disp = i, size, int64(v)
		case immSize == 0:
			imm, immOff, immSize = v, i, size
		default:
			imm2, imm2Off, imm2Sz = v, i, size
		}
		i += size
	}

	next := addr + uint64(i)
	var target uint64
	if relSize != 0 {
		var rel int64
		switch relSize {
		case 1:
			rel = int64(int8(imm))
		case 2:
			rel = int64(int16(imm))
		default:
			rel = int64(int32(imm))
		}
		target = next + uint64(rel)
		if opSize == 16 {
			// A 16-bit operand size truncates the instruction pointer
			// (AMD near branches with 66, xbegin with 66), whatever the
			// displacement's size.
			target &= 0xFFFF
		}
	} else if ripRel {
		target = next + uint64(disp)
		if addrSize == 32 {
			target &= 0xFFFFFFFF
		}
	}
	mnem := e.mnem
	if op == 0x90 && tbl == tbl1byte {
		switch {
		case ext&extB != 0:
			mnem = "xchg"
		case rep == 0xF3:
			mnem = "pause"
		}
	}
	// General-purpose registers read and written. Computed here rather
	// than in a helper taking a struct: copying a struct just built field
	// by field stalls on store forwarding.
	read, written := RegSet(e.impR), RegSet(e.impW)
	noREX := rex == 0 && enc != EncREX2
	if all := e.srcR | e.srcW; all != 0 {
		if all&srcReg != 0 {
			read, written = addSrc(e, srcReg, int(reg)|int(ext>>2&1)<<3|int(ext>>6&1)<<4, noREX, read, written)
		}
		if mod == 3 {
			if all&srcRM != 0 {
				read, written = addSrc(e, srcRM, int(rm)|int(ext&1)<<3|int(ext>>4&1)<<4, noREX, read, written)
			}
		} else if hasModRM && !ripRel && e.srcR&srcMem != 0 {
			if hasSIB {
				if base := int(sib & 7); base != 5 || mod != 0 {
					read |= 1 << uint(base|int(ext&1)<<3|int(ext>>4&1)<<4)
				}
				if idx := int(sib>>3&7) | int(ext>>1&1)<<3 | int(ext>>5&1)<<4; idx != 4 && flags&fVSIB == 0 {
					read |= 1 << uint(idx)
				}
			} else {
				read |= 1 << uint(int(rm)|int(ext&1)<<3|int(ext>>4&1)<<4)
			}
		}
		if all&srcVVVV != 0 {
			read, written = addSrc(e, srcVVVV, int(ext>>extVVVVShift&0xF)|int(ext>>7&1)<<4, false, read, written)
		}
		if all&srcZ != 0 {
			read, written = addSrc(e, srcZ, int(op&7)|int(ext&1)<<3|int(ext>>4&1)<<4, noREX, read, written)
		}
	}
	if op == 0x90 && tbl == tbl1byte && ext&extB != 0 {
		// 90 with REX.B is xchg r8, rax.
		m := RegSet(1)<<uint(R8|int(ext>>4&1)<<4) | 1<<RAX
		read |= m
		written |= m
	}
	if flags&fString != 0 && prefixes&(PrefixREP|PrefixREPNE) != 0 {
		read |= 1 << RCX
		written |= 1 << RCX
	}

	// Every field is stored (none is read back), so inst needs no zeroing.
	inst.Addr = addr
	inst.Len = i
	inst.Prefixes = prefixes
	inst.NumPrefixes = nprefix
	inst.LastSeg = lastSeg
	inst.MandPrefix = mand
	inst.Encoding = enc
	inst.REX = rex
	inst.setExt(ext)
	inst.Map = mp
	inst.Opcode = opcode
	inst.HasModRM = hasModRM
	inst.ModRM = modrm
	inst.Mod = mod
	inst.Reg = reg
	inst.RM = rm
	inst.HasSIB = hasSIB
	inst.SIB = sib
	inst.DispOff = dispOff
	inst.DispSize = dispSize
	inst.Disp = disp
	inst.ImmOff = immOff
	inst.ImmSize = immSize
	inst.Imm = imm
	inst.Imm2Off = imm2Off
	inst.Imm2Size = imm2Sz
	inst.Imm2 = imm2
	inst.OpSize = opSize
	inst.AddrSize = addrSize
	inst.RIPRel = ripRel
	inst.Branch = e.branch
	inst.RelOff = relOff
	inst.RelSize = relSize
	inst.Target = target
	inst.VendorDependent = vendorDep
	inst.Read = read
	inst.Written = written
	inst.RegsApprox = flags&fDefault != 0
	inst.Mnemonic = mnem
	inst.form = id
	inst.modrmOff = uint8(modrmOff)
	setRawBytes(&inst.Bytes, b, i)
	return nil
}

// Bits and fields of the packed extension word ext used while decoding:
// REX/REX2/VEX/EVEX/XOP bits, then vvvv, L, pp and the EVEX mask register.
const (
	extB  = 1 << 0
	extX  = 1 << 1
	extR  = 1 << 2
	extW  = 1 << 3
	extB4 = 1 << 4
	extX4 = 1 << 5
	extR4 = 1 << 6
	extV4 = 1 << 7
	extEZ = 1 << 8
	extEB = 1 << 9

	extVVVVShift = 12
	extLShift    = 16
	extPPShift   = 18
	extAAAShift  = 20
)

// setExt stores the packed extension fields into inst.
func (inst *X86Inst) setExt(ext uint32) {
	inst.B = ext&extB != 0
	inst.X = ext&extX != 0
	inst.R = ext&extR != 0
	inst.W = ext&extW != 0
	inst.B4 = ext&extB4 != 0
	inst.X4 = ext&extX4 != 0
	inst.R4 = ext&extR4 != 0
	inst.V4 = ext&extV4 != 0
	inst.EVEXz = ext&extEZ != 0
	inst.EVEXb = ext&extEB != 0
	inst.VVVV = uint8(ext >> extVVVVShift & 0xF)
	inst.L = uint8(ext >> extLShift & 3)
	inst.PP = uint8(ext >> extPPShift & 3)
	inst.EVEXaaa = uint8(ext >> extAAAShift & 7)
}

// mandIndex maps a mandatory prefix byte (low five bits) to the child of a
// selPrefix node: none 0, 66 1, F3 2, F2 3.
var mandIndex = func() (t [32]int) {
	t[0x66&0x1F] = 1
	t[0xF3&0x1F] = 2
	t[0xF2&0x1F] = 3
	return t
}()

// immSizes gives an immediate's size in bytes by kind and operand size
// (index opSize>>5: 0 for 16, 1 for 32, 2 for 64 bits).
var immSizes = [...][3]uint8{
	immNone:  {0, 0, 0},
	immB:     {1, 1, 1},
	immW:     {2, 2, 2},
	immD:     {4, 4, 4},
	immZ:     {2, 4, 4},
	immV:     {2, 4, 8},
	immRelB:  {1, 1, 1},
	immRelZ:  {2, 4, 4},
	immMoffs: {8, 8, 8},
}

// jmpabs decodes APX JMPABS: REX2 (M0=0, W=0), A1, imm64.
func (d X86Decoder) jmpabs(b []byte, addr uint64, i int, op byte, inst *X86Inst, prefixes X86Prefixes, nprefix int, lastSeg byte, ext uint32) error {
	if err := need(b, i+8); err != nil {
		return err
	}
	imm := le64(b[i:])
	*inst = X86Inst{
		Addr:        addr,
		Len:         i + 8,
		Prefixes:    prefixes,
		NumPrefixes: nprefix,
		LastSeg:     lastSeg,
		Encoding:    EncREX2,
		Map:         Map1Byte,
		Opcode:      op,
		Imm:         imm,
		ImmOff:      i,
		ImmSize:     8,
		Branch:      BranchJmpAbs,
		Target:      imm,
		Mnemonic:    "jmpabs",
		OpSize:      64,
		AddrSize:    64,
	}
	inst.setExt(ext)
	copy(inst.Bytes[:i+8], b)
	return nil
}

// setRawBytes stores the first n (1-15) bytes of b into out, zero-padded.
// With 16 bytes at hand it stores two overlapping words instead of calling
// memmove.
func setRawBytes(out *[15]byte, b []byte, n int) {
	if len(b) < 16 {
		*out = [15]byte{}
		copy(out[:n], b)
		return
	}
	lo, hi := le64(b), le64(b[7:])
	if n < 8 {
		lo &= 1<<(8*uint(n)) - 1
	}
	if n <= 7 {
		hi = 0
	} else if n < 15 {
		hi &= 1<<(8*uint(n-7)) - 1
	}
	putLE64(out[7:], hi)
	putLE64(out[:8], lo)
}

func putLE64(b []byte, v uint64) {
	_ = b[7]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	b[4], b[5], b[6], b[7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
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
