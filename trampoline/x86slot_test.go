package trampoline

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/reason"
	"github.com/probeopt/probeopt/internal/x86enc"
	"github.com/probeopt/probeopt/xol"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// genConfigs are configurations that cover every code path of the
// generator: near and far data, both flag methods, all thread-pointer
// sources.
func genConfigs(t testing.TB, slot uint64) map[string]*Config {
	t.Helper()
	near, err := NewData(slot+0x10000, 64, 1024)
	if err != nil {
		t.Fatal(err)
	}
	far, err := NewData(slot+0x1_0000_0000, 64, 1024)
	if err != nil {
		t.Fatal(err)
	}
	thr, err := NewThreads(slot+0x40000, 256)
	if err != nil {
		t.Fatal(err)
	}
	farThr, err := NewThreads(slot+0x2_0000_0000, 1)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*Config{
		"near":       {Data: near, Threads: thr, ReturnAddr: slot + 0x8000},
		"far":        {Data: far, Threads: farThr, ReturnAddr: slot + 0x3_0000_0000},
		"pushf-tcb":  {Data: near, Threads: thr, ReturnAddr: slot + 0x8000, Flags: FlagsPushf, ThreadPointer: ThreadTCB},
		"noring-tcb": {Data: &Data{Addr: slot + 0x10000, NumCounters: 8}, Threads: thr, ReturnAddr: slot + 0x8000, ThreadPointer: ThreadTCB},
	}
}

var genHandlers = map[string]Handler{
	"none":     {},
	"counter":  {ID: 1, Count: true, Counter: 3},
	"event":    {ID: 2, Event: true},
	"return":   {ID: 3, Return: &ReturnHandler{Count: true, Counter: 4, Event: true}},
	"unhijack": {ID: 4, Unhijack: true},
	"rehijack": {ID: 4, Rehijack: true},
	"all":      {ID: 5, Count: true, Counter: 5, Event: true, Return: &ReturnHandler{Count: true, Counter: 6, Event: true}, Unhijack: true, Rehijack: true},
}

// genSites are site byte strings at 0x401000 (followed by a ret).
var genSites = map[string]string{
	"nop5":        "0f1f440000",
	"nop10":       "662e0f1f840000000000",
	"nop+nop5":    "90 0f1f440000",
	"nop+nop10":   "90 662e0f1f840000000000",
	"push-mov":    "55 4889e5 4883ec10",
	"endbr":       "f30f1efa 53 4889fb 488d4473 07",
	"rip-lea":     "488d0510000000 c3",
	"rip-load":    "488b0510000000 4831f0 c3",
	"jcc-rel8":    "85ff 7405 b801000000 c3",
	"jcc-rel32":   "85ff 0f84 00010000 c3",
	"call-last":   "53 4889fb e8 00010000 c3",
	"ret-padding": "31c0 c3 cccc",
	"jmp-first":   "eb03 cccccc c3",
	"movabs":      "48b8 8877665544332211 c3",
	"sse":         "66 0f6f 0510000000 c3",
	"rep-movsb":   "f3a4 f3a4 f3a4 c3",
	"loop-last":   "4889f8 48ffc1 e2f8 c3",
}

