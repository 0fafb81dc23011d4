package x86cpu

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/testenv"
)

// newTestOracle starts a LengthOracle for a test and closes it at the end.
// It skips on platforms without the oracle, and skips (fails under CI) when
// the machine does not allow ptrace.
func newTestOracle(t testing.TB) *LengthOracle {
	t.Helper()
	o, err := NewLengthOracle()
	switch {
	case errors.Is(err, ErrNotSupported):
		t.Skipf("no cpu length oracle here: %v", err)
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOSYS):
		testenv.Unavailable(t, "ptrace: %v", err)
	case err != nil:
		t.Fatalf("NewLengthOracle: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return o
}

// hostVendor returns the host CPU vendor or skips the test.
func hostVendor(t testing.TB) decode.Vendor {
	t.Helper()
	v, err := HostVendor()
	if err != nil {
		t.Skipf("host cpu vendor: %v", err)
	}
	return v
}

// mustHex decodes hex bytes, spaces allowed, or fails the test.
func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// TestLengthOracleKnown checks the oracle against lengths known from the
// manuals and objdump, and against the host vendor's column of
// x86VendorLengths.
func TestLengthOracleKnown(t *testing.T) {
	o := newTestOracle(t)
	vendor := hostVendor(t)
	tests := []struct {
		name string
		hex  string
		n    int
		res  CPUResult
	}{
		{"nop", "90", 1, CPUAccepted},
		{"nopl 0(rax,rax)", "0f 1f 44 00 00", 5, CPUAccepted},
		{"movabs rax", "48 b8 01 02 03 04 05 06 07 08", 10, CPUAccepted},
		{"endbr64", "f3 0f 1e fa", 4, CPUAccepted},
		{"call rel32", "e8 01 02 03 04", 5, CPUAccepted},
		{"int3", "cc", 1, CPUAccepted},
		{"syscall is not executed", "0f 05", 2, CPUAccepted},
		{"jmp to the boundary", "eb 00", 2, CPUAccepted},
		{"jmp to itself", "eb fe", 2, CPUAccepted},
		{"ret", "c3", 1, CPUAccepted},
		{"privileged hlt", "f4", 1, CPUAccepted},
		{"mov ss", "8e d0", 2, CPUAccepted},
		{"rip-relative lea", "48 8d 05 01 02 03 04", 7, CPUAccepted},
		{"sib disp32 imm32", "48 c7 84 24 01 02 03 04 05 06 07 08", 12, CPUAccepted},
		{"15-byte instruction", "66 67 2e 48 c7 84 24 01 02 03 04 01 02 03 04", 15, CPUAccepted},
		{"14 prefixes and nop", "66 66 66 66 66 66 66 66 66 66 66 66 66 66 90", 15, CPUAccepted},
		{"15-byte privileged swapgs", "2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 0f 01 f8", 15, CPUAccepted},
		{"ud2", "0f 0b", 2, CPUUndefined},
		{"push es is invalid in 64-bit mode", "06", 1, CPUUndefined},
		{"16-byte prefix chain", "66 66 66 66 66 66 66 66 66 66 66 66 66 66 66 90", 0, CPULonger},
		{"16-byte lock chain", "f0 f0 f0 f0 f0 f0 f0 f0 f0 f0 f0 f0 f0 f0 f0 f0", 0, CPULonger},
		{"opcode past byte 15", "66 66 66 66 66 66 66 66 66 66 66 66 66 0f 01", 0, CPULonger},
		{"imm16 past byte 15", "66 66 66 66 66 66 66 66 66 66 66 66 66 b8 01", 0, CPULonger},
		{"truncated movabs", "48 b8 01 02", 0, CPULonger},
		{"empty", "", 0, CPULonger},
	}
	for _, v := range x86VendorLengths {
		w := v.want(vendor)
		tests = append(tests, struct {
			name string
			hex  string
			n    int
			res  CPUResult
		}{v.name + " (" + vendor.String() + ")", v.hex, w.N, w.Result})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, res, err := o.Length(mustHex(t, tt.hex))
			if err != nil {
				t.Fatalf("Length(%s): %v", tt.hex, err)
			}
			if n != tt.n || res != tt.res {
				t.Errorf("Length(%s) = %d %v, want %d %v", tt.hex, n, res, tt.n, tt.res)
			}
		})
	}
}

