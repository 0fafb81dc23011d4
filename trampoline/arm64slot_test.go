package trampoline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/reason"
	"github.com/probeopt/probeopt/xol"
)

// a64Words are instructions of every relocation kind, for the generator
// tests and the fuzz seeds.
var a64Words = []struct {
	name string
	word uint32
}{
	{"nop", 0xD503201F},
	{"stp-pre", 0xA9BD7BFD},  // stp x29, x30, [sp, #-48]!
	{"mov-sp", 0x910003FD},   // mov x29, sp
	{"add", 0x91000421},      // add x1, x1, #1
	{"b.lo", 0x54000083},     // b.lo +16
	{"b.al", 0x5400008E},     // b.al +16
	{"cbz", 0xB4000080},      // cbz x0, +16
	{"cbnz-w", 0x35FFFF80},   // cbnz w0, -16
	{"tbz", 0x36180080},      // tbz w0, #3, +16
	{"tbnz", 0xB7F80080},     // tbnz x0, #63, +16
	{"adrp", 0x90000001},     // adrp x1, .
	{"adrp-far", 0xF0FFFFE1}, // adrp x1, -4 KiB... (immhi all ones)
	{"adr", 0x10000085},      // adr x5, +16
	{"adr-xzr", 0x1000009F},  // adr xzr, +16
	{"ldr-lit-x", 0x58000084},
	{"ldr-lit-w", 0x18000084},
	{"ldrsw-lit", 0x98000084},
	{"ldr-lit-d", 0x5C000080},
	{"ldr-lit-q", 0x9C000083},
	{"ldr-lit-s", 0x1C000082},
	{"ldr-lit-wzr", 0x1800009F},
	{"ldrsw-lit-xzr", 0x9800009F},
	{"prfm-lit", 0xD8000080},
	{"bl", 0x94000010},
	{"bl-back", 0x97FFFFF0},
	{"b", 0x14000010},
	{"b-far", 0x15FFFFFF}, // b +128 MiB - 4
	{"blr", 0xD63F00E0},   // blr x7
	{"blr-x16", 0xD63F0200},
	{"br", 0xD61F0220},  // br x17
	{"ret", 0xD65F03C0}, // ret
	{"bti-c", 0xD503245F},
	{"paciasp", 0xD503233F},
	{"ldadd", 0xF8200020}, // ldadd x0, x0, [x1]
	{"mrs-nzcv", 0xD53B4200},
	{"msr-nzcv", 0xD51B4200},
	{"fadd", 0x1E622820},
}

var a64Handlers = []struct {
	name string
	h    Handler
}{
	{"none", Handler{}},
	{"count", Handler{Count: true, Counter: 3}},
	{"event", Handler{ID: 5, Event: true}},
	{"both", Handler{ID: 6, Count: true, Counter: 63, Event: true}},
}

// checkA64Slot checks generated slot code: every word that is not a
// literal decodes, the jump back at g.back goes to s.Resume(), and
// nothing but its literal follows it.
func checkA64Slot(slot uint64, s *SiteARM64, g *a64Slot) error {
	code := g.code
	if len(code)%4 != 0 || g.back%4 != 0 || g.back >= len(code) {
		return fmt.Errorf("%d bytes, jump back at %d", len(code), g.back)
	}
	back, err := decode.DecodeARM64(code[g.back:], slot+uint64(g.back))
	if err != nil {
		return fmt.Errorf("jump back: %v", err)
	}
	switch {
	case back.Branch == decode.BranchJmp && back.Target == s.Resume():
		if len(code) != g.back+4 {
			return fmt.Errorf("%d bytes after the jump back", len(code)-g.back-4)
		}
	case back.Class == decode.ARM64ClassLiteral && len(code) == g.back+16 &&
		binary.LittleEndian.Uint64(code[g.back+8:]) == s.Resume():
		br, err := decode.DecodeARM64(code[g.back+4:], slot+uint64(g.back)+4)
		if err != nil || br.Mnemonic != "br" || br.Rn != back.Rt {
			return fmt.Errorf("far jump back: %s", br.Text())
		}
	default:
		return fmt.Errorf("jump back at +%d is %s, want a jump to %#x", g.back, back.Text(), s.Resume())
	}
	// The words before the jump back decode, but for the literals of far
	// jumps (a ldr x16/x17 literal two words back).
	for i := 0; i < g.back; i += 4 {
		in, err := decode.DecodeARM64(code[i:], slot+uint64(i))
		if err != nil {
			if i >= 8 {
				prev, _ := decode.DecodeARM64(code[i-8:], slot+uint64(i-8))
				prev2, _ := decode.DecodeARM64(code[i-12:], slot+uint64(i-12))
				if prev.Mnemonic == "br" || prev2.Mnemonic == "br" {
					continue
				}
			}
			return fmt.Errorf("+%d: %v", i, err)
		}
		if in.Class == decode.ARM64ClassException {
			return fmt.Errorf("+%d: %s in a slot", i, in.Text())
		}
	}
	return nil
}

