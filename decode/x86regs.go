package decode

// Register numbers of the x86-64 general-purpose registers.
const (
	RAX = iota
	RCX
	RDX
	RBX
	RSP
	RBP
	RSI
	RDI
	R8
	R9
	R10
	R11
	R12
	R13
	R14
	R15
)

// x86Reg64 names the 64-bit general-purpose registers by number.
var x86Reg64 = [32]string{
	"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
	"r16", "r17", "r18", "r19", "r20", "r21", "r22", "r23",
	"r24", "r25", "r26", "r27", "r28", "r29", "r30", "r31",
}

// X86RegName returns the 64-bit name of general-purpose register r
// (0-31), or "" when r is out of range.
func X86RegName(r int) string {
	if r < 0 || r >= len(x86Reg64) {
		return ""
	}
	return x86Reg64[r]
}

// X86RegNames lists the registers of s by their 64-bit names.
func X86RegNames(s RegSet) []string {
	var out []string
	for r := 0; r < 32; r++ {
		if s.Has(r) {
			out = append(out, x86Reg64[r])
		}
	}
	return out
}

func bit(b bool, v int) int {
	if b {
		return v
	}
	return 0
}

// regField is the register named by ModRM.reg with its extensions.
func (inst *X86Inst) regField() int {
	return int(inst.Reg) | bit(inst.R, 8) | bit(inst.R4, 16)
}

// rmField is the register named by ModRM.rm (register form).
func (inst *X86Inst) rmField() int {
	return int(inst.RM) | bit(inst.B, 8) | bit(inst.B4, 16)
}

// baseReg returns the base register of the memory operand, or -1.
func (inst *X86Inst) baseReg() int {
	if !inst.HasModRM || inst.Mod == 3 || inst.RIPRel {
		return -1
	}
	if inst.HasSIB {
		base := int(inst.SIB & 7)
		if base == 5 && inst.Mod == 0 {
			return -1
		}
		return base | bit(inst.B, 8) | bit(inst.B4, 16)
	}
	return inst.rmField()
}

// indexReg returns the general-purpose index register of the memory
// operand, or -1 (none, or a vector index).
func (inst *X86Inst) indexReg(vsib bool) int {
	if !inst.HasSIB || inst.Mod == 3 || vsib {
		return -1
	}
	idx := int(inst.SIB>>3&7) | bit(inst.X, 8) | bit(inst.X4, 16)
	if idx == 4 {
		return -1
	}
	return idx
}

// byteReg maps a byte-register number: without any REX prefix 4-7 are
// ah, ch, dh, bh, which live in registers 0-3.
func (inst *X86Inst) byteReg(r int) int {
	if r >= 4 && r < 8 && inst.REX == 0 && inst.Encoding != EncREX2 {
		return r - 4
	}
	return r
}
