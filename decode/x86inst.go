package decode

// X86Encoding says which encoding scheme carried an x86-64 instruction.
type X86Encoding uint8

const (
	EncLegacy X86Encoding = iota // optional legacy prefixes and REX
	EncREX2                      // APX REX2 prefix D5
	EncVEX2                      // two-byte VEX C5
	EncVEX3                      // three-byte VEX C4
	EncEVEX                      // EVEX 62
	EncXOP                       // AMD XOP 8F
	Enc3DNow                     // 0F 0F ModRM ... imm8 opcode suffix
)

var encNames = [...]string{"legacy", "rex2", "vex2", "vex3", "evex", "xop", "3dnow"}

func (e X86Encoding) String() string {
	if int(e) < len(encNames) {
		return encNames[e]
	}
	return "unknown"
}

// X86Map is an opcode map.
type X86Map uint8

const (
	Map1Byte X86Map = 0  // one-byte opcodes
	Map0F    X86Map = 1  // 0F xx, VEX/EVEX map 1
	Map0F38  X86Map = 2  // 0F 38 xx, VEX/EVEX map 2
	Map0F3A  X86Map = 3  // 0F 3A xx, VEX/EVEX map 3
	MapEVEX5 X86Map = 5  // EVEX map 5 (AVX512-FP16)
	MapEVEX6 X86Map = 6  // EVEX map 6 (AVX512-FP16)
	MapXOP8  X86Map = 8  // XOP map 8
	MapXOP9  X86Map = 9  // XOP map 9
	MapXOPA  X86Map = 10 // XOP map A
	Map3DNow X86Map = 15 // 0F 0F: the opcode is the trailing byte
)

func (m X86Map) String() string {
	switch m {
	case Map1Byte:
		return "1byte"
	case Map0F:
		return "0f"
	case Map0F38:
		return "0f38"
	case Map0F3A:
		return "0f3a"
	case MapEVEX5:
		return "map5"
	case MapEVEX6:
		return "map6"
	case MapXOP8:
		return "xop8"
	case MapXOP9:
		return "xop9"
	case MapXOPA:
		return "xopa"
	case Map3DNow:
		return "3dnow"
	}
	return "unknown"
}

// X86Prefixes is the set of legacy prefixes present, one bit each.
type X86Prefixes uint16

const (
	PrefixLock  X86Prefixes = 1 << iota // F0
	PrefixREPNE                         // F2
	PrefixREP                           // F3
	PrefixCS                            // 2E
	PrefixSS                            // 36
	PrefixDS                            // 3E
	PrefixES                            // 26
	PrefixFS                            // 64
	PrefixGS                            // 65
	PrefixData                          // 66 operand size
	PrefixAddr                          // 67 address size
)

// Vendor selects between the few places where Intel and AMD CPUs decode
// the same bytes to different lengths.
type Vendor uint8

const (
	// VendorAMD follows AMD64 (and objdump's default): a 66 prefix on a near
	// branch makes its displacement 16 bits.
	VendorAMD Vendor = iota
	// VendorIntel follows Intel 64: a 66 prefix on a near branch is ignored
	// and the displacement stays 32 bits.
	VendorIntel
)

func (v Vendor) String() string {
	if v == VendorIntel {
		return "intel"
	}
	return "amd"
}

// X86Inst is one decoded x86-64 instruction. Offsets are byte offsets from
// the first byte of the instruction; sizes are in bytes.
type X86Inst struct {
	Addr  uint64   // virtual address the instruction was decoded at
	Len   int      // length in bytes, 1..15
	Bytes [15]byte // the first Len bytes are the instruction

	Prefixes    X86Prefixes // legacy prefixes present
	NumPrefixes int         // legacy prefix bytes, counting repeats
	LastSeg     byte        // last segment-override prefix byte, 0 if none
	MandPrefix  byte        // 66, F2 or F3 selecting the form (legacy last of F2/F3, or VEX/EVEX pp), 0 if none

	Encoding X86Encoding
	REX      byte // the REX byte (40-4F), 0 if none
	// Extension bits, from REX, REX2, VEX, EVEX or XOP (already un-inverted).
	W, R, X, B bool
	R4, X4, B4 bool  // REX2/EVEX high register bits (R', X', B'/V')
	V4         bool  // EVEX V' (vvvv bit 4)
	VVVV       uint8 // VEX/EVEX/XOP non-destructive register, un-inverted, 0-15
	L          uint8 // vector length: VEX.L (0-1), EVEX.L'L (0-3)
	PP         uint8 // VEX/EVEX/XOP pp field: 0 none, 1 66, 2 F3, 3 F2
	EVEXaaa    uint8 // EVEX opmask register
	EVEXz      bool  // EVEX zeroing
	EVEXb      bool  // EVEX broadcast / rounding

	Map    X86Map
	Opcode byte // the opcode byte within Map (for 3DNow!, the trailing byte)

	HasModRM bool
	ModRM    byte
	Mod      uint8 // ModRM.mod
	Reg      uint8 // ModRM.reg, without extension bits
	RM       uint8 // ModRM.rm, without extension bits
	HasSIB   bool
	SIB      byte

	DispOff  int   // offset of the displacement, 0 if none
	DispSize int   // 0, 1, 2, 4 or 8 (moffs64)
	Disp     int64 // sign-extended displacement (moffs: zero-extended)

	ImmOff   int    // offset of the first immediate, 0 if none
	ImmSize  int    // 0, 1, 2, 4 or 8
	Imm      uint64 // first immediate, zero-extended as encoded
	Imm2Off  int    // offset of the second immediate (enter's imm8, extrq/insertq), 0 if none
	Imm2Size int
	Imm2     uint64

	OpSize   int // effective operand size in bits: 16, 32 or 64
	AddrSize int // effective address size in bits: 32 or 64

	// RIPRel is set when a memory operand is addressed relative to the
	// next instruction; its disp32 sits at DispOff.
	RIPRel bool

	Branch BranchKind
	// RelOff and RelSize locate the relative branch displacement
	// (jmp/jcc/call/loop/jrcxz/xbegin); RelSize is 0 when there is none.
	RelOff  int
	RelSize int
	// Target is the branch target for relative branches, or the address a
	// RIP-relative operand refers to; 0 otherwise.
	Target uint64

	// VendorDependent is set when Intel and AMD CPUs decode these bytes
	// differently (for example a 66 prefix on a near branch).
	VendorDependent bool

	// Read and Written are the general-purpose registers the instruction
	// reads and writes, explicitly and implicitly, including address
	// registers. RSP appears for stack operations.
	Read, Written RegSet
	// RegsApprox is set when the instruction is one of a map's default
	// (vector) forms, described as a class rather than one by one: the sets
	// then hold only the address registers, and a rare member of the class
	// could use a general-purpose register the tables do not list.
	RegsApprox bool

	Mnemonic string // the decoder's own mnemonic from its tables

	form     uint16 // the table entry of the form, for rendering
	modrmOff uint8  // offset of the ModRM byte, 0 if none
}
