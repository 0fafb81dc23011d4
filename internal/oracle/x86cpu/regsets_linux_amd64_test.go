//go:build linux && amd64

package x86cpu

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
	"golang.org/x/sys/unix"
)

// regsetCount is how many instructions TestX86RegisterSetsCPU compares:
// PROBEOPT_REGSET_N, else 1,000,000 with PROBEOPT_LONG=1, else 20,000.
func regsetCount(t testing.TB) int {
	return testCaseCount(t, "PROBEOPT_REGSET_N", 20_000, 20_000, 1_000_000)
}

const (
	// regsetStates is how many initial states each instruction runs from;
	// each gives three runs (A, B, A2).
	regsetStates = 2
	// regsetPerRound is how many instructions share a memory image and a
	// call of the oracle.
	regsetPerRound = 2000
)

// regsetKnown lists instructions that use registers without naming them,
// or move values between general-purpose and other registers; every round
// runs them besides the generated ones, which meet most of them rarely.
var regsetKnown = []string{
	"0fa2", "0f01d0", "0f01f9", "f30fc7f8", "0f01ee", "0f31", "0f33", // cpuid xgetbv rdtscp rdpid rdpkru rdtsc rdpmc
	"0f01c1", "0f01d4", "0f01c8", "0f01c9", "0f01d5", "0f01d6", "0f01e8", // vmcall vmfunc monitor mwait xend xtest serialize
	"0fc7f0", "480fc7f8", "f30faec0", "f3480faec9", // rdrand rdseed rdfsbase rdgsbase
	"d7", "0fc70e", "480fc70e", "c8100002", "c9", "c6f801", // xlat cmpxchg8b cmpxchg16b enter leave xabort
	"a4", "f3a5", "f348ab", "ac", "f2ae", "f3a6", "67f3a4", "aa", "48af", // string instructions
	"660f3a61c105", "c4e3f961c105", "660f3a63c105", "660f3a60ca05", "c4e3f963c105", // pcmpestri/pcmpistri/pcmpestrm
	"c4e2fbf6c1", "c4e2f3f7c2", "c4e2f0f2c2", "c4e2f8f3ce", "c4e3fbf0c105", "c4e2f1f7c2", // mulx bextr andn blsr rorx shlx
	"0ff7c1", "660ff7c1", "c5f9f7c1", "f20f38f1c1", "660f38f806", // maskmovq maskmovdqu vmaskmovdqu crc32 movdir64b
	"0fae26", "480fae26", "0fae36", "0fc726", "0fae06", // xsave xsave64 xsaveopt xsavec fxsave
	"dfe0", "d903", "dd30", "dd3e", "d93e", "df2e", "db3b", // fnstsw ax, x87 memory forms
	"0f02c1", "0f03c1", "0f00e1", "0f00e9", "8cd8", // lar lsl verr verw mov from a segment register
	"99", "4899", "98", "6698", "f7e1", "f7f9", "f6e1", "f6f1", "48f7f9", // cdq cqo cwde cbw mul idiv
	"9e", "9f", "9c", "9d", "669d", // sahf lahf pushf popf
	"e2fe", "e3fe", "67e2fe", "e1fe", // loop jrcxz loope
	"ffd0", "ff16", "c3", "c20800", "e800000000", "ffe0", // call ret jmp
	"50", "4158", "ff36", "8f06", "6a01", "0fa0", "0fa8", "5c", // push pop
	"0fb1ce", "f00fb10e", "0fc1c8", "0fc0c8", "4887c8", "86e0", // cmpxchg xadd xchg
	"0f38f006", "0f38f106", "0fc306", "0fbcc1", "f30fbcc1", "0fbdc1", "f30fb8c1", "f30fbdc1", // movbe movnti bsf tzcnt bsr popcnt lzcnt
	"0fa5c8", "0fadc8", "d3e0", "0fc8", "480fc9", "660f38f6c1", "f30f38f6c1", // shld shrd shl bswap adcx adox
	"0f50c1", "660fd7c1", "0fc5c100", "660f3a16c000", "660f3a14c000", "660f3a17c000", "660fc4c000", "660f3a22c000", // vector to gpr and back
	"f20f2cc1", "f3480f2dc1", "f20f2ac0", "660f6ec0", "66480f7ec0", "0f7ec0", // cvt movd movq
	"c5f850c1", "c5f9d7c1", "c5f9c5c100", "c4e3f916c000", "c4e1f97ec0", "c4e1f96ec0", "c5fa2dc1", // vex
	"c5f893c1", "c5f892c8", "c4e1fb93c1", // kmovw kmovq
	"62f27d487cc0", "62f1fd087ec0", "62f1fe082dc0", "62f17e087bc0", "62f57e082dc0", "62f5fd087ec0", // evex
	"e410", "ec", "6c", "6e", "0f30", "0f32", "0f01f8", "fa", "0f06", // faulting: in out ins outs wrmsr rdmsr swapgs cli clts
	"660f3a6244650b7b", "660f3a60c105", "d9e8", "dd1e", "660fd7c0", // changing their own inputs: pcmpistrm/pcmpestrm xmm0, fld1, fstp, pmovmskb
}

