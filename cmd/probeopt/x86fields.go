package main

import (
	"fmt"
	"strings"

	"github.com/probeopt/probeopt/decode"
)

// x86Fields is the JSON and human description of a decoded x86-64
// instruction. Offsets are from the first byte of the instruction, sizes in
// bytes; addresses and 64-bit values are 0x-prefixed hex strings.
type x86Fields struct {
	Vendor          string     `json:"vendor"`
	Encoding        string     `json:"encoding"`
	Prefixes        []string   `json:"prefixes"`
	NumPrefixes     int        `json:"num_prefixes"`
	Segment         string     `json:"segment,omitempty"`
	MandatoryPrefix string     `json:"mandatory_prefix,omitempty"`
	REX             string     `json:"rex,omitempty"`
	W               bool       `json:"w"`
	R               bool       `json:"r"`
	X               bool       `json:"x"`
	B               bool       `json:"b"`
	R4              bool       `json:"r4"`
	X4              bool       `json:"x4"`
	B4              bool       `json:"b4"`
	V4              bool       `json:"v4"`
	VVVV            uint8      `json:"vvvv"`
	L               uint8      `json:"l"`
	PP              uint8      `json:"pp"`
	EVEX            *x86EVEX   `json:"evex,omitempty"`
	Map             string     `json:"map"`
	Opcode          string     `json:"opcode"`
	ModRM           *x86ModRM  `json:"modrm,omitempty"`
	SIB             *x86SIB    `json:"sib,omitempty"`
	Disp            *x86Disp   `json:"disp,omitempty"`
	Imm             *x86Imm    `json:"imm,omitempty"`
	Imm2            *x86Imm    `json:"imm2,omitempty"`
	OpSize          int        `json:"op_size"`
	AddrSize        int        `json:"addr_size"`
	RIPRelative     *x86RIPRel `json:"rip_relative,omitempty"`
	Branch          *x86Branch `json:"branch,omitempty"`
	VendorDependent bool       `json:"vendor_dependent"`
	RegsRead        []string   `json:"regs_read"`
	RegsWritten     []string   `json:"regs_written"`
	RegsApprox      bool       `json:"regs_approx"`
	inst            *decode.X86Inst
}

type x86EVEX struct {
	AAA uint8 `json:"aaa"` // opmask register k0-k7
	Z   bool  `json:"z"`   // zeroing
	B   bool  `json:"b"`   // broadcast / rounding
}

type x86ModRM struct {
	Byte string `json:"byte"`
	Mod  uint8  `json:"mod"`
	Reg  uint8  `json:"reg"`
	RM   uint8  `json:"rm"`
}

type x86SIB struct {
	Byte  string `json:"byte"`
	Scale uint8  `json:"scale"`
	Index uint8  `json:"index"`
	Base  uint8  `json:"base"`
}

type x86Disp struct {
	Offset int   `json:"offset"`
	Size   int   `json:"size"`
	Value  int64 `json:"value"`
}

type x86Imm struct {
	Offset int    `json:"offset"`
	Size   int    `json:"size"`
	Value  string `json:"value"`
}

type x86RIPRel struct {
	DispOffset int    `json:"disp_offset"` // offset of the disp32
	Target     string `json:"target"`
}

type x86Branch struct {
	Kind     string `json:"kind"`
	Relative bool   `json:"relative"`
	RelOff   int    `json:"rel_offset,omitempty"`
	RelSize  int    `json:"rel_size,omitempty"`
	Target   string `json:"target,omitempty"`
}

// prefixNames are the legacy prefixes in the bit order of decode.X86Prefixes.
var prefixNames = []struct {
	bit  decode.X86Prefixes
	name string
	b    byte
}{
	{decode.PrefixLock, "lock", 0xf0},
	{decode.PrefixREPNE, "repne", 0xf2},
	{decode.PrefixREP, "rep", 0xf3},
	{decode.PrefixCS, "cs", 0x2e},
	{decode.PrefixSS, "ss", 0x36},
	{decode.PrefixDS, "ds", 0x3e},
	{decode.PrefixES, "es", 0x26},
	{decode.PrefixFS, "fs", 0x64},
	{decode.PrefixGS, "gs", 0x65},
	{decode.PrefixData, "data16", 0x66},
	{decode.PrefixAddr, "addr32", 0x67},
}

