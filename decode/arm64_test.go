package decode

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"golang.org/x/arch/arm64/arm64asm"
)

func TestDecodeARM64Errors(t *testing.T) {
	for _, b := range [][]byte{nil, {}, {0x1f}, {0x1f, 0x20, 0x03}} {
		inst, err := DecodeARM64(b, 0x1000)
		if !errors.Is(err, ErrTruncated) || inst.Len != 0 {
			t.Errorf("DecodeARM64(% x) = Len %d, %v; want ErrTruncated", b, inst.Len, err)
		}
	}
	// udf #imm16: the permanently undefined encodings.
	for _, w := range []uint32{0x00000000, 0x00000001, 0x0000ffff} {
		inst, err := DecodeARM64(ARM64Code(w), 0x1000)
		if !errors.Is(err, ErrInvalid) || inst.Len != 0 {
			t.Errorf("DecodeARM64(%#08x) = Len %d, %v; want ErrInvalid", w, inst.Len, err)
		}
		if inst.Text() != "(bad)" {
			t.Errorf("Text of failed decode = %q", inst.Text())
		}
	}
	// Only the first four bytes count.
	inst, err := DecodeARM64([]byte{0x1f, 0x20, 0x03, 0xd5, 0xff, 0xff}, 0)
	if err != nil || inst.Len != 4 || inst.Mnemonic != "nop" {
		t.Errorf("nop with trailing bytes: %+v, %v", inst, err)
	}
	// A word just above the udf space is not an error.
	if _, err := DecodeARM64(ARM64Code(0x00010000), 0); err != nil {
		t.Errorf("0x00010000: %v", err)
	}
}