// regsetInst is one instruction under test and where its runs are.
type regsetInst struct {
	inst  decode.X86Inst
	bytes []byte
	// reset is set when the instruction may use the FPU or vector state:
	// each of its runs follows a reset of that state.
	reset bool
	// unlisted holds the registers in neither Read nor Written, RSP
	// excepted: run B gives them other values.
	unlisted decode.RegSet
	// s and p are the initial states of runs A (and A2) and B.
	s, p [regsetStates]emulate.X86State
	// a, b and a2 index the results of the runs.
	a, b, a2 [regsetStates]int
	// late is set when a later run A differs from the first.
	late bool
	// approx is set for a form whose sets are a class's approximation
	// (RegsApprox): only the scratch registers such a form may lend are
	// unlisted.
	approx bool
}

// regsetEncStats counts the instructions of one encoding.
type regsetEncStats struct {
	decoded, approx, vendor, excluded, patch, nondet, compared int
	// Outcomes of the runs A of compared instructions.
	completed, faulted, undefined, fpe, other int
}

// regsetBisect is a run B that differs from run A outside the unlisted
// registers: the runs that perturb one unlisted register at a time tell
// which one the instruction uses.
type regsetBisect struct {
	ri   *regsetInst
	k    int    // the state
	diff string // how B differed from A
	base int    // a fresh run A
	one  []int  // the run with only register regs[i] perturbed
	regs []int
}

// TestX86RegisterSetsCPU checks the decoder's register sets against the
// CPU. Generated instructions (random and structured bytes, decoded with
// the host's vendor rules) run in the emulator oracle's child from random
// register states, each state three times: run A from state S, run B from
// S with every register in neither Read nor Written (RSP excepted) given
// another value, and run A2 from S again. It checks:
//
//  1. Written is complete: every register whose value changes in any run
//     is in Written (RIP excepted; RSP too must be listed when it moves).
//  2. Read and Written together are complete: in run B the perturbed
//     registers keep their values, and every other output equals run A's:
//     the other registers, RIP, the status flags and DF, the signal, its
//     code and address, the trap and its error code, and the changed
//     memory. For a difference, runs that perturb one register at a time
//     name the register the instruction uses.
//
// An instruction whose runs A and A2 differ (rdtsc, rdrand) is not
// deterministic: only claim 1 is checked for it. Instructions whose
// decoding depends on the vendor, or that would harm the child
// (regsetExclusion), are skipped.
//
// For a form whose sets are a class's approximation (RegsApprox), the
// claims are the ones the relocation of such a form relies on (package
// xol): of RSI, RDI and RBX, those the form names neither in ModRM.reg,
// nor in VEX.vvvv, nor in its address, are neither read nor written (no
// implicit use); those alone are unlisted, and only their changes break
// claim 1. The
// runs of an instruction that may use the FPU or vector state (any but the
// one-byte opcodes outside x87) each follow an xrstor of a fixed image, so
// that the vector, mask and x87 registers and MXCSR an instruction changes
// do not feed its next run. Signals other than the single-step trap (SIGILL for #UD,
// SIGFPE, SIGSEGV) are outputs like any other.
func TestX86RegisterSetsCPU(t *testing.T) {
	if msg := regsetReachesOracle(regsetValueRanges); msg != "" {
		t.Fatalf("register values could address the oracle's memory: %s", msg)
	}
	o := newTestEmuOracle(t)
	c := newRegsetCampaign(t, o)
	t.Logf("%d instructions to compare, seed %d, vendor %v", c.want, c.seed, c.dec.Vendor)
	start := time.Now()
	for round := uint64(0); c.compared < c.want; round++ {
		r := c.newRound(round)
		r.fill()
		out := r.run()
		if bisects := c.checkClaims(r, out); len(bisects) > 0 {
			c.bisect(r, out, bisects)
		}
	}
	c.report(time.Since(start))
}

