package x86cpu

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/xol"
)

// XOLX86Mismatch is a disagreement between an instruction and its
// relocated copy (or between the relocator and the eligibility check).
type XOLX86Mismatch struct {
	Case XOLX86Case
	// Text is the original instruction, Copy the copy's description and
	// bytes.
	Text, Copy string
	// Run is the run that disagreed: "step" (single step and Fixup),
	// "boost" (the boost entry run to the end of the copy), or "relocate"
	// (the relocation itself failed).
	Run string
	// Reason says what differs; Want and Got are the two states.
	Reason, Want, Got string
}

// String renders the mismatch with a line to add to the regression vectors.
func (m *XOLX86Mismatch) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "xol mismatch (%s, %s run): % x  %s\n", m.Case.Class, m.Run, m.Case.Bytes, m.Text)
	fmt.Fprintf(&s, "  %s\n", m.Copy)
	fmt.Fprintf(&s, "  %s\n", m.Reason)
	if m.Want != "" || m.Got != "" {
		fmt.Fprintf(&s, "  want: %s\n  got:  %s\n", m.Want, m.Got)
	}
	fmt.Fprintf(&s, "  vector: %s", m.Case.Vector())
	return s.String()
}

// xoPrepared is a case ready to run: decoded, relocated, its runs laid out.
type xoPrepared struct {
	c       XOLX86Case
	inst    decode.X86Inst
	cp      *xol.X86Copy
	refused string // refusal code when the relocator refused
	bad     *XOLX86Mismatch
	run     [3]int // original, copy step, boost: indices into the runs, -1 none
	// canonicalOnly is set when the runner cannot resume a thread whose
	// rsp is not canonical (HostEntersNoncanonicalRSP); unboosted is set
	// by compare when the boost run could not be compared for that
	// reason.
	canonicalOnly, unboosted bool
}

// prepareXOL decodes and relocates case c, places its bytes in img and
// appends its runs. A refusal is recorded (the case is not run); a refusal
// CheckX86 does not make, or a relocation error, is a mismatch.
func prepareXOL(c *XOLX86Case, dec decode.X86Decoder, img *XOLX86Image, runs []XOLX86Run) (*xoPrepared, []XOLX86Run) {
	p := &xoPrepared{c: *c, run: [3]int{-1, -1, -1}}
	if err := dec.Decode(c.Bytes, c.Regs.RIP, &p.inst); err != nil || p.inst.Len != len(c.Bytes) {
		p.refused = "undecodable"
		return p, runs
	}
	check, checkErr := xol.CheckX86(&p.inst)
	cp, err := xol.RelocateX86(&p.inst, c.Slot, &c.Opts)
	var re *xol.RefusalError
	switch {
	case err == nil:
	case errors.As(err, &re):
		// The relocator may refuse only what CheckX86 refuses, or an
		// operand out of reach without a free scratch register.
		if checkErr == nil && (re.Code != xol.RefuseRIPRelNoScratch || check.Scratch >= 0) {
			p.bad = p.mismatch("relocate", fmt.Sprintf("CheckX86 accepts (%s) but RelocateX86 refuses: %v", check, err), "", "")
		}
		p.refused = string(re.Code)
		return p, runs
	default:
		p.bad = p.mismatch("relocate", fmt.Sprintf("RelocateX86: %v", err), "", "")
		return p, runs
	}
	if checkErr != nil {
		p.bad = p.mismatch("relocate", fmt.Sprintf("CheckX86 refuses (%v) but RelocateX86 relocates", checkErr), "", "")
		return p, runs
	}
	p.cp = cp
	if err := xoPlace(img, c.Regs.RIP, c.Bytes); err != nil {
		p.bad = p.mismatch("relocate", err.Error(), "", "")
		return p, runs
	}
	if err := xoPlace(img, c.Slot, cp.Code); err != nil {
		p.bad = p.mismatch("relocate", err.Error(), "", "")
		return p, runs
	}
	ranged := c.Class == "rep" && check.Rep
	orig := XOLX86Run{Regs: c.Regs}
	if ranged {
		orig.Lo, orig.Hi = c.Regs.RIP, c.Regs.RIP+1
	}
	step := XOLX86Run{Regs: c.Regs}
	if err := cp.Enter(&step.Regs); err != nil {
		p.bad = p.mismatch("relocate", err.Error(), "", "")
		return p, runs
	}
	if ranged {
		step.Lo, step.Hi = cp.Slot, cp.Slot+1
	}
	p.run[0], p.run[1] = len(runs), len(runs)+1
	runs = append(runs, orig, step)
	if cp.Boost && (!check.Rep || ranged) {
		boost := XOLX86Run{Regs: c.Regs, Lo: cp.Slot, Hi: cp.Slot + uint64(len(cp.Code))}
		if err := cp.BoostEnter(&boost.Regs); err == nil {
			p.run[2] = len(runs)
			runs = append(runs, boost)
		}
	}
	return p, runs
}