// Hand-checked encodings (field values worked out from the Arm
// architecture's encoding diagrams).
func TestDecodeARM64Table(t *testing.T) {
	const addr = 0x10000
	tests := []struct {
		word   uint32
		class  ARM64Class
		mn     string
		branch BranchKind
		target uint64 // 0: not PC-relative
		read   RegSet
		write  RegSet
		text   string
	}{
		{0xd503201f, ARM64ClassHint, "nop", BranchNone, 0, 0, 0, "nop"},
		{0xd65f03c0, ARM64ClassBranch, "ret", BranchRet, 0, 1 << 30, 0, "ret"},
		{0xd65f0020, ARM64ClassBranch, "ret", BranchRet, 0, 1 << 1, 0, "ret x1"},
		{0xd61f0200, ARM64ClassBranch, "br", BranchJmpIndirect, 0, 1 << 16, 0, "br x16"},
		{0xd63f0220, ARM64ClassBranch, "blr", BranchCallIndirect, 0, 1 << 17, 1 << 30, "blr x17"},
		{0x14000004, ARM64ClassBranch, "b", BranchJmp, addr + 16, 0, 0, "b 0x10010"},
		{0x17ffffff, ARM64ClassBranch, "b", BranchJmp, addr - 4, 0, 0, "b 0xfffc"},
		{0x94000002, ARM64ClassBranch, "bl", BranchCall, addr + 8, 0, 1 << 30, "bl 0x10008"},
		{0x54000040, ARM64ClassBranch, "b.eq", BranchJcc, addr + 8, 0, 0, "b.eq 0x10008"},
		{0x54ffffeb, ARM64ClassBranch, "b.lt", BranchJcc, addr - 4, 0, 0, "b.lt 0xfffc"},
		{0x54000051, ARM64ClassBranch, "bc.ne", BranchJcc, addr + 8, 0, 0, "bc.ne 0x10008"},
		{0xb4000060, ARM64ClassBranch, "cbz", BranchCompare, addr + 12, 1 << 0, 0, "cbz x0, 0x1000c"},
		{0x35ffffe3, ARM64ClassBranch, "cbnz", BranchCompare, addr - 4, 1 << 3, 0, "cbnz w3, 0xfffc"},
		{0x36080041, ARM64ClassBranch, "tbz", BranchTest, addr + 8, 1 << 1, 0, "tbz w1, #1, 0x10008"},
		{0xb7f80022, ARM64ClassBranch, "tbnz", BranchTest, addr + 4, 1 << 2, 0, "tbnz x2, #63, 0x10004"},
		{0xd65f0bff, ARM64ClassBranch, "retaa", BranchRet, 0, 1<<30 | 1<<31, 0, "retaa"},
		{0xd65f0fff, ARM64ClassBranch, "retab", BranchRet, 0, 1<<30 | 1<<31, 0, "retab"},
		{0xd71f081f, ARM64ClassBranch, "braa", BranchJmpIndirect, 0, 1<<0 | 1<<31, 0, "braa x0, sp"},
		{0xd73f0c41, ARM64ClassBranch, "blrab", BranchCallIndirect, 0, 1<<2 | 1<<1, 1 << 30, "blrab x2, x1"},
		{0xd63f081f, ARM64ClassBranch, "blraaz", BranchCallIndirect, 0, 1 << 0, 1 << 30, "blraaz x0"},
		{0xd69f03e0, ARM64ClassBranch, "eret", BranchIret, 0, 0, 0, "eret"},
		{0xd69f0bff, ARM64ClassBranch, "eretaa", BranchIret, 0, 1 << 31, 0, "eretaa"},
		{0x30000000, ARM64ClassAdr, "adr", BranchNone, addr + 1, 0, 1 << 0, "adr x0, 0x10001"},
		{0x10000020, ARM64ClassAdr, "adr", BranchNone, addr + 4, 0, 1 << 0, "adr x0, 0x10004"},
		{0x90000001, ARM64ClassAdr, "adrp", BranchNone, addr, 0, 1 << 1, "adrp x1, 0x10000"},
		{0xb0000002, ARM64ClassAdr, "adrp", BranchNone, addr + 0x1000, 0, 1 << 2, "adrp x2, 0x11000"},
		{0x58000040, ARM64ClassLiteral, "ldr", BranchNone, addr + 8, 0, 1 << 0, "ldr x0, 0x10008"},
		{0x18000040, ARM64ClassLiteral, "ldr", BranchNone, addr + 8, 0, 1 << 0, "ldr w0, 0x10008"},
		{0x98ffffe1, ARM64ClassLiteral, "ldrsw", BranchNone, addr - 4, 0, 1 << 1, "ldrsw x1, 0xfffc"},
		{0x9c000040, ARM64ClassLiteral, "ldr", BranchNone, addr + 8, 0, 0, "ldr q0, 0x10008"},
		{0x1c000041, ARM64ClassLiteral, "ldr", BranchNone, addr + 8, 0, 0, "ldr s1, 0x10008"},
		{0x5c000042, ARM64ClassLiteral, "ldr", BranchNone, addr + 8, 0, 0, "ldr d2, 0x10008"},
		{0xd8000040, ARM64ClassLiteral, "prfm", BranchNone, addr + 8, 0, 0, "prfm pldl1keep, 0x10008"},
		{0x885f7c20, ARM64ClassExclusive, "ldxr", BranchNone, 0, 1 << 1, 1 << 0, "ldxr w0, [x1]"},
		{0xc85ffc20, ARM64ClassExclusive, "ldaxr", BranchNone, 0, 1 << 1, 1 << 0, "ldaxr x0, [x1]"},
		{0x88027c20, ARM64ClassExclusive, "stxr", BranchNone, 0, 1<<0 | 1<<1, 1 << 2, "stxr w2, w0, [x1]"},
		{0xc8a27c20, ARM64ClassAtomic, "cas", BranchNone, 0, 1<<0 | 1<<1 | 1<<2, 1 << 2, "cas x2, x0, [x1]"},
		{0xf8200020, ARM64ClassAtomic, "ldadd", BranchNone, 0, 1<<0 | 1<<1, 1 << 0, "ldadd x0, x0, [x1]"},
		{0xb820003f, ARM64ClassAtomic, "stadd", BranchNone, 0, 1<<0 | 1<<1, 0, "stadd w0, [x1]"},
		{0xd503233f, ARM64ClassHint, "paciasp", BranchNone, 0, 1<<30 | 1<<31, 1 << 30, "paciasp"},
		{0xd50323bf, ARM64ClassHint, "autiasp", BranchNone, 0, 1<<30 | 1<<31, 1 << 30, "autiasp"},
		{0xd503245f, ARM64ClassHint, "bti c", BranchNone, 0, 0, 0, "bti c"},
		{0xd503211f, ARM64ClassHint, "pacia1716", BranchNone, 0, 1<<16 | 1<<17, 1 << 17, "pacia1716"},
		{0xd50320ff, ARM64ClassHint, "xpaclri", BranchNone, 0, 1 << 30, 1 << 30, "xpaclri"},
		{0xd503251f, ARM64ClassHint, "chkfeat", BranchNone, 0, 1 << 16, 1 << 16, "chkfeat x16"},
		{0xd50325bf, ARM64ClassHint, "hint", BranchNone, 0, 0, 0, "hint #0x2d"},
		{0xd5033bbf, ARM64ClassBarrier, "dmb", BranchNone, 0, 0, 0, "dmb ish"},
		{0xd5033f9f, ARM64ClassBarrier, "dsb", BranchNone, 0, 0, 0, "dsb sy"},
		{0xd5033fdf, ARM64ClassBarrier, "isb", BranchNone, 0, 0, 0, "isb"},
		{0xd503309f, ARM64ClassBarrier, "ssbb", BranchNone, 0, 0, 0, "ssbb"},
		{0xd50330ff, ARM64ClassBarrier, "sb", BranchNone, 0, 0, 0, "sb"},
		{0xd53b4220, ARM64ClassSystem, "mrs", BranchNone, 0, 0, 1 << 0, "mrs x0, daif"},
		{0xd51b4221, ARM64ClassSystem, "msr", BranchNone, 0, 1 << 1, 0, "msr daif, x1"},
		{0xd53bd040, ARM64ClassSystem, "mrs", BranchNone, 0, 0, 1 << 0, "mrs x0, tpidr_el0"},
		{0xd50342df, ARM64ClassSystem, "msr", BranchNone, 0, 0, 0, "msr daifset, #0x2"},
		{0xd50b7e20, ARM64ClassSystem, "sys", BranchNone, 0, 1 << 0, 0, "dc civac, x0"},
		{0xd4000001, ARM64ClassException, "svc", BranchSyscall, 0, 0, 0, "svc #0x0"},
		{0xd4000002, ARM64ClassException, "hvc", BranchSyscall, 0, 0, 0, "hvc #0x0"},
		{0xd4207d00, ARM64ClassException, "brk", BranchInt, 0, 0, 0, "brk #0x3e8"},
		{0xd4400000, ARM64ClassException, "hlt", BranchInt, 0, 0, 0, "hlt #0x0"},
		{0xa9bf7bfd, ARM64ClassLoadStore, "stp", BranchNone, 0, 1<<29 | 1<<30 | 1<<31, 1 << 31, "stp x29, x30, [sp,#-16]!"},
		{0xa8c17bfd, ARM64ClassLoadStore, "ldp", BranchNone, 0, 1 << 31, 1<<29 | 1<<30 | 1<<31, "ldp x29, x30, [sp],#16"},
		{0xf9400020, ARM64ClassLoadStore, "ldr", BranchNone, 0, 1 << 1, 1 << 0, "ldr x0, [x1]"},
		{0xf8627820, ARM64ClassLoadStore, "ldr", BranchNone, 0, 1<<1 | 1<<2, 1 << 0, "ldr x0, [x1,x2,lsl #3]"},
		{0xf8200420, ARM64ClassLoadStore, "ldraa", BranchNone, 0, 1 << 1, 1 << 0, "ldraa x0, [x1]"},
		{0x8b020020, ARM64ClassOther, "", BranchNone, 0, arm64AllRegs, arm64AllRegs, "add x0, x1, x2"},
	}
	for _, tt := range tests {
		inst, err := DecodeARM64(ARM64Code(tt.word), addr)
		if err != nil {
			t.Errorf("%#08x: %v", tt.word, err)
			continue
		}
		if inst.Len != 4 || inst.Word != tt.word || inst.Addr != addr {
			t.Errorf("%#08x: Len %d Word %#x Addr %#x", tt.word, inst.Len, inst.Word, inst.Addr)
		}
		if inst.Class != tt.class || inst.Mnemonic != tt.mn || inst.Branch != tt.branch {
			t.Errorf("%#08x: got %v %q %v, want %v %q %v", tt.word, inst.Class, inst.Mnemonic, inst.Branch, tt.class, tt.mn, tt.branch)
		}
		if inst.PCRel != (tt.target != 0) || inst.Target != tt.target {
			t.Errorf("%#08x: PCRel %v Target %#x, want %#x", tt.word, inst.PCRel, inst.Target, tt.target)
		}
		if inst.Read != tt.read || inst.Written != tt.write {
			t.Errorf("%#08x: read %s written %s, want %s / %s", tt.word, arm64RegSetString(inst.Read), arm64RegSetString(inst.Written), arm64RegSetString(tt.read), arm64RegSetString(tt.write))
		}
		if got := inst.Text(); got != tt.text {
			t.Errorf("%#08x: Text() = %q, want %q", tt.word, got, tt.text)
		}
	}
}

