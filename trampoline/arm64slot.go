package trampoline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/xol"
)

// ARM64Options tune the arm64 slot generator. A nil *ARM64Options means
// the zero value.
type ARM64Options struct {
	// LSE makes counters use stadd (FEAT_LSE, Armv8.1: the kernel reports
	// HWCAP_ATOMICS) instead of a ldxr/stxr loop. Both are exact under any
	// concurrency; stadd is one instruction and never retries.
	LSE bool
	// ScratchFree says x16 and x17 are dead at the site, as they are at a
	// function entry by the procedure call standard (AAPCS64 lets veneers
	// and PLT stubs overwrite them between a call and its target). Only
	// then may the slot jump back, or relocate a branch, through x16 or
	// x17 (ldr literal; br) when the target is beyond the +-128 MiB of a
	// b; otherwise such a slot fails with ErrOutOfReach and the area must
	// be placed nearer (see MaxReachARM64).
	ScratchFree bool
	// BTIGuarded says the probed text is mapped with PROT_BTI: jumps
	// through a register must land on a landing pad, so the slot never
	// reaches the original code by br, and a displaced blr becomes a jump
	// through x16/x17 (which needs ScratchFree).
	BTIGuarded bool
}

// a64Gen generates one arm64 slot.
type a64Gen struct {
	e     *a64Emitter
	cfg   *Config
	opt   ARM64Options
	regs  []a64Reg // saved registers, x16 and x17 first
	frame int64    // bytes the frame takes below the original sp
	cold  []func() // slow paths, emitted after the hot path (emitCold)
}

// prologue saves regs in a frame below the stack pointer. There is no red
// zone on arm64 (AAPCS64: no access below sp), and the stack pointer is
// 16-byte aligned wherever the probed code can be, since Linux enables
// the stack alignment check for user mode (SCTLR_EL1.SA0): the frame
// keeps it aligned.
func (g *a64Gen) prologue(regs []a64Reg) {
	g.regs = regs
	g.frame = int64(8*len(regs)+15) &^ 15
	e := g.e
	e.stpPre(regs[0], regs[1], a64SP, -g.frame)
	g.eachSaved(e.stp, e.str)
}

func (g *a64Gen) epilogue() {
	e := g.e
	g.eachSaved(e.ldp, e.ldr)
	e.ldpPost(g.regs[0], g.regs[1], a64SP, g.frame)
}

// eachSaved calls pair for every two saved registers after the first two
// (which the pre- and post-indexed pair moves), and single for a last odd
// one, with the base sp and their offset in the frame.
func (g *a64Gen) eachSaved(pair func(a, b, base a64Reg, off int64), single func(r, base a64Reg, off int64)) {
	rest := g.regs[2:]
	for i := 0; i < len(rest); i += 2 {
		off := int64(16 + 8*i)
		if i+1 < len(rest) {
			pair(rest[i], rest[i+1], a64SP, off)
		} else {
			single(rest[i], a64SP, off)
		}
	}
}

// increment adds 1 to the 64-bit word at the address in x16. It clobbers
// x17 and (without LSE) x15, never the flags.
func (g *a64Gen) increment() { g.incAt(a64X16) }

// incAt adds 1 to the 64-bit word at the address in register r: one
// stadd with LSE, else a ldxr/stxr loop. It clobbers x17 and (without
// LSE) x15, never the flags.
func (g *a64Gen) incAt(r uint32) {
	e := g.e
	if g.opt.LSE {
		e.movImm(a64X17, 1)
		e.stadd(a64X17, r)
		return
	}
	loop := e.newLabel()
	e.bind(loop)
	e.ldxr(a64X17, r)
	e.addImm(a64X17, a64X17, 1)
	e.stxr(a64X15, a64X17, r)
	e.cbnzW(a64X15, loop)
}