// regsetCampaign is the state of TestX86RegisterSetsCPU across its rounds:
// the generators, the host's vector state, the counts and the
// disagreements found.
type regsetCampaign struct {
	t    *testing.T
	o    *EmuOracle
	dec  decode.X86Decoder
	g    *X86Gen
	rg   *regsetGen
	seed uint64
	want int // instructions to compare

	// xcr0 and comps describe the host's XSAVE state, for the reset; on a
	// host where cpuidTrapLost is set cpuid is not run.
	xcr0          uint64
	comps         []regsetXComp
	cpuidTrapLost bool
	reset         EmuCase // the xrstor that starts a run from a fixed vector state

	stats                       [8]regsetEncStats
	decErrs, runs, compared     int
	excluded                    map[string]int
	nondet, written, read, past disagreements
}

func newRegsetCampaign(t *testing.T, o *EmuOracle) *regsetCampaign {
	seed := cpuSeed(t)
	c := &regsetCampaign{
		t: t, o: o, dec: decode.X86Decoder{Vendor: hostVendor(t)}, seed: seed, want: regsetCount(t),
		g: NewX86Gen(seed), rg: newRegsetGen(seed),
		excluded: map[string]int{}, nondet: disagreements{}, written: disagreements{}, read: disagreements{}, past: disagreements{},
	}
	c.rg.canonicalRSP = !o.EntersNoncanonicalRSP()
	c.xcr0, c.comps, c.cpuidTrapLost = regsetProbe(t, o)
	c.reset = EmuCase{Class: "reset", Bytes: regsetResetBytes}
	c.reset.Init.RIP, c.reset.Init.RFLAGS = EmuCodeLow, 0x202
	c.reset.Init.FSBase, c.reset.Init.GSBase = EmuFSBase, EmuGSBase
	c.reset.Init.GPR[decode.RSI] = EmuROAddr
	return c
}

// regsetRound is one memory image and the instructions and runs placed in
// it.
type regsetRound struct {
	c          *regsetCampaign
	img        *EmuImage
	rfbm       uint64 // the components the reset restores
	reset      EmuCase
	slots      emuSlots
	firstReset int // the first run of the reset, or -1
	insts      []*regsetInst
	cases      []EmuCase
}

func (c *regsetCampaign) newRound(round uint64) *regsetRound {
	r := &regsetRound{c: c, img: NewEmuImage(emuMix64(c.seed, round)), reset: c.reset, firstReset: -1}
	r.rfbm = regsetResetArea(r.img.RO[:], c.xcr0, c.comps, rand.New(rand.NewPCG(c.seed, round)))
	r.reset.Init.GPR[decode.RAX], r.reset.Init.GPR[decode.RDX] = r.rfbm&0xffff_ffff, r.rfbm>>32
	if err := r.img.Place(&r.reset); err != nil {
		c.t.Fatal(err)
	}
	r.slots = emuSlots{low: 1} // slot 0 holds the reset
	return r
}