var segNames = map[byte]string{0x2e: "cs", 0x36: "ss", 0x3e: "ds", 0x26: "es", 0x64: "fs", 0x65: "gs"}

func newX86Fields(inst *decode.X86Inst, vendor decode.Vendor) *x86Fields {
	f := &x86Fields{
		Vendor:      vendor.String(),
		Encoding:    inst.Encoding.String(),
		Prefixes:    []string{},
		NumPrefixes: inst.NumPrefixes,
		Segment:     segNames[inst.LastSeg],
		W:           inst.W, R: inst.R, X: inst.X, B: inst.B,
		R4: inst.R4, X4: inst.X4, B4: inst.B4, V4: inst.V4,
		VVVV:            inst.VVVV,
		L:               inst.L,
		PP:              inst.PP,
		Map:             inst.Map.String(),
		Opcode:          fmt.Sprintf("%02x", inst.Opcode),
		OpSize:          inst.OpSize,
		AddrSize:        inst.AddrSize,
		VendorDependent: inst.VendorDependent,
		RegsRead:        regNames(decode.X86_64, inst.Read),
		RegsWritten:     regNames(decode.X86_64, inst.Written),
		RegsApprox:      inst.RegsApprox,
		inst:            inst,
	}
	for _, p := range prefixNames {
		if inst.Prefixes&p.bit != 0 {
			f.Prefixes = append(f.Prefixes, p.name)
		}
	}
	if inst.MandPrefix != 0 {
		f.MandatoryPrefix = fmt.Sprintf("%02x", inst.MandPrefix)
	}
	if inst.REX != 0 {
		f.REX = fmt.Sprintf("%02x", inst.REX)
	}
	if inst.Encoding == decode.EncEVEX {
		f.EVEX = &x86EVEX{AAA: inst.EVEXaaa, Z: inst.EVEXz, B: inst.EVEXb}
	}
	if inst.HasModRM {
		f.ModRM = &x86ModRM{Byte: fmt.Sprintf("%02x", inst.ModRM), Mod: inst.Mod, Reg: inst.Reg, RM: inst.RM}
	}
	if inst.HasSIB {
		f.SIB = &x86SIB{Byte: fmt.Sprintf("%02x", inst.SIB), Scale: inst.SIB >> 6, Index: inst.SIB >> 3 & 7, Base: inst.SIB & 7}
	}
	if inst.DispSize > 0 {
		f.Disp = &x86Disp{Offset: inst.DispOff, Size: inst.DispSize, Value: inst.Disp}
	}
	if inst.ImmSize > 0 {
		f.Imm = &x86Imm{Offset: inst.ImmOff, Size: inst.ImmSize, Value: fmt.Sprintf("%#x", inst.Imm)}
	}
	if inst.Imm2Size > 0 {
		f.Imm2 = &x86Imm{Offset: inst.Imm2Off, Size: inst.Imm2Size, Value: fmt.Sprintf("%#x", inst.Imm2)}
	}
	if inst.RIPRel {
		f.RIPRelative = &x86RIPRel{DispOffset: inst.DispOff, Target: hexAddr(inst.Target)}
	}
	if inst.Branch != decode.BranchNone {
		br := &x86Branch{Kind: inst.Branch.String(), Relative: inst.Branch.Relative()}
		if inst.RelSize > 0 {
			br.RelOff, br.RelSize = inst.RelOff, inst.RelSize
			br.Target = hexAddr(inst.Target)
		}
		f.Branch = br
	}
	return f
}

