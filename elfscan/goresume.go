package elfscan

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
)

// GoResumeKind says why the Go runtime may resume a goroutine inside a
// range of code without running the instruction before it.
type GoResumeKind uint8

const (
	// GoAsyncPoint: asynchronous preemption points. The runtime's
	// SIGURG handler (and a debugger's injected call) may stop a goroutine
	// at any instruction the unsafe-point table (PCDATA_UnsafePoint) marks
	// safe, park it, and later resume it at that instruction.
	GoAsyncPoint GoResumeKind = iota + 1
	// GoRestart: the first instruction of a restartable sequence, where a
	// goroutine preempted inside the sequence resumes.
	GoRestart
	// GoDeferReturn: the function's deferreturn call, where a recovered
	// panic resumes the function that deferred the recovering call.
	GoDeferReturn
	// GoRuntimeEntry: a runtime assembly function with a special role
	// (goexit, systemstack_switch, gogo, mcall, morestack...), which the
	// runtime enters at computed addresses: a new goroutine returns to
	// goexit+1, a switch back from the system stack resumes at
	// systemstack_switch+8.
	GoRuntimeEntry
	// GoUnknownPoints: any function of a function table older than Go
	// 1.18, whose records this package does not read: any instruction may
	// be a resume point.
	GoUnknownPoints
)

// String returns the kind's name.
func (k GoResumeKind) String() string {
	switch k {
	case GoAsyncPoint:
		return "async-preemption"
	case GoRestart:
		return "restart"
	case GoDeferReturn:
		return "deferreturn"
	case GoRuntimeEntry:
		return "runtime-entry"
	case GoUnknownPoints:
		return "unknown"
	}
	return "?"
}

// GoResume is a range [Lo, Hi) of a Go binary's code in which every
// instruction boundary is a place where the Go runtime may resume a
// goroutine (for GoRestart and GoDeferReturn, Hi is Lo+1: one point). A
// jump written over an instruction boundary inside such a range would be
// entered in its middle. The ranges of a file do not overlap.
type GoResume struct {
	Lo, Hi uint64
	Kind   GoResumeKind
	// Func is the name of the function that holds the range.
	Func string
}

// Flags and values of the Go function table (internal/abi of Go 1.18 and
// later), as the runtime reads them.
const (
	goFuncFlagAsm       = 1 << 2 // FuncFlagAsm: written in assembly
	goPCDataUnsafePoint = 0      // PCDATA_UnsafePoint, the index of the unsafe-point table
	goFuncDataLocals    = 1      // FUNCDATA_LocalsPointerMaps, the index of the locals pointer map
	goUnsafePointSafe   = -1
	goUnsafeRestart1    = -3
	goUnsafeRestart2    = -4
)

// GoResumePoints returns, for a Go binary, the ranges of code where the Go
// runtime may resume a goroutine at an instruction it did not reach by
// running the one before it, sorted by address (nil for a file that is not
// Go). They are read from the Go function table (.gopclntab): the
// unsafe-point table of each compiled function, its deferreturn offset,
// and the special function IDs of the runtime's assembly. Return addresses
// after calls are not listed: they follow an instruction like any other
// call's.
//
// A table older than Go 1.18 is not read: each function is then one range
// of kind GoUnknownPoints.
func (f *File) GoResumePoints() ([]GoResume, error) {
	f.goResumeOnce.Do(func() { f.goResume, f.goResumeErr = f.readGoResume() })
	return f.goResume, f.goResumeErr
}

func (f *File) readGoResume() ([]GoResume, error) {
	data, textStart, err := f.pclntab()
	if data == nil || err != nil {
		return nil, err
	}
	if err := checkPclntab(data); err != nil {
		return nil, err
	}
	magic := binary.LittleEndian.Uint32(data)
	if magic != pclnGo118 && magic != pclnGo120 {
		return f.goUnknownResume()
	}
	t := goTable{data: data, quantum: uint64(data[6]), text: textStart, go120: magic == pclnGo120}
	if err := t.header(); err != nil {
		return nil, err
	}
	var out []GoResume
	for i := uint64(0); i < t.nfunc; i++ {
		r, err := t.funcResume(i)
		if err != nil {
			return nil, err
		}
		out = append(out, r...)
	}
	slices.SortFunc(out, func(a, b GoResume) int { return cmp.Compare(a.Lo, b.Lo) })
	return out, nil
}

// goUnknownResume marks every function of an older table as unknown.
func (f *File) goUnknownResume() ([]GoResume, error) {
	funcs, err := f.goFuncs()
	if err != nil {
		return nil, err
	}
	out := make([]GoResume, 0, len(funcs))
	for _, fn := range funcs {
		out = append(out, GoResume{Lo: fn.addr, Hi: fn.addr + fn.size, Kind: GoUnknownPoints, Func: fn.name})
	}
	slices.SortFunc(out, func(a, b GoResume) int { return cmp.Compare(a.Lo, b.Lo) })
	return out, nil
}

