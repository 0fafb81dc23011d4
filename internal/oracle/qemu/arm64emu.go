package qemu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
)

// ARM64Runner runs arm64 cases: QEMUOracle does it under qemu-aarch64.
type ARM64Runner interface {
	Run(cases []ARM64Case, out []ARM64Result) error
	Image() *ARM64Image
}

// ARM64EmuCampaign is a differential campaign of the arm64 emulator against
// qemu-user: each generated instruction the emulator accepts runs in both
// from the same state, and every disagreement is a mismatch. The emulator
// is configured like the oracle's CPU: without pointer authentication, so
// the PAC hints are NOPs on both.
type ARM64EmuCampaign struct {
	// Cases is how many cases to generate.
	Cases int
	// Seed determines every case.
	Seed uint64
	// Class restricts the generator to one of ARM64EmuClasses; "" mixes
	// them all.
	Class string
	// BatchSize is the number of cases per round trip to the oracle; 0
	// means 2048.
	BatchSize int
	// OnMismatch, if set, receives each mismatch; returning false stops
	// the campaign.
	OnMismatch func(*ARM64Mismatch) bool
	// Progress, if set, is called after each batch with the cases
	// generated so far.
	Progress func(done int)
}

// ARM64Report sums up an arm64 campaign.
type ARM64Report struct {
	Generated  int `json:"generated"`  // cases generated
	Cases      int `json:"cases"`      // cases run on the oracle and compared
	Completed  int `json:"completed"`  // compared: both completed with the same state
	Faulted    int `json:"faulted"`    // compared: both faulted the same way
	Mismatches int `json:"mismatches"` // compared: disagreements
	// Refused counts the instructions the emulator (or relocator) refused,
	// by reason; they are not run.
	Refused map[string]int `json:"refused"`
	// Skipped counts cases not compared, by reason: a state the emulator
	// does not reproduce, a loop, an instruction the oracle's CPU lacks.
	Skipped map[string]int `json:"skipped"`
	// Forms counts the relocated instructions by form (relocation
	// campaigns only).
	Forms     map[string]int               `json:"forms,omitempty"`
	Seconds   float64                      `json:"seconds"`
	PerSecond float64                      `json:"cases_per_second"` // compared cases per second
	Classes   map[string]*ARM64ClassReport `json:"classes"`
}

// ARM64ClassReport counts the compared cases of one generator class.
type ARM64ClassReport struct {
	Cases      int `json:"cases"`
	Completed  int `json:"completed"`
	Faulted    int `json:"faulted"`
	Mismatches int `json:"mismatches"`
}

func newARM64Report() *ARM64Report {
	return &ARM64Report{Refused: map[string]int{}, Skipped: map[string]int{}, Classes: map[string]*ARM64ClassReport{}}
}

// count records a compared case.
func (rep *ARM64Report) count(class string, v a64Verdict) {
	cl := rep.Classes[class]
	if cl == nil {
		cl = &ARM64ClassReport{}
		rep.Classes[class] = cl
	}
	rep.Cases++
	cl.Cases++
	switch v {
	case a64Completed:
		rep.Completed++
		cl.Completed++
	case a64Faulted:
		rep.Faulted++
		cl.Faulted++
	case a64Mismatch:
		rep.Mismatches++
		cl.Mismatches++
	}
}

func (rep *ARM64Report) finish(start time.Time) {
	rep.Seconds = time.Since(start).Seconds()
	if rep.Seconds > 0 {
		rep.PerSecond = float64(rep.Cases) / rep.Seconds
	}
}

// a64Verdict is the outcome of one comparison.
type a64Verdict uint8

const (
	a64Completed a64Verdict = iota
	a64Faulted
	a64Mismatch
	a64Skip // not compared
)

// ARM64Mismatch is a disagreement between the emulator (or a relocated
// copy) and the oracle.
type ARM64Mismatch struct {
	// Kind is "emulate" or "xol".
	Kind  string
	Class string
	// Case is what the oracle ran (for xol, the original at its address).
	Case ARM64Case
	// Text is the instruction(s), Want what the emulator or relocated copy
	// gave, Got what the oracle gave, Diff the differences.
	Text, Want, Got, Diff string
	// Seed regenerates the case: the campaign's seed and the case index.
	Seed  uint64
	Index int
}