// xoPlace copies b into the code window holding addr.
func xoPlace(img *XOLX86Image, addr uint64, b []byte) error {
	for w, base := range XOLX86Windows {
		if addr >= base && addr+uint64(len(b)) <= base+XOLX86WindowSize {
			copy(img.Code[w][addr-base:], b)
			return nil
		}
	}
	return fmt.Errorf("%d bytes at %#x are outside the code windows", len(b), addr)
}

func (p *xoPrepared) mismatch(run, reason, want, got string) *XOLX86Mismatch {
	m := &XOLX86Mismatch{Case: p.c, Run: run, Reason: reason, Want: want, Got: got, Text: p.inst.Text("gnu")}
	if p.cp != nil {
		m.Copy = fmt.Sprintf("%s: % x", p.cp, p.cp.Code)
	} else {
		m.Copy = fmt.Sprintf("slot %#x", p.c.Slot)
	}
	return m
}

// xoCompleted reports a run that ended with the single-step trap: SIGTRAP
// from the debug exception (see buildXOLHarness for why not its si_code).
func xoCompleted(r *XOLX86Result) bool { return r.Signal == xoSigTrap && r.Trap == xoTrapDB }

// xoMem is the read-write window as a run left it (the image's content
// with the run's changed quadwords), for Fixup.
type xoMem struct {
	base  []byte
	words map[uint64]uint64
}

func newXOMem(img *XOLX86Image, writes []XOLX86Word) *xoMem {
	m := &xoMem{base: img.RW[:], words: map[uint64]uint64{}}
	for _, w := range writes {
		m.words[w.Addr] = w.Val
	}
	return m
}

var errXOMem = errors.New("outside the read-write window")

func (m *xoMem) word(q uint64) uint64 {
	if v, ok := m.words[q]; ok {
		return v
	}
	return binary.LittleEndian.Uint64(m.base[q-XOLX86RWAddr:])
}

func (m *xoMem) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		a := uint64(off) + uint64(i)
		if a < XOLX86RWAddr || a >= XOLX86RWAddr+XOLX86RWSize {
			return i, fmt.Errorf("read %#x: %w", a, errXOMem)
		}
		p[i] = byte(m.word(a&^7) >> (8 * (a & 7)))
	}
	return len(p), nil
}

func (m *xoMem) WriteAt(p []byte, off int64) (int, error) {
	for i := range p {
		a := uint64(off) + uint64(i)
		if a < XOLX86RWAddr || a >= XOLX86RWAddr+XOLX86RWSize {
			return i, fmt.Errorf("write %#x: %w", a, errXOMem)
		}
		q, sh := a&^7, 8*(a&7)
		m.words[q] = m.word(q)&^(0xFF<<sh) | uint64(p[i])<<sh
	}
	return len(p), nil
}

// diff returns the quadwords that differ from the image, by address.
func (m *xoMem) diff() []XOLX86Word {
	var out []XOLX86Word
	for q, v := range m.words {
		if v != binary.LittleEndian.Uint64(m.base[q-XOLX86RWAddr:]) {
			out = append(out, XOLX86Word{q, v})
		}
	}
	slices.SortFunc(out, func(a, b XOLX86Word) int { return cmp.Compare(a.Addr, b.Addr) })
	return out
}

