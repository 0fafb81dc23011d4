package plan_test

import (
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/xol"
)

// TestProbeoptAsksThePackages checks that the probeopt policy follows what
// the trampoline, emulate and xol packages say, whatever they support
// today: a trampoline when trampoline.AnalyzeX86 accepts the site, else
// emulate when emulate.X86Supported accepts, else xol when xol.CheckX86
// accepts, else reject with xol's refusal code. With NoTrampolines the
// decision is the trap strategy alone.
func TestProbeoptAsksThePackages(t *testing.T) {
	for _, h := range []string{
		"90", "55", "4889f8", "488b0510000000", "c3", "ffd0", "e800000000", "7400", "0f05", "cc", "0f0b",
		"f30f1efa", "9c", "9d", "f3a4", "8ed0", "c7f800000000", "0fa2", "c5fe6f0510000000", "0f1f440000",
		"662e0f1f840000000000", "f0480107", "48cf", "678b0510000000", "900f1f440000",
	} {
		b, _ := hex.DecodeString(h)
		inst, err := decode.DecodeX86(b, 0x401000)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		site := &plan.Site{Arch: decode.X86_64, Addr: 0x401000, Code: b, USDT: true, Branches: plan.NoBranches}
		d := plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true})
		traps := plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true, NoTrampolines: true})
		// No function is known: only a NOP site can take a trampoline.
		ts, tsErr := trampoline.AnalyzeX86(0x401000, b, &trampoline.SiteOptions{NopOnly: true})
		emuErr := emulate.X86Supported(&inst)
		fix, xolErr := xol.CheckX86(&inst)
		var want plan.Strategy
		switch {
		case emuErr == nil:
			want = plan.Emulate
		case xolErr == nil:
			want = plan.XOL
		default:
			want = plan.Reject
		}
		if traps.Strategy != want {
			t.Errorf("%s (%s), traps only: %s (%s), want %s (emulate: %v; xol: %v %v)", h, inst.Mnemonic, traps.Strategy, traps.Reason, want, emuErr, fix, xolErr)
		}
		if tsErr == nil {
			want = plan.TrampolineNop
			if ts.Kind != trampoline.SiteNop {
				t.Errorf("%s: trampoline site kind %s", h, ts.Kind)
			}
		}
		if d.Strategy != want {
			t.Errorf("%s (%s): %s (%s), want %s (trampoline: %v)", h, inst.Mnemonic, d.Strategy, d.Reason, want, tsErr)
		}
		var re *xol.RefusalError
		if want == plan.Reject && errors.As(xolErr, &re) && string(d.Reason) != string(re.Code) {
			t.Errorf("%s: reason %s, want xol's code %s", h, d.Reason, re.Code)
		}
		if want == plan.XOL && !strings.Contains(d.Detail, "emulation is not available") {
			t.Errorf("%s: the sentence does not say why it is not emulated: %s", h, d.Detail)
		}
		found := false
		for _, r := range d.Rules {
			if r.Name == "trampoline" {
				found = true
				if (r.Outcome == plan.Pass) != (tsErr == nil) {
					t.Errorf("%s: trampoline rule %+v, AnalyzeX86 says %v", h, r, tsErr)
				}
			}
		}
		if !found {
			t.Errorf("%s: no trampoline rule", h)
		}
	}
}