// String describes the mismatch on several lines.
func (m *ARM64Mismatch) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s mismatch (class %s, seed %#x, case %d): %s\n", m.Kind, m.Class, m.Seed, m.Index, m.Text)
	fmt.Fprintf(&b, "  code:")
	for _, p := range m.Case.Code {
		fmt.Fprintf(&b, " %#x:%08x", p.Addr, p.Word)
	}
	fmt.Fprintf(&b, "\n  start:\n%s\n  differences: %s\n  expected: %s\n  oracle:   %s", a64Indent(m.Case.State.String()), m.Diff, m.Want, m.Got)
	return b.String()
}

func a64Indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

// a64EmuItem is one generated case with the emulator's answer.
type a64EmuItem struct {
	c     ARM64Case
	class string
	index int
	inst  decode.ARM64Inst
	st    emulate.ARM64State // the emulator's final state
	fault *emulate.Fault
	mem   []ARM64MemWord
}

// arm64Emulator is the emulator as the campaigns configure it.
var arm64Emulator = emulate.ARM64{NoPAuth: true}

// Run runs the campaign on r. It returns an error only when the oracle
// fails; mismatches are counted and given to OnMismatch.
func (c *ARM64EmuCampaign) Run(r ARM64Runner) (*ARM64Report, error) {
	size := c.BatchSize
	if size <= 0 {
		size = 2048
	}
	rep := newARM64Report()
	start := time.Now()
	defer rep.finish(start)
	hbc, err := a64OracleHasHBC(r)
	if err != nil {
		return rep, err
	}
	g := newA64Gen(c.Seed, c.Class)
	img := r.Image()
	gen := func(idx int, cases []ARM64Case) (a64EmuItem, []ARM64Case, bool) {
		tc, class := g.emuCase(c.Class)
		it, skip := a64Emulate(tc, class, idx, img)
		if skip != "" {
			if strings.HasPrefix(skip, "refused: ") {
				rep.Refused[strings.TrimPrefix(skip, "refused: ")]++
			} else {
				rep.Skipped[skip]++
			}
			return it, cases, false
		}
		if !hbc && it.inst.HasCond && it.inst.Word&0x10 != 0 {
			rep.Skipped["bc.cond: the oracle's CPU lacks FEAT_HBC"]++
			return it, cases, false
		}
		return it, append(cases, tc), true
	}
	check := func(it *a64EmuItem, i int, out []ARM64Result) (string, a64Verdict, string, *ARM64Mismatch) {
		v, why := checkA64Emu(it, &out[i])
		var m *ARM64Mismatch
		if v == a64Mismatch {
			m = &ARM64Mismatch{Kind: "emulate", Class: it.class, Case: it.c, Text: it.inst.Text(),
				Want: a64EmuWant(it), Got: a64ResultText(&out[i]), Diff: why, Seed: c.Seed, Index: it.index}
		}
		return it.class, v, why, m
	}
	return rep, a64Batches(r, c.Cases, size, rep, gen, check, c.OnMismatch, c.Progress)
}

// a64Batches runs the n items of a campaign in batches of at most size
// items: gen makes item idx and appends the oracle cases it needs (false
// when it is not run: refused or skipped, counted by gen); check judges
// item it, the i-th of its batch, from the batch's results, giving its
// class, the verdict, why, and the mismatch when there is one. Verdicts
// are counted in rep; a mismatch goes to onMismatch (when set), which
// stops the campaign by returning false; progress (when set) is called
// after each batch with the items generated so far.
func a64Batches[I any](r ARM64Runner, n, size int, rep *ARM64Report,
	gen func(idx int, cases []ARM64Case) (I, []ARM64Case, bool),
	check func(it *I, i int, out []ARM64Result) (string, a64Verdict, string, *ARM64Mismatch),
	onMismatch func(*ARM64Mismatch) bool, progress func(done int)) error {
	var items []I
	var cases []ARM64Case
	var out []ARM64Result
	for done := 0; done < n; {
		items, cases = items[:0], cases[:0]
		for len(items) < size && done < n {
			rep.Generated++
			it, more, ok := gen(done, cases)
			done++
			if ok {
				items, cases = append(items, it), more
			}
		}
		if len(cases) == 0 {
			continue
		}
		if cap(out) < len(cases) {
			out = make([]ARM64Result, len(cases))
		}
		out = out[:len(cases)]
		if err := r.Run(cases, out); err != nil {
			return err
		}
		for i := range items {
			class, v, why, m := check(&items[i], i, out)
			if v == a64Skip {
				rep.Skipped[why]++
				continue
			}
			rep.count(class, v)
			if m != nil && onMismatch != nil && !onMismatch(m) {
				return nil
			}
		}
		if progress != nil {
			progress(done)
		}
	}
	return nil
}