// event records an entry event in the shared ring (see data.go for the
// ring protocol); a drop also counts in the shared stripe's drops word of
// counter dropCtr when that counter is a per-thread one. It clobbers
// x13-x17, never the flags: the ring test is a shift and cbnz.
func (g *a64Gen) event(id uint32, ip uint64, dropCtr int) {
	e := g.e
	d := g.cfg.Data
	log := uint32(bits.TrailingZeros(uint(d.RingRecords)))
	full, done := e.newLabel(), e.newLabel()
	e.addr(a64X16, d.RingAddr())
	// The load-acquire of the tail pairs with the consumer's store of it:
	// its reads of a record come before this producer's writes into the
	// record.
	g.reserve(a64X16, func() {
		e.addImm(a64X14, a64X16, ringTail)
		e.ldar(a64X14, a64X14)
	}, log, full)
	// x17 = sequence number, x14 = commit value; x13 = the record.
	if log > 0 {
		e.ubfiz(a64X13, a64X17, recordLog, log)
		e.addReg(a64X13, a64X16, a64X13)
		e.addImm(a64X13, a64X13, ringRecords)
	} else {
		e.addImm(a64X13, a64X16, ringRecords)
	}
	e.stp(0, 1, a64X13, recArgs)
	e.stp(2, 3, a64X13, recArgs+16)
	e.stp(4, 5, a64X13, recArgs+32)
	e.movImm(a64X15, uint64(EventEntry)<<32|uint64(id))
	e.str(a64X15, a64X13, recProbe)
	e.stp(a64ZR, a64ZR, a64X13, recRet)
	e.addImm(a64X15, a64SP, uint32(g.frame))
	e.str(a64X15, a64X13, recSP)
	e.movImm(a64X15, ip)
	e.str(a64X15, a64X13, recIP)
	e.mrsTPIDR(a64X15)
	e.str(a64X15, a64X13, recThread)
	g.timestamp(a64X15)
	e.str(a64X15, a64X13, recTime)
	// Publish: the store-release orders the record's stores before it.
	e.stlr(a64X14, a64X13)
	e.bL(done)
	e.bind(full)
	e.clrex()
	e.addImm(a64X16, a64X16, ringDropped)
	g.increment()
	if d.perThread(dropCtr) {
		e.addr(a64X16, d.Addr+d.stripesOff()+stripeData+8*uint64(d.ThreadCounters+dropCtr))
		g.increment()
	}
	e.bind(done)
}

// reserve takes the next sequence number s of a ring whose head word is
// at the address in head and that holds 1<<log records: it runs tail,
// which loads the tail (or a copy of it) into x14, loads the head into x17
// exclusively, branches to full when 1<<log records are in use, and
// otherwise stores s+1 to the head (a cas with LSE, else a stxr), again
// from the tail's load until the store succeeds. It leaves s in x17 and s+1 in x14, clobbers x15 and
// returns the label of the tail's load (a slow path that makes room
// branches back there). The tail is read before the load-exclusive: no
// other memory access between ldxr and stxr (the condition of the
// architecture's forward progress guarantee); a stale tail is smaller, so
// the test is only more cautious.
func (g *a64Gen) reserve(head a64Reg, tail func(), log uint32, full a64Label) (retry a64Label) {
	e := g.e
	retry = e.newLabel()
	e.bind(retry)
	tail()
	if g.opt.LSE {
		e.ldr(a64X17, head, 0)
	} else {
		e.ldxr(a64X17, head)
	}
	e.subReg(a64X14, a64X17, a64X14)
	if log > 0 {
		e.lsr(a64X14, a64X14, log)
	}
	e.cbnzX(a64X14, full)
	e.addImm(a64X14, a64X17, 1)
	if g.opt.LSE {
		// One cas: a thread the engine single-steps out of a slot gets
		// through it, where a step between ldxr and stxr makes the stxr
		// fail every time.
		e.movReg(a64X15, a64X17)
		e.cas(a64X15, a64X14, head, false)
		e.subReg(a64X15, a64X15, a64X17)
		e.cbnzX(a64X15, retry)
		return retry
	}
	e.stxr(a64X15, a64X14, head)
	e.cbnzW(a64X15, retry)
	return retry
}

// back jumps to the resume address t: b, or through x16 when allowed.
func (g *a64Gen) back(t uint64) error {
	if g.e.bTo(t) {
		return nil
	}
	if !g.opt.ScratchFree || g.opt.BTIGuarded {
		return fmt.Errorf("jump back from %#x to %#x: %w", g.e.pc(), t, ErrOutOfReach)
	}
	g.e.farTo(a64X16, t)
	return nil
}