// TestBoundaries checks the instruction-boundary rule of the probeopt
// policy, and that the linux-uprobes policy only warns.
func TestBoundaries(t *testing.T) {
	// push %rbp; movabs $0x9090909090909090,%rax; ret
	code, _ := hex.DecodeString("5548b89090909090909090c3")
	fn := plan.AnalyzeX86(0x1000, code, decodeAMD)
	if fn.Err != nil || fn.Instructions != 3 || fn.Decoded != len(code) {
		t.Fatalf("sweep: %d instructions, %d bytes, %v", fn.Instructions, fn.Decoded, fn.Err)
	}
	at := func(p plan.Policy, addr uint64, f *plan.Function, usdt bool) plan.Decision {
		return plan.Decide(p, &plan.Site{Arch: decode.X86_64, Addr: addr, Code: code[addr-0x1000:], Func: f, USDT: usdt, Branches: plan.NoBranches}, &plan.Options{Rules: true})
	}
	if d := at(plan.Probeopt, 0x1001, fn, false); d.Strategy == plan.Reject {
		t.Errorf("boundary 0x1001: %s (%s)", d.Strategy, d.Reason)
	}
	d := at(plan.Probeopt, 0x1003, fn, false)
	if d.Strategy != plan.Reject || d.Reason != plan.ReasonMidInstruction || !strings.Contains(d.Detail, "0x1001") {
		t.Errorf("mid-instruction: %s (%s) %s", d.Strategy, d.Reason, d.Detail)
	}
	l := at(plan.LinuxUprobes, 0x1003, fn, false)
	if l.Strategy != plan.Emulate || l.Reason != plan.ReasonEmulatedNop || l.Rules[0].Outcome != plan.Warn {
		t.Errorf("linux mid-instruction: %s (%s) %+v", l.Strategy, l.Reason, l.Rules)
	}
	if d := at(plan.Probeopt, 0x1003, nil, false); d.Reason != plan.ReasonNoFunction {
		t.Errorf("no function: %s (%s)", d.Strategy, d.Reason)
	}
	if d := at(plan.Probeopt, 0x1003, nil, true); d.Strategy == plan.Reject {
		t.Errorf("USDT without function: %s (%s)", d.Strategy, d.Reason)
	}
	// A function whose sweep stops early: boundaries after it are unknown.
	bad, _ := hex.DecodeString("55" + "06" + "90" + "c3") // 06 is invalid in 64-bit mode
	bfn := plan.AnalyzeX86(0x2000, bad, decodeAMD)
	if bfn.Err == nil || bfn.Decoded != 1 {
		t.Fatalf("sweep of bad bytes: %d %v", bfn.Decoded, bfn.Err)
	}
	d = plan.Decide(plan.Probeopt, &plan.Site{Arch: decode.X86_64, Addr: 0x2003, Code: bad[3:], Func: bfn, Branches: plan.NoBranches}, nil)
	if d.Reason != plan.ReasonBoundaryUnknown {
		t.Errorf("after the sweep stopped: %s (%s)", d.Strategy, d.Reason)
	}
	// arm64: alignment.
	arm := decode.ARM64Code(0xD503201F, 0xD65F03C0)
	afn := plan.AnalyzeARM64(0x3000, arm)
	if d := plan.Decide(plan.Probeopt, &plan.Site{Arch: decode.ARM64, Addr: 0x3002, Code: arm[2:], Func: afn, Branches: plan.NoBranches}, nil); d.Reason != plan.ReasonMisaligned {
		t.Errorf("arm64 misaligned: %s (%s)", d.Strategy, d.Reason)
	}
}

// TestDetourChecks checks the function-wide checks a detour needs, through
// the trampoline rule.
func TestDetourChecks(t *testing.T) {
	decide := func(h string, addr uint64) plan.Decision {
		t.Helper()
		code, _ := hex.DecodeString(h)
		fn := plan.AnalyzeX86(0x1000, code, decodeAMD)
		return plan.Decide(plan.Probeopt, &plan.Site{Arch: decode.X86_64, Addr: addr, Code: code[addr-0x1000:], Func: fn, Branches: plan.NoBranches}, &plan.Options{Rules: true, Live: true})
	}
	for _, tc := range []struct {
		what, hex string
		addr      uint64
		want      plan.Strategy
		detail    string
	}{
		// push %rbp; mov %rsp,%rbp; sub $0x10,%rsp; leave; ret
		{"plain", "554889e54883ec10c9c3", 0x1000, plan.TrampolineDetour, "8 bytes replaced at 0x1000, 3 instructions moved"},
		// endbr64 stays; push; mov; sub moved
		{"endbr64 kept", "f30f1efa554889e54883ec10c9c3", 0x1000, plan.TrampolineDetour, "replaced at 0x1004"},
		// jne back into the second instruction of the region
		{"branch into the region", "554889e57400" + "75f9" + "c3", 0x1000, plan.Emulate, "lands at 0x1001"},
		// a branch to the jump after a kept endbr64 skips the probe address
		{"branch past endbr64", "f30f1efa554889e54883ec10" + "75f6" + "c3", 0x1000, plan.Emulate, "lands at 0x1004"},
		// a branch to the first byte meets the jump: fine
		{"branch to the site", "554889e54883ec10" + "75f6" + "c3", 0x1000, plan.TrampolineDetour, "no branch of the function lands inside"},
		// jmp *%rax somewhere in the function
		{"jump table", "554889e54883ec10ffe0c3", 0x1000, plan.Emulate, "indirect jump"},
		// ret; nop: two bytes to the end
		{"too short", "c390", 0x1000, plan.Emulate, "the jump needs 5"},
		// call in the middle of the displaced bytes
		{"call not last", "ffd04889e5c3", 0x1000, plan.Emulate, "return address into the slot"},
		{"call last", "55e800000000c3", 0x1000, plan.TrampolineDetour, "the last a call"},
		// syscall cannot move
		{"syscall", "0f054889e5c3", 0x1000, plan.Reject, ""},
	} {
		d := decide(tc.hex, tc.addr)
		var rule plan.Rule
		for _, r := range d.Rules {
			if r.Name == "trampoline" {
				rule = r
			}
		}
		if d.Strategy != tc.want || !strings.Contains(rule.Detail, tc.detail) {
			t.Errorf("%s: %s (%s), rule %+v; want %s and %q", tc.what, d.Strategy, d.Reason, rule, tc.want, tc.detail)
		}
		if (rule.Outcome == plan.Pass) != (tc.want == plan.TrampolineDetour) {
			t.Errorf("%s: rule outcome %s", tc.what, rule.Outcome)
		}
	}
}