// TestLengthOracleBatch checks that LengthBatch agrees with Length.
func TestLengthOracleBatch(t *testing.T) {
	o := newTestOracle(t)
	g := NewX86Gen(7)
	in := make([][]byte, 200)
	for i := range in {
		var c [MaxX86Len]byte
		if i%2 == 0 {
			g.Random(&c)
		} else {
			g.Structured(&c)
		}
		in[i] = c[:]
	}
	out := make([]CPULength, len(in))
	if err := o.LengthBatch(in, out); err != nil {
		t.Fatalf("LengthBatch: %v", err)
	}
	for i, b := range in {
		n, res, err := o.Length(b)
		if err != nil {
			t.Fatalf("Length(% x): %v", b, err)
		}
		if (CPULength{n, res}) != out[i] {
			t.Errorf("% x: Length %d %v, LengthBatch %d %v", b, n, res, out[i].N, out[i].Result)
		}
	}
	if err := o.LengthBatch(in, out[:1]); err == nil {
		t.Errorf("LengthBatch with a short result slice: no error")
	}
}

// TestLengthOracleClosed checks the errors after Close.
func TestLengthOracleClosed(t *testing.T) {
	o := newTestOracle(t)
	if err := o.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, _, err := o.Length([]byte{0x90}); !errors.Is(err, ErrClosed) {
		t.Errorf("Length after Close: %v, want ErrClosed", err)
	}
}

// TestNeutralPrefix checks which prefix byte the #GP disambiguation may
// remove.
func TestNeutralPrefix(t *testing.T) {
	tests := []struct {
		hex  string
		want int
	}{
		{"90", -1},
		{"66 90", -1},
		{"66 66 90", 0},
		{"67 66 f2 f3 48 c7", -1},
		{"67 66 2e 48 c7", 2},
		{"f0 66", 0},
		{"48 66 90", 0},
		{"66 48 90", -1},
		{"48 41 90", 0},
		{"f2 f3 f2 0f", 0},
		{"f3 f2 0f", -1},
		{"64 64", 0},
	}
	for _, tt := range tests {
		if got := neutralPrefix(mustHex(t, tt.hex)); got != tt.want {
			t.Errorf("neutralPrefix(%s) = %d, want %d", tt.hex, got, tt.want)
		}
	}
}

// cpuCaseCount is how many generated strings TestCPUvsDecoderX86 runs:
// PROBEOPT_CPU_N, else 1,000,000 with PROBEOPT_LONG=1, else 20,000.
func cpuCaseCount(t testing.TB) int {
	return testCaseCount(t, "PROBEOPT_CPU_N", 20_000, 20_000, 1_000_000)
}

// cpuSeed is the generator seed: PROBEOPT_SEED, else 1.
func cpuSeed(t testing.TB) uint64 {
	if v := os.Getenv("PROBEOPT_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("PROBEOPT_SEED=%q: %v", v, err)
		}
		return s
	}
	return 1
}

// shapeStats counts the outcomes for one generator shape.
type shapeStats struct {
	cases, accepted, undefined, longer, ambiguous int
	// CPU accepted: the decoder agrees, gives another length, or fails.
	agree, lenDiff, decErr int
	// CPU #UD or longer, and the decoder gives a length anyway.
	decOKOnUD, decOKOnLonger int
	// Of decOKOnLonger: strings whose length the decoder gets wrong once
	// neutral prefixes are removed until the CPU accepts them (failures).
	longerWrong int
}

// add adds the counts of t to s.
func (s *shapeStats) add(t shapeStats) {
	s.cases += t.cases
	s.accepted += t.accepted
	s.undefined += t.undefined
	s.longer += t.longer
	s.ambiguous += t.ambiguous
	s.agree += t.agree
	s.lenDiff += t.lenDiff
	s.decErr += t.decErr
	s.decOKOnUD += t.decOKOnUD
	s.decOKOnLonger += t.decOKOnLonger
	s.longerWrong += t.longerWrong
}

// disagreement is one group of strings on which the CPU and the decoder
// disagree in the same way.
type disagreement struct {
	count    int
	examples []string
}

