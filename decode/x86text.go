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
	if inst.Branch.Relative() && xi.PCRel == 0 {
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

// ownText renders the mnemonic and operands from the decoder's own fields.
// It is plainer than x86asm's text but always consistent with the decode.
func (inst *X86Inst) ownText(syntax string) string {
	var b strings.Builder
	if inst.Prefixes&PrefixLock != 0 {
		b.WriteString("lock ")
	}
	if inst.Prefixes&PrefixREP != 0 && inst.MandPrefix != 0xF3 {
		b.WriteString("rep ")
	}
	m := inst.Mnemonic
	switch {
	case inst.Encoding == Enc3DNow:
		m = fmt.Sprintf("3dnow.%02x", inst.Opcode)
	case m == "" || m == "-" || inst.RegsApprox:
		m = fmt.Sprintf("(%s %s %02x)", inst.Encoding, inst.Map, inst.Opcode)
	}
	b.WriteString(m)
	var ops []string
	if inst.HasModRM {
		ops = append(ops, inst.memOrRegText(syntax))
	}
	switch {
	case inst.Branch.Relative() || inst.Branch == BranchJmpAbs:
		ops = append(ops, fmt.Sprintf("%#x", inst.Target))
	case inst.ImmSize != 0:
		ops = append(ops, immText(syntax, inst.Imm))
		if inst.Imm2Size != 0 {
			ops = append(ops, immText(syntax, inst.Imm2))
		}
	}
	if len(ops) > 0 {
		b.WriteByte(' ')
		b.WriteString(strings.Join(ops, ", "))
	}
	return b.String()
}

func immText(syntax string, v uint64) string {
	if syntax == "intel" {
		return fmt.Sprintf("%#x", v)
	}
	return fmt.Sprintf("$%#x", v)
}

// memOrRegText renders the ModRM.rm operand.
func (inst *X86Inst) memOrRegText(syntax string) string {
	gnu := syntax != "intel"
	reg := func(r int) string {
		if gnu {
			return "%" + x86Reg64[r&31]
		}
		return x86Reg64[r&31]
	}
	if inst.Mod == 3 {
		return "rm:" + reg(inst.rmField())
	}
	disp := inst.Disp
	if inst.RIPRel {
		if gnu {
			return fmt.Sprintf("%#x(%%rip)", disp)
		}
		return fmt.Sprintf("[rip%+#x]", disp)
	}
	base, index := inst.baseReg(), inst.indexReg(false)
	scale := 1 << (inst.SIB >> 6)
	if gnu {
		s := ""
		if disp != 0 || base < 0 {
			s = fmt.Sprintf("%#x", disp)
		}
		s += "("
		if base >= 0 {
			s += reg(base)
		}
		if index >= 0 {
			s += fmt.Sprintf(",%s,%d", reg(index), scale)
		}
		return s + ")"
	}
	var parts []string
	if base >= 0 {
		parts = append(parts, reg(base))
	}
	if index >= 0 {
		parts = append(parts, fmt.Sprintf("%s*%d", reg(index), scale))
	}
	s := "[" + strings.Join(parts, "+")
	if disp != 0 || len(parts) == 0 {
		s += fmt.Sprintf("%+#x", disp)
	}
	return s + "]"
}