// add appends a run of ri from st (after the reset when ri needs it) and
// returns its index.
func (r *regsetRound) add(ri *regsetInst, st emulate.X86State) int {
	for reg, v := range st.GPR {
		if !regsetValueOK(v) {
			r.c.t.Fatalf("% x: %s = %#x is outside the safe register values", ri.bytes, decode.X86RegName(reg), v)
		}
	}
	if ri.reset {
		if r.firstReset < 0 {
			r.firstReset = len(r.cases)
		}
		r.cases = append(r.cases, r.reset)
	}
	r.cases = append(r.cases, EmuCase{Class: "regset", Bytes: ri.bytes, Init: st})
	return len(r.cases) - 1
}

// fill takes the known instructions, then generated ones (random and
// structured in turn) until the round holds regsetPerRound or the code
// windows are full.
func (r *regsetRound) fill() {
	for _, h := range regsetKnown {
		var b [MaxX86Len]byte
		copy(b[:], mustHex(r.c.t, h))
		r.take(&b, true)
	}
	for n := 0; len(r.insts) < regsetPerRound; n++ {
		var b [MaxX86Len]byte
		if n%2 == 0 {
			r.c.g.Random(&b)
		} else {
			r.c.g.Structured(&b)
		}
		if !r.take(&b, false) {
			break
		}
	}
}

// take decodes the bytes in b and, unless they are skipped, places the
// instruction and adds its runs; it returns false when the code windows
// are full. A known instruction must decode.
func (r *regsetRound) take(b *[MaxX86Len]byte, known bool) bool {
	c, t := r.c, r.c.t
	ri := &regsetInst{}
	inst := &ri.inst
	if err := c.dec.Decode(b[:], EmuCodeLow, inst); err != nil {
		if known {
			t.Fatalf("% x: %v", b, err)
		}
		c.decErrs++
		return true
	}
	st := &c.stats[inst.Encoding]
	st.decoded++
	if inst.VendorDependent {
		st.vendor++
		return true
	}
	why := regsetExclusion(inst)
	if c.cpuidTrapLost && inst.Map == decode.Map0F && inst.Opcode == 0xa2 && inst.Encoding == decode.EncLegacy {
		why = "cpuid: this host loses the single-step trap after it (the hypervisor executes cpuid), so the bytes after it run too"
	}
	if why != "" {
		st.excluded++
		c.excluded[why]++
		return true
	}
	rip, ok := r.slots.next(c.rg.r)
	if !ok {
		return false
	}
	if err := c.dec.Decode(b[:], rip, inst); err != nil {
		t.Fatalf("% x decodes at %#x but not at %#x: %v", b, uint64(EmuCodeLow), rip, err)
	}
	if !c.rg.prepare(c.dec, inst, b[:], rip) {
		st.patch++
		return true
	}
	ri.bytes = append([]byte(nil), b[:inst.Len]...)
	x87 := inst.Opcode >= 0xd8 && inst.Opcode <= 0xdf
	ri.reset = inst.Map != decode.Map1Byte || x87 || inst.Encoding != decode.EncLegacy && inst.Encoding != decode.EncREX2
	ri.unlisted = ^(inst.Read | inst.Written) & 0xffff &^ (1 << decode.RSP)
	if inst.RegsApprox {
		st.approx++
		ri.approx = true
		ri.unlisted = regsetApproxScratch(inst)
	}
	for k := range regsetStates {
		s := c.rg.state(inst, rip)
		p := s
		for reg := range 16 {
			if ri.unlisted.Has(reg) {
				p.GPR[reg] = c.rg.other(s.GPR[reg])
			}
		}
		ri.s[k], ri.p[k] = s, p
		ri.a[k] = r.add(ri, s)
		ri.b[k] = r.add(ri, p)
		ri.a2[k] = r.add(ri, s)
	}
	if err := r.img.Place(&r.cases[ri.a[0]]); err != nil {
		t.Fatal(err)
	}
	r.insts = append(r.insts, ri)
	return true
}

