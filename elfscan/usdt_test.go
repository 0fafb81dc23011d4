package elfscan_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
)

func TestParseUSDTArgs(t *testing.T) {
	type A = elfscan.USDTArg
	x86, a64 := decode.X86_64, decode.ARM64
	tests := []struct {
		arch decode.Arch
		in   string
		want []A
	}{
		{x86, "", nil},
		{x86, "-4@%edi", []A{{Size: 4, Signed: true, Kind: elfscan.ArgReg, Reg: "edi"}}},
		{x86, "8@$-1 1@$0x10", []A{{Size: 8, Kind: elfscan.ArgConst, Value: -1}, {Size: 1, Kind: elfscan.ArgConst, Value: 16}}},
		{x86, "-4@-20(%rbp)", []A{{Size: 4, Signed: true, Kind: elfscan.ArgMem, Reg: "rbp", Value: -20}}},
		{x86, "8@(%rsp)", []A{{Size: 8, Kind: elfscan.ArgMem, Reg: "rsp"}}},
		{x86, "-4@(%rdx,%rsi,4)", []A{{Size: 4, Signed: true, Kind: elfscan.ArgMem, Reg: "rdx", Index: "rsi", Scale: 4}}},
		{x86, "4@8(,%rax,8)", []A{{Size: 4, Kind: elfscan.ArgMem, Index: "rax", Scale: 8, Value: 8}}},
		{x86, "4@0x10(%r12,%r13)", []A{{Size: 4, Kind: elfscan.ArgMem, Reg: "r12", Index: "r13", Scale: 1, Value: 16}}},
		{x86, "-8@counter(%rip)", []A{{Size: 8, Signed: true, Kind: elfscan.ArgMem, Reg: "rip", Symbol: "counter"}}},
		{x86, "-4@40+CheckpointStats(%rip)", []A{{Size: 4, Signed: true, Kind: elfscan.ArgMem, Reg: "rip", Symbol: "CheckpointStats", Value: 40}}},
		{x86, "4@table+8", []A{{Size: 4, Kind: elfscan.ArgMem, Symbol: "table", Value: 8}}},
		{x86, "8@%fs:0x28", []A{{Size: 8, Kind: elfscan.ArgMem, Segment: "fs", Value: 0x28}}},
		{x86, "-1@%r8b 2@%cx", []A{{Size: 1, Signed: true, Kind: elfscan.ArgReg, Reg: "r8b"}, {Size: 2, Kind: elfscan.ArgReg, Reg: "cx"}}},
		{x86, "%rax", []A{{Kind: elfscan.ArgReg, Reg: "rax"}}},
		{a64, "-8@x0", []A{{Size: 8, Signed: true, Kind: elfscan.ArgReg, Reg: "x0"}}},
		{a64, "-4@7 -4@-1", []A{{Size: 4, Signed: true, Kind: elfscan.ArgConst, Value: 7}, {Size: 4, Signed: true, Kind: elfscan.ArgConst, Value: -1}}},
		{a64, "-4@[x6]", []A{{Size: 4, Signed: true, Kind: elfscan.ArgMem, Reg: "x6"}}},
		{a64, "-8@[x4, 64]", []A{{Size: 8, Signed: true, Kind: elfscan.ArgMem, Reg: "x4", Value: 64}}},
		{a64, "-4@[sp, 128] 4@#3", []A{{Size: 4, Signed: true, Kind: elfscan.ArgMem, Reg: "sp", Value: 128}, {Size: 4, Kind: elfscan.ArgConst, Value: 3}}},
		{a64, "1@w2", []A{{Size: 1, Kind: elfscan.ArgReg, Reg: "w2"}}},
	}
	for _, tt := range tests {
		got, err := elfscan.ParseUSDTArgs(tt.arch, tt.in)
		if err != nil {
			t.Errorf("%v %q: %v", tt.arch, tt.in, err)
			continue
		}
		for i := range got {
			got[i].Text = ""
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%v %q:\n got %+v\nwant %+v", tt.arch, tt.in, got, tt.want)
		}
	}
	for _, bad := range []struct {
		arch decode.Arch
		in   string
	}{
		{x86, "3@%eax"}, {x86, "x@%eax"}, {x86, "4@%foo"}, {x86, "4@(%rax"}, {x86, "4@()"},
		{x86, "4@(%rax,%rbx,3)"}, {x86, "4@$"}, {x86, "4@"}, {x86, "4@%xs:8"}, {x86, "4@a+b(%rip)"},
		{a64, "4@x31"}, {a64, "4@[x1, y]"}, {a64, "4@[q0]"}, {a64, "4@v0"},
	} {
		if _, err := elfscan.ParseUSDTArgs(bad.arch, bad.in); !errors.Is(err, elfscan.ErrBadSpec) {
			t.Errorf("%v %q: error %v, want ErrBadSpec", bad.arch, bad.in, err)
		}
	}
}