// analyzedGenSites analyzes every site of genSites at addr, followed by a
// ret and int3 padding, and fails the test if one takes no trampoline.
func analyzedGenSites(t testing.TB, addr uint64) map[string]*Site {
	t.Helper()
	sites := make(map[string]*Site, len(genSites))
	for name, sb := range genSites {
		code := append(mustHex(t, sb), 0xC3, 0xCC, 0xCC, 0xCC, 0xCC, 0xCC, 0xCC)
		s, err := AnalyzeX86(addr, code, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sites[name] = s
	}
	return sites
}

// TestGeneratedCodeDecodes generates a slot for every site shape, handler
// and configuration, and decodes the whole slot with the project decoder
// and with objdump: the same instruction boundaries, no invalid bytes,
// and the emitter's own instruction starts among them.
func TestGeneratedCodeDecodes(t *testing.T) {
	const site, slot = 0x401000, 0x401000 + 0x100000
	for sname, s := range analyzedGenSites(t, site) {
		for cname, cfg := range genConfigs(t, slot) {
			for hname, h := range genHandlers {
				if cfg.Data.RingRecords == 0 && (h.Event || h.Return != nil && h.Return.Event) {
					continue
				}
				name := fmt.Sprintf("%s/%s/%s", sname, cname, hname)
				a := x86enc.New(slot)
				err := generateInto(a, s, &h, cfg)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				b := a.Bytes()
				checkBoundaries(t, b, slot, a.Starts())
				if t.Failed() {
					t.Fatalf("%s: % x", name, b)
				}
			}
		}
	}
	for cname, cfg := range genConfigs(t, slot) {
		a := x86enc.New(slot)
		if err := generateReturnInto(a, cfg); err != nil {
			t.Fatalf("return trampoline %s: %v", cname, err)
		}
		checkBoundaries(t, a.Bytes(), slot, a.Starts())
	}
}

// TestDetourRelocation checks the relocated part of detours: the slot ends
// with the displaced instructions re-targeted to their original targets
// and a jump back to the resume address.
func TestDetourRelocation(t *testing.T) {
	const site, slot = 0x401000, 0x402000
	cfg := genConfigs(t, slot)["near"]
	cases := []struct {
		code string
		want []string // objdump text of the relocated tail, in order
	}{
		{"55 4889e5 4883ec10", []string{"push %rbp", "mov %rsp,%rbp", "sub $0x10,%rsp", "jmp 0x401008"}},
		{"488d0510000000 c3", []string{"lea 0x401017(%rip),%rax", "jmp 0x401007"}},
		{"85ff 7405 b801000000 c3", []string{"test %edi,%edi", "je 0x401009", "mov $0x1,%eax", "jmp 0x401009"}},
		{"53 4889fb e8 00010000", []string{"push %rbx", "mov %rdi,%rbx", "push $0x401009", "jmp 0x401109"}},
		{"31c0 c3 cccc", []string{"xor %eax,%eax", "ret", "jmp 0x401003"}},
		{"eb03 cccccc", []string{"jmp 0x401005"}},
	}
	for _, c := range cases {
		s, err := AnalyzeX86(site, mustHex(t, c.code), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.code, err)
		}
		b, err := GenerateX86(slot, s, &Handler{}, cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.code, err)
		}
		obj := objdump(t, b, slot)
		var got []string
		for _, o := range obj {
			got = append(got, o.text)
		}
		if strings.Join(got, "; ") != strings.Join(c.want, "; ") {
			t.Errorf("%s: slot\n  %s\nwant\n  %s", c.code, strings.Join(got, "; "), strings.Join(c.want, "; "))
		}
	}
}

// TestFinishX86Errors checks that finishX86 gives the encoder's errors
// this package's sentinels: a jump or a RIP-relative operand beyond
// +-2 GiB is ErrOutOfReach, an unbound label ErrEncode.
func TestFinishX86Errors(t *testing.T) {
	a := x86enc.New(0x1000)
	a.JmpTo(0x1000 + 1<<32)
	if err := finishX86(a); !errors.Is(err, ErrOutOfReach) {
		t.Fatalf("jump beyond 2 GiB: %v", err)
	}
	a = x86enc.New(0x1000)
	a.LockIncMem(x86enc.S64, x86enc.RIP(0x1000+1<<31+100))
	if err := finishX86(a); !errors.Is(err, ErrOutOfReach) {
		t.Fatalf("RIP-relative operand beyond 2 GiB: %v", err)
	}
	a = x86enc.New(0x1000)
	a.Jmp(a.NewLabel())
	if err := finishX86(a); !errors.Is(err, ErrEncode) {
		t.Fatalf("unbound label: %v", err)
	}
}

