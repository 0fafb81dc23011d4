package trampoline_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/trampoline"
)

// fuzzHandlers are the handler kinds of package trampoline, alone and all
// together.
var fuzzHandlers = []struct {
	name string
	h    trampoline.Handler
	ret  bool // needs the return-probe machinery
}{
	{"none", trampoline.Handler{}, false},
	{"counter", trampoline.Handler{ID: 1, Count: true, Counter: 3}, false},
	{"event", trampoline.Handler{ID: 2, Event: true}, false},
	{"return", trampoline.Handler{ID: 3, Return: &trampoline.ReturnHandler{Count: true, Counter: 4, Event: true}}, true},
	{"unhijack", trampoline.Handler{ID: 4, Unhijack: true}, true},
	{"rehijack", trampoline.Handler{ID: 5, Rehijack: true}, true},
	{"all", trampoline.Handler{ID: 6, Count: true, Counter: 5, Event: true,
		Return: &trampoline.ReturnHandler{Count: true, Counter: 6, Event: true}, Unhijack: true, Rehijack: true}, true},
}

// Bits of the opts argument of FuzzGenerateX86.
const (
	fuzzIntel        = 1 << iota // decode with Intel's rules
	fuzzReplaceEndbr             // SiteOptions.ReplaceEndbr
	fuzzNopOnly                  // SiteOptions.NopOnly
	fuzzPushf                    // Config.Flags = FlagsPushf
	fuzzTCB                      // Config.ThreadPointer = ThreadTCB (with fuzzNoTP: ThreadNone)
	fuzzFarData                  // data area and thread table beyond 4 GiB of the slot
	fuzzHighSite                 // the site in the upper part of the user address space
	fuzzFarSlot                  // the slot 4 GiB away: nothing reaches it
)

// fuzzSites are the site addresses: a small executable's text and a
// shared library's.
var fuzzSites = [2]uint64{0x40_1000, 0x7f12_3456_7000}

// FuzzGenerateX86 analyzes arbitrary bytes as a probe site and, when
// AnalyzeX86 accepts it, builds its slot with every handler kind. It checks
// that:
//
//   - a refusal is a *SiteError (errors.Is ErrNotSite) with a code, at
//     the site or at an instruction the jump would displace;
//   - an accepted site replaces at least the 5 bytes of the jump, at the
//     site or after the nop or endbr64 it keeps, and its old bytes are the
//     input's;
//   - BuildX86 fails only with ErrOutOfReach or ErrNotSite (never
//     ErrEncode, ErrConfig or an untyped error), always fails for a slot
//     beyond 2 GiB of the site, and succeeds for a
//     slot within 1 GiB of every address the site must reach;
//   - the slot decodes with decode.X86Decoder instruction by instruction
//     (skipping the 8-byte literals its RIP-relative operands refer to)
//     and ends exactly at the slot's size, which the area and the Remove
//     guard agree on; GenerateX86 at the same address gives the same bytes;
//   - the slot's last instruction is a jmp (direct, or through a literal
//     in the slot): back to Site.Resume()
//     when the site's last displaced instruction is no branch (always for a
//     NOP site), otherwise to that branch's target or end; every direct
//     branch stays in the slot or goes to the resume address, a displaced
//     branch's target or a displaced instruction's end;
//   - the Install patch is a jmp rel32 from the patch address to the slot,
//     padded with int3 to the replaced length, and Remove undoes it.
//
// A return handler with ThreadNone must fail with ErrConfig.
func FuzzGenerateX86(f *testing.F) {
	f.Add([]byte("\x0f\x1f\x44\x00\x00"), int32(0x10_0000), uint8(0))
	f.Add([]byte("\x55\x48\x89\xe5\xc3"), int32(-0x20_0000), uint8(fuzzTCB))
	f.Fuzz(func(t *testing.T, code []byte, slotDelta int32, opts uint8) {
		checkGenerateX86(t, code, slotDelta, opts)
	})
}