// xoState is a run's outcome in comparable form.
type xoState struct {
	signal, code, trap int
	addr, errCode      uint64
	regs               xol.X86Regs
	writes             []XOLX86Word
	lost               bool
	fp                 []byte
}

func (s *xoState) String() string {
	var b strings.Builder
	if xoCompletedState(s) {
		b.WriteString("completed")
	} else {
		fmt.Fprintf(&b, "signal %d code %d trap %d err %#x addr %#x", s.signal, s.code, s.trap, s.errCode, s.addr)
	}
	fmt.Fprintf(&b, "; rip %#x rflags %#x", s.regs.RIP, s.regs.RFLAGS)
	for i, v := range s.regs.GPR {
		fmt.Fprintf(&b, " %s=%#x", decode.X86RegName(i), v)
	}
	b.WriteString("; writes")
	for _, w := range s.writes {
		fmt.Fprintf(&b, " %#x:%#x", w.Addr, w.Val)
	}
	if len(s.writes) == 0 {
		b.WriteString(" none")
	}
	return b.String()
}

func xoCompletedState(s *xoState) bool { return s.signal == xoSigTrap && s.trap == xoTrapDB }

func xoStateOf(r *XOLX86Result) xoState {
	return xoState{signal: r.Signal, code: r.Code, trap: r.Trap, addr: r.Addr, errCode: r.ErrCode,
		regs: r.Regs, writes: r.Writes, lost: r.WritesLost, fp: r.FP}
}

// expected is the original's outcome as a program running without the
// harness's trap flag would see it: TF as before (except as popf loaded
// it), and a pushf image with before's TF.
func (p *xoPrepared) expected(img *XOLX86Image, r0 *XOLX86Result) xoState {
	s := xoStateOf(r0)
	before := p.c.Regs.RFLAGS & 0x100
	done := xoCompleted(r0)
	if !done || !p.cp.Check.PopfTF {
		s.regs.RFLAGS = s.regs.RFLAGS&^0x100 | before
	}
	if done && p.cp.Check.PushfTF {
		m := newXOMem(img, r0.Writes)
		var b [1]byte
		sp := r0.Regs.GPR[decode.RSP]
		if _, err := m.ReadAt(b[:], int64(sp+1)); err == nil {
			b[0] = b[0]&^1 | byte(before>>8)
			_, _ = m.WriteAt(b[:], int64(sp+1))
			s.writes = m.diff()
		}
	}
	return s
}

