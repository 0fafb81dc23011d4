package qemu

import (
	"testing"

	"github.com/probeopt/probeopt/xol"
)

// TestARM64XOLStoreIntoBlock replays a run the xol campaign reported
// (seed 20261130, class pair): a store whose address is the relocated
// block's own first word. Both runs fault there, the relocated one with
// its pc at that word too; the checker took the relocated fault for a
// fault at the pc and reported a mismatch.
func TestARM64XOLStoreIntoBlock(t *testing.T) {
	q := startTestQEMU(t, 2)
	const from, to = 0x10_0000_7510, 0x10_0000_f398
	words := []uint32{
		0xa83c7d21, // stnp x1, xzr, [x9, #-64]
		0xd61f02e0, // br x23
		0x54ffa9e9, // b.ls 0x1000006a54
	}
	st := a64CheckState()
	st.X[9] = to + 64
	st.X[23] = ARM64CodeAddr + 0x100
	opt := xol.ARM64RelocOptions{Return: true, BTIGuarded: true, Live: true}
	it, refused := a64Relocate(words, from, to, opt, st, "pair", 0)
	if refused != "" {
		t.Fatalf("refused: %s", refused)
	}
	cases := []ARM64Case{it.orig, it.orig}
	cases[0].State.PC = from
	cases[1].State.PC = to
	out := make([]ARM64Result, 2)
	if err := q.Run(cases, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Signo != sigSEGV || out[0].Addr != to {
		t.Fatalf("the original no longer faults on the block's address: %s", a64ResultText(&out[0]))
	}
	if v, why := checkA64XOL(&it, &out[0], &out[1]); v != a64Faulted || why != "" {
		t.Errorf("%s: verdict %d: %s\n  original:  %s\n  relocated: %s", a64RunText(&it), v, why, a64ResultText(&out[0]), a64ResultText(&out[1]))
	}
}