// run runs the round's cases on the oracle; the reset must complete.
func (r *regsetRound) run() []EmuCPUResult {
	out := r.c.runCases(r.img, r.cases)
	if r.firstReset >= 0 {
		if res := &out[r.firstReset]; res.Signal != emuSigTrap || res.Trap != emuTrapDB {
			r.c.t.Fatalf("the reset (xrstor, rfbm %#x) did not complete: signal %d trap %d", r.rfbm, res.Signal, res.Trap)
		}
	}
	return out
}

// runCases runs cases on the oracle and counts them.
func (c *regsetCampaign) runCases(img *EmuImage, cases []EmuCase) []EmuCPUResult {
	out := make([]EmuCPUResult, len(cases))
	if err := c.o.Run(img, cases, out); err != nil {
		c.t.Fatalf("oracle: %v", err)
	}
	c.runs += len(cases)
	return out
}

// checkClaims checks claim 1 on every run of the round and determinism,
// counts the outcomes, and returns the runs B whose outputs differ from
// A's, to be bisected.
func (c *regsetCampaign) checkClaims(r *regsetRound, out []EmuCPUResult) []*regsetBisect {
	var bisects []*regsetBisect
	for _, ri := range r.insts {
		inst := &ri.inst
		st := &c.stats[inst.Encoding]
		key := decodeKey(inst)
		text := inst.Text("intel")
		hexb := hex.EncodeToString(ri.bytes)
		c.checkWritten(ri, out, key, text, hexb)
		// Determinism.
		det := true
		for k := range regsetStates {
			if d := regsetDiff(&out[ri.a[k]], &out[ri.a2[k]], 0); len(d) > 0 {
				if det {
					c.nondet.add(key, fmt.Sprintf("%s %q (%s)", hexb, text, d[0]))
				}
				det = false
			}
		}
		if !det {
			st.nondet++
			continue
		}
		st.compared++
		c.compared++
		// Claim 2: the outputs of B outside the unlisted registers.
		for k := range regsetStates {
			a := &out[ri.a[k]]
			st.count(a)
			if a.Signal == emuSigTrap && a.Trap == emuTrapDB && inst.Branch == decode.BranchNone {
				// A completed instruction that is not a branch ends
				// right after itself (or at itself, for a repeated string
				// instruction with more to do); anything else means
				// more than the instruction ran.
				if rip := ri.s[k].RIP; a.State.RIP != rip+uint64(inst.Len) && a.State.RIP != rip {
					c.past.add(key, fmt.Sprintf("%s %q (rip %+d)", hexb, text, int64(a.State.RIP-rip)))
				}
			}
			if d := regsetDiff(a, &out[ri.b[k]], ri.unlisted); len(d) > 0 {
				bisects = append(bisects, &regsetBisect{ri: ri, k: k, diff: strings.Join(d, ", ")})
			}
		}
	}
	return bisects
}

// checkWritten checks claim 1 on the runs of ri: no register outside
// Written changes (outside the scratch candidates, for an approximated
// form).
func (c *regsetCampaign) checkWritten(ri *regsetInst, out []EmuCPUResult, key, text, hexb string) {
	inst := &ri.inst
	seen := map[string]bool{}
	for k := range regsetStates {
		for _, run := range []struct {
			init *emulate.X86State
			res  *EmuCPUResult
		}{{&ri.s[k], &out[ri.a[k]]}, {&ri.p[k], &out[ri.b[k]]}, {&ri.s[k], &out[ri.a2[k]]}} {
			for r := range 16 {
				listed := inst.Written.Has(r)
				if ri.approx {
					listed = !ri.unlisted.Has(r)
				}
				if v := run.res.State.GPR[r]; v != run.init.GPR[r] && !listed && !seen[decode.X86RegName(r)] {
					seen[decode.X86RegName(r)] = true
					what := "Written lacks"
					if ri.approx {
						what = "an approximated form writes the scratch candidate"
					}
					c.written.add(fmt.Sprintf("%s %s: %s", what, decode.X86RegName(r), key),
						fmt.Sprintf("%s %q (%s %#x -> %#x)", hexb, text, decode.X86RegName(r), run.init.GPR[r], v))
				}
			}
		}
	}
}

