package trampoline

import "math/bits"

// The per-thread hit path of arm64 slots (see threaddata.go for the
// layout and the protocols; x86thread.go is the x86-64 half). The thread
// pointer is tpidr_el0, which user code reads with mrs.
//
// arm64 has no single instruction that increments a word in memory
// except the LSE atomics: a stripe's words are incremented with stadd
// where the CPU has LSE (ARM64Options.LSE), else with a ldxr/stxr pair,
// and the thread's ring is reserved with a cas, else a ldxr/stxr pair;
// never with a barrier. The line is the owner's alone, so neither
// contends with another CPU or bounces a line, and both stay exact when a
// signal handler of the owner hits a probe in the middle (taking the
// signal clears the exclusive monitor, the interrupted stxr fails and the
// loop loads again). A plain ldr/add/str would lose that handler's hit.
// One instruction is also what a single step gets through: the engine
// steps a thread out of a slot it removes, and a step between ldxr and
// stxr makes the stxr fail every time (without LSE such a thread stays
// until the removal's bound).

// stripeLookup finds the calling thread's stripe: it leaves its address in
// x16, its offset from slot 0's stripe in x14 and the thread pointer in
// x15, or branches to noStripe when the thread has no thread pointer or
// finds no stripe. It clobbers x13-x17 and never the flags; x12 only in
// the cold path, which saves it on the stack (16 bytes, keeping sp
// aligned).
func (g *a64Gen) stripeLookup(noStripe a64Label) {
	e := g.e
	d := g.cfg.Data
	base := d.Addr + d.stripeOff(0)
	size := d.stripeSize()
	found, slow := e.newLabel(), e.newLabel()
	e.mrsTPIDR(a64X15)
	e.cbzX(a64X15, noStripe)
	if d.ThreadSlots == 1 {
		e.movImm(a64X14, 0)
	} else {
		e.movImm(a64X14, threadHashMul)
		e.mul(a64X14, a64X15, a64X14)
		e.lsr(a64X14, a64X14, uint32(64-d.threadSlotBits()))
		e.lsl(a64X14, a64X14, uint32(d.stripeLog()))
	}
	e.addr(a64X16, base)
	e.addReg(a64X16, a64X16, a64X14)
	e.ldr(a64X17, a64X16, stripeKey)
	e.subReg(a64X17, a64X17, a64X15)
	e.cbnzX(a64X17, slow)
	e.bind(found)
	g.cold = append(g.cold, func() {
		look, claim, claimLoop, try, taken, next, foundPop, none := e.newLabel(), e.newLabel(), e.newLabel(), e.newLabel(), e.newLabel(), e.newLabel(), e.newLabel(), e.newLabel()
		width := uint32(d.threadSlotBits() + d.stripeLog())
		// advance moves x14 and x16 to the next stripe, wrapping, and
		// counts down x12, branching to again while it is not zero.
		advance := func(again a64Label) {
			e.movImm(a64X13, size)
			e.addReg(a64X14, a64X14, a64X13)
			e.lowBits(a64X14, a64X14, width)
			e.addr(a64X16, base)
			e.addReg(a64X16, a64X16, a64X14)
			e.subImm(a64X12, a64X12, 1)
			e.cbnzX(a64X12, again)
		}
		e.bind(slow)
		e.strPre(a64X12, a64SP, -16)
		// Look for the key until a free stripe.
		e.movImm(a64X12, uint64(d.ThreadSlots))
		e.bind(look)
		e.ldr(a64X17, a64X16, stripeKey)
		e.subReg(a64X13, a64X17, a64X15)
		e.cbzX(a64X13, foundPop)
		e.cbzX(a64X17, claim)
		advance(look)
		// Claim the first free (0) or reclaimed (TombstoneKey, 1) stripe
		// from here on: key >> 1 is zero for both.
		e.bind(claim)
		e.movImm(a64X12, uint64(d.ThreadSlots))
		e.bind(claimLoop)
		e.ldr(a64X17, a64X16, stripeKey)
		e.lsr(a64X13, a64X17, 1)
		e.cbnzX(a64X13, next)
		e.bind(try)
		// The acquire pairs with the tracer's release of a tombstone:
		// the counters it zeroed are zero for the new owner.
		if g.opt.LSE {
			// casa from the key just read (0 or TombstoneKey): x13
			// gets the key found.
			e.movReg(a64X13, a64X17)
			e.cas(a64X13, a64X15, a64X16, true)
			e.subReg(a64X17, a64X13, a64X17)
			e.cbzX(a64X17, foundPop)
			e.subReg(a64X13, a64X13, a64X15)
			e.cbzX(a64X13, foundPop)
			e.bL(next)
		} else {
			e.ldaxr(a64X17, a64X16)
			e.lsr(a64X13, a64X17, 1)
			e.cbnzX(a64X13, taken)
			e.stxr(a64X13, a64X15, a64X16)
			e.cbnzW(a64X13, try)
			e.bL(foundPop)
		}
		// Taken meanwhile: by a signal handler of this thread (then it
		// is ours) or by another thread.
		e.bind(taken)
		e.clrex()
		e.subReg(a64X13, a64X17, a64X15)
		e.cbzX(a64X13, foundPop)
		e.bind(next)
		advance(claimLoop)
		e.bL(none)
		e.bind(foundPop)
		e.ldrPost(a64X12, a64SP, 16)
		e.bL(found)
		e.bind(none)
		e.ldrPost(a64X12, a64SP, 16)
		e.bL(noStripe)
	})
}

