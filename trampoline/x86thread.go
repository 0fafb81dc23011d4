package trampoline

import (
	"math/bits"

	"github.com/probeopt/probeopt/internal/x86enc"
)

// The per-thread hit path of x86-64 slots (see threaddata.go for the
// layout and the protocols).

// stripeLookup finds the calling thread's stripe: it leaves its address in
// r11, its offset from slot 0's stripe in r10 and the thread pointer in
// rdx, or jumps to noStripe when the thread has no thread pointer or finds
// no stripe. It clobbers rdx, r10, r11 and the flags; rax and rcx only in
// the cold path, which saves them on the stack.
func (g *x86Gen) stripeLookup(noStripe x86enc.Label) {
	a := g.a
	d := g.cfg.Data
	base := d.Addr + d.stripeOff(0)
	size := d.stripeSize()
	found, slow := a.NewLabel(), a.NewLabel()
	g.threadPointer(rdx)
	a.Test(x86enc.S64, rdx, rdx)
	a.Jcc(x86enc.CondE, noStripe)
	g.threadHashOffset(r10, d.ThreadSlots, size)
	g.addr(r11, base)
	a.ALU(x86enc.Add, x86enc.S64, r11, r10)
	a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.At(r11, stripeKey), rdx)
	a.Jcc(x86enc.CondNE, slow)
	a.Bind(found)
	g.cold = append(g.cold, func() {
		look, claim, claimLoop, try, next, foundPop, none := a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel(), a.NewLabel()
		mask := int32(uint64(d.ThreadSlots)*size - 1)
		advance := func() {
			a.ALUImm32(x86enc.Add, x86enc.S64, r10, int32(size))
			a.ALUImm32(x86enc.And, x86enc.S64, r10, mask)
			g.addr(r11, base)
			a.ALU(x86enc.Add, x86enc.S64, r11, r10)
		}
		a.Bind(slow)
		a.Push(rax)
		a.Push(rcx)
		// Look for the key until a free stripe.
		a.MovImm32(rcx, uint32(d.ThreadSlots))
		a.Bind(look)
		a.ALUStore(x86enc.Cmp, x86enc.S64, x86enc.At(r11, stripeKey), rdx)
		a.Jcc(x86enc.CondE, foundPop)
		a.ALUMemImm8(x86enc.Cmp, x86enc.S64, x86enc.At(r11, stripeKey), 0)
		a.Jcc(x86enc.CondE, claim)
		advance()
		a.Dec(x86enc.S32, rcx)
		a.Jcc(x86enc.CondNE, look)
		// Claim the first free or reclaimed stripe from here on.
		a.Bind(claim)
		a.MovImm32(rcx, uint32(d.ThreadSlots))
		a.Bind(claimLoop)
		a.Load(x86enc.S64, rax, x86enc.At(r11, stripeKey))
		a.ALUImm8(x86enc.Cmp, x86enc.S64, rax, TombstoneKey)
		a.Jcc(x86enc.CondBE, try)
		a.Jmp(next)
		a.Bind(try)
		a.Cmpxchg(x86enc.S64, x86enc.At(r11, stripeKey), rdx, true)
		a.Jcc(x86enc.CondE, foundPop)
		// Taken meanwhile: by a signal handler of this thread (then it
		// is ours) or by another thread.
		a.ALU(x86enc.Cmp, x86enc.S64, rax, rdx)
		a.Jcc(x86enc.CondE, foundPop)
		a.Bind(next)
		advance()
		a.Dec(x86enc.S32, rcx)
		a.Jcc(x86enc.CondNE, claimLoop)
		a.Jmp(none)
		a.Bind(foundPop)
		a.Pop(rcx)
		a.Pop(rax)
		a.Jmp(found)
		a.Bind(none)
		a.Pop(rcx)
		a.Pop(rax)
		a.Jmp(noStripe)
	})
}