// count counts the outcome of a run A.
func (st *regsetEncStats) count(a *EmuCPUResult) {
	switch {
	case a.Signal == emuSigTrap && a.Trap == emuTrapDB:
		st.completed++
	case a.Signal == emuSigSegv || a.Signal == emuSigBus:
		st.faulted++
	case a.Signal == int(unix.SIGILL):
		st.undefined++
	case a.Signal == int(unix.SIGFPE):
		st.fpe++
	default:
		st.other++
	}
}

// bisect runs each differing instruction again with one unlisted register
// perturbed at a time, and records the registers whose change alone
// changes an output (claim 2).
func (c *regsetCampaign) bisect(r *regsetRound, out []EmuCPUResult, bisects []*regsetBisect) {
	r.cases = r.cases[:0]
	for _, bs := range bisects {
		ri := bs.ri
		bs.base = r.add(ri, ri.s[bs.k])
		for reg := range 16 {
			if ri.unlisted.Has(reg) {
				st := ri.s[bs.k]
				st.GPR[reg] = ri.p[bs.k].GPR[reg]
				bs.regs = append(bs.regs, reg)
				bs.one = append(bs.one, r.add(ri, st))
			}
		}
	}
	out2 := c.runCases(r.img, r.cases)
	for _, bs := range bisects {
		ri := bs.ri
		inst := &ri.inst
		key := decodeKey(inst)
		ex := fmt.Sprintf("%s %q", hex.EncodeToString(ri.bytes), inst.Text("intel"))
		if ri.late {
			continue
		}
		base := &out2[bs.base]
		if d := regsetDiff(&out[ri.a[bs.k]], base, 0); len(d) > 0 {
			// Not deterministic after all: a state no run sets
			// changed since run A.
			ri.late = true
			c.nondet.add(key, fmt.Sprintf("%s (%s, later)", ex, d[0]))
			c.stats[inst.Encoding].nondet++
			c.stats[inst.Encoding].compared--
			c.compared--
			continue
		}
		found := false
		for i, reg := range bs.regs {
			if d := regsetDiff(base, &out2[bs.one[i]], 1<<reg); len(d) > 0 {
				found = true
				c.read.add(fmt.Sprintf("Read lacks %s: %s", decode.X86RegName(reg), key),
					fmt.Sprintf("%s (%s %#x -> %#x changes %s)", ex, decode.X86RegName(reg), ri.s[bs.k].GPR[reg], ri.p[bs.k].GPR[reg], strings.Join(d, ", ")))
			}
		}
		if !found {
			c.read.add("Read or Written incomplete, no single register explains it: "+key, fmt.Sprintf("%s (B differs: %s)", ex, bs.diff))
		}
	}
}

