package main

// Small adapters between the decode package and the command's output, kept
// in one place so that the rest of the command does not depend on the
// details of either decoder.

import (
	"fmt"
	"strings"

	"github.com/probeopt/probeopt/decode"
)

// x86Text renders inst in the given syntax, "gnu" or "intel".
func x86Text(inst *decode.X86Inst, syntax string) string {
	return inst.Text(syntax)
}

// x86Mnemonic returns the mnemonic of inst, for histograms: the decoder's
// own, or else the first word of its text after any rep/lock prefix.
func x86Mnemonic(inst *decode.X86Inst) string {
	if inst.Mnemonic != "" {
		return inst.Mnemonic
	}
	words := strings.Fields(x86Text(inst, "intel"))
	for len(words) > 1 {
		switch words[0] {
		case "rep", "repe", "repz", "repne", "repnz", "lock", "data16", "addr32", "bnd", "notrack":
			words = words[1:]
			continue
		}
		break
	}
	if len(words) == 0 {
		return "(unknown)"
	}
	return words[0]
}

// regNames lists the registers of s by name for arch, in register order;
// the list is empty, not nil, when s is.
func regNames(arch decode.Arch, s decode.RegSet) []string {
	names := []string{}
	if arch == decode.X86_64 {
		return append(names, decode.X86RegNames(s)...)
	}
	for r := 0; r < 64; r++ {
		if !s.Has(r) {
			continue
		}
		if r <= int(decode.ARM64SP) {
			names = append(names, decode.ARM64Reg(r).String())
		} else {
			names = append(names, fmt.Sprintf("r%d?", r))
		}
	}
	return names
}

// arm64Decoded is what the command needs of one arm64 instruction.
type arm64Decoded struct {
	Len      int               // always 4
	Word     uint32            // the instruction word
	Branch   decode.BranchKind // how the instruction may change the flow of control
	Text     string            // assembly text; only with full
	Mnemonic string            // for histograms; only with full
	// Fields is the decoder's own description (a decode.ARM64Inst), to be
	// rendered field by field; only with full.
	Fields any
}

// decodeARM64 decodes the first arm64 instruction in b, at address addr.
// Rendering the text costs more than decoding, so it is done, like the
// rest of the description, only when full is set.
func decodeARM64(b []byte, addr uint64, full bool) (arm64Decoded, error) {
	inst, err := decode.DecodeARM64(b, addr)
	if err != nil {
		return arm64Decoded{}, err
	}
	d := arm64Decoded{Len: inst.Len, Word: inst.Word, Branch: inst.Branch}
	if full {
		d.Fields = inst
		d.Text = inst.Text()
		d.Mnemonic = inst.Mnemonic
		if d.Mnemonic == "" {
			d.Mnemonic = firstWord(d.Text)
		}
	}
	return d, nil
}

// firstWord returns the first space-separated word of s.
func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return s
}
