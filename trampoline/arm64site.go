package trampoline

import (
	"encoding/binary"
	"errors"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/xol"
)

// arm64 words the site analysis recognizes.
const (
	a64NopWord uint32 = 0xD503201F
	// The BTI hint: hint #32, #34, #36, #38 (bti, bti c, bti j, bti jc).
	a64BTIMask uint32 = 0xFFFFFF3F
	a64BTIWord uint32 = 0xD503241F
)

// MaxReachARM64 is the largest distance PlaceOptions.Reach should allow
// for arm64 slot areas: the reach of b (128 MiB) less 1 MiB, so that a
// relocated conditional branch, adr or literal load of a site (whose
// target lies within 1 MiB of it) is reached from the slot by an inverted
// short branch over a b, or by code that materializes the address, never
// through a scratch register.
const MaxReachARM64 = 1<<27 - 1<<20

// SiteARM64 is an arm64 probe site: one instruction word replaced by a b
// to the slot.
type SiteARM64 struct {
	// Addr is the probe address.
	Addr uint64
	// Kind is SiteNop (a nop, such as a USDT site: nothing that must run
	// is displaced) or SiteDetour (the instruction runs, relocated, in
	// the slot).
	Kind SiteKind
	// PatchAddr is where the b is written: Addr, or Addr+4 when a bti at
	// Addr is kept.
	PatchAddr uint64
	// Old is the instruction word at PatchAddr before the rewrite.
	Old uint32
	// Inst is the decoded instruction at PatchAddr.
	Inst decode.ARM64Inst
	// Calls reports that the displaced instruction is a call (bl, blr):
	// the slot sets x30 to PatchAddr+4, so the callee returns to the
	// original code, not to the slot.
	Calls bool
}

// Resume is the address after the replaced word, where the slot goes on
// when the displaced instruction falls through.
func (s *SiteARM64) Resume() uint64 { return s.PatchAddr + 4 }

// Reach lists the addresses the slot must reach with a b: the site, the
// resume address, and the target of a displaced direct branch, adr or
// literal load. Pass them to Place with PlaceOptions.Reach set to
// MaxReachARM64. (An adrp's page is materialized in a register and
// needs no reach.)
func (s *SiteARM64) Reach() []uint64 {
	out := []uint64{s.PatchAddr, s.Resume()}
	if s.Kind == SiteDetour && s.Inst.PCRel && s.Inst.Mnemonic != "adrp" {
		out = append(out, s.Inst.Target)
	}
	return out
}

// AnalyzeARM64 decides how the arm64 site at addr is rewritten. code
// holds the bytes at addr as they are in memory: at least 4 bytes, 8 when
// a bti at addr is kept. addr must be a multiple of 4.
//
// An arm64 site is rewritten into a single b (+-128 MiB) to a slot of its
// own, so exactly one instruction is displaced: a branch elsewhere in the
// function to PatchAddr lands on the b and enters the slot as the site's
// own execution would, and no branch can land inside the replaced bytes.
// The checks over the whole function that remain are the caller's
// (package plan): the instruction boundary at addr (trivial on arm64 but
// for data in text), and that addr does not lie inside a load/store
// exclusive sequence (ldxr ... stxr): the slot's own memory accesses and
// exclusives clear the exclusive monitor, so the store-exclusive would
// fail every time and the loop around it would never end.
//
// A bti at addr (a landing pad for indirect branches when the text is
// guarded by BTI) stays unless opts.ReplaceEndbr is set, and the b
// replaces the instruction after it. A nop (0xD503201F) is a NOP site;
// with opts.NopOnly every other instruction is refused. An instruction
// that xol.CheckARM64 refuses (exclusives, svc, brk, privileged system
// instructions) or that cannot run from the slot without a scratch
// register (a blr x30) is refused with a *SiteError (errors.Is
// ErrNotSite). opts.Vendor does not apply.
func AnalyzeARM64(addr uint64, code []byte, opts *SiteOptions) (*SiteARM64, error) {
	var o SiteOptions
	if opts != nil {
		o = *opts
	}
	if addr%4 != 0 {
		return nil, siteErr(addr, RefuseUndecodable, nil, "an arm64 instruction address must be a multiple of 4")
	}
	at := 0
	if !o.ReplaceEndbr && len(code) >= 4 && binary.LittleEndian.Uint32(code)&a64BTIMask == a64BTIWord {
		at = 4
	}
	if len(code) < at+4 {
		return nil, siteErr(addr, RefuseShort, nil, "%d bytes of code; the b needs 4 at %#x", len(code), addr+uint64(at))
	}
	pa := addr + uint64(at)
	inst, err := decode.DecodeARM64(code[at:], pa)
	if err != nil {
		return nil, siteErr(addr, RefuseUndecodable, err, "the word at %#x does not decode", pa)
	}
	s := &SiteARM64{Addr: addr, PatchAddr: pa, Old: inst.Word, Inst: inst, Kind: SiteDetour}
	if inst.Word == a64NopWord {
		s.Kind = SiteNop
		return s, nil
	}
	if o.NopOnly {
		return nil, siteErr(addr, RefuseNoDetour, nil, "not a nop, and detours are off")
	}
	if _, err := xol.CheckARM64(&inst); err != nil {
		return nil, siteErr(addr, RefuseNotRelocatable, err, "the %s at %#x cannot run from another address", inst.Text(), pa)
	}
	// Relocate it for a slot next to it, without a scratch register:
	// what fails there fails everywhere.
	if _, err := xol.RelocateARM64(code[at:at+4], pa, pa+8, &xol.ARM64RelocOptions{Return: true, NoScratch: true, Live: true}); err != nil {
		var re *xol.RefusalError
		if errors.As(err, &re) && re.Code == xol.RefuseNoScratch {
			return nil, siteErr(addr, RefuseNotBoostable, err, "the %s at %#x needs x16 or x17 to run from the slot", inst.Text(), pa)
		}
		return nil, siteErr(addr, RefuseNotRelocatable, err, "the %s at %#x cannot be relocated", inst.Text(), pa)
	}
	s.Calls = inst.Branch == decode.BranchCall || inst.Branch == decode.BranchCallIndirect
	return s, nil
}
