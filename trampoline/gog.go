package trampoline

import (
	"fmt"

	"github.com/probeopt/probeopt/internal/x86enc"
)

// GoG locates, for the slots of a Go program's functions, the goroutine
// and the kernel thread that hit a probe. Go's register ABI (ABIInternal,
// Go 1.17 and later on x86-64) keeps the running goroutine's g in r14 at
// every instruction of compiled Go code; the g points to its m (the
// runtime's thread), whose procid the runtime sets to the thread's kernel
// id (gettid) when the thread starts. The offsets depend on the Go
// release (elfscan.GoLayout reads them). Code written in assembly (ABI0)
// and the wrappers between the two ABIs may hold anything in r14: the
// caller gives GoG only to sites of ABIInternal code.
//
// An entry event of a handler with Handler.Go records g.goid and
// g.m.procid after the other fields: 0 and 0 when r14 holds no g (the
// runtime runs a few functions without one, as a signal arriving on a
// thread the runtime did not create), the goid and 0 when the g has no m.
type GoG struct {
	M      int32 // offset of g.m in bytes
	Goid   int32 // offset of g.goid in bytes (a 64-bit word)
	Procid int32 // offset of m.procid in bytes (a 64-bit word)
}

// maxGoOffset bounds the offsets a GoG may give: runtime.g and runtime.m
// are a few hundred bytes to a few KiB.
const maxGoOffset = 1 << 16

func (o *GoG) validate() error {
	for _, v := range []int32{o.M, o.Goid, o.Procid} {
		if v < 0 || v >= maxGoOffset || v%8 != 0 {
			return fmt.Errorf("go runtime offsets %+v (want multiples of 8 below %d): %w", *o, maxGoOffset, ErrConfig)
		}
	}
	return nil
}

// kindGoFlag marks, in a record's kind word, a record whose GoTid and
// Goid fields were written (recGoTid, recGoid).
const kindGoFlag EventKind = 1 << 8

// goFields stores the goroutine id and the thread id of the running g
// (r14) in the record at rax. It clobbers rdx and the flags.
func (g *x86Gen) goFields(o GoG) {
	a := g.a
	r14 := x86enc.R14
	noG, store := a.NewLabel(), a.NewLabel()
	a.Mov(x86enc.S64, rdx, r14)
	a.Test(x86enc.S64, rdx, rdx)
	a.Jcc(x86enc.CondE, noG)
	a.Load(x86enc.S64, rdx, x86enc.At(r14, o.Goid))
	a.Store(x86enc.S64, x86enc.At(rax, recGoid), rdx)
	a.Load(x86enc.S64, rdx, x86enc.At(r14, o.M))
	a.Test(x86enc.S64, rdx, rdx)
	a.Jcc(x86enc.CondE, store) // no m: thread 0
	a.Load(x86enc.S64, rdx, x86enc.At(rdx, o.Procid))
	a.Jmp(store)
	a.Bind(noG)
	a.Store(x86enc.S64, x86enc.At(rax, recGoid), rdx) // rdx is 0
	a.Bind(store)
	a.Store(x86enc.S64, x86enc.At(rax, recGoTid), rdx)
}