func TestDecodeARM64Fields(t *testing.T) {
	dec := func(w uint32, addr uint64) ARM64Inst {
		t.Helper()
		inst, err := DecodeARM64(ARM64Code(w), addr)
		if err != nil {
			t.Fatalf("%#08x: %v", w, err)
		}
		return inst
	}
	// adrp at an address inside a page: the target is page based.
	if i := dec(0xb0000000, 0x400ffc); i.Target != 0x401000 || i.Offset != 0x1000 {
		t.Errorf("adrp x0, +1 page at 0x400ffc: Target %#x Offset %#x", i.Target, i.Offset)
	}
	// b with the most negative offset wraps below zero.
	if i := dec(0x16000000, 0x1000); i.Offset != -0x8000000 || i.Target != 0x1000-0x8000000+1<<64 {
		t.Errorf("b -128MiB at 0x1000: Offset %d Target %#x", i.Offset, i.Target)
	}
	// stxr w2, x0, [x1]: store side of an exclusive pair.
	if i := dec(0xc8027c20, 0); i.Exclusive != ARM64ExclStore || i.Rs != 2 || i.Rt != 0 || i.Rn != 1 || i.Width != 64 || i.MemSize != 8 || !i.Store || i.Load {
		t.Errorf("stxr: %+v", i)
	}
	// ldaxr w0, [sp].
	if i := dec(0x885fffe0, 0); i.Exclusive != ARM64ExclLoad || !i.Acquire || i.Rn != ARM64SP || i.Read != 1<<31 {
		t.Errorf("ldaxr [sp]: %+v", i)
	}
	// casp x0, x1, x2, x3, [x4]: reads both pairs, writes the compare pair.
	if i := dec(0x48207c82, 0); !i.LSE || !i.Pair || i.Read != 0x1f || i.Written != 0x3 || i.Rt2 != 3 {
		t.Errorf("casp: %+v", i)
	}
	// mrs x0, daif.
	if i := dec(0xd53b4220, 0); !i.DAIF {
		t.Errorf("mrs daif: DAIF not set")
	}
	// msr daifclr, #2.
	if i := dec(0xd50342ff, 0); !i.DAIF || i.Imm != 2 {
		t.Errorf("msr daifclr: %+v", i)
	}
	// tbnz x2, #63: bit and width.
	if i := dec(0xb7f80022, 0); i.Bit != 63 || i.Width != 64 || i.Rt != 2 {
		t.Errorf("tbnz: %+v", i)
	}
	// b.cond condition.
	if i := dec(0x5400004b, 0); !i.HasCond || i.Cond != 11 || i.Cond.String() != "lt" {
		t.Errorf("b.lt: %+v", i)
	}
	// ldr x0, [x1, #8]! writes back.
	if i := dec(0xf8408c20, 0); !i.Writeback || i.Disp != 8 || i.Written != 1<<0|1<<1 {
		t.Errorf("ldr pre-index: %+v", i)
	}
	// xzr is never in a register set: cbz xzr, str xzr.
	if i := dec(0xb400003f, 0); i.Read != 0 || i.Rt != ARM64ZR {
		t.Errorf("cbz xzr: %+v", i)
	}
}

