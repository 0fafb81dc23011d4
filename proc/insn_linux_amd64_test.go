package proc

// The instructions the tests write and expect, x86-64.

// site5 is the text of the patch fixture's fx_a_base site 5 (mov
// %edi,%eax; add $5,%eax; ret), and site5Imm the offset of its immediate.
var site5, site5Imm = []byte{0x89, 0xf8, 0x83, 0xc0, 0x05, 0xc3}, 4

// retInsn is a return.
var retInsn = []byte{0xc3}

// nopsThenLoop is three nops and a branch to itself; nopLen is the size of
// one nop.
var nopsThenLoop, nopLen = []byte{0x90, 0x90, 0x90, 0xeb, 0xfe}, 1