// TestUSDTSites checks the site kinds of the hand-written sites, the
// .stapsdt.base correction, offsets and semaphores of the fixtures.
func TestUSDTSites(t *testing.T) {
	f := open(t, fixture.Path(t, "x86_64", "nopsites"))
	probes, err := f.USDT()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]elfscan.SiteInsn{
		"nop": elfscan.SiteNop, "nop5": elfscan.SiteNop5, "nop10": elfscan.SiteNop10,
		"nop_nop5": elfscan.SiteNopNop5, "nop_nop10": elfscan.SiteNopNop10, "mov": elfscan.SiteOther,
	}
	if len(probes) != len(want) {
		t.Fatalf("%d probes, want %d", len(probes), len(want))
	}
	for _, p := range probes {
		if p.Site != want[p.Name] {
			t.Errorf("%s: site %q, want %q", p.Name, p.Site, want[p.Name])
		}
		if p.Addr != p.Location || p.Offset != p.Addr {
			t.Errorf("%s: addr %#x offset %#x, location %#x (a PIE with text at its file offset)", p.Name, p.Addr, p.Offset, p.Location)
		}
	}
	for _, arch := range []string{"x86_64", "aarch64"} {
		for _, name := range []string{"usdt-pie", "usdt-nopie"} {
			f := open(t, fixture.Path(t, arch, name))
			probes, err := f.USDT()
			if err != nil {
				t.Fatal(err)
			}
			data := readFixture(t, arch, name)
			for _, p := range probes {
				if p.Site != elfscan.SiteNop {
					t.Errorf("%s/%s %s: site %q, want nop", arch, name, p.Name, p.Site)
				}
				if p.Semaphore == 0 {
					continue
				}
				// The semaphore's file offset holds the zero-initialized
				// 16-bit counter in .probes.
				if p.SemaphoreOffset == 0 || p.SemaphoreOffset+2 > uint64(len(data)) || binary.LittleEndian.Uint16(data[p.SemaphoreOffset:]) != 0 {
					t.Errorf("%s/%s %s: semaphore offset %#x", arch, name, p.Name, p.SemaphoreOffset)
				}
				if off, err := f.Offset(p.SemaphoreAddr); err != nil || off != p.SemaphoreOffset {
					t.Errorf("%s/%s %s: Offset(semaphore) %#x %v", arch, name, p.Name, off, err)
				}
			}
		}
	}
}

// TestParseUSDTNotes feeds hand-made note sections to the parser.
func TestParseUSDTNotes(t *testing.T) {
	note := func(owner string, typ uint32, desc []byte) []byte {
		var b []byte
		b = binary.LittleEndian.AppendUint32(b, uint32(len(owner)+1))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
		b = binary.LittleEndian.AppendUint32(b, typ)
		b = append(b, owner...)
		b = append(b, 0)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		b = append(b, desc...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	desc := func(loc, base, sema uint64, strs ...string) []byte {
		var b []byte
		b = binary.LittleEndian.AppendUint64(b, loc)
		b = binary.LittleEndian.AppendUint64(b, base)
		b = binary.LittleEndian.AppendUint64(b, sema)
		for _, s := range strs {
			b = append(append(b, s...), 0)
		}
		return b
	}
	good := note("stapsdt", 3, desc(0x1000, 0x2000, 0x3000, "prov", "name", "-4@%edi"))
	other := note("GNU", 3, []byte{1, 2, 3, 4})
	probes, err := elfscan.ParseUSDTNotes(append(append(append([]byte{}, other...), good...), 0, 0, 0, 0), 0)
	if err != nil || len(probes) != 1 {
		t.Fatalf("ParseUSDTNotes: %v, %v", probes, err)
	}
	p := probes[0]
	if p.Provider != "prov" || p.Name != "name" || p.Args != "-4@%edi" || p.Location != 0x1000 || p.Base != 0x2000 || p.Semaphore != 0x3000 {
		t.Errorf("probe %+v", p)
	}
	for name, data := range map[string][]byte{
		"cut-header":    good[:10],
		"desc-past-end": good[:len(good)-4],
		"short-desc":    note("stapsdt", 3, desc(1, 2, 3)[:20]),
		"unterminated":  note("stapsdt", 3, append(desc(1, 2, 3, "prov", "name"), 'x')),
		"empty-name":    note("stapsdt", 3, desc(1, 2, 3, "prov", "", "")),
	} {
		_, err := elfscan.ParseUSDTNotes(data, 0)
		var fe *elfscan.FormatError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a *FormatError", name, err)
		}
	}
}

func TestClassifySite(t *testing.T) {
	tests := []struct {
		arch decode.Arch
		code []byte
		want elfscan.SiteInsn
	}{
		{decode.X86_64, []byte{0x90, 0xc3}, elfscan.SiteNop},
		{decode.X86_64, []byte{0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00}, elfscan.SiteNopNop5},
		{decode.X86_64, []byte{0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}, elfscan.SiteNopNop10},
		{decode.X86_64, []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}, elfscan.SiteNop5},
		{decode.X86_64, []byte{0x66, 0x66, 0x66, 0x66, 0x90}, elfscan.SiteNop5},
		{decode.X86_64, []byte{0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}, elfscan.SiteNop10},
		{decode.X86_64, []byte{0x41, 0x90}, elfscan.SiteOther}, // xchg %r8,%rax
		{decode.X86_64, []byte{0xf3, 0x90}, elfscan.SiteOther}, // pause
		{decode.X86_64, []byte{0x55}, elfscan.SiteOther},
		{decode.X86_64, nil, elfscan.SiteOther},
		{decode.ARM64, []byte{0x1f, 0x20, 0x03, 0xd5}, elfscan.SiteNop},
		{decode.ARM64, []byte{0xc0, 0x03, 0x5f, 0xd6}, elfscan.SiteOther},
	}
	for _, tt := range tests {
		if got := elfscan.ClassifySite(tt.arch, tt.code); got != tt.want {
			t.Errorf("%v % x: %q, want %q", tt.arch, tt.code, got, tt.want)
		}
	}
}