func TestARM64Strings(t *testing.T) {
	for c := ARM64ClassOther; c <= ARM64ClassLoadStore; c++ {
		if s := c.String(); s == "" || s == "unknown" {
			t.Errorf("class %d has no name", c)
		}
	}
	if ARM64Class(200).String() != "unknown" {
		t.Error("out-of-range class")
	}
	want := "eq ne cs cc mi pl vs vc hi ls ge lt gt le al nv"
	var got []string
	for c := ARM64Cond(0); c < 16; c++ {
		got = append(got, c.String())
	}
	if strings.Join(got, " ") != want {
		t.Errorf("conditions: %v", got)
	}
	for r, s := range map[ARM64Reg]string{0: "x0", 30: "x30", ARM64SP: "sp", ARM64ZR: "xzr", ARM64NoReg: "none"} {
		if r.String() != s {
			t.Errorf("ARM64Reg(%d) = %q, want %q", r, r.String(), s)
		}
	}
	if ARM64ExclNone.String() != "none" || ARM64ExclLoad.String() != "load" || ARM64ExclStore.String() != "store" {
		t.Error("exclusive names")
	}
	var zero ARM64Inst
	if zero.Text() != "(bad)" {
		t.Errorf("zero Text = %q", zero.Text())
	}
}

func arm64RegSetString(s RegSet) string {
	var out []string
	for r := 0; r < 32; r++ {
		if s.Has(r) {
			if r == 31 {
				out = append(out, "sp")
			} else {
				out = append(out, fmt.Sprintf("x%d", r))
			}
		}
	}
	if s>>32 != 0 {
		out = append(out, fmt.Sprintf("extra:%#x", uint64(s>>32)))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

// arm64Vector is one line of testdata/arm64.txt.
type arm64Vector struct {
	line  int
	bytes []byte
	kv    map[string]string
	flags map[string]bool
	text  string // what llvm-mc printed
}

func readARM64Vectors(t testing.TB) []arm64Vector {
	t.Helper()
	data, err := os.ReadFile("testdata/arm64.txt")
	if err != nil {
		t.Fatal(err)
	}
	var vs []arm64Vector
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		parts := strings.SplitN(line, "\t", 3)
		if len(parts) < 2 {
			t.Fatalf("line %d: malformed: %q", n, line)
		}
		b, err := hex.DecodeString(parts[0])
		if err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		v := arm64Vector{line: n, bytes: b, kv: map[string]string{}, flags: map[string]bool{}}
		if len(parts) == 3 {
			v.text = strings.TrimPrefix(parts[2], "# ")
		}
		for _, f := range strings.Fields(parts[1]) {
			if k, val, ok := strings.Cut(f, "="); ok {
				v.kv[k] = val
			} else {
				v.flags[f] = true
			}
		}
		vs = append(vs, v)
	}
	return vs
}

// The flags a vector lists exactly when they hold.
var arm64VectorFlags = map[string]func(*ARM64Inst) bool{
	"ld":     func(i *ARM64Inst) bool { return i.Load },
	"st":     func(i *ARM64Inst) bool { return i.Store },
	"wb":     func(i *ARM64Inst) bool { return i.Writeback },
	"pair":   func(i *ARM64Inst) bool { return i.Pair },
	"vec":    func(i *ARM64Inst) bool { return i.Vec },
	"acq":    func(i *ARM64Inst) bool { return i.Acquire },
	"rel":    func(i *ARM64Inst) bool { return i.Release },
	"lse":    func(i *ARM64Inst) bool { return i.LSE },
	"pac":    func(i *ARM64Inst) bool { return i.PAC },
	"daif":   func(i *ARM64Inst) bool { return i.DAIF },
	"approx": func(i *ARM64Inst) bool { return i.RegsApprox },
}

func TestARM64Vectors(t *testing.T) {
	vs := readARM64Vectors(t)
	if len(vs) < 500 {
		t.Fatalf("only %d vectors", len(vs))
	}
	classes := map[string]int{}
	for _, v := range vs {
		addr := uint64(0x400000)
		if a, ok := v.kv["addr"]; ok {
			var err error
			if addr, err = strconv.ParseUint(a, 0, 64); err != nil {
				t.Fatalf("line %d: addr: %v", v.line, err)
			}
		}
		inst, err := DecodeARM64(v.bytes, addr)
		where := fmt.Sprintf("line %d (% x, %s)", v.line, v.bytes, v.text)
		if e, ok := v.kv["err"]; ok {
			want := map[string]error{"invalid": ErrInvalid, "truncated": ErrTruncated}[e]
			if !errors.Is(err, want) || inst.Len != 0 {
				t.Errorf("%s: got Len %d, err %v; want %s", where, inst.Len, err, e)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		classes[v.kv["class"]]++
		checkARM64Vector(t, where, &inst, v)
	}
	t.Logf("%d vectors; per class: %v", len(vs), classes)
}

func checkARM64Vector(t *testing.T, where string, inst *ARM64Inst, v arm64Vector) {
	t.Helper()
	eq := func(key, got string) {
		t.Helper()
		if want, ok := v.kv[key]; ok && got != want {
			t.Errorf("%s: %s = %s, want %s", where, key, got, want)
		}
	}
	for _, k := range []string{"class", "mn", "br", "r", "w"} {
		if _, ok := v.kv[k]; !ok {
			t.Fatalf("%s: vector lacks %s=", where, k)
		}
	}
	mn := strings.ReplaceAll(inst.Mnemonic, " ", "_")
	if mn == "" {
		mn = "-"
	}
	eq("class", inst.Class.String())
	eq("mn", mn)
	eq("br", inst.Branch.String())
	if tgt, ok := v.kv["target"]; ok {
		if !inst.PCRel {
			t.Errorf("%s: not PC-relative, want target %s", where, tgt)
		}
		eq("target", fmt.Sprintf("%#x", inst.Target))
		eq("off", strconv.FormatInt(inst.Offset, 10))
	} else if inst.PCRel || inst.Target != 0 || inst.Offset != 0 {
		t.Errorf("%s: PCRel %v Target %#x Offset %d, want none", where, inst.PCRel, inst.Target, inst.Offset)
	}
	if c, ok := v.kv["cond"]; ok {
		if !inst.HasCond {
			t.Errorf("%s: no condition, want %s", where, c)
		}
		eq("cond", inst.Cond.String())
	} else if inst.HasCond {
		t.Errorf("%s: unexpected condition %v", where, inst.Cond)
	}
	regs := func(s RegSet) string {
		if inst.RegsApprox && s == arm64AllRegs {
			return "*"
		}
		return arm64RegSetString(s)
	}
	eq("r", regs(inst.Read))
	eq("w", regs(inst.Written))
	for flag, get := range arm64VectorFlags {
		if got := get(inst); got != v.flags[flag] {
			t.Errorf("%s: flag %s = %v, want %v", where, flag, got, v.flags[flag])
		}
	}
	excl := v.kv["excl"]
	if excl == "" {
		excl = "none"
	}
	if inst.Exclusive.String() != excl {
		t.Errorf("%s: excl = %v, want %s", where, inst.Exclusive, excl)
	}
	reg := func(r ARM64Reg, isData bool) string {
		if isData && inst.Vec {
			return fmt.Sprintf("v%d", int(r))
		}
		return r.String()
	}
	eq("rd", reg(inst.Rd, false))
	eq("rn", reg(inst.Rn, false))
	eq("rt", reg(inst.Rt, true))
	eq("rt2", reg(inst.Rt2, true))
	eq("rs", reg(inst.Rs, false))
	eq("rm", reg(inst.Rm, false))
	eq("width", strconv.Itoa(inst.Width))
	eq("size", strconv.Itoa(inst.MemSize))
	eq("disp", strconv.FormatInt(inst.Disp, 10))
	eq("bit", strconv.Itoa(int(inst.Bit)))
	eq("imm", strconv.FormatUint(inst.Imm, 10))
	if _, ok := v.kv["sysreg"]; ok {
		eq("sysreg", a64SysregName(inst.SysReg))
	}
	if _, ok := v.kv["pstate"]; ok {
		eq("pstate", a64PstateNames[inst.SysReg])
	}
	checkARM64Text(t, where, inst)
}

// checkARM64Text checks what can be checked of Text without an
// assembler: it is never empty, it starts with the mnemonic (or the alias
// arm64asm prints for sys), and it shows the absolute target.
func checkARM64Text(t *testing.T, where string, inst *ARM64Inst) {
	t.Helper()
	text := inst.Text()
	if text == "" {
		t.Errorf("%s: empty Text", where)
		return
	}
	if inst.Class == ARM64ClassOther {
		return
	}
	first := strings.Fields(text)[0]
	want := strings.Fields(inst.Mnemonic)[0]
	ok := first == want
	if inst.Mnemonic == "sys" {
		ok = ok || first == "dc" || first == "ic" || first == "at" || first == "tlbi"
	}
	if !ok {
		t.Errorf("%s: Text %q does not start with %q", where, text, want)
	}
	if inst.Mnemonic == "bti c" && text != "bti c" {
		t.Errorf("%s: Text %q", where, text)
	}
	if inst.PCRel && !strings.HasSuffix(text, fmt.Sprintf(", %#x", inst.Target)) && !strings.HasSuffix(text, fmt.Sprintf(" %#x", inst.Target)) {
		t.Errorf("%s: Text %q does not end with the target %#x", where, text, inst.Target)
	}
}

// TestARM64VectorsUpToDate regenerates the vectors with llvm-mc and
// compares them with the committed file.
func TestARM64VectorsUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("regenerating vectors runs llvm-mc")
	}
	testenv.MustHaveTool(t, "llvm-mc")
	gobin := testenv.MustHaveTool(t, "go")
	cmd := exec.Command(gobin, "run", "./internal/arm64vec")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./internal/arm64vec: %v\n%s", err, stderr.String())
	}
	want, err := os.ReadFile("testdata/arm64.txt")
	if err != nil {
		t.Fatal(err)
	}
	// Compare the words and expectations only: the header and the text
	// llvm-mc prints back may differ between LLVM releases.
	if g, w := arm64VectorCore(out), arm64VectorCore(want); g != w {
		t.Errorf("testdata/arm64.txt is stale: run go run ./decode/internal/arm64vec > decode/testdata/arm64.txt")
	}
}