// threadCount increments counter i of the stripe in r11 (no lock: only
// the owner writes it, and one instruction is atomic with respect to its
// signal handlers).
func (g *x86Gen) threadCount(i int) {
	g.a.IncMem(x86enc.S64, x86enc.At(r11, int32(stripeData+8*i)))
}

// threadEvent records an entry event (a ThreadRecordSize record, see
// threaddata.go) in the ring of the stripe in r11
// (stripe offset in r10, thread pointer in rdx, see stripeLookup), or
// counts it dropped for counter ctr. It clobbers rax, rcx, rdx, r10 and
// the flags, which must be saved (rcx and rdx: their values at the hit
// are read back from the frame).
func (g *x86Gen) threadEvent(id uint32, ctr int, regs ArgRegs) {
	a := g.a
	d := g.cfg.Data
	full, done := a.NewLabel(), a.NewLabel()
	// The stripe's offset (a multiple of the stripe size) scaled to its
	// ring's: both sizes are powers of two, either may be the larger.
	ringLog := bits.TrailingZeros64(d.threadRingSize())
	switch sl := d.stripeLog(); {
	case ringLog > sl:
		a.Shl(x86enc.S64, r10, uint8(ringLog-sl))
	case ringLog < sl:
		a.Shr(x86enc.S64, r10, uint8(sl-ringLog))
	}
	g.addr(rcx, d.Addr+d.threadRingsOff())
	a.ALU(x86enc.Add, x86enc.S64, rcx, r10)
	retry := g.reserve(x86enc.At(r11, stripeHead), x86enc.At(r11, stripeCTail), d.ThreadRing, false, full)
	// rax = sequence number, r10 = commit value; rcx = the record.
	a.ALUImm32(x86enc.And, x86enc.S32, rax, int32(d.ThreadRing-1))
	a.Shl(x86enc.S64, rax, threadRecordLog)
	a.ALU(x86enc.Add, x86enc.S64, rcx, rax)
	for i, r := range regs.x86() {
		m := x86enc.At(rcx, int32(trecArgs+8*i))
		if r == rax || r == rcx || r == rdx || r == r10 || r == r11 {
			a.Load(x86enc.S64, rax, x86enc.At(rsp, int32(g.savedOff(r))))
			a.Store(x86enc.S64, m, rax)
			continue
		}
		a.Store(x86enc.S64, m, r)
	}
	g.timestamp()
	a.Shl(x86enc.S64, rdx, 32)
	a.ALU(x86enc.Or, x86enc.S64, rax, rdx)
	a.Store(x86enc.S64, x86enc.At(rcx, trecTime), rax)
	// Publish the probe id and the commit value with one store: x86
	// stores are not reordered with earlier stores.
	a.MovImm32(rax, id)
	a.Shl(x86enc.S64, rax, 32)
	a.Mov(x86enc.S32, r10, r10)
	a.ALU(x86enc.Or, x86enc.S64, rax, r10)
	a.Store(x86enc.S64, x86enc.At(rcx, trecCommit), rax)
	a.Bind(done)
	g.cold = append(g.cold, func() {
		// The ring looks full: refresh the cached tail and look again.
		a.Bind(full)
		a.Load(x86enc.S64, rax, x86enc.At(r11, stripeTail))
		a.Store(x86enc.S64, x86enc.At(r11, stripeCTail), rax)
		a.Load(x86enc.S64, r10, x86enc.At(r11, stripeHead))
		a.ALU(x86enc.Sub, x86enc.S64, r10, rax)
		a.ALUImm32(x86enc.Cmp, x86enc.S64, r10, int32(d.ThreadRing))
		a.Jcc(x86enc.CondB, retry)
		a.IncMem(x86enc.S64, x86enc.At(r11, int32(stripeData+8*d.ThreadCounters+8*ctr)))
		a.IncMem(x86enc.S64, x86enc.At(r11, stripeDropped))
		a.Jmp(done)
	})
}