// a64Emulate runs the emulator on a generated case. skip is non-empty when
// the case is not to be compared ("refused: reason" for an instruction
// outside the emulated set).
func a64Emulate(tc ARM64Case, class string, idx int, img *ARM64Image) (a64EmuItem, string) {
	it := a64EmuItem{c: tc, class: class, index: idx}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], tc.Code[0].Word)
	inst, err := decode.DecodeARM64(b[:], tc.State.PC)
	if err != nil {
		return it, "refused: undecodable"
	}
	it.inst = inst
	if err := arm64Emulator.Supported(&inst); err != nil {
		return it, "refused: " + a64RefusalKey(err)
	}
	st := tc.State
	m := newArm64Model(img, tc.Code)
	err = arm64Emulator.Step(&inst, &st, m)
	var f *emulate.Fault
	switch {
	case err == nil:
		if st.PC == tc.State.PC {
			return it, "branch to itself"
		}
		it.st, it.mem = st, m.writes()
	case errors.As(err, &f):
		it.fault, it.st = f, tc.State
	case errors.Is(err, emulate.ErrNotEmulated):
		return it, "state not emulated: " + a64RefusalKey(err)
	default:
		return it, "emulator error: " + err.Error()
	}
	return it, ""
}

// a64RefusalKey shortens a refusal to its reason, without the mnemonic
// and the addresses, for counting.
func a64RefusalKey(err error) string {
	s := err.Error()
	s = strings.TrimSuffix(s, ": "+emulate.ErrNotEmulated.Error())
	if i := strings.Index(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	if i := strings.Index(s, "0x"); i >= 0 {
		if j := strings.Index(s[i:], " "); j >= 0 {
			s = s[:i] + "..." + s[i+j:]
		} else {
			s = s[:i] + "..."
		}
	}
	return s
}

// a64OracleHasHBC runs bc.al to learn whether the oracle's CPU has
// FEAT_HBC.
func a64OracleHasHBC(r ARM64Runner) (bool, error) {
	pc := uint64(ARM64CodeAddr + 0x100)
	c := []ARM64Case{{State: emulate.ARM64State{PC: pc, SP: ARM64RWAddr + 0x1000}, Code: []ARM64Patch{{pc, 0x5400005E}}}}
	out := make([]ARM64Result, 1)
	if err := r.Run(c, out); err != nil {
		return false, err
	}
	return out[0].Signo != sigILL, nil
}

// a64HostCanonical says whether qemu reports faults at address a exactly:
// beyond 47 bits the x86-64 host raises a general-protection fault, whose
// signal carries no address.
func a64HostCanonical(a uint64) bool { return a < 1<<47 }

// checkA64Emu compares the emulator's answer with the oracle's.
func checkA64Emu(it *a64EmuItem, q *ARM64Result) (a64Verdict, string) {
	if q.Signo == sigVTALRM {
		return a64Skip, "oracle timed out"
	}
	var diffs []string
	if it.fault == nil {
		switch q.Signo {
		case sigTRAP, sigSEGV, sigBUS, sigILL:
			if q.Addr != q.State.PC && a64HostCanonical(q.State.PC) {
				diffs = append(diffs, fmt.Sprintf("signal %d at %#x, not at the pc", q.Signo, q.Addr))
			}
		default:
			diffs = append(diffs, fmt.Sprintf("signal %d", q.Signo))
		}
	} else {
		if q.Signo != sigSEGV {
			diffs = append(diffs, fmt.Sprintf("signal %d, expected SIGSEGV", q.Signo))
		}
		if q.Addr != it.fault.Addr && a64HostCanonical(it.fault.Addr) {
			diffs = append(diffs, fmt.Sprintf("fault address %#x, expected %#x", q.Addr, it.fault.Addr))
		}
	}
	// A load that faults leaves its destination registers UNKNOWN (qemu
	// writes the first register of an ldp of q registers before the second
	// faults); the emulator leaves them unchanged.
	var skip decode.RegSet
	var skipV uint32
	if in := &it.inst; it.fault != nil && in.Load && !in.Store {
		for _, r := range []decode.ARM64Reg{in.Rt, in.Rt2} {
			switch {
			case in.Vec && r >= 0 && r <= 31:
				skipV |= 1 << uint(r)
			case !in.Vec && r >= 0 && r <= 30:
				skip = skip.Add(int(r))
			}
		}
	}
	diffs = append(diffs, a64StateDiff(&it.st, &q.State, it.c.Vec, skip, skipV)...)
	if it.fault == nil {
		if d := a64WritesDiff(it.mem, q); d != "" {
			diffs = append(diffs, d)
		}
	}
	if len(diffs) > 0 {
		return a64Mismatch, strings.Join(diffs, "; ")
	}
	if it.fault != nil {
		return a64Faulted, ""
	}
	return a64Completed, ""
}

// a64StateDiff lists the differences between two register files, ignoring
// the general-purpose registers in skip and the FP/SIMD registers in
// skipV.
func a64StateDiff(want, got *emulate.ARM64State, vec bool, skip decode.RegSet, skipV uint32) []string {
	var d []string
	for i := range want.X {
		if want.X[i] != got.X[i] && !skip.Has(i) {
			d = append(d, fmt.Sprintf("x%d %#x, expected %#x", i, got.X[i], want.X[i]))
		}
	}
	if want.SP != got.SP {
		d = append(d, fmt.Sprintf("sp %#x, expected %#x", got.SP, want.SP))
	}
	if want.PC != got.PC {
		d = append(d, fmt.Sprintf("pc %#x, expected %#x", got.PC, want.PC))
	}
	if want.NZCV&emulate.NZCVMask != got.NZCV&emulate.NZCVMask {
		d = append(d, fmt.Sprintf("nzcv %#x, expected %#x", got.NZCV>>28, want.NZCV>>28))
	}
	if vec {
		for i := range want.V {
			if want.V[i] != got.V[i] && skipV>>uint(i)&1 == 0 {
				d = append(d, fmt.Sprintf("v%d %#x:%016x, expected %#x:%016x", i, got.V[i][1], got.V[i][0], want.V[i][1], want.V[i][0]))
			}
		}
	}
	return d
}

// a64WritesDiff compares memory writes.
func a64WritesDiff(want []ARM64MemWord, q *ARM64Result) string {
	same := q.NWrites == len(want) && len(q.Writes) == len(want)
	for i := 0; same && i < len(want); i++ {
		same = want[i] == q.Writes[i]
	}
	if same {
		return ""
	}
	return fmt.Sprintf("memory %s, expected %s", a64WordsText(q.Writes), a64WordsText(want))
}

func a64WordsText(w []ARM64MemWord) string {
	if len(w) == 0 {
		return "unchanged"
	}
	var parts []string
	for _, x := range w {
		parts = append(parts, fmt.Sprintf("[%#x]=%#x", x.Addr, x.Val))
	}
	return strings.Join(parts, " ")
}

// a64EmuWant renders the emulator's answer.
func a64EmuWant(it *a64EmuItem) string {
	if it.fault != nil {
		return "fault: " + it.fault.Error()
	}
	return fmt.Sprintf("pc=%#x nzcv=%#x memory %s", it.st.PC, it.st.NZCV>>28, a64WordsText(it.mem))
}

// a64ResultText renders the oracle's answer.
func a64ResultText(q *ARM64Result) string {
	return fmt.Sprintf("signal %d code %d addr %#x pc=%#x nzcv=%#x memory %s", q.Signo, q.Code, q.Addr, q.State.PC, q.State.NZCV>>28, a64WordsText(q.Writes))
}