// TestDetourPLT checks that a PLT stub's own indirect jump does not bar a
// detour, while the same bytes in an ordinary function do.
func TestDetourPLT(t *testing.T) {
	// endbr64; bnd jmp *0x2fe2(%rip); nop 5 bytes
	code, _ := hex.DecodeString("f30f1efaf2ff25e22f00000f1f440000")
	fn := plan.AnalyzeX86(0x1000, code, decodeAMD)
	if fn.IndirectJumps != 1 {
		t.Fatalf("indirect jumps %d", fn.IndirectJumps)
	}
	for _, plt := range []bool{false, true} {
		d := plan.Decide(plan.Probeopt, &plan.Site{Arch: decode.X86_64, Addr: 0x1000, Code: code, Func: fn, PLT: plt, Branches: plan.NoBranches}, &plan.Options{Rules: true})
		if tramp := d.Strategy == plan.TrampolineDetour; tramp != plt {
			t.Errorf("PLT %v: %s (%s)", plt, d.Strategy, d.Detail)
		}
	}
}

// TestReasonsDocumented checks that every reason code is listed once in
// Reasons and documented in the README.
func TestReasonsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[plan.Reason]bool{}
	for _, r := range plan.Reasons() {
		if seen[r.Code] {
			t.Errorf("reason %s listed twice", r.Code)
		}
		seen[r.Code] = true
		if !strings.Contains(string(readme), "| `"+string(r.Code)+"` |") {
			t.Errorf("README lacks reason %s", r.Code)
		}
	}
}