// checkGenerateX86 is the body of FuzzGenerateX86.
func checkGenerateX86(t *testing.T, code []byte, slotDelta int32, opts uint8) {
	site := fuzzSites[0]
	if opts&fuzzHighSite != 0 {
		site = fuzzSites[1]
	}
	sopts := &trampoline.SiteOptions{ReplaceEndbr: opts&fuzzReplaceEndbr != 0, NopOnly: opts&fuzzNopOnly != 0}
	if opts&fuzzIntel != 0 {
		sopts.Vendor = decode.VendorIntel
	}
	s, err := trampoline.AnalyzeX86(site, code, sopts)
	if err != nil {
		// A refusal names the instruction it is about: the site's first
		// or a later one the jump would displace.
		var se *trampoline.SiteError
		if !errors.As(err, &se) || !errors.Is(err, trampoline.ErrNotSite) || se.Code == "" || se.Addr-site >= uint64(len(code)) && se.Addr != site {
			t.Fatalf("AnalyzeX86: not a site refusal: %#v", err)
		}
		return
	}
	checkSite(t, s, site, code, sopts)

	slot := site + uint64(int64(slotDelta))
	if slotDelta < 0 && uint64(-int64(slotDelta)) > site-0x1_0000 {
		slot = site + uint64(-int64(slotDelta))
	}
	if opts&fuzzFarSlot != 0 {
		slot += 1 << 32
	}
	cfg := fuzzConfig(t, slot, opts)
	inReach := opts&fuzzFarSlot == 0
	for _, r := range s.Reach() {
		if d := int64(slot - r); d >= 1<<30 || d <= -1<<30 {
			inReach = false
		}
	}
	for _, fh := range fuzzHandlers {
		h := fh.h
		area, err := trampoline.NewArea(slot, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := area.BuildX86(s, &h, cfg)
		switch {
		case fh.ret && cfg.ThreadPointer == trampoline.ThreadNone:
			if !errors.Is(err, trampoline.ErrConfig) {
				t.Fatalf("%s handler without a thread pointer: %v, want ErrConfig", fh.name, err)
			}
			continue
		case opts&fuzzFarSlot != 0:
			// The jump cannot reach the slot; relocating a displaced
			// instruction there may fail first.
			if !errors.Is(err, trampoline.ErrOutOfReach) && !errors.Is(err, trampoline.ErrNotSite) {
				t.Fatalf("%s: slot at %#x beyond reach of the site at %#x: %v, want ErrOutOfReach", fh.name, slot, s.PatchAddr, err)
			}
			continue
		case err != nil:
			if inReach || !errors.Is(err, trampoline.ErrOutOfReach) && !errors.Is(err, trampoline.ErrNotSite) {
				t.Fatalf("%s: BuildX86 with the slot at %#x (reach %#x): %v", fh.name, slot, s.Reach(), err)
			}
			continue
		}
		checkTrampoline(t, fh.name, sopts.Vendor, s, &h, cfg, area, tr)
	}
}

// fuzzConfig returns the configuration opts selects for a slot at slot.
func fuzzConfig(t *testing.T, slot uint64, opts uint8) *trampoline.Config {
	dataAt, threadsAt := slot+0x10_0000, slot+0x20_0000
	if opts&fuzzFarData != 0 {
		dataAt, threadsAt = slot+0x1_0000_0000, slot+0x2_0000_0000
	}
	data, err := trampoline.NewData(dataAt, 64, 1024)
	if err != nil {
		t.Fatal(err)
	}
	threads, err := trampoline.NewThreads(threadsAt, 256)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &trampoline.Config{Data: data, Threads: threads, ReturnAddr: slot + 0x30_0000}
	if opts&fuzzPushf != 0 {
		cfg.Flags = trampoline.FlagsPushf
	}
	switch {
	case opts&fuzzTCB != 0 && opts&fuzzFarData != 0 && opts&fuzzPushf != 0:
		cfg.ThreadPointer = trampoline.ThreadNone
	case opts&fuzzTCB != 0:
		cfg.ThreadPointer = trampoline.ThreadTCB
	}
	return cfg
}

// checkSite checks what AnalyzeX86 accepted at site from code.
func checkSite(t *testing.T, s *trampoline.Site, site uint64, code []byte, o *trampoline.SiteOptions) {
	t.Helper()
	at := s.PatchAddr - site
	switch {
	case s.Addr != site:
		t.Fatalf("site address %#x, want %#x", s.Addr, site)
	case at != 0 && at != 1 && at != 4 && at != 5:
		t.Fatalf("patch address %#x, %d bytes after the site", s.PatchAddr, at)
	case at >= 4 && (o.ReplaceEndbr || !bytes.HasPrefix(code, []byte{0xf3, 0x0f, 0x1e, 0xfa})):
		t.Fatalf("patch address after an endbr64 that is not kept: % x", code)
	case s.Len < 5 || at+uint64(s.Len) > uint64(len(code)):
		t.Fatalf("%d bytes replaced at +%d of %d", s.Len, at, len(code))
	case !bytes.Equal(s.Old, code[at:at+uint64(s.Len)]):
		t.Fatalf("old bytes % x, input % x at +%d", s.Old, code, at)
	case s.Resume() != s.PatchAddr+uint64(s.Len):
		t.Fatalf("resume %#x, patch %#x + %d", s.Resume(), s.PatchAddr, s.Len)
	}
	switch s.Kind {
	case trampoline.SiteNop:
		if s.Run != 0 || len(s.Insts) != 0 {
			t.Fatalf("NOP site with %d displaced instructions", len(s.Insts))
		}
	case trampoline.SiteDetour:
		if o.NopOnly {
			t.Fatalf("a detour with NopOnly set")
		}
		if s.Run < 1 || s.Run > len(s.Insts) {
			t.Fatalf("%d of %d displaced instructions run", s.Run, len(s.Insts))
		}
		next := s.PatchAddr
		for i := range s.Insts {
			in := &s.Insts[i]
			if in.Addr != next || in.Len < 1 {
				t.Fatalf("displaced instruction %d at %#x, length %d; want it at %#x", i, in.Addr, in.Len, next)
			}
			next += uint64(in.Len)
		}
		if next != s.Resume() {
			t.Fatalf("displaced instructions end at %#x, resume at %#x", next, s.Resume())
		}
	default:
		t.Fatalf("site kind %v", s.Kind)
	}
}

// checkTrampoline checks a slot BuildX86 made for s and h, decoding with
// the vendor's rules the site was analyzed with.
func checkTrampoline(t *testing.T, name string, vendor decode.Vendor, s *trampoline.Site, h *trampoline.Handler, cfg *trampoline.Config, area *trampoline.Area, tr *trampoline.Trampoline) {
	t.Helper()
	c := &slotCheck{t: t, name: name, dec: decode.X86Decoder{Vendor: vendor}, s: s, h: h, cfg: cfg, tr: tr, end: tr.Slot + uint64(len(tr.Code))}
	if tr.Slot%16 != 0 || tr.Slot < area.Addr || len(tr.Code) == 0 || area.Used() != c.end-area.Addr {
		c.fail("slot at %#x, %d bytes, area at %#x with %d bytes used", tr.Slot, len(tr.Code), area.Addr, area.Used())
	}
	if again, err := trampoline.GenerateX86(tr.Slot, s, h, cfg); err != nil || !bytes.Equal(again, tr.Code) {
		c.fail("GenerateX86 at the same address: % x, %v", again, err)
	}
	c.exitsAndData()
	c.walk()
	c.finalJmp()
	c.installRemove()
}

// slotCheck is the check of one generated slot (checkTrampoline).
type slotCheck struct {
	t    *testing.T
	name string
	dec  decode.X86Decoder
	s    *trampoline.Site
	h    *trampoline.Handler
	cfg  *trampoline.Config
	tr   *trampoline.Trampoline
	end  uint64 // the slot's end

	// exits are where the slot may leave to; progData the data the
	// displaced instructions address (the program's own, which the
	// fuzzed layout may put inside the slot: a real area is placed where
	// nothing is mapped); last the last displaced instruction of a detour.
	exits, progData map[uint64]bool
	last            *decode.X86Inst
	// What the walk found: the last instruction and, when known, where it
	// goes.
	final      decode.X86Inst
	finalDest  uint64
	finalKnown bool
}

// fail fails the test with the slot, its site and its code.
func (c *slotCheck) fail(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("%s handler, slot at %#x for the site at %#x (% x): %s\nslot: % x", c.name, c.tr.Slot, c.s.Addr, c.s.Old, fmt.Sprintf(format, args...), c.tr.Code)
}

// exitsAndData sets exits, progData and last from the site and handler.
func (c *slotCheck) exitsAndData() {
	s := c.s
	c.exits = map[uint64]bool{s.Resume(): true}
	c.progData = map[uint64]bool{}
	if c.h.Return != nil {
		// The gate, just before the return trampoline's entry.
		c.exits[c.cfg.ReturnAddr-4] = true
	}
	if s.Kind != trampoline.SiteDetour {
		return
	}
	for i := 0; i < s.Run; i++ {
		in := &s.Insts[i]
		if in.RIPRel {
			c.progData[in.Target] = true
		}
		c.exits[in.Addr+uint64(in.Len)] = true
		if in.Branch.Relative() && in.RelSize > 0 {
			c.exits[in.Target] = true
		}
	}
	c.last = &s.Insts[s.Run-1]
}

// walk decodes the whole slot: every instruction decodes within it, every
// branch stays in it or goes where the site goes on, every literal lies
// after the instruction that reads it and apart from the others, and
// every code address a lea takes is an instruction of the slot.
func (c *slotCheck) walk() {
	tr, end := c.tr, c.end
	// Code addresses a lea takes: the slot's own instructions.
	var codeRefs []uint64
	starts := map[uint64]bool{}
	// Decode the slot. A RIP-relative operand may refer to an 8-byte
	// literal in the slot (the absolute target of a jmp *0(%rip) that
	// replaces a branch beyond reach): those bytes are skipped.
	data := map[int]bool{}
	var in decode.X86Inst
	for off := 0; off < len(tr.Code); {
		if data[off] {
			if off+8 > len(tr.Code) {
				c.fail("the literal at +%d runs past the slot's end", off)
			}
			delete(data, off)
			off += 8
			continue
		}
		pc := tr.Slot + uint64(off)
		if err := c.dec.Decode(tr.Code[off:], pc, &in); err != nil {
			c.fail("the instruction at %#x (+%d) does not decode: %v", pc, off, err)
		}
		if in.Len < 1 || off+in.Len > len(tr.Code) {
			c.fail("the instruction at %#x has length %d past the slot's end %#x", pc, in.Len, end)
		}
		starts[pc] = true
		dest, known := uint64(0), false
		switch {
		case in.Branch.Relative() && in.RelSize > 0:
			dest, known = in.Target, true
		case in.RIPRel && in.Target >= tr.Slot && in.Target < end && !c.progData[in.Target] && in.Mnemonic == "lea":
			codeRefs = append(codeRefs, in.Target)
		case in.RIPRel && in.Target >= tr.Slot && in.Target < end && !c.progData[in.Target]:
			lit := int(in.Target - tr.Slot)
			if lit < off+in.Len || lit+8 > len(tr.Code) {
				c.fail("the %s at %#x refers to %#x, not to a literal after it in the slot", in.Mnemonic, pc, in.Target)
			}
			data[lit] = true
			if in.Branch == decode.BranchJmpIndirect {
				dest, known = binary.LittleEndian.Uint64(tr.Code[lit:]), true
			}
		}
		if known && !(dest >= tr.Slot && dest < end) && !c.exits[dest] {
			c.fail("the %s at %#x goes to %#x: neither in the slot nor where the site goes on", in.Mnemonic, pc, dest)
		}
		c.final, c.finalDest, c.finalKnown = in, dest, known
		off += in.Len
	}
	if len(data) != 0 {
		c.fail("a literal the code refers to overlaps an instruction: %v", data)
	}
	for _, a := range codeRefs {
		if !starts[a] {
			c.fail("a lea takes the address %#x, which is no instruction of the slot", a)
		}
	}
}

// finalJmp checks that the slot ends with a jmp back to the resume
// address (or, after a displaced branch, to its target or fall-through).
func (c *slotCheck) finalJmp() {
	s, last, final, finalDest := c.s, c.last, &c.final, c.finalDest
	if !c.finalKnown || final.Branch != decode.BranchJmp && final.Branch != decode.BranchJmpIndirect {
		c.fail("the slot ends with %s (%v), not a jmp whose target is known", final.Mnemonic, final.Branch)
	}
	switch {
	case last == nil || last.Branch == decode.BranchNone:
		if finalDest != s.Resume() {
			c.fail("the final jmp goes to %#x, not back to the resume address %#x", finalDest, s.Resume())
		}
	case last.Branch.Relative() && last.RelSize > 0:
		if finalDest != s.Resume() && finalDest != last.Target && finalDest != last.Addr+uint64(last.Len) {
			c.fail("the final jmp goes to %#x, not to the resume address %#x or the target %#x of the last displaced %s", finalDest, s.Resume(), last.Target, last.Mnemonic)
		}
	default:
		if finalDest != s.Resume() && finalDest != last.Addr+uint64(last.Len) {
			c.fail("the final jmp goes to %#x, not to the resume address %#x or after the last displaced %s", finalDest, s.Resume(), last.Mnemonic)
		}
	}
}

// installRemove checks the patches: install writes a jmp rel32 to the
// slot, then int3; remove undoes it, guarded by the slot (and the gate).
func (c *slotCheck) installRemove() {
	s, tr := c.s, c.tr
	ins := tr.Install
	if ins.Addr != s.PatchAddr || !bytes.Equal(ins.Old, s.Old) || len(ins.New) != s.Len {
		c.fail("install at %#x: % x -> % x; want %d bytes at %#x replacing % x", ins.Addr, ins.Old, ins.New, s.Len, s.PatchAddr, s.Old)
	}
	var in decode.X86Inst
	if err := c.dec.Decode(ins.New, ins.Addr, &in); err != nil || in.Len != 5 || ins.New[0] != 0xe9 || in.Branch != decode.BranchJmp || in.Target != tr.Slot {
		c.fail("install writes % x: not a jmp rel32 to the slot (%s to %#x, %v)", ins.New, in.Mnemonic, in.Target, err)
	}
	for _, b := range ins.New[5:] {
		if b != 0xcc {
			c.fail("install pads the jump with % x, not int3", ins.New[5:])
		}
	}
	rm := tr.Remove
	guard := []trampoline.Range{{Start: tr.Slot, End: c.end}}
	if c.h.Return != nil {
		guard = append(guard, trampoline.Range{Start: c.cfg.ReturnAddr - 4, End: c.cfg.ReturnAddr})
	}
	if rm.Addr != ins.Addr || !bytes.Equal(rm.Old, ins.New) || !bytes.Equal(rm.New, ins.Old) || !slices.Equal(rm.Guard, guard) {
		c.fail("remove %+v does not undo install %+v with the slot (and the gate) as its guard", rm, ins)
	}
}

// TestGenerateX86Shapes runs the checks of FuzzGenerateX86 on typical site
// shapes with every option bit, for a slot after the site, before it, and
// near the edge of the jump's reach.
func TestGenerateX86Shapes(t *testing.T) {
	sites := []string{
		"\x0f\x1f\x44\x00\x00",                     // nop5
		"\x66\x2e\x0f\x1f\x84\x00\x00\x00\x00\x00", // nop10
		"\x90\x0f\x1f\x44\x00\x00",                 // nop; nop5
		"\xf3\x0f\x1e\xfa\x0f\x1f\x44\x00\x00",     // endbr64; nop5
		"\x55\x48\x89\xe5\x48\x83\xec\x10",         // push %rbp; mov %rsp,%rbp; sub $0x10,%rsp
		"\xf3\x0f\x1e\xfa\x55\x48\x89\xe5\x41\x57", // endbr64; push %rbp; mov %rsp,%rbp; push %r15
		"\x48\x8d\x05\x10\x00\x00\x00",             // lea 0x10(%rip),%rax
		"\x85\xff\x74\x05\xb8\x01\x00\x00\x00",     // test %edi,%edi; je .+7; mov $1,%eax
		"\x53\x48\x89\xfb\xe8\x00\x01\x00\x00",     // push %rbx; mov %rdi,%rbx; call .+0x105
		"\x48\x89\xf8\xe3\xf0",                     // mov %rdi,%rax; jrcxz .-14
		"\x31\xc0\xc3\xcc\xcc",                     // xor %eax,%eax; ret
		"\xff\x25\x00\x00\x00\x00",                 // jmp *0(%rip)
	}
	for _, code := range sites {
		for opts := 0; opts < 256; opts++ {
			for _, delta := range []int32{0x10_0000, -0x10_0000, 0x7fff_0000} {
				checkGenerateX86(t, append([]byte(code), 0xc3), delta, uint8(opts))
			}
		}
	}
}
