package plan

import "github.com/probeopt/probeopt/decode"

// isa is what plan does differently for each instruction set: how a
// function is swept, how a file's branches are indexed, the two policies'
// rules, and how a direct branch is named in a sentence. Every other part
// of plan is written once for both.
type isa struct {
	analyze    func(addr uint64, code []byte, vendor decode.Vendor) *Function
	index      func(load func() (*BranchCode, error), vendor decode.Vendor) *BranchIndex
	linux      func(*Site, *Options) Decision
	probeopt   func(*Site, *Options) Decision
	branchName func(decode.BranchKind) string
}

// The tables are filled by init: the policies they name use isaOf.
var isaX86, isaARM64 *isa

func init() {
	isaX86 = &isa{
		analyze: func(addr uint64, code []byte, v decode.Vendor) *Function {
			return AnalyzeX86(addr, code, decode.X86Decoder{Vendor: v})
		},
		index: func(load func() (*BranchCode, error), v decode.Vendor) *BranchIndex {
			return IndexX86Branches(load, decode.X86Decoder{Vendor: v})
		},
		linux:      linuxX86,
		probeopt:   probeoptX86,
		branchName: decode.BranchKind.String,
	}
	isaARM64 = &isa{
		analyze: func(addr uint64, code []byte, _ decode.Vendor) *Function {
			return AnalyzeARM64(addr, code)
		},
		index: func(load func() (*BranchCode, error), _ decode.Vendor) *BranchIndex {
			return IndexARM64Branches(load)
		},
		linux:    linuxARM64,
		probeopt: probeoptARM64,
		branchName: func(k decode.BranchKind) string {
			return arm64BranchNames[k]
		},
	}
}

// arm64BranchNames names the direct branches of arm64 as its assembly does.
var arm64BranchNames = map[decode.BranchKind]string{
	decode.BranchJmp:     "b",
	decode.BranchCall:    "bl",
	decode.BranchJcc:     "b.cond",
	decode.BranchCompare: "cbz",
	decode.BranchTest:    "tbz",
}

// isaOf returns the table of arch, nil for an instruction set plan does
// not know.
func isaOf(arch decode.Arch) *isa {
	switch arch {
	case decode.X86_64:
		return isaX86
	case decode.ARM64:
		return isaARM64
	}
	return nil
}