// displaced appends the relocated instruction and the jump back (or just
// the jump back for a NOP site). It returns the offset of the jump back.
func (g *a64Gen) displaced(s *SiteARM64) (int, error) {
	e := g.e
	if s.Kind != SiteDetour {
		end := 4 * len(e.words)
		return end, g.back(s.Resume())
	}
	in := &s.Inst
	pc := e.pc()
	if in.Class == decode.ARM64ClassLiteral && in.Mnemonic != "prfm" && (in.Vec || in.Rt == decode.ARM64ZR) {
		if off := int64(in.Target - pc); off < -(1<<20) || off >= 1<<20 {
			// A literal beyond reach that xol would load through a
			// scratch register (FP/SIMD, or into the zero register,
			// where only the access matters): load it through x16,
			// saved around the load.
			e.strPre(a64X16, a64SP, -16)
			e.movImm(a64X16, in.Target)
			e.ldrLike(in.Word, a64X16)
			e.ldrPost(a64X16, a64SP, 16)
			end := 4 * len(e.words)
			return end, g.back(s.Resume())
		}
	}
	var word [4]byte
	binary.LittleEndian.PutUint32(word[:], s.Old)
	rel, err := xol.RelocateARM64(word[:], s.PatchAddr, pc, &xol.ARM64RelocOptions{
		Return: true, NoScratch: !g.opt.ScratchFree, BTIGuarded: g.opt.BTIGuarded, Live: true,
	})
	if err != nil {
		var re *xol.RefusalError
		if errors.As(err, &re) && (re.Code == xol.RefuseNoScratch || re.Code == xol.RefuseBTI) {
			return 0, fmt.Errorf("the %s at %#x from the slot at %#x: %w: %w", in.Text(), s.PatchAddr, pc, ErrOutOfReach, err)
		}
		return 0, siteErr(s.Addr, RefuseNotRelocatable, err, "relocating the %s at %#x to %#x failed", in.Text(), s.PatchAddr, pc)
	}
	// Literal words: the last two of a far jump (ldr; br; literal), in a
	// relocated instruction or in the jump back.
	lit := map[int]bool{}
	for _, ri := range rel.Insts {
		if ri.Form == xol.ARM64FormFar {
			n := (ri.Off + ri.Len) / 4
			lit[n-1], lit[n-2] = true, true
		}
	}
	if len(rel.Code)-rel.End == 16 {
		n := len(rel.Code) / 4
		lit[n-1], lit[n-2] = true, true
	}
	end := 4*len(e.words) + rel.End
	e.foreign(rel.Code, func(i int) bool { return lit[i] })
	if err := checkBack(rel.Code[rel.End:], pc+uint64(rel.End), s.Resume()); err != nil {
		return 0, err
	}
	return end, nil
}

// checkBack checks that code at pc jumps to t: b t, or ldr x16/x17, #8;
// br; t.
func checkBack(code []byte, pc, t uint64) error {
	inst, err := decode.DecodeARM64(code, pc)
	if err != nil {
		return fmt.Errorf("%w: the jump back at %#x: %v", ErrEncode, pc, err)
	}
	switch {
	case inst.Branch == decode.BranchJmp && inst.Target == t:
		return nil
	case inst.Class == decode.ARM64ClassLiteral && inst.Target == pc+8 && len(code) >= 16 &&
		binary.LittleEndian.Uint64(code[8:]) == t:
		return nil
	}
	return fmt.Errorf("%w: the jump back at %#x (%s) does not go to %#x", ErrEncode, pc, inst.Text(), t)
}

// a64Slot is a generated slot: its code and the offset of the jump back.
type a64Slot struct {
	code []byte
	back int
}

// GenerateARM64 generates the code of the arm64 slot at address slot for
// site s and handler h: it saves the registers the handler uses below the
// stack pointer, runs the handler (a counter, an event record: in the
// thread's stripe and ring when the counter is a per-thread one, see
// arm64thread.go), restores them, runs the displaced instruction
// relocated (package xol: branches
// re-targeted or inverted over a b, bl and blr with x30 set to the
// original return address, adr, adrp and literal loads materialized) and
// jumps back to s.Resume(). The probed code sees every register, NZCV and
// memory outside the data area as without the probe. Return probes,
// Unhijack and Rehijack are x86-64 only (ErrConfig). Most callers use
// Area.BuildARM64, which also allocates the slot and makes the patches.
func GenerateARM64(slot uint64, s *SiteARM64, h *Handler, cfg *Config, opts *ARM64Options) ([]byte, error) {
	g, err := generateARM64(slot, s, h, cfg, opts)
	if err != nil {
		return nil, err
	}
	return g.code, nil
}

