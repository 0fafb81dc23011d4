package trampoline

import (
	"errors"
	"testing"

	"github.com/probeopt/probeopt/decode"
)

// FuzzBuildARM64 analyzes an arbitrary instruction word at a site (after
// a bti when bti is set), builds a slot for it at a distance from the
// site, and checks the invariants: a refusal is a *SiteError; a slot
// within MaxReachARM64 of every address of Reach is always generated;
// a slot farther away is generated or refused with ErrOutOfReach; the
// code decodes word by word (but for far-jump literals), ends with the
// jump back to the resume address, and the site's b goes to the slot.
func FuzzBuildARM64(f *testing.F) {
	for i, w := range a64Words {
		f.Add(w.word, int64(0x1000), uint8(i), false)
		f.Add(w.word, int64(-(3 << 20)), uint8(i+1), i%2 == 0)
	}
	f.Fuzz(func(t *testing.T, word uint32, delta int64, sel uint8, bti bool) {
		const addr = 0x10_0000_0000
		code := decode.ARM64Code(word)
		if bti {
			code = decode.ARM64Code(0xD503245F, word)
		}
		s, err := AnalyzeARM64(addr, code, nil)
		if err != nil {
			var se *SiteError
			if !errors.As(err, &se) || !errors.Is(err, ErrNotSite) || se.Addr != addr {
				t.Fatalf("refusal %v is not a *SiteError", err)
			}
			return
		}
		if s.Old != word || s.Resume() != s.PatchAddr+4 || (bti && s.PatchAddr != addr+4) {
			t.Fatalf("site %+v", s)
		}
		// The slot: 16-byte aligned, up to 256 MiB away.
		delta %= 1 << 28
		slot := uint64(int64(addr)+delta) &^ 15
		h := a64Handlers[int(sel)%len(a64Handlers)].h
		opt := ARM64Options{LSE: sel&0x10 != 0, ScratchFree: sel&0x20 != 0}
		cfg := testConfig(t, slot+uint64(sel)<<24)
		inReach := true
		for _, r := range s.Reach() {
			if d := int64(r - slot); d > MaxReachARM64 || d < -MaxReachARM64 {
				inReach = false
			}
		}
		area, err := NewArea(slot, 4096)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := area.BuildARM64(s, &h, cfg, &opt)
		if err != nil {
			if inReach || !errors.Is(err, ErrOutOfReach) {
				t.Fatalf("slot at %#x for %#08x (reach %v): %v", slot, word, inReach, err)
			}
			return
		}
		g, err := generateARM64(tr.Slot, s, &h, cfg, &opt)
		if err != nil {
			t.Fatal(err)
		}
		if string(g.code) != string(tr.Code) {
			t.Fatal("generation is not deterministic")
		}
		if err := checkA64Slot(tr.Slot, s, g); err != nil {
			t.Fatalf("%#08x at %#x, slot %#x: %v\n% x", word, s.PatchAddr, tr.Slot, err, g.code)
		}
		b, err := decode.DecodeARM64(tr.Install.New, tr.Install.Addr)
		if err != nil || b.Branch != decode.BranchJmp || b.Target != tr.Slot || tr.Install.Addr != s.PatchAddr {
			t.Fatalf("install %s at %#x, want b %#x at %#x", b.Text(), tr.Install.Addr, tr.Slot, s.PatchAddr)
		}
	})
}