// TestProbeoptARM64AsksTrampoline checks that the probeopt policy follows
// trampoline.AnalyzeARM64 on arm64: a trampoline when it accepts the site
// (a nop site for a nop, else a detour), else the trap decision, which is
// emulate when emulate.ARM64Supported accepts, else xol when
// xol.CheckARM64 accepts, else a rejection. Inside a load/store-exclusive
// window the window check decides first. With NoTrampolines the decision
// is the trap decision; without a function only a nop site takes a
// trampoline.
func TestProbeoptARM64AsksTrampoline(t *testing.T) {
	const ret = 0xD65F03C0
	for _, tc := range []struct {
		what   string
		words  []uint32 // the function, from 0x1000
		at     int      // the index of the site's word
		window bool     // the site lies inside a load/store-exclusive window
		want   plan.Strategy
	}{
		{"nop", []uint32{0xD503201F, ret}, 0, false, plan.TrampolineNop},
		{"stp x29, x30, [sp,#-16]!", []uint32{0xA9BF7BFD, ret}, 0, false, plan.TrampolineDetour},
		{"b.eq", []uint32{0x54000040, ret, ret}, 0, false, plan.TrampolineDetour},
		{"cbz x0", []uint32{0xB4000040, ret, ret}, 0, false, plan.TrampolineDetour},
		{"adrp x0", []uint32{0x90000000, ret}, 0, false, plan.TrampolineDetour},
		{"ldr x0, literal", []uint32{0x58000040, ret, 0, 0}, 0, false, plan.TrampolineDetour},
		{"bl", []uint32{0x94000002, ret, ret}, 0, false, plan.TrampolineDetour},
		{"ret", []uint32{ret}, 0, false, plan.TrampolineDetour},
		{"svc #0", []uint32{0xD4000001, ret}, 0, false, plan.Reject},
		{"brk #0", []uint32{0xD4200000, ret}, 0, false, plan.Reject},
		// ldxr x0, [x1]; ldxr x2, [x3]; stxr w4, x0, [x1]; ret: the
		// second ldxr is inside the sequence the first one starts.
		{"ldxr in an exclusive window", []uint32{0xC85F7C20, 0xC85F7C62, 0xC8047C20, ret}, 1, true, plan.Reject},
		// blr x30 needs x16 or x17 to run from the slot: emulated.
		{"blr x30", []uint32{0xD63F03C0, ret}, 0, false, plan.Emulate},
	} {
		code := decode.ARM64Code(tc.words...)
		addr := 0x1000 + uint64(4*tc.at)
		fn := plan.AnalyzeARM64(0x1000, code)
		site := &plan.Site{Arch: decode.ARM64, Addr: addr, Code: code[4*tc.at:], Func: fn, Branches: plan.NoBranches}
		d := plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true})
		traps := plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true, NoTrampolines: true})
		inst, err := decode.DecodeARM64(code[4*tc.at:], addr)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}

		// The trap decision: what emulate and xol say, unless the site is
		// inside an exclusive window.
		var want plan.Strategy
		switch {
		case tc.window:
			want = plan.Reject
			if traps.Reason != plan.ReasonExclusiveWindow || d.Reason != plan.ReasonExclusiveWindow {
				t.Errorf("%s: %s / %s, want %s", tc.what, d.Reason, traps.Reason, plan.ReasonExclusiveWindow)
			}
		case emulate.ARM64Supported(&inst) == nil:
			want = plan.Emulate
		default:
			if _, err := xol.CheckARM64(&inst); err == nil {
				want = plan.XOL
			} else {
				want = plan.Reject
			}
		}
		if traps.Strategy != want {
			t.Errorf("%s, traps only: %s (%s), want %s", tc.what, traps.Strategy, traps.Reason, want)
		}
		if r := ruleOf(traps, "trampoline"); !tc.window && r.Outcome != plan.Info {
			t.Errorf("%s, traps only: trampoline rule %+v", tc.what, r)
		}

		// The trampoline, as trampoline.AnalyzeARM64 says.
		ts, tsErr := trampoline.AnalyzeARM64(addr, code[4*tc.at:], nil)
		if tsErr == nil && !tc.window {
			want = plan.TrampolineDetour
			if ts.Kind == trampoline.SiteNop {
				want = plan.TrampolineNop
			}
		}
		if d.Strategy != want || d.Strategy != tc.want {
			t.Errorf("%s: %s (%s), want %s; the table says %s (AnalyzeARM64: %v)", tc.what, d.Strategy, d.Reason, want, tc.want, tsErr)
		}
		switch d.Strategy {
		case plan.TrampolineNop, plan.TrampolineDetour:
			if d.Reason != plan.Reason(d.Strategy) {
				t.Errorf("%s: reason %s for %s", tc.what, d.Reason, d.Strategy)
			}
			r := ruleOf(d, "trampoline")
			if r.Outcome != plan.Pass || !strings.Contains(r.Detail, "no branch can land inside") && !strings.Contains(r.Detail, "never inside the replaced bytes") {
				t.Errorf("%s: trampoline rule %+v", tc.what, r)
			}
			if ts.Calls != strings.Contains(r.Detail, "the slot sets x30") {
				t.Errorf("%s: a call is %v, rule %q", tc.what, ts.Calls, r.Detail)
			}
		default:
			// Refused: the trap decision, with the refusal in the rule.
			if d.Reason != traps.Reason || d.Detail != traps.Detail {
				t.Errorf("%s: %s (%s) %q, want the trap decision %s (%s) %q", tc.what, d.Strategy, d.Reason, d.Detail, traps.Strategy, traps.Reason, traps.Detail)
			}
			var se *trampoline.SiteError
			r := ruleOf(d, "trampoline")
			switch {
			case d.Reason == plan.ReasonExclusiveWindow:
				if r.Name != "" {
					t.Errorf("%s: trampoline rule after the exclusive window refused: %+v", tc.what, r)
				}
			case !errors.As(tsErr, &se):
				t.Errorf("%s: AnalyzeARM64 accepted it, yet the policy did not: %+v", tc.what, d.Rules)
			case r.Outcome != plan.Fail || r.Detail != se.Reason:
				t.Errorf("%s: trampoline rule %+v, want fail with %q", tc.what, r, se.Reason)
			}
		}

		// Without a function (a USDT site): a nop site only.
		usdt := &plan.Site{Arch: decode.ARM64, Addr: addr, Code: code[4*tc.at:], USDT: true, Branches: plan.NoBranches}
		u := plan.Decide(plan.Probeopt, usdt, nil)
		_, nopErr := trampoline.AnalyzeARM64(addr, code[4*tc.at:], &trampoline.SiteOptions{NopOnly: true})
		uTraps := plan.Decide(plan.Probeopt, usdt, &plan.Options{NoTrampolines: true})
		if nopErr == nil && u.Strategy != plan.TrampolineNop || nopErr != nil && (u.Strategy != uTraps.Strategy || u.Reason != uTraps.Reason) {
			t.Errorf("%s, no function: %s (%s); AnalyzeARM64 with NopOnly: %v; traps: %s", tc.what, u.Strategy, u.Reason, nopErr, uTraps.Strategy)
		}
	}
}

