package decode

import (
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// x86asmDistrusted lists mnemonics for which x86asm v0.33 is known to
// return the right length with a wrong name; its text is used for them only
// when its op name agrees with the decoder's.
var x86asmDistrusted = map[string]bool{
	"endbr64": true, "endbr32": true, "rdssp": true, "rdpid": true,
	"ptwrite": true, "adcx": true, "adox": true, "movdir64b": true,
	"enqcmd": true, "enqcmds": true, "clwb": true, "clflushopt": true,
	"tpause": true, "umwait": true, "umonitor": true, "incssp": true,
	"senduipi": true, "wrss": true, "wruss": true, "setssbsy": true,
	"saveprevssp": true, "rstorssp": true, "clrssbsy": true,
	"serialize": true, "wrpkru": true, "rdpkru": true, "movdiri": true,
}

// Text renders the instruction in "gnu" (AT&T) or "intel" syntax. The text
// comes from x86asm when x86asm decodes the same bytes to the same length,
// sees the same RIP-relative operand and names a known instruction;
// otherwise the decoder renders it itself from its own fields, so the text
// never contradicts Len, RIPRel or Target.
func (inst *X86Inst) Text(syntax string) string {
	if inst.Len == 0 {
		return "(bad)"
	}
	if t, ok := inst.x86asmText(syntax); ok {
		return t
	}
	return inst.ownText(syntax)
}

func (inst *X86Inst) x86asmText(syntax string) (string, bool) {
	xi, err := x86asm.Decode(inst.Bytes[:inst.Len], 64)
	if err != nil || xi.Len != inst.Len || xi.Op == 0 {
		return "", false
	}
	ripArg := false
	for k, a := range xi.Args {
		m, ok := a.(x86asm.Mem)
		if !ok {
			continue
		}
		if m.Base == x86asm.RIP {
			ripArg = true
		}
		// x86asm reads VEX and EVEX RIP-relative operands as absolute
		// addresses: put the RIP base back.
		if inst.RIPRel && (inst.Encoding == EncVEX2 || inst.Encoding == EncVEX3 || inst.Encoding == EncEVEX) &&
			m.Base == 0 && m.Index == 0 && m.Disp == inst.Disp {
			m.Base = x86asm.RIP
			xi.Args[k] = m
			ripArg = true
		}
	}
	if ripArg != (inst.RIPRel && inst.AddrSize == 64) {
		return "", false
	}
	if inst.Branch.Relative() && !x86asmTargetAgrees(&xi, inst) {
		return "", false
	}
	if inst.VendorDependent {
		// x86asm follows neither vendor's rule for a 66 prefix on a near
		// branch: it prints a 16-bit branch ("callw") that Intel CPUs run
		// as a 64-bit one.
		return "", false
	}
	if inst.Prefixes&PrefixLock != 0 && inst.Mod == 3 {
		return "", false
	}
	if x86asmDistrusted[inst.Mnemonic] && !strings.HasPrefix(strings.ToLower(xi.Op.String()), inst.Mnemonic) {
		return "", false
	}
	if inst.Encoding == EncEVEX && (inst.Map == MapEVEX5 || inst.Map == MapEVEX6) {
		return "", false // x86asm reads maps 5 and 6 as map 1
	}
	if inst.Encoding == EncREX2 || inst.Encoding == EncXOP || inst.Encoding == Enc3DNow {
		return "", false
	}
	if syntax == "intel" {
		return x86asm.IntelSyntax(xi, inst.Addr, nil), true
	}
	return x86asm.GNUSyntax(xi, inst.Addr, nil), true
}

// x86asmTargetAgrees reports whether x86asm's relative operand leads to
// the decoder's Target. They differ where a 66 prefix makes a near branch
// 16-bit (AMD): the CPU truncates the target to 16 bits and x86asm does not.
func x86asmTargetAgrees(xi *x86asm.Inst, inst *X86Inst) bool {
	if xi.PCRel == 0 {
		return false
	}
	for _, a := range xi.Args {
		if rel, ok := a.(x86asm.Rel); ok {
			return inst.Addr+uint64(xi.Len)+uint64(int64(rel)) == inst.Target
		}
	}
	return false
}

// ownText renders the mnemonic and operands from the decoder's own tables.
// It is plainer than x86asm's text but always consistent with the decode.
func (inst *X86Inst) ownText(syntax string) string {
	gnu := syntax != "intel"
	var b strings.Builder
	if inst.Prefixes&PrefixLock != 0 {
		b.WriteString("lock ")
	}
	if inst.Prefixes&(PrefixREP|PrefixREPNE) != 0 && inst.MandPrefix != 0 && x86Entries[inst.form].flags&fString != 0 {
		if inst.MandPrefix == 0xF2 {
			b.WriteString("repne ")
		} else {
			b.WriteString("rep ")
		}
	}
	m := inst.Mnemonic
	switch {
	case inst.Encoding == Enc3DNow:
		m = fmt.Sprintf("3dnow.%02x", inst.Opcode)
	case m == "" || m == "-" || inst.RegsApprox:
		m = fmt.Sprintf("%s.%s.%02x", inst.Encoding, inst.Map, inst.Opcode)
	}
	b.WriteString(m)
	var ops []string
	if int(inst.form) < len(x86Forms) && x86Forms[inst.form] != "" {
		immUsed := 0
		for _, tok := range strings.Split(x86Forms[inst.form], ",") {
			ops = append(ops, inst.operandText(tok, gnu, &immUsed))
		}
	} else if inst.HasModRM && inst.Mod != 3 {
		ops = append(ops, inst.memText(gnu))
	}
	if gnu {
		for i, j := 0, len(ops)-1; i < j; i, j = i+1, j-1 {
			ops[i], ops[j] = ops[j], ops[i]
		}
		if (inst.Branch == BranchJmpIndirect || inst.Branch == BranchCallIndirect) && len(ops) == 1 {
			ops[0] = "*" + ops[0] // AT&T marks an indirect branch's operand
		}
	}
	if len(ops) > 0 {
		b.WriteByte(' ')
		b.WriteString(strings.Join(ops, ","))
	}
	return b.String()
}

var (
	x86Reg32 = [16]string{"eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"}
	x86Reg16 = [16]string{"ax", "cx", "dx", "bx", "sp", "bp", "si", "di"}
	x86Reg8  = [16]string{"al", "cl", "dl", "bl", "spl", "bpl", "sil", "dil"}
	x86Reg8H = [4]string{"ah", "ch", "dh", "bh"}
	x86Seg   = [8]string{"es", "cs", "ss", "ds", "fs", "gs", "seg6", "seg7"}
)

// gprName names general-purpose register r at a size in bits; noREX
// selects ah..bh for byte registers 4-7.
func gprName(r, bits int, noREX bool) string {
	switch bits {
	case 64:
		return x86Reg64[r&31]
	case 32:
		if r < 8 {
			return x86Reg32[r]
		}
		return x86Reg64[r&31] + "d"
	case 16:
		if r < 8 {
			return x86Reg16[r]
		}
		return x86Reg64[r&31] + "w"
	}
	if r >= 4 && r < 8 && noREX {
		return x86Reg8H[r-4]
	}
	if r < 8 {
		return x86Reg8[r]
	}
	return x86Reg64[r&31] + "b"
}

// sizeBits resolves an operand size letter of x86map.txt.
func (inst *X86Inst) sizeBits(size string) int {
	switch size {
	case "b":
		return 8
	case "w":
		return 16
	case "d":
		return 32
	case "q":
		return 64
	case "y":
		if inst.W {
			return 64
		}
		return 32
	case "z":
		if inst.OpSize == 16 {
			return 16
		}
		return 32
	}
	return inst.OpSize
}

// vecName names vector register n by the vector length.
func (inst *X86Inst) vecName(n int) string {
	switch {
	case inst.Encoding == EncEVEX && inst.L == 2:
		return fmt.Sprintf("zmm%d", n)
	case (inst.Encoding == EncEVEX || inst.Encoding == EncVEX2 || inst.Encoding == EncVEX3 || inst.Encoding == EncXOP) && inst.L == 1:
		return fmt.Sprintf("ymm%d", n)
	}
	return fmt.Sprintf("xmm%d", n)
}

// operandText renders one operand token of x86map.txt.
func (inst *X86Inst) operandText(tok string, gnu bool, immUsed *int) string {
	pct := ""
	if gnu {
		pct = "%"
	}
	noREX := inst.REX == 0 && inst.Encoding == EncLegacy
	reg := int(inst.Reg) | bit(inst.R, 8) | bit(inst.R4, 16)
	rm := int(inst.RM) | bit(inst.B, 8) | bit(inst.B4, 16)
	switch tok {
	case "AL", "CL", "DL", "BL", "AH", "CH", "DH", "BH", "AX", "CX", "DX", "BX":
		return pct + strings.ToLower(tok)
	case "eAX":
		return pct + gprName(RAX, inst.sizeBits("z"), false)
	case "rAX", "rCX", "rDX", "rBX", "rSP", "rBP", "rSI", "rDI":
		n := map[string]int{"rAX": 0, "rCX": 1, "rDX": 2, "rBX": 3, "rSP": 4, "rBP": 5, "rSI": 6, "rDI": 7}[tok]
		return pct + gprName(n, inst.OpSize, false)
	case "FS", "GS":
		return pct + strings.ToLower(tok)
	case "1":
		if gnu {
			return "$1"
		}
		return "1"
	}
	imm := func(v uint64) string {
		if gnu {
			return fmt.Sprintf("$%#x", v)
		}
		return fmt.Sprintf("%#x", v)
	}
	kind, size := tok[0], tok[1:]
	switch kind {
	case 'E', 'R':
		if inst.Mod == 3 {
			return pct + gprName(rm, inst.sizeBits(size), noREX)
		}
		return inst.memText(gnu)
	case 'M', 'W', 'Q':
		if inst.Mod != 3 {
			return inst.memText(gnu)
		}
		if kind == 'Q' {
			return fmt.Sprintf("%smm%d", pct, inst.RM)
		}
		if strings.HasSuffix(size, "k") {
			return fmt.Sprintf("%sk%d", pct, inst.RM)
		}
		return pct + inst.vecName(int(inst.RM)|bit(inst.B, 8)|bit(inst.X && inst.Encoding == EncEVEX, 16))
	case 'G':
		return pct + gprName(reg, inst.sizeBits(size), noREX)
	case 'B':
		return pct + gprName(int(inst.VVVV)|bit(inst.V4, 16), inst.sizeBits(size), false)
	case 'Z':
		return pct + gprName(int(inst.Opcode&7)|bit(inst.B, 8)|bit(inst.B4, 16), inst.sizeBits(size), noREX)
	case 'X', 'Y':
		r := "rsi"
		if kind == 'Y' {
			r = "rdi"
		}
		if inst.AddrSize == 32 {
			r = "e" + r[1:]
		}
		if gnu {
			return "(%" + r + ")"
		}
		return "[" + r + "]"
	case 'O':
		if gnu {
			return fmt.Sprintf("%#x", uint64(inst.Disp))
		}
		return fmt.Sprintf("[%#x]", uint64(inst.Disp))
	case 'I':
		*immUsed++
		if *immUsed == 2 {
			return imm(inst.Imm2)
		}
		return imm(inst.Imm)
	case 'J':
		return fmt.Sprintf("%#x", inst.Target)
	case 'L':
		*immUsed++
		return pct + inst.vecName(int(inst.Imm>>4))
	case 'V':
		return pct + inst.vecName(reg)
	case 'U':
		return pct + inst.vecName(int(inst.RM)|bit(inst.B, 8)|bit(inst.X && inst.Encoding == EncEVEX, 16))
	case 'H':
		if strings.HasSuffix(size, "k") {
			return fmt.Sprintf("%sk%d", pct, inst.VVVV&7)
		}
		return pct + inst.vecName(int(inst.VVVV)|bit(inst.V4, 16))
	case 'P', 'N':
		r := inst.Reg
		if kind == 'N' {
			r = inst.RM
		}
		return fmt.Sprintf("%smm%d", pct, r)
	case 'S':
		return pct + x86Seg[inst.Reg]
	case 'C':
		return fmt.Sprintf("%scr%d", pct, reg&15)
	case 'D':
		return fmt.Sprintf("%sdb%d", pct, reg&15)
	case 'K':
		return fmt.Sprintf("%sk%d", pct, inst.Reg)
	case 'T':
		return fmt.Sprintf("%stmm%d", pct, inst.Reg)
	}
	return tok
}

// memText renders the memory operand of ModRM.
func (inst *X86Inst) memText(gnu bool) string {
	addrBits := inst.AddrSize
	reg := func(r int) string {
		if gnu {
			return "%" + gprName(r, addrBits, false)
		}
		return gprName(r, addrBits, false)
	}
	seg := ""
	if inst.LastSeg == 0x64 || inst.LastSeg == 0x65 {
		seg = map[byte]string{0x64: "fs:", 0x65: "gs:"}[inst.LastSeg]
		if gnu {
			seg = "%" + seg
		}
	}
	disp := inst.Disp
	if inst.RIPRel {
		rip := "rip"
		if addrBits == 32 {
			rip = "eip"
		}
		if gnu {
			return fmt.Sprintf("%s%#x(%%%s)", seg, disp, rip)
		}
		return fmt.Sprintf("%s[%s%+#x]", seg, rip, disp)
	}
	base, index := inst.baseReg(), inst.indexReg(x86Entries[inst.form].flags&fVSIB != 0)
	scale := 1 << (inst.SIB >> 6)
	vindex := ""
	if x86Entries[inst.form].flags&fVSIB != 0 && inst.HasSIB {
		vindex = inst.vecName(int(inst.SIB>>3&7) | bit(inst.X, 8) | bit(inst.V4, 16))
		if gnu {
			vindex = "%" + vindex
		}
	}
	if gnu {
		s := seg
		if disp != 0 || (base < 0 && index < 0) {
			s += fmt.Sprintf("%#x", disp)
		}
		if base < 0 && index < 0 && vindex == "" {
			return s
		}
		s += "("
		if base >= 0 {
			s += reg(base)
		}
		switch {
		case index >= 0:
			s += fmt.Sprintf(",%s,%d", reg(index), scale)
		case vindex != "":
			s += fmt.Sprintf(",%s,%d", vindex, scale)
		}
		return s + ")"
	}
	var parts []string
	if base >= 0 {
		parts = append(parts, reg(base))
	}
	switch {
	case index >= 0:
		parts = append(parts, fmt.Sprintf("%s*%d", reg(index), scale))
	case vindex != "":
		parts = append(parts, fmt.Sprintf("%s*%d", vindex, scale))
	}
	s := seg + "[" + strings.Join(parts, "+")
	if disp != 0 || len(parts) == 0 {
		if len(parts) == 0 {
			s += fmt.Sprintf("%#x", disp)
		} else {
			s += fmt.Sprintf("%+#x", disp)
		}
	}
	return s + "]"
}
