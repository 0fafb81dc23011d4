package kuprobe

import (
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/plan"
)

// Placement says whether and how a kernel uprobe counts an instruction.
type Placement struct {
	Site
	// Refused is the reason the kernel refuses a uprobe there, as the
	// linux-uprobes policy of package plan predicts it; "" when it accepts.
	Refused plan.Reason
	// PerIteration is set for a string instruction with a repeat prefix:
	// the kernel steps it one iteration at a time, each step ending back
	// on its int3, so a kernel uprobe there counts every iteration, not
	// every execution.
	PerIteration bool
}

// Place returns the placement of a kernel uprobe at the instruction at
// link-time address vaddr of f: its file offset, and whether the kernel
// accepts it.
func Place(f *elfscan.File, vaddr uint64) (Placement, error) {
	off, err := f.TextOffset(vaddr)
	if err != nil {
		return Placement{}, err
	}
	code, err := f.Code(vaddr, 16)
	if err != nil {
		return Placement{}, fmt.Errorf("%s:%#x: %w", f.Path, vaddr, err)
	}
	p := Placement{Site: Site{Path: f.Path, Offset: off}}
	var fn *plan.Function
	if sf := f.FuncAt(vaddr); sf != nil && f.Arch == decode.X86_64 {
		if body, err := f.Code(sf.Addr, sf.End-sf.Addr); err == nil {
			fn = plan.AnalyzeX86(sf.Addr, body, decode.X86Decoder{})
		}
	}
	if d := plan.Decide(plan.LinuxUprobes, &plan.Site{Arch: f.Arch, Addr: vaddr, Code: code, Func: fn}, nil); d.Strategy == plan.Reject {
		p.Refused = d.Reason
	}
	var in decode.X86Inst
	if f.Arch == decode.X86_64 && (decode.X86Decoder{}).Decode(code, vaddr, &in) == nil && in.Encoding == decode.EncLegacy && in.Map == decode.Map1Byte &&
		in.Prefixes&(decode.PrefixREP|decode.PrefixREPNE) != 0 && (in.Opcode >= 0xA4 && in.Opcode <= 0xA7 || in.Opcode >= 0xAA && in.Opcode <= 0xAF) {
		p.PerIteration = true
	}
	return p, nil
}