// TestProbeoptARM64BTI checks a site on a bti: the bti stays and the b
// replaces the instruction after it, unless a branch of the function lands
// there (it would enter the slot without passing the probe address).
func TestProbeoptARM64BTI(t *testing.T) {
	// bti c; stp x29, x30, [sp,#-16]!; ret
	code := decode.ARM64Code(0xD503245F, 0xA9BF7BFD, 0xD65F03C0)
	d := plan.Decide(plan.Probeopt, &plan.Site{Arch: decode.ARM64, Addr: 0x1000, Code: code, Func: plan.AnalyzeARM64(0x1000, code), Branches: plan.NoBranches}, &plan.Options{Rules: true})
	if d.Strategy != plan.TrampolineDetour || !strings.Contains(d.Detail, "at 0x1004 (the bti at 0x1000 stays)") {
		t.Errorf("bti; stp: %s (%s) %s", d.Strategy, d.Reason, d.Detail)
	}
	// bti c; stp x29, x30, [sp,#-16]!; b 0x1004
	loop := decode.ARM64Code(0xD503245F, 0xA9BF7BFD, 0x17FFFFFF)
	d = plan.Decide(plan.Probeopt, &plan.Site{Arch: decode.ARM64, Addr: 0x1000, Code: loop, Func: plan.AnalyzeARM64(0x1000, loop), Branches: plan.NoBranches}, &plan.Options{Rules: true})
	if r := ruleOf(d, "trampoline"); d.Strategy != plan.Emulate || r.Outcome != plan.Fail || !strings.Contains(r.Detail, "lands at 0x1004") {
		t.Errorf("bti; stp with a branch to the stp: %s (%s), rule %+v", d.Strategy, d.Reason, r)
	}
	// A bti that ends the function: no word for the b.
	d = plan.Decide(plan.Probeopt, &plan.Site{Arch: decode.ARM64, Addr: 0x1000, Code: code, Func: plan.AnalyzeARM64(0x1000, code[:4]), Branches: plan.NoBranches}, nil)
	if d.Strategy != plan.Emulate {
		t.Errorf("bti at the end of the function: %s (%s)", d.Strategy, d.Reason)
	}
}

func ruleOf(d plan.Decision, name string) plan.Rule {
	for _, r := range d.Rules {
		if r.Name == name {
			return r
		}
	}
	return plan.Rule{}
}
