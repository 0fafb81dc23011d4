package proc

// The instructions the tests write and expect, arm64 (little-endian
// words).

// site5 is the text of the patch fixture's fx_a_base site 5 (mov w8, w0;
// add w0, w8, #5; ret), and site5Imm the offset of the byte that holds the
// low bits of its immediate (imm12 at bit 10: 5<<10 = 0x1400).
var site5, site5Imm = []byte{0xe8, 0x03, 0x00, 0x2a, 0x00, 0x15, 0x00, 0x11, 0xc0, 0x03, 0x5f, 0xd6}, 5

// retInsn is a return.
var retInsn = []byte{0xc0, 0x03, 0x5f, 0xd6}

// nopsThenLoop is three nops and a branch to itself; nopLen is the size of
// one nop.
var nopsThenLoop, nopLen = []byte{
	0x1f, 0x20, 0x03, 0xd5, 0x1f, 0x20, 0x03, 0xd5, 0x1f, 0x20, 0x03, 0xd5,
	0x00, 0x00, 0x00, 0x14,
}, 4