// arm64VectorCore keeps the first two columns of the vector lines.
func arm64VectorCore(data []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		parts := strings.SplitN(line, "\t", 3)
		b.WriteString(strings.Join(parts[:min(2, len(parts))], "\t") + "\n")
	}
	return b.String()
}

// TestARM64TextRoundTrip assembles Text() of every classified vector with
// llvm-mc and checks that it encodes back to the same word, so the text
// (arm64asm's or this package's own) names the right instruction and
// operands. PC-relative targets are turned back into "#offset" operands,
// which is how llvm-mc takes a PC-relative immediate.
func TestARM64TextRoundTrip(t *testing.T) {
	llvmMC := testenv.MustHaveTool(t, "llvm-mc")
	// Names newer than the LLVM release the vectors are made with.
	tooNew := map[string]bool{"gcsb dsync": true, "clrbhb": true, "chkfeat": true}
	type item struct {
		word uint32
		text string
	}
	var items []item
	for _, v := range readARM64Vectors(t) {
		if _, ok := v.kv["err"]; ok {
			continue
		}
		addr := uint64(0x400000)
		if a, ok := v.kv["addr"]; ok {
			addr, _ = strconv.ParseUint(a, 0, 64)
		}
		inst, err := DecodeARM64(v.bytes, addr)
		if err != nil || inst.Class == ARM64ClassOther || tooNew[inst.Mnemonic] {
			continue
		}
		text := inst.Text()
		if inst.PCRel {
			tgt := fmt.Sprintf("%#x", inst.Target)
			if !strings.HasSuffix(text, tgt) {
				t.Errorf("%#08x: Text %q lacks target %s", inst.Word, text, tgt)
				continue
			}
			text = strings.TrimSuffix(text, tgt) + fmt.Sprintf("#%d", inst.Offset)
		}
		items = append(items, item{inst.Word, text})
	}
	var src strings.Builder
	for _, it := range items {
		src.WriteString(it.text + "\n")
	}
	cmd := exec.Command(llvmMC, "--triple=aarch64", "-show-encoding",
		"-mattr=+v8.8a,+lse,+pauth,+bti,+hbc,+mte,+rcpc,+sb,+wfxt,+xs,+ls64,+lor,+spe,+tracev8.4,+ssbs,+flagm,+altnzcv,+predres,+neon,+fp-armv8,+rand,+sme")
	cmd.Stdin = strings.NewReader(src.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run() // errors are reported per line below
	// Lines llvm-mc rejected ("<stdin>:N:M: error: ...").
	bad := map[int]string{}
	for _, l := range strings.Split(stderr.String(), "\n") {
		rest, ok := strings.CutPrefix(l, "<stdin>:")
		if !ok || !strings.Contains(l, "error:") {
			continue
		}
		num, _, _ := strings.Cut(rest, ":")
		if n, err := strconv.Atoi(num); err == nil {
			bad[n] = l
		}
	}
	var encs []uint32
	for _, l := range strings.Split(stdout.String(), "\n") {
		_, enc, ok := strings.Cut(l, "// encoding: [")
		if !ok {
			continue
		}
		var b []byte
		for _, x := range strings.Split(strings.TrimSuffix(enc, "]"), ",") {
			v, err := strconv.ParseUint(strings.TrimPrefix(x, "0x"), 16, 8)
			if err != nil {
				t.Fatalf("cannot parse %q", l)
			}
			b = append(b, byte(v))
		}
		if len(b) != 4 {
			t.Fatalf("encoding %q", l)
		}
		encs = append(encs, binary.LittleEndian.Uint32(b))
	}
	if len(encs)+len(bad) != len(items) {
		t.Fatalf("llvm-mc gave %d encodings and %d errors for %d lines\n%s", len(encs), len(bad), len(items), stderr.String())
	}
	k := 0
	for n, it := range items {
		if msg, ok := bad[n+1]; ok {
			t.Errorf("%#08x: llvm-mc rejects Text %q: %s", it.word, it.text, msg)
			continue
		}
		if encs[k] != it.word {
			t.Errorf("%#08x: Text %q assembles to %#08x", it.word, it.text, encs[k])
		}
		k++
	}
	t.Logf("%d texts round-tripped", len(items))
}

// arm64asmKnownDisagreements lists, as "ours/arm64asm's", the mnemonic
// differences between this decoder and arm64asm that are understood:
// arm64asm prints the PAC, BTI and other newer hints as a generic hint,
// ssbb/pssbb as dsb #0/#4, sys by its dc/ic/at/tlbi alias, and b.nv as b.al
// (its condition printer folds nv into al).
func arm64asmKnownDisagreement(ours, theirs string) bool {
	switch {
	case theirs == "hint":
		return true
	case ours == "sys":
		return theirs == "dc" || theirs == "ic" || theirs == "at" || theirs == "tlbi"
	case ours == "ssbb" || ours == "pssbb":
		return theirs == "dsb"
	case ours == "b.nv":
		return theirs == "b.al"
	}
	return false
}

// arm64ClassifiedOps are arm64asm op names that belong to the classes this
// decoder singles out: a word arm64asm decodes as one of them must not be
// left as class other.
var arm64ClassifiedOps = map[string]bool{
	"b": true, "bl": true, "br": true, "blr": true, "ret": true, "cbz": true, "cbnz": true, "tbz": true, "tbnz": true,
	"eret": true, "adr": true, "adrp": true, "ldr": true, "ldrb": true, "ldrh": true, "ldrsb": true, "ldrsh": true,
	"ldrsw": true, "str": true, "strb": true, "strh": true, "ldur": true, "ldurb": true, "ldurh": true,
	"ldursb": true, "ldursh": true, "ldursw": true, "stur": true, "sturb": true, "sturh": true, "ldtr": true,
	"sttr": true, "ldp": true, "stp": true, "ldnp": true, "stnp": true, "ldpsw": true, "prfm": true, "prfum": true,
	"ldxr": true, "ldaxr": true, "stxr": true, "stlxr": true, "ldxp": true, "ldaxp": true, "stxp": true, "stlxp": true,
	"ldar": true, "stlr": true, "hint": true, "nop": true, "yield": true, "wfe": true, "wfi": true, "sev": true,
	"sevl": true, "dsb": true, "dmb": true, "isb": true, "clrex": true, "msr": true, "mrs": true, "sys": true,
	"sysl": true, "dc": true, "ic": true, "at": true, "tlbi": true, "svc": true, "hvc": true, "smc": true,
	"brk": true, "hlt": true, "dcps1": true, "dcps2": true, "dcps3": true,
}

// TestARM64AgainstArm64asm compares the classification with arm64asm over
// the vectors, the whole hint/barrier/PSTATE block and random words of every
// group this decoder classifies.
func TestARM64AgainstArm64asm(t *testing.T) {
	var words []uint32
	for _, v := range readARM64Vectors(t) {
		words = append(words, binary.LittleEndian.Uint32(v.bytes))
	}
	for w := uint32(0xd5030000); w < 0xd5040000; w++ {
		words = append(words, w)
	}
	r := rand.New(rand.NewSource(1))
	n := 200000
	if testing.Short() {
		n = 20000
	}
	for k := 0; k < n; k++ {
		w := r.Uint32()
		switch k % 3 {
		case 0: // branches, exceptions, system
			w = w&^0x1C000000 | 0x14000000
		case 1: // loads and stores
			w = w&^0x0A000000 | 0x08000000
		}
		words = append(words, w)
	}
	known := map[string]int{}
	for _, w := range words {
		inst, err := DecodeARM64(ARM64Code(w), 0x400000)
		if err != nil {
			continue
		}
		a, aerr := arm64asm.Decode(ARM64Code(w))
		if aerr != nil {
			continue
		}
		theirs, _, _ := strings.Cut(strings.TrimSpace(arm64asm.GNUSyntax(a)), " ")
		if inst.Class == ARM64ClassOther {
			if arm64ClassifiedOps[strings.ToLower(a.Op.String())] {
				t.Errorf("%#08x: class other, but arm64asm decodes %q", w, arm64asm.GNUSyntax(a))
			}
			continue
		}
		ours, _, _ := strings.Cut(inst.Mnemonic, " ")
		if theirs != ours {
			if !arm64asmKnownDisagreement(ours, theirs) {
				t.Errorf("%#08x: we decode %q (%s), arm64asm %q", w, inst.Text(), inst.Mnemonic, arm64asm.GNUSyntax(a))
			}
			known[ours+"/"+theirs]++
			if strings.HasPrefix(inst.Text(), theirs+" ") && theirs == "hint" {
				t.Errorf("%#08x: Text %q shows the generic hint for %s", w, inst.Text(), inst.Mnemonic)
			}
		}
		for _, arg := range a.Args {
			if rel, ok := arg.(arm64asm.PCRel); ok && (!inst.PCRel || int64(rel) != inst.Offset) {
				t.Errorf("%#08x: arm64asm offset %d, ours %d (PCRel %v)", w, int64(rel), inst.Offset, inst.PCRel)
			}
		}
	}
	var ks []string
	for k, c := range known {
		ks = append(ks, fmt.Sprintf("%s:%d", k, c))
	}
	sort.Strings(ks)
	t.Logf("%d words; understood disagreements: %s", len(words), strings.Join(ks, " "))
}

// TestARM64CodeAgainstObjdump checks ARM64Code against the file's own
// bytes: the words objdump prints for a committed fixture's .text, laid out
// by ARM64Code, are that section's bytes, and DecodeARM64 reads every word
// back.
func TestARM64CodeAgainstObjdump(t *testing.T) {
	objdump := testenv.MustHaveTool(t, "aarch64-linux-gnu-objdump")
	path := fixture.Path(t, "aarch64", "funcs-pie")
	out, err := exec.Command(objdump, "-d", "-j", ".text", path).Output()
	if err != nil {
		t.Fatalf("%s: %v", objdump, err)
	}
	line := regexp.MustCompile(`(?m)^\s*([0-9a-f]+):\t([0-9a-f]{8}) `)
	var first uint64
	var words []uint32
	for _, m := range line.FindAllStringSubmatch(string(out), -1) {
		a, _ := strconv.ParseUint(m[1], 16, 64)
		w, _ := strconv.ParseUint(m[2], 16, 32)
		if len(words) == 0 {
			first = a
		}
		if a != first+4*uint64(len(words)) {
			t.Fatalf("objdump's words are not contiguous at %#x", a)
		}
		words = append(words, uint32(w))
	}
	if len(words) < 100 {
		t.Fatalf("objdump printed %d words", len(words))
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	text := f.Section(".text")
	data, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	code := ARM64Code(words...)
	off := first - text.Addr
	if !bytes.Equal(code, data[off:off+uint64(len(code))]) {
		t.Fatalf("ARM64Code of objdump's %d words differs from the file's .text", len(words))
	}
	for i, w := range words {
		inst, err := DecodeARM64(code[4*i:], first+4*uint64(i))
		if err == nil && inst.Word != w {
			t.Fatalf("word %d: decoded %#08x, objdump %#08x", i, inst.Word, w)
		}
	}
}