func testConfig(t testing.TB, dataAddr uint64) *Config {
	t.Helper()
	d, err := NewData(dataAddr, 64, 256)
	if err != nil {
		t.Fatal(err)
	}
	return &Config{Data: d}
}

func TestAnalyzeARM64(t *testing.T) {
	const addr = 0x40_1000
	tests := []struct {
		name   string
		code   []byte
		opts   *SiteOptions
		kind   SiteKind
		patch  uint64
		calls  bool
		refuse reason.Code // refusal code, "" for a site
	}{
		{name: "nop", code: decode.ARM64Code(0xD503201F), kind: SiteNop, patch: addr},
		{name: "stp", code: decode.ARM64Code(0xA9BD7BFD), kind: SiteDetour, patch: addr},
		{name: "bl", code: decode.ARM64Code(0x94000010), kind: SiteDetour, patch: addr, calls: true},
		{name: "blr", code: decode.ARM64Code(0xD63F00E0), kind: SiteDetour, patch: addr, calls: true},
		{name: "bti-kept", code: decode.ARM64Code(0xD503245F, 0xA9BD7BFD), kind: SiteDetour, patch: addr + 4},
		{name: "bti-nop", code: decode.ARM64Code(0xD503249F, 0xD503201F), kind: SiteNop, patch: addr + 4},
		{name: "bti-replaced", code: decode.ARM64Code(0xD503245F), opts: &SiteOptions{ReplaceEndbr: true}, kind: SiteDetour, patch: addr},
		{name: "bti-short", code: decode.ARM64Code(0xD503245F), refuse: RefuseShort},
		{name: "short", code: []byte{0x1F, 0x20}, refuse: RefuseShort},
		{name: "udf", code: decode.ARM64Code(0x00000000), refuse: RefuseUndecodable},
		{name: "nop-only", code: decode.ARM64Code(0xA9BD7BFD), opts: &SiteOptions{NopOnly: true}, refuse: RefuseNoDetour},
		{name: "ldxr", code: decode.ARM64Code(0xC85F7C20), refuse: RefuseNotRelocatable},
		{name: "stxr", code: decode.ARM64Code(0xC8027C20), refuse: RefuseNotRelocatable},
		{name: "svc", code: decode.ARM64Code(0xD4000001), refuse: RefuseNotRelocatable},
		{name: "brk", code: decode.ARM64Code(0xD4200000), refuse: RefuseNotRelocatable},
		{name: "msr-daif", code: decode.ARM64Code(0xD51B4220), refuse: RefuseNotRelocatable},
		{name: "eret", code: decode.ARM64Code(0xD69F03E0), refuse: RefuseNotRelocatable},
		{name: "blr-x30", code: decode.ARM64Code(0xD63F03C0), refuse: RefuseNotBoostable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := AnalyzeARM64(addr, tt.code, tt.opts)
			if tt.refuse != "" {
				var se *SiteError
				if !errors.As(err, &se) || se.Code != tt.refuse || !errors.Is(err, ErrNotSite) {
					t.Fatalf("err = %v, want refusal %s", err, tt.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Kind != tt.kind || s.PatchAddr != tt.patch || s.Calls != tt.calls || s.Addr != addr || s.Resume() != tt.patch+4 {
				t.Fatalf("site %+v", s)
			}
		})
	}
	if _, err := AnalyzeARM64(addr+2, decode.ARM64Code(0xD503201F), nil); !errors.Is(err, ErrNotSite) {
		t.Errorf("unaligned address: %v", err)
	}
}

// TestGenerateARM64 generates slots for every kind of instruction,
// handler and option, near and far from the site, and checks the code.
func TestGenerateARM64(t *testing.T) {
	const addr = 0x4000_0000
	dists := []struct {
		name string
		d    int64
	}{{"next", 0x1000}, {"2MiB", 2 << 20}, {"below-100MiB", -100 << 20}, {"max", MaxReachARM64 - 0x10000}}
	for _, w := range a64Words {
		s, err := AnalyzeARM64(addr, decode.ARM64Code(w.word), &SiteOptions{ReplaceEndbr: true})
		if err != nil {
			t.Errorf("%s: %v", w.name, err)
			continue
		}
		for _, d := range dists {
			for _, h := range a64Handlers {
				for _, opt := range []ARM64Options{{}, {LSE: true}, {ScratchFree: true}} {
					name := fmt.Sprintf("%s/%s/%s/%+v", w.name, d.name, h.name, opt)
					slot := uint64(int64(addr) + d.d)
					cfg := testConfig(t, slot+0x1_0000_0000)
					g, err := generateARM64(slot, s, &h.h, cfg, &opt)
					inReach := true
					for _, r := range s.Reach() {
						if dd := int64(r - slot); dd > MaxReachARM64 || dd < -MaxReachARM64 {
							inReach = false
						}
					}
					if err != nil {
						if !inReach && errors.Is(err, ErrOutOfReach) {
							continue
						}
						t.Errorf("%s: %v", name, err)
						continue
					}
					if err := checkA64Slot(slot, s, g); err != nil {
						t.Errorf("%s: %v\n% x", name, err, g.code)
					}
				}
			}
		}
	}
}

func TestGenerateARM64Errors(t *testing.T) {
	const addr = 0x4000_0000
	s, err := AnalyzeARM64(addr, decode.ARM64Code(0x14000010), nil) // b +64
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, addr+0x10_0000)
	tests := []struct {
		name string
		slot uint64
		h    Handler
		cfg  *Config
		opt  *ARM64Options
		want error
	}{
		{"site out of reach", addr + 200<<20, Handler{Count: true}, cfg, nil, ErrOutOfReach},
		{"back out of reach", addr - (1<<27 - 64), Handler{}, cfg, nil, ErrOutOfReach},
		{"return probe", addr + 0x1000, Handler{Return: &ReturnHandler{}}, cfg, nil, ErrConfig},
		{"unhijack", addr + 0x1000, Handler{Unhijack: true}, cfg, nil, ErrConfig},
		{"counter out of range", addr + 0x1000, Handler{Count: true, Counter: 64}, cfg, nil, ErrConfig},
		{"no data", addr + 0x1000, Handler{Count: true}, &Config{}, nil, ErrConfig},
		{"no ring", addr + 0x1000, Handler{Event: true}, &Config{Data: &Data{Addr: addr, NumCounters: 1}}, nil, ErrConfig},
		{"misaligned slot", addr + 0x1002, Handler{}, cfg, nil, ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := GenerateARM64(tt.slot, s, &tt.h, tt.cfg, tt.opt)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	// The far jump back, allowed with ScratchFree: b +64 from a slot
	// 127 MiB below is out of reach for the back jump only.
	slot := uint64(addr - (1<<27 - 64))
	g, err := generateARM64(slot, s, &Handler{}, cfg, &ARM64Options{ScratchFree: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkA64Slot(slot, s, g); err != nil {
		t.Fatal(err)
	}
}

func TestBuildARM64(t *testing.T) {
	const addr = 0x40_2000
	s, err := AnalyzeARM64(addr, decode.ARM64Code(0x54000083), nil) // b.lo +16
	if err != nil {
		t.Fatal(err)
	}
	area, err := NewArea(addr+0x10_0000, 4096)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, addr+0x20_0000)
	var prev uint64
	for i := 0; i < 3; i++ {
		tr, err := area.BuildARM64(s, &Handler{Count: true, Counter: i}, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Slot%16 != 0 || tr.Slot <= prev || tr.Site != nil {
			t.Fatalf("slot %#x after %#x, site %v", tr.Slot, prev, tr.Site)
		}
		prev = tr.Slot
		b, err := decode.DecodeARM64(tr.Install.New, tr.Install.Addr)
		if err != nil || b.Branch != decode.BranchJmp || b.Target != tr.Slot {
			t.Fatalf("install %s, want b %#x", b.Text(), tr.Slot)
		}
		if tr.Install.Addr != addr || string(tr.Install.Old) != string(decode.ARM64Code(0x54000083)) ||
			tr.Remove.Addr != addr || string(tr.Remove.Old) != string(tr.Install.New) || string(tr.Remove.New) != string(tr.Install.Old) ||
			len(tr.Remove.Guard) != 1 || tr.Remove.Guard[0] != (Range{tr.Slot, tr.Slot + uint64(len(tr.Code))}) {
			t.Fatalf("patches %+v %+v", tr.Install, tr.Remove)
		}
	}
	small, _ := NewArea(addr+0x10_0000, 16)
	if _, err := small.BuildARM64(s, &Handler{Count: true}, cfg, nil); !errors.Is(err, ErrAreaFull) {
		t.Fatalf("small area: %v", err)
	}
}

// TestPlaceARM64 places an area for arm64 sites within the reach of b.
func TestPlaceARM64(t *testing.T) {
	maps := []Mapping{
		{Start: 0x40_0000, End: 0x60_0000, Path: "/bin/prog"},
		{Start: 0x7f00_0000_0000, End: 0x7f00_0010_0000, Path: "/lib/libc.so"},
	}
	reach := []uint64{0x40_1000, 0x40_1004, 0x5f_0000, 0x5f_0004}
	at, err := Place(maps, reach, 0x4000, &PlaceOptions{Reach: MaxReachARM64})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reach {
		for _, b := range []uint64{at, at + 0x4000 - 4} {
			if d := int64(b - r); d > MaxReachARM64 || d < -MaxReachARM64 {
				t.Fatalf("area at %#x: %#x out of reach", at, r)
			}
		}
	}
	// The library is 127 TiB away: no place reaches both.
	if _, err := Place(maps, append(reach, 0x7f00_0000_1000), 0x4000, &PlaceOptions{Reach: MaxReachARM64}); !errors.Is(err, ErrNoPlace) {
		t.Fatalf("err = %v", err)
	}
}

// TestARM64SlotLayout pins the code of a counter slot: the frame, the
// exclusive loop, the relocated instruction and the jump back.
func TestARM64SlotLayout(t *testing.T) {
	const addr, slot = 0x40_0000, 0x41_0000
	s, err := AnalyzeARM64(addr, decode.ARM64Code(0xB4000080), nil) // cbz x0, +16
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, 0x50_0000)
	code, err := GenerateARM64(slot, s, &Handler{Count: true, Counter: 1}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"stp x16, x17, [sp,#-32]!",
		"str x15, [sp,#16]",
		"adrp x16, 0x500000",
		"add x16, x16, #0x48",
		"ldxr x17, [x16]",
		"add x17, x17, #0x1",
		"stxr w15, x17, [x16]",
		"cbnz w15, 0x410010",
		"ldr x15, [sp,#16]",
		"ldp x16, x17, [sp],#32",
		"cbz x0, 0x400010",
		"b 0x400004",
	}
	var got []string
	for i := 0; i < len(code); i += 4 {
		in, err := decode.DecodeARM64(code[i:], slot+uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, in.Text())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}

// TestARM64RelocRefusal checks that a relocation refusal that only more
// reach would cure is ErrOutOfReach, not a site refusal.
func TestARM64RelocRefusal(t *testing.T) {
	s, err := AnalyzeARM64(0x40_0000, decode.ARM64Code(0xD63F00E0), nil) // blr x7
	if err != nil {
		t.Fatal(err)
	}
	_, err = GenerateARM64(0x41_0000, s, &Handler{}, &Config{}, &ARM64Options{BTIGuarded: true})
	var re *xol.RefusalError
	if !errors.Is(err, ErrOutOfReach) || !errors.As(err, &re) {
		t.Fatalf("blr under BTI without scratch: %v", err)
	}
}
