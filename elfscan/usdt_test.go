package elfscan_test

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// TestUSDTBaseShift simulates a prelinked file: a copy of each fixture
// whose notes record their location, base and semaphore moved by the same
// amount while .stapsdt.base stays where it is. The corrected addresses
// must be the ones readelf -n prints for the original file, and the file
// offsets and sites those of the original.
func TestUSDTBaseShift(t *testing.T) {
	for _, shift := range []int64{-0x1000, 0x3000} {
		for _, arch := range []string{"x86_64", "aarch64"} {
			for _, name := range []string{"usdt-pie", "usdt-nopie"} {
				t.Run(fmt.Sprintf("%s/%s/%+#x", arch, name, shift), func(t *testing.T) {
					testUSDTBaseShift(t, arch, name, shift)
				})
			}
		}
	}
}

func testUSDTBaseShift(t *testing.T, arch, name string, shift int64) {
	orig := fixture.Path(t, arch, name)
	want := readelfNotes(t, orig)
	ref, err := open(t, orig).USDT()
	if err != nil {
		t.Fatal(err)
	}
	data := readFixture(t, arch, name)
	baseAddr := section(t, data, ".stapsdt.base").Addr
	delta := uint64(shift)
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, shiftUSDTNotes(t, data, delta), 0o644); err != nil {
		t.Fatal(err)
	}
	raw := readelfNotes(t, path)
	got, err := open(t, path).USDT()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 || len(raw) != len(want) || len(got) != len(want) || len(ref) != len(want) {
		t.Fatalf("probes: %d shifted (readelf %d), %d original (readelf %d)", len(got), len(raw), len(ref), len(want))
	}
	sema := 0
	for i, w := range want {
		g, r, o := got[i], raw[i], ref[i]
		// The copy must be what a prelinked file looks like, or the test
		// proves nothing: the note's base is not the section's address,
		// and its raw location and semaphore are not the real ones.
		if w.base != baseAddr || r.base != w.base+delta || r.base == 0 || r.loc != w.loc+delta || r.loc == w.loc ||
			(w.sema != 0 && (r.sema != w.sema+delta || r.sema == w.sema)) || (w.sema == 0 && r.sema != 0) {
			t.Fatalf("%s: shifted note loc %#x base %#x sema %#x; original %#x %#x %#x, .stapsdt.base at %#x",
				w.name, r.loc, r.base, r.sema, w.loc, w.base, w.sema, baseAddr)
		}
		if g.Location != r.loc || g.Base != r.base || g.Semaphore != r.sema {
			t.Errorf("%s: note loc %#x base %#x sema %#x, readelf -n: %#x %#x %#x", g.Name, g.Location, g.Base, g.Semaphore, r.loc, r.base, r.sema)
		}
		if g.Addr != w.loc || g.SemaphoreAddr != w.sema {
			t.Errorf("%s: addr %#x semaphore %#x, want %#x %#x (readelf -n of the original)", g.Name, g.Addr, g.SemaphoreAddr, w.loc, w.sema)
		}
		if g.Offset != o.Offset || g.OffsetErr != nil || o.OffsetErr != nil {
			t.Errorf("%s: offset %#x (%v), original %#x (%v)", g.Name, g.Offset, g.OffsetErr, o.Offset, o.OffsetErr)
		}
		if off := loadOffset(t, data, w.loc); g.Offset != off {
			t.Errorf("%s: offset %#x, program headers give %#x", g.Name, g.Offset, off)
		}
		if g.Site != o.Site || g.Site != elfscan.SiteNop {
			t.Errorf("%s: site %q, original %q", g.Name, g.Site, o.Site)
		}
		if w.sema == 0 {
			continue
		}
		sema++
		if g.SemaphoreOffset != o.SemaphoreOffset || g.SemaphoreErr != nil || o.SemaphoreErr != nil {
			t.Errorf("%s: semaphore offset %#x (%v), original %#x (%v)", g.Name, g.SemaphoreOffset, g.SemaphoreErr, o.SemaphoreOffset, o.SemaphoreErr)
		}
		if off := loadOffset(t, data, w.sema); g.SemaphoreOffset != off {
			t.Errorf("%s: semaphore offset %#x, program headers give %#x", g.Name, g.SemaphoreOffset, off)
		}
	}
	if sema == 0 {
		t.Error("no probe with a semaphore")
	}
}

// shiftUSDTNotes returns a copy of the ELF file b in which every stapsdt
// note's location, base and (non-zero) semaphore are moved by delta, as in
// a file prelinked after its notes were written.
func shiftUSDTNotes(t *testing.T, b []byte, delta uint64) []byte {
	t.Helper()
	le := binary.LittleEndian
	c := append([]byte(nil), b...)
	n := 0
	for _, s := range sections(t, b) {
		if s.Name != ".note.stapsdt" {
			continue
		}
		note := c[s.Offset : s.Offset+s.Size]
		for off := 0; off+12 <= len(note); {
			namesz, descsz, typ := int(le.Uint32(note[off:])), int(le.Uint32(note[off+4:])), le.Uint32(note[off+8:])
			desc := off + 12 + (namesz+3)&^3
			if typ == 3 && string(note[off+12:off+12+namesz]) == "stapsdt\x00" {
				for i, field := range []int{0, 8, 16} {
					if v := le.Uint64(note[desc+field:]); i < 2 || v != 0 {
						le.PutUint64(note[desc+field:], v+delta)
					}
				}
				n++
			}
			off = desc + (descsz+3)&^3
		}
	}
	if n == 0 {
		t.Fatal("no stapsdt note")
	}
	return c
}

// loadOffset returns the file offset of the virtual address addr through
// the PT_LOAD segment of b that holds it.
func loadOffset(t *testing.T, b []byte, addr uint64) uint64 {
	t.Helper()
	ef, err := elf.NewFile(bytesReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off
		}
	}
	t.Fatalf("%#x is in no PT_LOAD segment", addr)
	return 0
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