// goTable reads the records of a Go 1.18+ function table.
type goTable struct {
	data    []byte
	quantum uint64 // the instruction size quantum (1 on x86-64, 4 on arm64)
	// text is the address function entries are offsets from
	// (File.goTextStart).
	text  uint64
	go120 bool // the record has startLine (Go 1.20 and later)

	nfunc                      uint64
	nameOff, pctabOff, funcOff uint64
}

func (t *goTable) bad(format string, args ...any) error {
	return formatErr(".gopclntab", -1, format, args...)
}

// header reads the offsets of the name, pc-value and function tables.
func (t *goTable) header() error {
	ptr := uint64(t.data[7])
	word := func(i uint64) uint64 {
		off := 8 + i*ptr
		if ptr == 4 {
			return uint64(binary.LittleEndian.Uint32(t.data[off:]))
		}
		return binary.LittleEndian.Uint64(t.data[off:])
	}
	if uint64(len(t.data)) < 8+8*ptr {
		return truncErr(".gopclntab", -1, "header cut")
	}
	t.nfunc, t.nameOff, t.pctabOff, t.funcOff = word(0), word(3), word(6), word(7)
	if t.nameOff > uint64(len(t.data)) || t.pctabOff > uint64(len(t.data)) {
		return t.bad("table offsets past the section")
	}
	return nil
}

// u32 reads a little-endian word at off, ok false past the end.
func (t *goTable) u32(off uint64) (uint32, bool) {
	if off > uint64(len(t.data)) || uint64(len(t.data))-off < 4 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(t.data[off:]), true
}

// Offsets in a function record (runtime._func).
const (
	goFuncEntry       = 0
	goFuncName        = 4
	goFuncDeferReturn = 12
	goFuncPCSP        = 16
	goFuncNPCData     = 28
	goFuncID118       = 36 // funcID, flag, pad, nfuncdata; then pcdata
	goFuncID120       = 40 // after startLine
)

// funcResume returns the resume ranges of function i.
func (t *goTable) funcResume(i uint64) ([]GoResume, error) {
	ent := t.funcOff + 8*i
	entryOff, ok1 := t.u32(ent)
	recOff, ok2 := t.u32(ent + 4)
	nextOff, ok3 := t.u32(ent + 8)
	if !ok1 || !ok2 || !ok3 {
		return nil, truncErr(".gopclntab", -1, "function table cut at function %d", i)
	}
	rec := t.funcOff + uint64(recOff)
	idOff := uint64(goFuncID118)
	if t.go120 {
		idOff = goFuncID120
	}
	if rec+idOff+4 > uint64(len(t.data)) {
		return nil, truncErr(".gopclntab", -1, "record of function %d cut", i)
	}
	if e, _ := t.u32(rec + goFuncEntry); e != entryOff {
		return nil, t.bad("function %d: record entry %#x, table entry %#x", i, e, entryOff)
	}
	lo, hi := t.text+uint64(entryOff), t.text+uint64(nextOff)
	if hi < lo {
		return nil, t.bad("function %d ends before it starts", i)
	}
	nameOff, _ := t.u32(rec + goFuncName)
	name := t.name(uint64(nameOff))
	funcID, flag := t.data[rec+idOff], t.data[rec+idOff+1]
	if flag&goFuncFlagAsm != 0 {
		// Assembly is never preempted asynchronously; the runtime's own
		// assembly with a special role is entered at computed addresses.
		if funcID != 0 {
			return []GoResume{{Lo: lo, Hi: hi, Kind: GoRuntimeEntry, Func: name}}, nil
		}
		return nil, nil
	}
	var out []GoResume
	npc, _ := t.u32(rec + goFuncNPCData)
	pcdata := rec + idOff + 4
	nfd := uint64(t.data[rec+idOff+3])
	if pcdata+4*(uint64(npc)+nfd) > uint64(len(t.data)) {
		return nil, truncErr(".gopclntab", -1, "record of function %d cut", i)
	}
	var tab uint32
	if npc > goPCDataUnsafePoint {
		tab, _ = t.u32(pcdata + 4*goPCDataUnsafePoint)
	}
	// As the runtime's isAsyncSafePoint: a function without a locals
	// pointer map is never preempted asynchronously, and without an
	// unsafe-point table every instruction counts as safe.
	preemptible := false
	if nfd > goFuncDataLocals {
		m, _ := t.u32(pcdata + 4*uint64(npc) + 4*goFuncDataLocals)
		preemptible = m != ^uint32(0)
	}
	if !preemptible {
		tab = 0
	}
	runs := []pcRun{{lo: lo, hi: t.codeEnd(rec, lo, hi), val: goUnsafePointSafe}}
	if tab != 0 {
		var err error
		if runs, err = t.pcValues(t.pctabOff+uint64(tab), lo, hi); err != nil {
			return nil, t.bad("function %s: unsafe-point table: %v", name, err)
		}
	}
	for _, r := range runs {
		switch r.val {
		case goUnsafePointSafe:
			if !preemptible {
				continue
			}
			if n := len(out); n > 0 && out[n-1].Kind == GoAsyncPoint && out[n-1].Hi == r.lo {
				out[n-1].Hi = r.hi
				continue
			}
			out = append(out, GoResume{Lo: r.lo, Hi: r.hi, Kind: GoAsyncPoint, Func: name})
		case goUnsafeRestart1, goUnsafeRestart2:
			out = append(out, GoResume{Lo: r.lo, Hi: r.lo + 1, Kind: GoRestart, Func: name})
		}
	}
	// The deferreturn call, unless a range already holds it: the ranges
	// of a function stay disjoint.
	if dr, _ := t.u32(rec + goFuncDeferReturn); dr != 0 {
		at := lo + uint64(dr)
		if !slices.ContainsFunc(out, func(r GoResume) bool { return r.Lo <= at && at < r.Hi }) {
			out = append(out, GoResume{Lo: at, Hi: at + 1, Kind: GoDeferReturn, Func: name})
		}
	}
	return out, nil
}