func TestAnalyzeX86(t *testing.T) {
	const addr = 0x401000
	cases := []struct {
		code             string
		opts             *SiteOptions
		kind             SiteKind
		patchOff, length int
		run              int
		refuse           reason.Code
	}{
		{code: "0f1f440000", kind: SiteNop, length: 5},
		{code: "0f1f440000 c3", kind: SiteNop, length: 5},
		{code: "662e0f1f840000000000", kind: SiteNop, length: 10},
		{code: "90 0f1f440000", kind: SiteNop, patchOff: 1, length: 5},
		{code: "90 662e0f1f840000000000", kind: SiteNop, patchOff: 1, length: 10},
		{code: "660f1f440000", kind: SiteNop, length: 6},
		{code: "f30f1efa 0f1f440000 55", kind: SiteNop, patchOff: 4, length: 5},
		{code: "f30f1efa 90 0f1f440000", kind: SiteNop, patchOff: 5, length: 5},
		{code: "f30f1efa 0f1f440000 55", opts: &SiteOptions{ReplaceEndbr: true}, kind: SiteDetour, length: 9, run: 2},
		{code: "90 90 90 90 90 c3", kind: SiteDetour, length: 5, run: 5},
		{code: "0f1f440000", opts: &SiteOptions{NopOnly: true}, kind: SiteNop, length: 5},
		{code: "55 4889e5", opts: &SiteOptions{NopOnly: true}, refuse: RefuseNoDetour},
		{code: "55 4889e5 c3", kind: SiteDetour, length: 5, run: 3},
		{code: "f30f1efa 55 4889e5 4157", kind: SiteDetour, patchOff: 4, length: 6, run: 3},
		{code: "f30f1efa 55 4889e5", opts: &SiteOptions{ReplaceEndbr: true}, kind: SiteDetour, length: 5, run: 2},
		{code: "31c0 c3 cccc", kind: SiteDetour, length: 5, run: 2},
		{code: "55 c3", refuse: RefuseShort},
		{code: "55 48", refuse: RefuseShort},
		{code: "55 0f05 90 90", refuse: RefuseNotRelocatable},                     // syscall
		{code: "e8 00000000 90", kind: SiteDetour, length: 5, run: 1},             // call last
		{code: "e8 00000000 90 90 90 90 90", kind: SiteDetour, length: 5, run: 1}, // call last
		{code: "90 e8 00000000", kind: SiteDetour, length: 6, run: 2},
		{code: "e8 00000000", opts: nil, kind: SiteDetour, length: 5, run: 1},
		{code: "53 e8 00000000", kind: SiteDetour, length: 6, run: 2},
		{code: "e800000000", kind: SiteDetour, length: 5, run: 1},
		{code: "ffd0 90 90 90", refuse: RefuseNotBoostable},          // call *%rax
		{code: "9d 90 90 90 90", refuse: RefuseNotBoostable},         // popf
		{code: "cc 90 90 90 90", refuse: RefuseNotRelocatable},       // int3
		{code: "e2fe 90 90 90", refuse: RefuseMidRun},                // loop, not last
		{code: "90 90 90 e2fe", kind: SiteDetour, length: 5, run: 4}, // loop last
		{code: "06 90 90 90 90", refuse: RefuseUndecodable},          // push es: invalid in 64-bit mode
	}
	for _, c := range cases {
		s, err := AnalyzeX86(addr, mustHex(t, c.code), c.opts)
		if c.refuse != "" {
			var se *SiteError
			if !errors.As(err, &se) || se.Code != c.refuse || !errors.Is(err, ErrNotSite) {
				t.Errorf("%s: %v, want refusal %s", c.code, err, c.refuse)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.code, err)
			continue
		}
		if s.Kind != c.kind || s.PatchAddr != addr+uint64(c.patchOff) || s.Len != c.length || s.Run != c.run {
			t.Errorf("%s: kind %s patch +%d len %d run %d, want %s +%d %d %d", c.code, s.Kind, s.PatchAddr-addr, s.Len, s.Run, c.kind, c.patchOff, c.length, c.run)
		}
		if len(s.Old) != s.Len {
			t.Errorf("%s: %d old bytes for %d", c.code, len(s.Old), s.Len)
		}
	}
}

