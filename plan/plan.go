package plan

import (
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// Policy names a way of deciding.
type Policy string

const (
	// LinuxUprobes predicts what Linux 6.18 uprobes do.
	LinuxUprobes Policy = "linux-uprobes"
	// Probeopt is the best correct strategy probeopt supports today.
	Probeopt Policy = "probeopt"
)

// Policies lists the policies in report order.
func Policies() []Policy { return []Policy{LinuxUprobes, Probeopt} }

// ParsePolicy parses a policy name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies() {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown policy %q (want linux-uprobes or probeopt)", s)
}

// Strategy is how a probe is carried out.
type Strategy string

const (
	// Reject: the instruction cannot be probed under the policy.
	Reject Strategy = "reject"
	// Emulate: the probe traps, the instruction is executed by emulation
	// (one trap per hit).
	Emulate Strategy = "emulate"
	// XOL: the probe traps, a copy of the instruction is single-stepped
	// out of line and the registers fixed up (two traps per hit).
	XOL Strategy = "xol"
	// TrampolineNop: a NOP site is rewritten into a jump (or, for the
	// kernel, a call) to a trampoline: no trap at all.
	TrampolineNop Strategy = "trampoline-nop"
	// TrampolineDetour: whole instructions covering 5 bytes are moved to a
	// trampoline and replaced by a jump to it: no trap at all.
	TrampolineDetour Strategy = "trampoline-detour"
)

// Strategies lists the strategies in report order.
func Strategies() []Strategy {
	return []Strategy{TrampolineNop, TrampolineDetour, Emulate, XOL, Reject}
}

// Outcome is the result of one rule.
type Outcome string

const (
	Pass Outcome = "pass" // the rule allows what follows
	Fail Outcome = "fail" // the rule refuses (a strategy, or the probe)
	Info Outcome = "info" // a fact that changes nothing
	Warn Outcome = "warn" // a consequence the user should know
)

// Rule is one check a policy made, in the order it made them.
type Rule struct {
	Name    string  // "prefix", "opcode-table", "boundary", "emulate", "xol", ...
	Outcome Outcome // pass, fail, info or warn
	Detail  string  // what the rule found
}

// Decision is a policy's answer for one site.
type Decision struct {
	Policy   Policy
	Strategy Strategy
	Reason   Reason
	// Detail is the sentence behind Reason, specific to the instruction.
	Detail string
	// Rules are every rule that applied, in order; recorded only when
	// Options.Rules is set.
	Rules []Rule
	// Fallback is the decision without trampolines (the best trap
	// strategy, or a rejection) when the probeopt policy chose a
	// trampoline and Options.Fallback asked for it: what a tracer does with the site if
	// it cannot place its trampoline. nil otherwise: a decision that is
	// not a trampoline is its own fallback.
	Fallback *Decision
	// Kept is, for a trampoline decided with Options.KeepFirst, the
	// length of the first instruction left in place before the jump
	// (trampoline.Site.Kept); 0 when the jump is at the address.
	Kept int

	record bool
}

func (d *Decision) rule(name string, o Outcome, format string, args ...any) {
	if d.record {
		d.Rules = append(d.Rules, Rule{Name: name, Outcome: o, Detail: fmt.Sprintf(format, args...)})
	}
}

func newDecision(p Policy, o *Options) Decision {
	return Decision{Policy: p, record: o.Rules}
}

// finish sets the strategy, reason and sentence.
func (d *Decision) finish(s Strategy, r Reason, format string, args ...any) Decision {
	d.Strategy, d.Reason, d.Detail = s, r, fmt.Sprintf(format, args...)
	return *d
}

