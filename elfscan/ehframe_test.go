package elfscan_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// ehSections reads .eh_frame and .gcc_except_table of the file at path.
func ehSections(t testing.TB, path string) (elfscan.EHSection, []elfscan.EHSection) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var frame elfscan.EHSection
	var data []elfscan.EHSection
	for _, name := range []string{".eh_frame", ".gcc_except_table"} {
		s := ef.Section(name)
		if s == nil {
			continue
		}
		b, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		es := elfscan.EHSection{Name: name, Addr: s.Addr, Data: b}
		if name == ".eh_frame" {
			frame = es
		} else {
			data = append(data, es)
		}
	}
	return frame, data
}

// asmLandingPads returns the labels GCC's assembly names as landing pads:
// the third field of each call-site record (start, length, landing pad,
// action) between .LLSDACSB and .LLSDACSE.
func asmLandingPads(t *testing.T, asm string) []string {
	t.Helper()
	b, err := os.ReadFile(asm)
	if err != nil {
		t.Fatal(err)
	}
	var pads []string
	in, field := false, 0
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, ".LLSDACSB") && strings.HasSuffix(line, ":"):
			in, field = true, 0
			continue
		case strings.HasPrefix(line, ".LLSDACSE") && strings.HasSuffix(line, ":"):
			in = false
			continue
		case !in:
			continue
		}
		v, ok := strings.CutPrefix(line, ".uleb128")
		if !ok {
			t.Fatalf("unexpected line in a call-site table: %q", line)
		}
		if field%4 == 2 {
			if v = strings.TrimSpace(v); v != "0" {
				label, _, _ := strings.Cut(v, "-")
				pads = append(pads, label)
			}
		}
		field++
	}
	return pads
}