// disagreements groups disagreements by a key.
type disagreements map[string]*disagreement

// add counts one string under key, keeping the first three examples.
func (d disagreements) add(key, example string) {
	g := d[key]
	if g == nil {
		g = &disagreement{}
		d[key] = g
	}
	g.count++
	if len(g.examples) < 3 {
		g.examples = append(g.examples, example)
	}
}

// log prints the groups, most frequent first, one line each with its
// count and examples, at most limit lines.
func (d disagreements) log(t *testing.T, title string, limit int) {
	if len(d) == 0 {
		return
	}
	keys := make([]string, 0, len(d))
	total := 0
	for k, g := range d {
		keys = append(keys, k)
		total += g.count
	}
	sort.Slice(keys, func(i, j int) bool {
		if d[keys[i]].count != d[keys[j]].count {
			return d[keys[i]].count > d[keys[j]].count
		}
		return keys[i] < keys[j]
	})
	t.Logf("%s: %d strings in %d groups", title, total, len(keys))
	printed := 0
	for _, k := range keys {
		g := d[k]
		if printed >= limit {
			t.Logf("  ... %d more groups", len(keys)-printed)
			break
		}
		t.Logf("  %6d  %s  e.g. %s", g.count, k, strings.Join(g.examples, " | "))
		printed++
	}
}

// opcodeKey names the opcode of b for grouping, without a decoder: the
// escape or map and the opcode byte after any legacy prefixes and REX.
func opcodeKey(b []byte) string {
	i := 0
	pfx := ""
	for i < len(b) && (isLegacyPrefix(b[i]) || b[i]&0xf0 == 0x40) {
		if b[i] == 0x66 || b[i] == 0x67 || b[i] == 0xf2 || b[i] == 0xf3 {
			pfx += fmt.Sprintf("%02x.", b[i])
		}
		i++
	}
	rest := b[i:]
	at := func(j int) string {
		if j < len(rest) {
			return fmt.Sprintf("%02x", rest[j])
		}
		return "??"
	}
	if len(rest) == 0 {
		return "prefixes-only"
	}
	switch rest[0] {
	case 0x0f:
		if len(rest) > 1 && (rest[1] == 0x38 || rest[1] == 0x3a) {
			return pfx + "0f" + at(1) + ":" + at(2)
		}
		if len(rest) > 1 && rest[1] == 0x0f {
			return pfx + "3dnow"
		}
		return pfx + "0f:" + at(1)
	case 0xc5:
		return pfx + "vex2:" + at(2)
	case 0xc4, 0x8f:
		if len(rest) > 1 {
			esc := "vex3"
			if rest[0] == 0x8f {
				esc = "xop"
			}
			return fmt.Sprintf("%s%s.m%d:%s", pfx, esc, rest[1]&0x1f, at(3))
		}
	case 0x62:
		if len(rest) > 1 {
			return fmt.Sprintf("%sevex.m%d:%s", pfx, rest[1]&0x0f, at(4))
		}
	case 0xd5:
		if len(rest) > 1 {
			return fmt.Sprintf("%srex2.m%d:%s", pfx, rest[1]>>7, at(2))
		}
	}
	return pfx + at(0)
}

// decodeKey names a decoded instruction for grouping.
func decodeKey(inst *decode.X86Inst) string {
	return fmt.Sprintf("%s/%s/%02x %s", inst.Encoding, inst.Map, inst.Opcode, inst.Mnemonic)
}