func generateARM64(slot uint64, s *SiteARM64, h *Handler, cfg *Config, opts *ARM64Options) (*a64Slot, error) {
	if s == nil || h == nil {
		return nil, fmt.Errorf("no site or handler: %w", ErrConfig)
	}
	if slot%4 != 0 {
		return nil, fmt.Errorf("slot at %#x not 4-byte aligned: %w", slot, ErrConfig)
	}
	if h.Return != nil || h.Unhijack || h.Rehijack {
		return nil, fmt.Errorf("return probes on arm64: %w", ErrConfig)
	}
	if err := cfg.validate(h); err != nil {
		return nil, err
	}
	if _, err := arm64Jump(s.PatchAddr, slot); err != nil {
		return nil, err
	}
	g := &a64Gen{e: newA64Emitter(slot), cfg: cfg}
	if opts != nil {
		g.opt = *opts
	}
	if h.Count || h.Event {
		g.handler(s, h)
	}
	back, err := g.displaced(s)
	if err != nil {
		return nil, err
	}
	code, err := g.e.finish()
	if err != nil {
		return nil, err
	}
	return &a64Slot{code: code, back: back}, nil
}

// handler saves the registers, counts and records the hit of h and
// restores them: in the thread's stripe when h's counter has a word in
// each stripe (arm64thread.go), with the shared counter and ring as the
// path of a thread without one, or in the shared counter and ring alone.
func (g *a64Gen) handler(s *SiteARM64, h *Handler) {
	e, d := g.e, g.cfg.Data
	perThread := d != nil && d.perThread(h.Counter)
	threadCount := h.Count && perThread
	threadEvent := h.Event && perThread && d.ThreadRing > 0
	dropCtr := -1
	if perThread {
		dropCtr = h.Counter
	}
	regs := []a64Reg{a64X16, a64X17, a64X15}
	switch {
	case threadEvent:
		regs = append(regs, a64X14, a64X13, a64X12)
	case h.Event || threadCount:
		regs = append(regs, a64X14, a64X13)
	case g.opt.LSE:
		regs = regs[:2]
	}
	g.prologue(regs)
	shared := func() {
		if h.Count {
			e.addr(a64X16, d.CounterAddr(h.Counter))
			g.increment()
		}
		if h.Event {
			g.event(h.ID, s.Addr, dropCtr)
		}
	}
	if !threadCount && !threadEvent {
		shared()
	} else {
		noStripe, after := e.newLabel(), e.newLabel()
		g.stripeLookup(noStripe)
		if threadCount {
			g.threadCount(h.Counter)
		}
		if threadEvent {
			g.threadEvent(h.ID, h.Counter)
		} else if h.Event {
			g.event(h.ID, s.Addr, dropCtr)
		}
		e.bind(after)
		g.cold = append(g.cold, func() {
			e.bind(noStripe)
			shared()
			e.bL(after)
		})
	}
	g.emitCold()
	g.epilogue()
}

// arm64Jump returns the b from at to slot, little-endian.
func arm64Jump(at, slot uint64) ([]byte, error) {
	off := int64(slot - at)
	if !a64FitsB(off) {
		return nil, fmt.Errorf("b from %#x to the slot at %#x: %w", at, slot, ErrOutOfReach)
	}
	return binary.LittleEndian.AppendUint32(nil, 0x14000000|uint32(off>>2)&0x3FFFFFF), nil
}

// BuildARM64 allocates a slot for the arm64 site s, generates its code for
// handler h (see GenerateARM64) and makes the patches that enter it and
// restore the site: Install replaces the word at s.PatchAddr with a b to
// the slot, Remove puts the original word back with the slot as a guard
// range. The returned Trampoline's Site is nil (it describes x86-64
// sites); s is the site.
//
// The engine writes Code at Slot before it applies Install. A 4-byte
// aligned word store is single-copy atomic, so a thread sees the old or
// the new instruction, never a mix; the engine still applies the patch
// with every thread stopped, like the other patches of the batch. On
// hardware, new code must also be made visible to instruction fetch (see
// the package documentation, Memory).
func (a *Area) BuildARM64(s *SiteARM64, h *Handler, cfg *Config, opts *ARM64Options) (*Trampoline, error) {
	if s == nil || h == nil {
		return nil, fmt.Errorf("no site or handler: %w", ErrConfig)
	}
	slot, code, err := a.place(func(at uint64) ([]byte, error) { return GenerateARM64(at, s, h, cfg, opts) })
	if err != nil {
		return nil, err
	}
	jmp, err := arm64Jump(s.PatchAddr, slot)
	if err != nil {
		return nil, err
	}
	old := binary.LittleEndian.AppendUint32(nil, s.Old)
	t := &Trampoline{Handler: *h, Slot: slot, Code: code}
	t.Install = Patch{Addr: s.PatchAddr, Old: old, New: jmp}
	t.Remove = Patch{Addr: s.PatchAddr, Old: append([]byte(nil), jmp...), New: append([]byte(nil), old...),
		Guard: []Range{{slot, slot + uint64(len(code))}}}
	return t, nil
}