// lines renders the fields for people, one line per aspect, leaving out
// what the instruction does not have.
func (f *x86Fields) lines() []field {
	inst := f.inst
	var out []field
	add := func(name, format string, args ...any) {
		out = append(out, field{name, fmt.Sprintf(format, args...)})
	}
	add("encoding", "%s", f.encodingLine())
	if len(f.Prefixes) > 0 {
		var ps []string
		for _, p := range prefixNames {
			if inst.Prefixes&p.bit != 0 {
				ps = append(ps, fmt.Sprintf("%s (%02x)", p.name, p.b))
			}
		}
		s := strings.Join(ps, ", ")
		if f.NumPrefixes > len(ps) {
			s += fmt.Sprintf("; %d prefix bytes", f.NumPrefixes)
		}
		add("prefixes", "%s", s)
	}
	if f.MandatoryPrefix != "" {
		add("mandatory", "%s", f.MandatoryPrefix)
	}
	if f.Segment != "" {
		add("segment", "%s override", f.Segment)
	}
	add("opcode", "%s (map %s)", f.Opcode, f.Map)
	if m := f.ModRM; m != nil {
		add("modrm", "%s: mod=%d reg=%d rm=%d", m.Byte, m.Mod, m.Reg, m.RM)
	}
	if s := f.SIB; s != nil {
		add("sib", "%s: scale=%d index=%d base=%d", s.Byte, s.Scale, s.Index, s.Base)
	}
	if d := f.Disp; d != nil {
		add("displacement", "%s at +%d: %#x (%d)", plural(d.Size, "byte"), d.Offset, d.Value, d.Value)
	}
	if i := f.Imm; i != nil {
		add("immediate", "%s at +%d: %s", plural(i.Size, "byte"), i.Offset, i.Value)
	}
	if i := f.Imm2; i != nil {
		add("immediate 2", "%s at +%d: %s", plural(i.Size, "byte"), i.Offset, i.Value)
	}
	if f.OpSize != 0 || f.AddrSize != 0 {
		add("sizes", "operand %d bits, address %d bits", f.OpSize, f.AddrSize)
	}
	if r := f.RIPRelative; r != nil {
		add("rip-relative", "disp32 at +%d, refers to %s", r.DispOffset, r.Target)
	}
	if b := f.Branch; b != nil {
		s := b.Kind
		if b.RelSize > 0 {
			s += fmt.Sprintf(" to %s (rel%d at +%d)", b.Target, 8*b.RelSize, b.RelOff)
		}
		add("branch", "%s", s)
	}
	if f.VendorDependent {
		add("vendor", "decoded as %s; Intel and AMD CPUs decode these bytes differently", f.Vendor)
	}
	regs := fmt.Sprintf("read %s; written %s", regList(f.RegsRead), regList(f.RegsWritten))
	if f.RegsApprox {
		regs += " (approximate: a vector form described as a class; only address registers listed)"
	}
	add("registers", "%s", regs)
	return out
}

// encodingLine describes the encoding and its extension bits.
func (f *x86Fields) encodingLine() string {
	inst := f.inst
	b01 := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	switch inst.Encoding {
	case decode.EncLegacy, decode.Enc3DNow:
		if f.REX == "" {
			return f.Encoding
		}
		return fmt.Sprintf("%s, REX %s: W=%d R=%d X=%d B=%d", f.Encoding, f.REX, b01(f.W), b01(f.R), b01(f.X), b01(f.B))
	case decode.EncREX2:
		return fmt.Sprintf("%s: W=%d R=%d X=%d B=%d R4=%d X4=%d B4=%d", f.Encoding,
			b01(f.W), b01(f.R), b01(f.X), b01(f.B), b01(f.R4), b01(f.X4), b01(f.B4))
	case decode.EncEVEX:
		return fmt.Sprintf("%s: W=%d R=%d X=%d B=%d R4=%d X4=%d B4=%d V4=%d vvvv=%d L=%d map=%s pp=%d aaa=%d z=%d b=%d",
			f.Encoding, b01(f.W), b01(f.R), b01(f.X), b01(f.B), b01(f.R4), b01(f.X4), b01(f.B4), b01(f.V4),
			f.VVVV, f.L, f.Map, f.PP, inst.EVEXaaa, b01(inst.EVEXz), b01(inst.EVEXb))
	default: // VEX2, VEX3, XOP
		return fmt.Sprintf("%s: W=%d R=%d X=%d B=%d vvvv=%d L=%d map=%s pp=%d", f.Encoding,
			b01(f.W), b01(f.R), b01(f.X), b01(f.B), f.VVVV, f.L, f.Map, f.PP)
	}
}

func regList(names []string) string {
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, ",")
}