// incStripe increments the word at offset off of the stripe in x16 (see
// above: a ldxr/stxr pair on the owner's line). It clobbers x13, x15 and
// x17.
func (g *a64Gen) incStripe(off uint64) {
	e := g.e
	e.movImm(a64X13, off)
	e.addReg(a64X13, a64X16, a64X13)
	g.incAt(a64X13)
}

// threadCount increments counter i of the stripe in x16.
func (g *a64Gen) threadCount(i int) {
	g.incStripe(uint64(stripeData + 8*i))
}

// threadEvent records an entry event (a ThreadRecordSize record, see
// threaddata.go) in the ring of the stripe in x16 (its offset in x14, see
// stripeLookup), or counts it dropped for counter ctr. It clobbers
// x12-x17, never the flags.
func (g *a64Gen) threadEvent(id uint32, ctr int) {
	e := g.e
	d := g.cfg.Data
	full, done := e.newLabel(), e.newLabel()
	recLog := uint32(bits.TrailingZeros(uint(d.ThreadRing)))
	ringLog := uint32(bits.TrailingZeros64(d.threadRingSize()))
	// x13 = the thread's ring: slot << ringLog past the first ring.
	e.lsr(a64X13, a64X14, uint32(d.stripeLog()))
	e.lsl(a64X13, a64X13, ringLog)
	e.addr(a64X14, d.Addr+d.threadRingsOff())
	e.addReg(a64X13, a64X13, a64X14)
	// Reserve sequence number s = head while s - cached tail <
	// ThreadRing. The owner (and its signal handlers) alone write head,
	// so the exclusive pair only guards against a handler that
	// interrupts it: no barrier.
	e.addImm(a64X12, a64X16, stripeHead)
	retry := g.reserve(a64X12, func() { e.ldr(a64X14, a64X16, stripeCTail) }, recLog, full)
	// x17 = s, x14 = s+1; x15 = the record.
	if recLog > 0 {
		e.ubfiz(a64X15, a64X17, threadRecordLog, recLog)
		e.addReg(a64X15, a64X13, a64X15)
	} else {
		e.addImm(a64X15, a64X13, 0)
	}
	e.stp(0, 1, a64X15, trecArgs)
	e.stp(2, 3, a64X15, trecArgs+16)
	e.stp(4, 5, a64X15, trecArgs+32)
	g.timestamp(a64X12)
	e.str(a64X12, a64X15, trecTime)
	// The commit word: the low 32 bits of s+1, the probe id above; the
	// store-release orders the record's stores before it.
	e.movImm(a64X12, uint64(id))
	e.bfi(a64X14, a64X12, 32, 32)
	e.stlr(a64X14, a64X15)
	e.bind(done)
	g.cold = append(g.cold, func() {
		// The ring looks full: refresh the cached tail (acquire: the
		// tracer read the records below it before it stored it) and
		// look again.
		e.bind(full)
		e.clrex()
		e.addImm(a64X14, a64X16, stripeTail)
		e.ldar(a64X14, a64X14)
		e.str(a64X14, a64X16, stripeCTail)
		e.ldr(a64X17, a64X16, stripeHead)
		e.subReg(a64X17, a64X17, a64X14)
		if recLog > 0 {
			e.lsr(a64X17, a64X17, recLog)
		}
		e.cbzX(a64X17, retry)
		g.incStripe(uint64(stripeData + 8*d.ThreadCounters + 8*ctr))
		g.incStripe(stripeDropped)
		e.bL(done)
	})
}

// timestamp reads the virtual counter into t. The Arm ARM lets reads of
// the counter occur speculatively and out of order with the instructions
// around them, and prescribes an isb before the read where it must come
// after a load that told the thread to go on (a lock, a turn): the isb
// makes it so.
func (g *a64Gen) timestamp(t a64Reg) {
	g.e.isb()
	g.e.mrsCNTVCT(t)
}

// emitCold emits the slow paths, jumped over.
func (g *a64Gen) emitCold() {
	if len(g.cold) == 0 {
		return
	}
	e := g.e
	over := e.newLabel()
	e.bL(over)
	for len(g.cold) > 0 {
		f := g.cold[0]
		g.cold = g.cold[1:]
		f()
	}
	e.bind(over)
}