// TestExceptionTablesGCC checks the parser against two independent
// oracles on a C++ program built by the test: the landing pads equal the
// addresses of the labels GCC's assembly puts in its call-site tables; and
// the FDE ranges and LSDA pointers equal those computed from objdump
// --dwarf=frames (the ranges as it prints them; each LSDA from the raw
// augmentation bytes it prints, a pc-relative sdata4 field 17 bytes into
// the FDE).
func TestExceptionTablesGCC(t *testing.T) {
	objdump := testenv.MustHaveTool(t, "objdump")
	asm, exe := fixture.ThrowsCXX(t)
	frame, data := ehSections(t, exe)
	if len(data) == 0 {
		t.Fatal("no .gcc_except_table")
	}
	eh, err := elfscan.ParseExceptionTables(frame, data)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if feh, err := f.ExceptionTables(); err != nil || fmt.Sprint(feh) != fmt.Sprint(eh) {
		t.Errorf("File.ExceptionTables: %v, %v; want what the sections parse to", feh, err)
	}

	// Landing pads against the assembly's labels.
	_, syms := fixture.OpenELF(t, exe)
	addrOf := map[string]uint64{}
	for _, s := range syms {
		addrOf[s.Name] = s.Value
	}
	var want []uint64
	for _, l := range asmLandingPads(t, asm) {
		a, ok := addrOf[l]
		if !ok {
			t.Fatalf("label %s not in the symbol table", l)
		}
		want = append(want, a)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if len(want) < 4 {
		t.Fatalf("only %d landing pads in the assembly", len(want))
	}
	if fmt.Sprintf("%#x", eh.LandingPads) != fmt.Sprintf("%#x", want) {
		t.Errorf("landing pads %#x, the assembly's labels %#x", eh.LandingPads, want)
	}

	// FDEs against objdump.
	type fde struct{ end, lsda uint64 }
	wantFDE := objdumpFDEs(t, objdump, exe, frame.Addr)
	got := map[uint64]fde{}
	withLSDA := 0
	for _, f := range eh.FDEs {
		if f.Err != nil {
			t.Errorf("FDE %#x-%#x: %v", f.PCBegin, f.PCEnd, f.Err)
		}
		got[f.PCBegin] = fde{f.PCEnd, f.LSDA}
		if f.LSDA != 0 {
			withLSDA++
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(wantFDE) {
		t.Errorf("FDEs (begin: end, LSDA) %#x\nobjdump %#x", got, wantFDE)
	}
	if withLSDA < 4 {
		t.Errorf("%d FDEs with an LSDA", withLSDA)
	}
	t.Logf("%d FDEs (%d with an LSDA), %d landing pads", len(eh.FDEs), withLSDA, len(eh.LandingPads))
}

var (
	objdumpCIE = regexp.MustCompile(`^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ CIE$`)
	objdumpFDE = regexp.MustCompile(`^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)$`)
)

// objdumpFDEs returns, by start, the end and the LSDA (0 if none) of each
// FDE objdump --dwarf=frames prints. Only the encodings GCC uses are
// understood: an FDE's pointers pc-relative sdata4 (R 1b), the LSDA too (L
// 1b); anything else fails the test.
func objdumpFDEs(t *testing.T, objdump, path string, ehAddr uint64) map[uint64]struct{ end, lsda uint64 } {
	t.Helper()
	out, err := exec.Command(objdump, "--dwarf=frames", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	type cieInfo struct {
		aug  string
		data []byte
	}
	cies := map[uint64]*cieInfo{}
	res := map[uint64]struct{ end, lsda uint64 }{}
	var cur *cieInfo
	var curFDE struct {
		off, begin, end uint64
		cie             *cieInfo
	}
	inFDE := false
	hexBytes := func(s string) []byte {
		var b []byte
		for _, f := range strings.Fields(s) {
			v, err := strconv.ParseUint(f, 16, 8)
			if err != nil {
				t.Fatalf("augmentation data %q", s)
			}
			b = append(b, byte(v))
		}
		return b
	}
	flush := func(aug []byte) {
		if !inFDE {
			return
		}
		inFDE = false
		c := curFDE.cie
		var lsda uint64
		if strings.Contains(c.aug, "L") {
			// zPLR: P's encoding and pointer, L's encoding, R's.
			lenc, renc := c.data[len(c.data)-2], c.data[len(c.data)-1]
			if c.aug != "zPLR" || lenc != 0x1b || renc != 0x1b {
				t.Fatalf("CIE %q data % x: encodings the oracle does not compute", c.aug, c.data)
			}
			if len(aug) != 4 {
				t.Fatalf("FDE at %#x: augmentation data % x", curFDE.off, aug)
			}
			if v := int32(binary.LittleEndian.Uint32(aug)); v != 0 {
				field := ehAddr + curFDE.off + 4 + 4 + 4 + 4 + 1
				lsda = field + uint64(int64(v))
			}
		}
		res[curFDE.begin] = struct{ end, lsda uint64 }{curFDE.end, lsda}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	var aug []byte
	for sc.Scan() {
		line := sc.Text()
		if m := objdumpCIE.FindStringSubmatch(line); m != nil {
			flush(aug)
			off, _ := strconv.ParseUint(m[1], 16, 64)
			cur = &cieInfo{}
			cies[off] = cur
			continue
		}
		if m := objdumpFDE.FindStringSubmatch(line); m != nil {
			flush(aug)
			aug, cur = nil, nil
			off, _ := strconv.ParseUint(m[1], 16, 64)
			cieOff, _ := strconv.ParseUint(m[2], 16, 64)
			begin, _ := strconv.ParseUint(m[3], 16, 64)
			end, _ := strconv.ParseUint(m[4], 16, 64)
			c := cies[cieOff]
			if c == nil {
				t.Fatalf("FDE at %#x: CIE %#x not seen", off, cieOff)
			}
			curFDE.off, curFDE.begin, curFDE.end, curFDE.cie = off, begin, end, c
			inFDE = true
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch {
		case cur != nil && k == "Augmentation":
			cur.aug = strings.Trim(v, `"`)
		case cur != nil && k == "Augmentation data":
			cur.data = hexBytes(v)
		case inFDE && k == "Augmentation data":
			aug = hexBytes(v)
		}
	}
	flush(aug)
	return res
}

// TestExceptionTablesLibstdcxx reads the exception tables of the C++
// runtime: every LSDA reads, and the LSDA pointers equal objdump's.
func TestExceptionTablesLibstdcxx(t *testing.T) {
	objdump := testenv.MustHaveTool(t, "objdump")
	const path = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
	testenv.MustHaveFile(t, path)
	frame, data := ehSections(t, path)
	eh, err := elfscan.ParseExceptionTables(frame, data)
	if err != nil {
		t.Fatal(err)
	}
	want := objdumpFDEs(t, objdump, path, frame.Addr)
	bad := 0
	for _, f := range eh.FDEs {
		w, ok := want[f.PCBegin]
		if f.Err != nil || !ok || w.end != f.PCEnd || w.lsda != f.LSDA {
			if bad++; bad <= 5 {
				t.Errorf("FDE %#x-%#x LSDA %#x (%v); objdump %#x-%#x LSDA %#x", f.PCBegin, f.PCEnd, f.LSDA, f.Err, f.PCBegin, w.end, w.lsda)
			}
		}
	}
	if len(eh.FDEs) != len(want) {
		t.Errorf("%d FDEs, objdump %d", len(eh.FDEs), len(want))
	}
	t.Logf("%d FDEs, %d landing pads, %d differ", len(eh.FDEs), len(eh.LandingPads), bad)
}

// ehSeedFrame is a CIE "zPLR" (GCC's encodings) and an FDE for
// 0x2008-0x2048 whose LSDA is at 0x3000, for .eh_frame at 0x2000.
var ehSeedFrame = []byte{
	0x1c, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'P', 'L', 'R', 0, 1, 0x78, 0x10, 7, 0x9b, 0, 0, 0, 0, 0x1b, 0x1b, 0x0c, 0x07, 0x08, 0x90, 0x01, 0, 0,
	0x1c, 0, 0, 0, 0x24, 0, 0, 0, 0xe0, 0xff, 0xff, 0xff, 0x40, 0, 0, 0, 4, 0xcf, 0x0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0,
}

// ehSeedLSDA is the LSDA at 0x3000: no landing-pad base, a type table,
// uleb128 call sites: [4, 9) lands at 0x10, [0x10, 0x16) has no pad.
var ehSeedLSDA = []byte{0xff, 0x9b, 0x11, 0x01, 0x08, 0x04, 0x05, 0x10, 0x01, 0x10, 0x06, 0x00, 0x00, 0, 0, 0}

// TestExceptionTablesHandMade checks hand-made tables: the landing pad,
// an LSDA cut short (its FDE's pads unknown), and damage that leaves
// nothing readable.
func TestExceptionTablesHandMade(t *testing.T) {
	parse := func(frame, lsda []byte) (*elfscan.ExceptionTables, error) {
		return elfscan.ParseExceptionTables(elfscan.EHSection{Name: ".eh_frame", Addr: 0x2000, Data: frame},
			[]elfscan.EHSection{{Name: ".gcc_except_table", Addr: 0x3000, Data: lsda}})
	}
	eh, err := parse(ehSeedFrame, ehSeedLSDA)
	if err != nil || len(eh.FDEs) != 1 || eh.FDEs[0] != (elfscan.FDE{PCBegin: 0x2008, PCEnd: 0x2048, LSDA: 0x3000}) || fmt.Sprintf("%#x", eh.LandingPads) != "[0x2018]" {
		t.Fatalf("seed: %+v, %v", eh, err)
	}
	eh, err = parse(ehSeedFrame, ehSeedLSDA[:9])
	var ee *elfscan.EHError
	if err != nil || len(eh.FDEs) != 1 || !errors.As(eh.FDEs[0].Err, &ee) || ee.Section != ".gcc_except_table" {
		t.Fatalf("short LSDA: %+v, %v", eh, err)
	}
	for _, bad := range [][]byte{
		ehSeedFrame[:20],                    // the CIE cut short
		append([]byte{0xff, 0xff, 0, 0}, 1), // a length past the end
		append(ehSeedFrame[:32:32], 8, 0, 0, 0, 0x50, 0, 0, 0, 0, 0, 0, 0), // a CIE pointer before the section
	} {
		if _, err := parse(bad, ehSeedLSDA); !errors.As(err, &ee) || !errors.Is(err, elfscan.ErrEHFrame) {
			t.Errorf("% x: error %v", bad, err)
		}
	}
}

// FuzzExceptionTables checks that the parser never panics on any bytes,
// and what it returns: an error is an *EHError wrapping ErrEHFrame, so is
// every FDE's, and the landing pads are sorted and distinct.
func FuzzExceptionTables(f *testing.F) {
	f.Add(ehSeedFrame, ehSeedLSDA)
	f.Add(ehSeedFrame[:40], ehSeedLSDA[:5])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []byte{})
	f.Fuzz(func(t *testing.T, frame, lsda []byte) {
		eh, err := elfscan.ParseExceptionTables(elfscan.EHSection{Name: ".eh_frame", Addr: 0x2000, Data: frame},
			[]elfscan.EHSection{{Name: ".gcc_except_table", Addr: 0x3000, Data: lsda}})
		var ee *elfscan.EHError
		if err != nil {
			if eh != nil || !errors.As(err, &ee) || !errors.Is(err, elfscan.ErrEHFrame) {
				t.Fatalf("error %v (%T) with result %v", err, err, eh)
			}
			return
		}
		for _, fde := range eh.FDEs {
			if fde.Err != nil && (!errors.As(fde.Err, &ee) || !errors.Is(fde.Err, elfscan.ErrEHFrame)) {
				t.Fatalf("FDE error %v (%T)", fde.Err, fde.Err)
			}
		}
		for i := 1; i < len(eh.LandingPads); i++ {
			if eh.LandingPads[i] <= eh.LandingPads[i-1] {
				t.Fatalf("landing pads not sorted and distinct: %#x", eh.LandingPads)
			}
		}
	})
}