// compareXOL compares the runs of a prepared case. It returns nil when
// they agree.
func (p *xoPrepared) compare(img *XOLX86Image, res []XOLX86Result) *XOLX86Mismatch {
	r0 := &res[p.run[0]]
	want := p.expected(img, r0)
	before := p.c.Regs
	// Single step.
	r1 := &res[p.run[1]]
	got := xoStateOf(r1)
	if xoCompleted(r1) {
		m := newXOMem(img, r1.Writes)
		out, err := p.cp.Fixup(&before, &got.regs, m)
		if err != nil {
			return p.mismatch("step", fmt.Sprintf("Fixup: %v", err), want.String(), got.String())
		}
		if out == xol.X86StepAgain {
			// A REP string instruction between iterations: as the
			// original, on it, with the program's trap flag.
			got.regs.RIP = p.c.Regs.RIP
			got.regs.RFLAGS = got.regs.RFLAGS&^0x100 | before.RFLAGS&0x100
		}
		got.writes = m.diff()
	} else {
		m := newXOMem(img, r1.Writes)
		ok, err := p.cp.FixupSignal(&before, &got.regs, m)
		if err != nil {
			return p.mismatch("step", fmt.Sprintf("FixupSignal: %v", err), want.String(), got.String())
		}
		if !ok {
			return p.mismatch("step", fmt.Sprintf("signal %d at %#x, not at the copy's entry", r1.Signal, r1.Regs.RIP), want.String(), got.String())
		}
		got.writes = m.diff()
	}
	if why := p.differ(&want, &got); why != "" {
		return p.mismatch("step", why, want.String(), got.String())
	}
	if p.run[2] < 0 {
		return nil
	}
	if p.canonicalOnly && xoCompleted(r0) && !canonical48(r0.Regs.GPR[decode.RSP]) {
		// The boost run goes on after the instruction, so the thread
		// would resume with a non-canonical rsp: this host cannot.
		p.unboosted = true
		return nil
	}
	// Boost: run to the end of the copy; completed runs compare as they
	// are (the harness's trap flag on both sides).
	r2 := &res[p.run[2]]
	got = xoStateOf(r2)
	if xoCompleted(r2) {
		if in := r2.Regs.RIP - p.cp.Slot; in < uint64(len(p.cp.Code)) {
			return p.mismatch("boost", fmt.Sprintf("still in the copy after %d steps", r2.Steps), "", got.String())
		}
		raw := xoStateOf(r0)
		if why := p.differ(&raw, &got); why != "" {
			return p.mismatch("boost", why, raw.String(), got.String())
		}
		return nil
	}
	m := newXOMem(img, r2.Writes)
	if ok, err := p.cp.FixupSignal(&before, &got.regs, m); err != nil || !ok {
		return p.mismatch("boost", fmt.Sprintf("signal %d at %#x, not at the copy's entry (%v)", r2.Signal, r2.Regs.RIP, err), want.String(), got.String())
	}
	got.writes = m.diff()
	if why := p.differ(&want, &got); why != "" {
		return p.mismatch("boost", why, want.String(), got.String())
	}
	return nil
}

// differ says how got differs from want, or "".
func (p *xoPrepared) differ(want, got *xoState) string {
	wd, gd := xoCompletedState(want), xoCompletedState(got)
	switch {
	case wd != gd:
		if wd {
			return fmt.Sprintf("the original completed, the copy got signal %d (trap %d, code %d, addr %#x)", got.signal, got.trap, got.code, got.addr)
		}
		return fmt.Sprintf("the original got signal %d (trap %d, code %d, addr %#x), the copy completed", want.signal, want.trap, want.code, want.addr)
	case wd:
		// A step's si_code (and si_addr) are not compared: see
		// buildXOLHarness.
	default:
		ga := got.addr
		if o, ok := p.cp.OrigIP(ga); ok && ga != want.addr {
			ga = o
		}
		if want.signal != got.signal || want.code != got.code || want.trap != got.trap || want.errCode != got.errCode || want.addr != ga {
			return fmt.Sprintf("signal %d/%d trap %d err %#x addr %#x, want %d/%d trap %d err %#x addr %#x",
				got.signal, got.code, got.trap, got.errCode, ga, want.signal, want.code, want.trap, want.errCode, want.addr)
		}
	}
	if want.regs.RIP != got.regs.RIP {
		return fmt.Sprintf("rip %#x, want %#x", got.regs.RIP, want.regs.RIP)
	}
	if want.regs.RFLAGS != got.regs.RFLAGS {
		return fmt.Sprintf("rflags %#x, want %#x", got.regs.RFLAGS, want.regs.RFLAGS)
	}
	for i := range want.regs.GPR {
		if want.regs.GPR[i] != got.regs.GPR[i] {
			return fmt.Sprintf("%s %#x, want %#x", decode.X86RegName(i), got.regs.GPR[i], want.regs.GPR[i])
		}
	}
	if !slices.Equal(want.writes, got.writes) {
		return "memory written differs"
	}
	if want.lost != got.lost {
		return "more memory written on one side than recorded"
	}
	if len(want.fp) != len(got.fp) {
		return "vector state sizes differ"
	}
	for i := range want.fp {
		if want.fp[i] != got.fp[i] && !xoFPIgnore(i) {
			return fmt.Sprintf("vector state differs at byte %d of the XSAVE image (%#x, want %#x)", i, got.fp[i], want.fp[i])
		}
	}
	return ""
}
