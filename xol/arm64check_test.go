package xol_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/reason"
	"github.com/probeopt/probeopt/xol"
)

func TestCheckARM64(t *testing.T) {
	const none = "none"
	tests := []struct {
		word   uint32
		what   string
		fixups string
		refuse reason.Code
	}{
		{0xAA0103E0, "mov x0, x1", "ip", ""},
		{0xD503201F, "nop", "ip", ""},
		{0xD503233F, "paciasp", "ip", ""},
		{0xD50323BF, "autiasp", "ip", ""},
		{0xF9400020, "ldr x0, [x1]", "ip", ""},
		{0xF8200020, "ldadd x0, x0, [x1]", "ip", ""},
		{0xD53BD040, "mrs x0, tpidr_el0", "ip", ""},
		{0xD51B4200, "msr nzcv, x0", "ip", ""},
		{0x14000010, "b +0x40", "rel+pcrel-branch", ""},
		{0x94000010, "bl +0x40", "call+rel+pcrel-branch", ""},
		{0x54000080, "b.eq +0x10", "rel+pcrel-branch", ""},
		{0x54000090, "bc.eq +0x10", "rel+pcrel-branch", ""},
		{0xB4000080, "cbz x0, +0x10", "rel+pcrel-branch", ""},
		{0x36000080, "tbz w0, #0, +0x10", "rel+pcrel-branch", ""},
		{0xD65F03C0, "ret", none, ""},
		{0xD61F0200, "br x16", none, ""},
		{0xD63F0200, "blr x16", "call", ""},
		{0xD65F0BFF, "retaa", none, ""},
		{0x10000080, "adr x0, +0x10", "pcrel-address", ""},
		{0x90000000, "adrp x0, 0", "pcrel-address", ""},
		{0x58000080, "ldr x0, +0x10", "ip+pcrel-literal", ""},
		{0x5C000080, "ldr d0, +0x10", "ip+pcrel-literal", ""},
		{0xD4000001, "svc #0", "", xol.RefuseSyscall},
		{0xD4200000, "brk #0", "", xol.RefuseTrap},
		{0xD4000002, "hvc #0", "", xol.RefusePrivileged},
		{0xD69F03E0, "eret", "", xol.RefusePrivileged},
		{0xD53B4220, "mrs x0, daif", "", xol.RefusePrivileged},
		{0xD50343DF, "msr daifset, #3", "", xol.RefusePrivileged},
		{0xD500419F, "msr pan, #1", "", xol.RefusePrivileged},
		{0xC85F7C20, "ldxr x0, [x1]", "", xol.RefuseExclusive},
		{0xC8027C20, "stxr w2, x0, [x1]", "", xol.RefuseExclusive},
	}
	for _, tt := range tests {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], tt.word)
		inst, err := decode.DecodeARM64(b[:], 0x1000)
		if err != nil {
			t.Fatalf("%s: decode: %v", tt.what, err)
		}
		f, err := xol.CheckARM64(&inst)
		if tt.refuse != "" {
			var re *xol.RefusalError
			if !errors.As(err, &re) || re.Code != tt.refuse {
				t.Errorf("%s (%08x): %v, %v; want refusal %s", tt.what, tt.word, f, err, tt.refuse)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s (%08x): %v", tt.what, tt.word, err)
			continue
		}
		if got := f.String(); got != tt.fixups {
			t.Errorf("%s (%08x): fixups %s, want %s", tt.what, tt.word, got, tt.fixups)
		}
	}
}