func TestBuildPatches(t *testing.T) {
	const site = 0x401000
	s, err := AnalyzeX86(site, mustHex(t, "90 662e0f1f840000000000"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewArea(0x500000, 4096)
	if err != nil {
		t.Fatal(err)
	}
	cfg := genConfigs(t, 0x500000)["near"]
	tr, err := a.BuildX86(s, &Handler{Count: true, Counter: 1}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Slot != 0x500000 || tr.Install.Addr != site+1 {
		t.Fatalf("slot %#x install at %#x", tr.Slot, tr.Install.Addr)
	}
	want := []byte{0xE9, 0, 0, 0, 0, 0xCC, 0xCC, 0xCC, 0xCC, 0xCC}
	d := uint32(0x500000 - (site + 1 + 5))
	want[1], want[2], want[3], want[4] = byte(d), byte(d>>8), byte(d>>16), byte(d>>24)
	if string(tr.Install.New) != string(want) || string(tr.Install.Old) != string(s.Old) {
		t.Fatalf("install % x -> % x", tr.Install.Old, tr.Install.New)
	}
	if string(tr.Remove.Old) != string(tr.Install.New) || string(tr.Remove.New) != string(tr.Install.Old) ||
		len(tr.Remove.Guard) != 1 || tr.Remove.Guard[0] != (Range{tr.Slot, tr.Slot + uint64(len(tr.Code))}) {
		t.Fatalf("remove %+v", tr.Remove)
	}
	tr2, err := a.BuildX86(s, &Handler{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tr2.Slot%16 != 0 || tr2.Slot < tr.Slot+uint64(len(tr.Code)) {
		t.Fatalf("second slot at %#x after %#x+%d", tr2.Slot, tr.Slot, len(tr.Code))
	}
	// The area fills up.
	for {
		_, err := a.BuildX86(s, &Handler{ID: 1, Event: true, Return: &ReturnHandler{Event: true}}, cfg)
		if errors.Is(err, ErrAreaFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Out of reach: a slot beyond 2 GiB of the site.
	far, _ := NewArea(site+1<<32, 4096)
	if _, err := far.BuildX86(s, &Handler{}, cfg); !errors.Is(err, ErrOutOfReach) {
		t.Fatalf("slot beyond reach: %v", err)
	}
	// A RIP-relative operand beyond reach of the slot.
	s2, err := AnalyzeX86(site, mustHex(t, "488d0510000000"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateX86(site+1<<31+0x100000, s2, &Handler{}, cfg); !errors.Is(err, ErrOutOfReach) {
		t.Fatalf("RIP-relative operand beyond reach: %v", err)
	}
}

func TestReachAndRelocForms(t *testing.T) {
	s, err := AnalyzeX86(0x401000, mustHex(t, "488d0510000000 85ff 7405"), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Reach()
	if len(r) != 3 || r[0] != 0x401000 || r[1] != 0x401007 || r[2] != 0x401017 {
		t.Fatalf("reach %#x", r)
	}
	// The xol forms the detour relies on for these instructions.
	c, err := xol.RelocateX86(&s.Insts[0], 0x402000, nil)
	if err != nil || c.Form != xol.X86FormDisp || !c.Boost {
		t.Fatalf("lea relocation %v, %v", c, err)
	}
	var in decode.X86Inst
	if err := (decode.X86Decoder{}).Decode(mustHex(t, "7405"), 0x401000, &in); err != nil {
		t.Fatal(err)
	}
	if c, err := xol.RelocateX86(&in, 0x402000, nil); err != nil || c.Form != xol.X86FormRetarget || c.StepLen != 6 {
		t.Fatalf("jcc relocation %v, %v", c, err)
	}
}