// TestCPUvsDecoderX86 runs generated strings through the CPU and the
// decoder (with the host's vendor rules) and compares lengths.
//
// The test fails when the decoder gives a length other than the one the CPU
// accepted, when it rejects bytes the CPU accepted, and when the decoder gives a length for bytes the CPU needs more
// than 15 bytes for, if removing neutral prefixes (segment overrides, LOCK,
// repeats) until the CPU accepts them shows the decoder's lengths to be
// wrong. It counts and shows, without failing: #UD on this CPU where the
// decoder gives a length (and where the CPU fetched more bytes than that
// length before raising #UD), and the rare 15-byte #GP the oracle cannot resolve.
func TestCPUvsDecoderX86(t *testing.T) {
	o := newTestOracle(t)
	vendor := hostVendor(t)
	n := cpuCaseCount(t)
	seed := cpuSeed(t)
	dec := decode.X86Decoder{Vendor: vendor}
	g := NewX86Gen(seed)
	t.Logf("%d strings, seed %d, vendor %v", n, seed, vendor)

	const batch = 512
	cases := make([][MaxX86Len]byte, batch)
	shapes := make([]X86Shape, batch)
	in := make([][]byte, batch)
	out := make([]CPULength, batch)
	stats := make([]shapeStats, numX86Shapes)
	lenDiff := disagreements{}
	longerWrong := disagreements{}
	longerUD := disagreements{}
	decErr := disagreements{}
	udFetchedMore := disagreements{}
	ambiguous := disagreements{}
	var inst decode.X86Inst

	for done := 0; done < n; done += batch {
		m := min(batch, n-done)
		for i := range m {
			if (done+i)%2 == 0 {
				g.Random(&cases[i])
				shapes[i] = ShapeRandom
			} else {
				shapes[i] = g.Structured(&cases[i])
			}
			in[i] = cases[i][:]
		}
		if err := o.LengthBatch(in[:m], out[:m]); err != nil {
			t.Fatalf("LengthBatch: %v", err)
		}
		for i := range m {
			b := in[i]
			cpu := out[i]
			st := &stats[shapes[i]]
			st.cases++
			derr := dec.Decode(b, 0x401000, &inst)
			hexb := hex.EncodeToString(b)
			switch cpu.Result {
			case CPUAccepted:
				st.accepted++
				switch {
				case derr != nil:
					st.decErr++
					decErr.add(fmt.Sprintf("%v %s", derr, opcodeKey(b[:cpu.N])), fmt.Sprintf("%s (cpu %d)", hexb[:2*cpu.N], cpu.N))
				case inst.Len != cpu.N:
					st.lenDiff++
					key := fmt.Sprintf("cpu %d dec %d %s", cpu.N, inst.Len, decodeKey(&inst))
					lenDiff.add(key, hexb[:2*max(cpu.N, inst.Len)])
				default:
					st.agree++
				}
			case CPUUndefined:
				st.undefined++
				if derr == nil {
					st.decOKOnUD++
					if cpu.N > inst.Len {
						udFetchedMore.add(decodeKey(&inst), fmt.Sprintf("%s (cpu fetched %d, dec %d)", hexb[:2*cpu.N], cpu.N, inst.Len))
					}
				}
			case CPULonger:
				st.longer++
				if derr != nil {
					break
				}
				st.decOKOnLonger++
				decLen := inst.Len
				verdict, example := checkLonger(t, o, dec, b)
				switch verdict {
				case verdictWrong:
					st.longerWrong++
					longerWrong.add(fmt.Sprintf("dec %d %s", decLen, decodeKey(&inst)), hexb+" "+example)
				default:
					longerUD.add(fmt.Sprintf("%s dec %d %s", verdict, decLen, decodeKey(&inst)), hexb+" "+example)
				}
			case CPUAmbiguous:
				st.ambiguous++
				res := "error " + fmt.Sprint(derr)
				if derr == nil {
					res = fmt.Sprintf("len %d", inst.Len)
				}
				ambiguous.add("dec "+res, hexb)
			}
		}
	}

	var tot shapeStats
	row := func(name string, st shapeStats) {
		t.Logf("%-12s %7d %8d %7d %6d %5d | %7d %7d %6d | %7d %7d %5d", name, st.cases, st.accepted, st.undefined, st.longer, st.ambiguous,
			st.agree, st.lenDiff, st.decErr, st.decOKOnUD, st.decOKOnLonger, st.longerWrong)
	}
	t.Logf("%-12s %7s %8s %7s %6s %5s | %7s %7s %6s | %7s %7s %5s", "shape", "cases", "accepted", "#UD", "longer", "ambig",
		"agree", "lendiff", "decerr", "decOK/UD", "decOK/long", "wrong")
	for s, st := range stats {
		if st.cases > 0 {
			row(X86Shape(s).String(), st)
			tot.add(st)
		}
	}
	row("total", tot)
	t.Logf("oracle: %d steps, %d child restarts", o.Steps(), o.Restarts())

	lenDiff.log(t, "LENGTH MISMATCH: cpu accepted, decoder length differs", 50)
	longerWrong.log(t, "LENGTH MISMATCH: cpu needs more than 15 bytes, decoder gave a length that is wrong with neutral prefixes removed", 30)
	decErr.log(t, "cpu accepted, decoder error", 40)
	longerUD.log(t, "cpu needs more than 15 bytes, decoder gave a length; not comparable once shortened", 20)
	udFetchedMore.log(t, "cpu #UD after fetching more bytes than the decoder length", 30)
	ambiguous.log(t, "cpu #GP with 15 bytes, 15 or longer undecided", 10)
	if tot.lenDiff > 0 || tot.longerWrong > 0 || tot.decErr > 0 {
		t.Errorf("%d length mismatches on accepted strings, %d on strings the cpu needs more than 15 bytes for, %d accepted strings the decoder rejects",
			tot.lenDiff, tot.longerWrong, tot.decErr)
	}
}