// codeEnd returns the end of the code of the function whose record is at
// rec and whose table entries span [lo, hi): where its stack-pointer table
// (pcsp, present in every function) ends, without the padding up to the
// next function; hi when that table cannot be read.
func (t *goTable) codeEnd(rec, lo, hi uint64) uint64 {
	sp, _ := t.u32(rec + goFuncPCSP)
	if sp == 0 {
		return hi
	}
	runs, err := t.pcValues(t.pctabOff+uint64(sp), lo, hi)
	if err != nil || len(runs) == 0 {
		return hi
	}
	return runs[len(runs)-1].hi
}

// name returns the NUL-terminated name at off in the name table.
func (t *goTable) name(off uint64) string {
	at := t.nameOff + off
	if at >= uint64(len(t.data)) {
		return ""
	}
	s := t.data[at:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

var (
	errShort   = errors.New("cut short")
	errPastEnd = errors.New("runs past the function's end")
)

// pcRun is one run of a pc-value table: val holds on [lo, hi).
type pcRun struct {
	lo, hi uint64
	val    int32
}

// pcValues decodes the pc-value table at off for a function at [lo, hi):
// pairs of a zig-zag varint value delta (from -1) and a varint pc delta
// in instruction quanta, ended by a zero value delta after the first pair.
func (t *goTable) pcValues(off, lo, hi uint64) ([]pcRun, error) {
	var out []pcRun
	pc, val := lo, int32(-1)
	for first := true; ; first = false {
		if off >= uint64(len(t.data)) {
			return nil, errShort
		}
		if t.data[off] == 0 && !first {
			return out, nil
		}
		uv, n := binary.Uvarint(t.data[off:])
		if n <= 0 {
			return nil, errShort
		}
		off += uint64(n)
		val += int32(-(uint32(uv) & 1) ^ (uint32(uv) >> 1))
		d, n := binary.Uvarint(t.data[min(off, uint64(len(t.data))):])
		if n <= 0 {
			return nil, errShort
		}
		off += uint64(n)
		next := pc + d*t.quantum
		if next > hi {
			return nil, errPastEnd
		}
		out = append(out, pcRun{lo: pc, hi: next, val: val})
		pc = next
	}
}

// goTextStart returns the address the function entries of a Go function
// table are offsets from: runtime.text. It is the start of .text when the
// Go linker linked the program itself, but follows C code when an external
// linker did (cgo), and the table's header then holds 0. In that order it
// takes the header's textStart, the runtime.text symbol, the text field of
// the runtime's first moduledata (found by its first word, the table's
// address, and checked against its minpc), and the start of .text.
func (f *File) goTextStart(pcln []byte, pclnAddr, textAddr uint64) uint64 {
	le := binary.LittleEndian
	if len(pcln) >= 72 && pcln[7] == 8 && (le.Uint32(pcln) == pclnGo118 || le.Uint32(pcln) == pclnGo120) {
		if v := le.Uint64(pcln[24:]); v != 0 {
			return v
		}
	} else {
		return textAddr
	}
	if syms, err := f.readSymbols(false); err == nil {
		for _, s := range syms {
			if s.Name == "runtime.text" {
				return s.Value
			}
		}
	}
	// moduledata: pcHeader, six slices, findfunctab, minpc, maxpc, text.
	const minpcOff, textOff, size = 160, 176, 184
	if len(pcln) < 72 {
		return textAddr
	}
	ftab := le.Uint64(pcln[64:])
	if ftab > uint64(len(pcln))-4 {
		return textAddr
	}
	firstEntry := uint64(le.Uint32(pcln[ftab:]))
	for _, name := range []string{".go.module", ".noptrdata", ".data"} {
		sec := f.section(name)
		if sec == nil {
			continue
		}
		b, err := f.sectionData(sec)
		if err != nil {
			continue
		}
		for off := 0; off+size <= len(b); off += 8 {
			if le.Uint64(b[off:]) != pclnAddr {
				continue
			}
			text, minpc := le.Uint64(b[off+textOff:]), le.Uint64(b[off+minpcOff:])
			if text != 0 && text+firstEntry == minpc {
				return text
			}
		}
	}
	return textAddr
}