// report logs the table of counts by encoding, the exclusions and the
// disagreements, and fails the test on any disagreement or when fewer
// instructions than wanted were compared.
func (c *regsetCampaign) report(elapsed time.Duration) {
	t := c.t
	var tot regsetEncStats
	row := func(name string, s regsetEncStats) {
		t.Logf("%-8s %8d %7d %6d %8d %5d %7d %8d | %9d %7d %6d %5d %5d", name, s.decoded, s.approx, s.vendor, s.excluded, s.patch, s.nondet, s.compared,
			s.completed, s.faulted, s.undefined, s.fpe, s.other)
	}
	t.Logf("%-8s %8s %7s %6s %8s %5s %7s %8s | %9s %7s %6s %5s %5s", "encoding", "decoded", "approx", "vendor", "excluded", "patch", "nondet", "compared",
		"completed", "faulted", "#UD", "#DE", "other")
	for e, s := range c.stats {
		if s.decoded == 0 {
			continue
		}
		row(decode.X86Encoding(e).String(), s)
		tot.add(&s)
	}
	row("total", tot)
	t.Logf("(outcomes are those of the %d runs A of compared instructions; %d generated strings did not decode)", regsetStates, c.decErrs)
	reasons := make([]string, 0, len(c.excluded))
	for why := range c.excluded {
		reasons = append(reasons, why)
	}
	sort.Slice(reasons, func(i, j int) bool { return c.excluded[reasons[i]] > c.excluded[reasons[j]] })
	for _, why := range reasons {
		t.Logf("excluded %6d  %s", c.excluded[why], why)
	}
	t.Logf("%d runs in %.1f s (%.0f runs/s), %d child restarts", c.runs, elapsed.Seconds(), float64(c.runs)/elapsed.Seconds(), c.o.Restarts())
	c.nondet.log(t, "not deterministic (claim 2 not checked)", 15)
	c.written.log(t, "CLAIM 1: a register changes that Written does not list", 40)
	c.read.log(t, "CLAIM 2: an output depends on a register in neither Read nor Written", 40)
	c.past.log(t, "COMPLETED PAST THE INSTRUCTION: the trap came after more than the instruction ran", 20)
	nw, nr, np := regsetTotal(c.written), regsetTotal(c.read), regsetTotal(c.past)
	if nw > 0 || nr > 0 || np > 0 {
		t.Errorf("%d instructions write a register Written lacks, %d runs depend on a register in neither set, %d runs went past the instruction", nw, nr, np)
	}
	if c.compared < c.want {
		t.Errorf("compared %d instructions, want %d", c.compared, c.want)
	}
}

// add adds the counts of s.
func (tot *regsetEncStats) add(s *regsetEncStats) {
	tot.decoded += s.decoded
	tot.approx += s.approx
	tot.vendor += s.vendor
	tot.excluded += s.excluded
	tot.patch += s.patch
	tot.nondet += s.nondet
	tot.compared += s.compared
	tot.completed += s.completed
	tot.faulted += s.faulted
	tot.undefined += s.undefined
	tot.fpe += s.fpe
	tot.other += s.other
}

// regsetTotal counts the strings of every group.
// regsetApproxScratch returns the registers a relocation may take as
// scratch for a form whose sets are approximate: RSI, RDI and RBX, less
// the one ModRM.reg names, the one VEX.vvvv names and the address
// registers (Read holds those for such a form).
func regsetApproxScratch(inst *decode.X86Inst) decode.RegSet {
	var s decode.RegSet
	for _, r := range []int{decode.RSI, decode.RDI, decode.RBX} {
		s |= 1 << r
	}
	reg := int(inst.Reg)
	if inst.R {
		reg += 8
	}
	s &^= 1 << reg
	switch inst.Encoding {
	case decode.EncVEX2, decode.EncVEX3, decode.EncEVEX, decode.EncXOP:
		s &^= 1 << (inst.VVVV & 15)
	}
	return s &^ (inst.Read | inst.Written)
}

func regsetTotal(d disagreements) int {
	n := 0
	for _, g := range d {
		n += g.count
	}
	return n
}