// Verdicts of checkLonger.
const (
	verdictWrong      = "wrong"         // the decoder's length is wrong
	verdictUndefined  = "#UD-shortened" // #UD once shortened: lengths not comparable
	verdictUnresolved = "unresolved"    // no neutral prefix left to remove
)

// checkLonger looks at bytes the CPU needs more than 15 bytes for but the
// decoder gives a length: it removes neutral prefixes one at a time (adding
// a zero byte at the end) until the CPU gives an answer. If the CPU then accepts, the decoder must agree
// with it on the shortened bytes and must not have accepted the original
// (which is longer by the removed prefixes); if the CPU raises #UD, the
// decoder accepted an encoding this CPU rejects and lengths say nothing.
func checkLonger(t *testing.T, o *LengthOracle, dec decode.X86Decoder, b []byte) (verdict, example string) {
	t.Helper()
	s := append([]byte(nil), b...)
	for removed := 1; ; removed++ {
		j := neutralPrefix(s)
		if j < 0 {
			return verdictUnresolved, ""
		}
		// Keep 15 bytes: what followed the original 15 is unknown, zeros
		// stand in for it (for the CPU and the decoder alike).
		s = append(append(s[:j], s[j+1:]...), 0)
		n, res, err := o.Length(s)
		if err != nil {
			t.Fatalf("Length(% x): %v", s, err)
		}
		switch res {
		case CPULonger, CPUAmbiguous:
			continue
		case CPUUndefined:
			return verdictUndefined, fmt.Sprintf("(-%d prefixes: #UD after %d)", removed, n)
		}
		var inst decode.X86Inst
		derr := dec.Decode(s, 0x401000, &inst)
		if derr == nil && inst.Len == n {
			// The decoder is right on the shortened bytes, so the original
			// is n+removed > 15 bytes long: it should have said so.
			return verdictWrong, fmt.Sprintf("(-%d prefixes: cpu and dec %d, so %d in all)", removed, n, n+removed)
		}
		return verdictWrong, fmt.Sprintf("(-%d prefixes: cpu %d, dec %d %v)", removed, n, inst.Len, derr)
	}
}

// BenchmarkLengthOracle measures oracle throughput on generated strings,
// in strings per second, one string per call and in batches.
func BenchmarkLengthOracle(b *testing.B) {
	o := newTestOracle(b)
	for _, bc := range []struct {
		name       string
		structured bool
		batch      int
	}{
		{"random/single", false, 1},
		{"random/batch", false, 256},
		{"structured/single", true, 1},
		{"structured/batch", true, 256},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g := NewX86Gen(1)
			cases := make([][MaxX86Len]byte, bc.batch)
			in := make([][]byte, bc.batch)
			out := make([]CPULength, bc.batch)
			steps := o.Steps()
			b.ResetTimer()
			for done := 0; done < b.N; done += bc.batch {
				m := min(bc.batch, b.N-done)
				for i := range m {
					if bc.structured {
						g.Structured(&cases[i])
					} else {
						g.Random(&cases[i])
					}
					in[i] = cases[i][:]
				}
				if err := o.LengthBatch(in[:m], out[:m]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "strings/s")
			b.ReportMetric(float64(o.Steps()-steps)/float64(b.N), "steps/string")
		})
	}
}