// Site is an instruction to decide about.
type Site struct {
	Arch decode.Arch
	// Addr is the virtual address of the instruction.
	Addr uint64
	// Code holds the bytes from Addr on: at least the whole instruction
	// (16 bytes are always enough), more is fine.
	Code []byte
	// Func is the analysis of the function that holds Addr (see
	// AnalyzeX86, AnalyzeARM64, File.Function), nil when no function is
	// known.
	Func *Function
	// USDT is set for a USDT site: its note marks Addr as the start of an
	// instruction, so the boundary holds even without a function.
	USDT bool
	// PLT is set for a procedure linkage table stub: its indirect jump
	// goes through the GOT to another function (or the lazy resolver),
	// never back into the stub, so it does not bar a detour.
	PLT bool
	// Branches is the index of the direct branch targets and exception
	// landing pads of the whole file (File.Branches), which a trampoline
	// must respect besides the function's own branches: a branch from
	// another function (a foo.cold part jumping back into foo), or a
	// landing pad, inside the replaced bytes bars it. It is built by the
	// first decision that needs it. nil means that they are not known: no
	// trampoline that an index could refuse is taken (the x86-64 NOP
	// sites and detours, an arm64 site on a bti), and the trampoline rule
	// says why. NoBranches is an explicit empty index, for code whose
	// file does not matter. File.Site fills it in.
	Branches *BranchIndex
}

// Options tune a decision; nil means the defaults.
type Options struct {
	// Vendor selects Intel or AMD where the two differ, for the probeopt
	// policy: the decoding, and the emulator that the decision relies on
	// (the Linux decoder follows AMD). A live engine sets the vendor of
	// the CPU its process runs on.
	Vendor decode.Vendor
	// PageSize is the page size in bytes for the nop5 page-crossing rule;
	// 0 means 4096.
	PageSize uint64
	// Live is set when the probe goes into a running process. A detour
	// is judged as for a live process in every case (a displaced call
	// must come last: a thread inside the callee returns after the
	// replaced bytes), so Live changes no x86-64 decision today.
	Live bool
	// NoTrampolines leaves the no-trap strategies out: the decision is
	// the best trap strategy (emulate, xol) or a rejection. A tracer uses
	// it for sites whose trampoline it could not place.
	NoTrampolines bool
	// TrustIndirectJumps lets a detour displace instructions of a
	// function that has indirect jumps: the caller knows that none of them
	// lands in the displaced bytes (the unwinder's context install, whose
	// jump goes to a landing pad in another function, say).
	TrustIndirectJumps bool
	// Rules asks for Decision.Rules, every rule with what it found (for
	// explanations; it costs time in bulk scans).
	Rules bool
	// KeepFirst asks a detour to keep the site's first instruction in
	// place and put the jump after it where that instruction may run
	// before the probe (trampoline.SiteOptions.KeepFirst, with neither
	// Args nor Returns: the longest span any handler may need): another
	// tracer's breakpoint at the address (a kernel uprobe) then never
	// overlaps the jump. The function-wide checks cover the bytes from
	// just after the address to the jump's end; when they refuse the
	// longer span, the jump goes at the address as without the option.
	// Decision.Kept says which was chosen. A live engine sets it.
	KeepFirst bool
	// Fallback asks, when the probeopt policy chooses a trampoline, for
	// Decision.Fallback: the decision with NoTrampolines, in the same
	// call. A live engine sets it.
	Fallback bool
}

func (o *Options) pageSize() uint64 {
	if o == nil || o.PageSize == 0 {
		return 4096
	}
	return o.PageSize
}

// Decide returns the decision of policy p for site s.
func Decide(p Policy, s *Site, o *Options) Decision {
	if o == nil {
		o = &Options{}
	}
	d := decide(p, s, o)
	d.record = false
	if p == Probeopt && o.Fallback && !o.NoTrampolines && (d.Strategy == TrampolineNop || d.Strategy == TrampolineDetour) {
		fo := *o
		fo.NoTrampolines, fo.Fallback = true, false
		fb := decide(p, s, &fo)
		fb.record = false
		d.Fallback = &fb
	}
	return d
}

func decide(p Policy, s *Site, o *Options) Decision {
	in := isaOf(s.Arch)
	if in == nil {
		in = isaX86 // the zero Arch has always meant x86-64 here
	}
	switch p {
	case LinuxUprobes:
		return in.linux(s, o)
	case Probeopt:
		return in.probeopt(s, o)
	}
	d := newDecision(p, o)
	return d.finish(Reject, ReasonUnknownPolicy, "unknown policy %q", p)
}

// hexBytes renders bytes as "0f 1f 44 00 00".
func hexBytes(b []byte) string { return fmt.Sprintf("% x", b) }

// plural renders a count with its unit: "1 byte", "3 bytes".
func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}