// TestRegsetValuesAvoidOracle checks the guard of TestX86RegisterSetsCPU:
// the register values it uses cannot address the oracle's control area,
// and a range that could is caught.
func TestRegsetValuesAvoidOracle(t *testing.T) {
	if msg := regsetReachesOracle(regsetValueRanges); msg != "" {
		t.Fatalf("register values could address the oracle's memory: %s", msg)
	}
	for _, bad := range []regsetRange{
		{"control area", emuCtrlAddr, emuCtrlAddr},
		{"below the control area", 0x4000_0000_0000, 0x5000_0000_0000}, // plus a window pointer and FS
		{"any canonical address", 0, 0x7fff_ffff_ffff},
	} {
		if msg := regsetReachesOracle(append(append([]regsetRange(nil), regsetValueRanges...), bad)); msg == "" {
			t.Errorf("values in %s [%#x, %#x] pass the guard", bad.name, bad.lo, bad.hi)
		} else {
			t.Logf("%s: %s", bad.name, msg)
		}
	}
	for _, v := range []uint64{0, 1, regsetHighLo, EmuRWAddr, EmuCodeLow, ^uint64(0)} {
		if !regsetValueOK(v) {
			t.Errorf("regsetValueOK(%#x) = false", v)
		}
	}
	for _, v := range []uint64{emuCtrlAddr, emuCtrlAddr + 0x1000, 0x5000_0000_0000, EmuCodeHigh} {
		if regsetValueOK(v) {
			t.Errorf("regsetValueOK(%#x) = true", v)
		}
	}
}

// regsetProbe asks the CPU for XCR0 (xgetbv) and for where the standard
// XSAVE format keeps the components the reset loads (cpuid leaf 0xD).
//
// It also reports whether the single-step trap after cpuid was lost
// (cpuidStopped): cpuid cannot be compared on such a host.
func regsetProbe(t *testing.T, o *EmuOracle) (xcr0 uint64, comps []regsetXComp, cpuidTrapLost bool) {
	t.Helper()
	img := NewEmuImage(0)
	var cases []EmuCase
	probe := func(b []byte, rax, rcx uint64) {
		c := EmuCase{Class: "probe", Bytes: b}
		c.Init.RIP, c.Init.RFLAGS = EmuCodeLow+16*uint64(len(cases)), 0x202
		c.Init.FSBase, c.Init.GSBase = EmuFSBase, EmuGSBase
		c.Init.GPR[decode.RAX], c.Init.GPR[decode.RCX] = rax, rcx
		if err := img.Place(&c); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, c)
	}
	probe([]byte{0x0f, 0x01, 0xd0}, 0, 0) // xgetbv
	for _, n := range regsetResetComps {
		// cpuid, then an int3 that stops the case where a hypervisor
		// loses the single-step trap after cpuid (see cpuidStopped).
		probe([]byte{0x0f, 0xa2, 0xcc}, 0xd, uint64(n))
	}
	out := make([]EmuCPUResult, len(cases))
	if err := o.Run(img, cases, out); err != nil {
		t.Fatalf("oracle: %v", err)
	}
	for i := range out {
		lost := cpuidStopped(&cases[i], &out[i])
		if out[i].Signal != emuSigTrap || out[i].Trap != emuTrapDB && !lost {
			t.Fatalf("% x: signal %d trap %d", cases[i].Bytes, out[i].Signal, out[i].Trap)
		}
		cpuidTrapLost = cpuidTrapLost || lost
	}
	g := func(i, r int) uint64 { return out[i].State.GPR[r] & 0xffff_ffff }
	xcr0 = g(0, decode.RAX) | g(0, decode.RDX)<<32
	for i, n := range regsetResetComps {
		comps = append(comps, regsetXComp{num: n, off: int(g(i+1, decode.RBX)), size: int(g(i+1, decode.RAX))})
	}
	t.Logf("xcr0 %#x, xsave components %+v, single-step trap after cpuid lost: %v", xcr0, comps, cpuidTrapLost)
	return xcr0, comps, cpuidTrapLost
}

// cpuidStopped reports whether a case of cpuid followed by int3 ended at
// the int3: under some hypervisors (seen under KVM on an AMD EPYC of family
// 26) the single-step trap after cpuid is lost, because the hypervisor,
// not the CPU, executes it for the guest.
func cpuidStopped(c *EmuCase, r *EmuCPUResult) bool {
	const trapBP = 3
	return len(c.Bytes) == 3 && c.Bytes[0] == 0x0f && c.Bytes[1] == 0xa2 && c.Bytes[2] == 0xcc &&
		r.Signal == emuSigTrap && r.Trap == trapBP && r.State.RIP == c.Init.RIP+3
}
