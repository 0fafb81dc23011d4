package probe

import (
	"bytes"
	"strings"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/trampoline"
)

// Goroutines and threads of Go programs. Go code compiled for Go's
// register ABI (ABIInternal) holds the running goroutine's g in r14 at
// every instruction; the g leads to its m, whose procid is the thread's
// kernel id. A trampoline slot of such a site records both
// (trampoline.GoG), so that its events carry their thread even in a
// static Go program, which has no C library thread control block to find
// it through; a trap reads the goroutine id from the stopped thread's r14.
//
// r14 is not g in code written in assembly (ABI0: the function table's
// assembly flag, or a symbol named NAME.abi0), nor at the entry of a
// wrapper that ABI0 code calls (it loads g into r14 itself): a function
// that writes r14 anywhere is taken to be such code. Those sites record
// no goroutine, and their events find their thread as other code does.

// goInfo is what a Go file's sites need to read the goroutine (under
// fileInfo.mu, made once).
type goInfo struct {
	gog *trampoline.GoG // nil when the layout is not known
	err error           // why gog is nil
	asm map[uint64]bool // functions the Go table marks as assembly
	// r14 caches, by function entry, where r14 holds g.
	r14 map[uint64]*r14Info
}

// goG returns the offsets a site at addr of function fn (analysed as
// pfn) reads the goroutine with, nil when r14 may not hold g there or the
// layout is not known (under fi.mu).
func (fi *fileInfo) goG(addr uint64, fn *elfscan.Func, pfn *plan.Function, vendor decode.Vendor) *trampoline.GoG {
	if !isGoFunc(fn) || fi.f.Arch != decode.X86_64 {
		return nil
	}
	if fi.gi == nil {
		gi := &goInfo{r14: map[uint64]*r14Info{}}
		l, err := fi.f.GoLayout()
		if err == nil {
			gi.gog = &trampoline.GoG{M: int32(l.GM), Goid: int32(l.GGoid), Procid: int32(l.MProcid)}
		} else {
			gi.err = err
		}
		if gi.asm, err = fi.f.GoAsmFuncs(); err != nil && gi.err == nil {
			gi.gog, gi.err = nil, err
		}
		fi.gi = gi
	}
	gi := fi.gi
	if gi.gog == nil {
		return nil
	}
	ri := gi.r14[fn.Addr]
	if ri == nil {
		ri = r14Holds(fn, pfn, gi.asm, vendor)
		gi.r14[fn.Addr] = ri
	}
	if !ri.g || ri.reloads[addr] {
		return nil
	}
	return gi.gog
}

// goLayoutErr says why the file's Go sites record no goroutine, nil if
// they do or the file is not Go (under fi.mu).
func (fi *fileInfo) goLayoutErr() error {
	if fi.gi == nil {
		return nil
	}
	return fi.gi.err
}

// r14Info says where r14 holds g in a function.
type r14Info struct {
	// g: at every instruction but the reloads.
	g bool
	// reloads are the instructions from a call to the reload of g into
	// r14 from the thread's TLS slot that follows it (the callee, written
	// in assembly, may have used r14): there r14 holds what the callee
	// left.
	reloads map[uint64]bool
}

// goTLSReload is the instruction by which compiled Go code of a program
// linked by Go's own linker loads g from its TLS slot into r14 again:
// mov %fs:-8, %r14.
var goTLSReload = []byte{0x64, 0x4c, 0x8b, 0x34, 0x25, 0xf8, 0xff, 0xff, 0xff}

// goZeroX15 is xorps %xmm15,%xmm15, which compiled Go puts between an
// ABI0 call and the reload of g.
var goZeroX15 = []byte{0x45, 0x0f, 0x57, 0xff}

// r14Holds says where r14 holds g in the Go function fn: nowhere in code
// written in assembly or an ABI0 symbol; in compiled Go, everywhere but
// the reloads of g that follow calls, unless r14 is written otherwise (an
// ABI0-to-ABIInternal wrapper, which loads g into r14 on entry, or code
// linked otherwise).
func r14Holds(fn *elfscan.Func, pfn *plan.Function, asm map[uint64]bool, vendor decode.Vendor) *r14Info {
	no := &r14Info{}
	if asm == nil || asm[fn.Addr] {
		return no // an older table, or assembly
	}
	for _, n := range fn.Names() {
		if strings.HasSuffix(n, ".abi0") {
			return no
		}
	}
	if pfn == nil || pfn.Err != nil || pfn.Addr != fn.Addr {
		return no
	}
	ri := &r14Info{g: true, reloads: map[uint64]bool{}}
	d := decode.X86Decoder{Vendor: vendor}
	var inst decode.X86Inst
	// window holds the instructions since the last call, while they are
	// those Go puts between an ABI0 call and the reload of g: the zeroing
	// of X15 (its other fixed register), then the reload.
	var window []uint64
	for a := range pfn.Starts() {
		code := pfn.Code[a-pfn.Addr:]
		if err := d.Decode(code, a, &inst); err != nil {
			return no
		}
		switch {
		case inst.Written.Has(int(decode.R14)):
			if window == nil || !bytes.HasPrefix(code, goTLSReload) {
				return no
			}
			for _, w := range append(window, a) {
				ri.reloads[w] = true
			}
			window = nil
		case window != nil && len(window) == 0 && bytes.HasPrefix(code, goZeroX15):
			window = append(window, a)
		default:
			window = nil
		}
		if inst.Branch == decode.BranchCall || inst.Branch == decode.BranchCallIndirect {
			window = []uint64{}
		}
	}
	return ri
}
