package elfscan

import (
	"bytes"
	"debug/buildinfo"
	"debug/dwarf"
	"errors"
	"fmt"
	"strings"
)

// ErrNoGoLayout means the offsets of the Go runtime's structures in a Go
// binary are not known: the file has no DWARF description of them and its
// Go version is not one whose layout the package knows.
var ErrNoGoLayout = errors.New("layout of the Go runtime's g and m not known")

// GoLayout gives where a Go binary's runtime keeps what a probe reads
// from the running goroutine (the runtime's g, which ABIInternal code on
// x86-64 holds in r14): byte offsets in runtime.g and runtime.m.
type GoLayout struct {
	// Version is the Go version that built the file ("go1.26.8"), "" if
	// the file does not say.
	Version string
	// GM is the offset of g.m (a *m, nil for a goroutine off its thread),
	// GGoid the offset of g.goid (uint64), MProcid the offset of m.procid
	// (uint64: the kernel's thread id of the m, set by the runtime once the
	// thread has started), in bytes.
	GM, GGoid, MProcid int
	// Source says where the offsets come from: "dwarf", or "go1.N" for
	// the known layout of that release.
	Source string
}

// goKnownLayouts are the offsets of runtime.g and runtime.m of the amd64
// and arm64 releases whose layout the package knows, for files without
// DWARF (go build -ldflags=-w); a test compares the entry of the Go in
// use with the DWARF of a build.
var goKnownLayouts = map[string]GoLayout{
	"go1.26": {GM: 0x30, GGoid: 0x98, MProcid: 0x40},
}

// GoLayout returns the offsets of the Go runtime's g and m in a Go binary:
// from its DWARF when it has it, else from the known layout of its Go
// release; an error wrapping ErrNoGoLayout when neither is there.
func (f *File) GoLayout() (GoLayout, error) {
	f.goLayoutOnce.Do(func() { f.goLayout, f.goLayoutErr = f.readGoLayout() })
	return f.goLayout, f.goLayoutErr
}

func (f *File) readGoLayout() (GoLayout, error) {
	if !f.IsGo() {
		return GoLayout{}, fmt.Errorf("not a Go binary: %w", ErrNoGoLayout)
	}
	var l GoLayout
	if bi, err := buildinfo.Read(bytes.NewReader(f.data)); err == nil {
		l.Version = bi.GoVersion
	}
	if d, err := f.ef.DWARF(); err == nil {
		if dl, err := dwarfGoLayout(d); err == nil {
			dl.Version = l.Version
			return dl, nil
		}
	}
	rel := goRelease(l.Version)
	if k, ok := goKnownLayouts[rel]; ok {
		k.Version, k.Source = l.Version, rel
		return k, nil
	}
	if l.Version == "" {
		return GoLayout{}, fmt.Errorf("no DWARF and no Go version: %w", ErrNoGoLayout)
	}
	return GoLayout{Version: l.Version}, fmt.Errorf("no DWARF, and %s is not a release of known layout: %w", l.Version, ErrNoGoLayout)
}

// goRelease returns the release of a Go version: "go1.26" for "go1.26.8"
// or "go1.26rc1 X:foo".
func goRelease(v string) string {
	v, _, _ = strings.Cut(v, " ")
	if !strings.HasPrefix(v, "go1.") {
		return ""
	}
	rest := v[len("go1."):]
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 {
		return ""
	}
	return "go1." + rest[:i]
}

// dwarfGoLayout reads the offsets from the DWARF types runtime.g and
// runtime.m.
func dwarfGoLayout(d *dwarf.Data) (GoLayout, error) {
	want := map[string]map[string]int{"runtime.g": {"m": -1, "goid": -1}, "runtime.m": {"procid": -1}}
	found := 0
	r := d.Reader()
	for found < len(want) {
		e, err := r.Next()
		if err != nil {
			return GoLayout{}, err
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType {
			if e.Tag != dwarf.TagCompileUnit && e.Children {
				r.SkipChildren()
			}
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		fields, ok := want[name]
		if !ok || !e.Children {
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		for {
			c, err := r.Next()
			if err != nil {
				return GoLayout{}, err
			}
			if c == nil || c.Tag == 0 {
				break
			}
			if c.Children {
				r.SkipChildren()
			}
			fn, _ := c.Val(dwarf.AttrName).(string)
			off, ok := c.Val(dwarf.AttrDataMemberLoc).(int64)
			if _, wanted := fields[fn]; wanted && ok && c.Tag == dwarf.TagMember {
				fields[fn] = int(off)
			}
		}
		found++
	}
	l := GoLayout{GM: want["runtime.g"]["m"], GGoid: want["runtime.g"]["goid"], MProcid: want["runtime.m"]["procid"], Source: "dwarf"}
	if l.GM < 0 || l.GGoid < 0 || l.MProcid < 0 {
		return GoLayout{}, fmt.Errorf("DWARF without runtime.g's m and goid and runtime.m's procid: %w", ErrNoGoLayout)
	}
	return l, nil
}

// GoAsmFuncs returns the entry addresses of the functions a Go binary's
// function table marks as written in assembly (Go 1.18 and later): their
// code follows Go's stack-based ABI0, in which no register holds the
// goroutine. nil for a file that is not Go or an older table.
func (f *File) GoAsmFuncs() (map[uint64]bool, error) {
	data, textStart, err := f.pclntab()
	if data == nil || err != nil {
		return nil, err
	}
	if err := checkPclntab(data); err != nil {
		return nil, err
	}
	t := goTable{data: data, quantum: uint64(data[6]), text: textStart}
	switch magic := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24; magic {
	case pclnGo118:
	case pclnGo120:
		t.go120 = true
	default:
		return nil, nil
	}
	if err := t.header(); err != nil {
		return nil, err
	}
	out := map[uint64]bool{}
	idOff := uint64(goFuncID118)
	if t.go120 {
		idOff = goFuncID120
	}
	for i := uint64(0); i < t.nfunc; i++ {
		ent := t.funcOff + 8*i
		entryOff, ok1 := t.u32(ent)
		recOff, ok2 := t.u32(ent + 4)
		if !ok1 || !ok2 {
			return nil, truncErr(".gopclntab", -1, "function table cut at function %d", i)
		}
		rec := t.funcOff + uint64(recOff)
		if rec+idOff+2 > uint64(len(data)) {
			return nil, truncErr(".gopclntab", -1, "record of function %d cut", i)
		}
		if data[rec+idOff+1]&goFuncFlagAsm != 0 {
			out[t.text+uint64(entryOff)] = true
		}
	}
	return out, nil
}
