package trampoline

import (
	"errors"
	"fmt"

	"github.com/probeopt/probeopt/internal/reason"
)

// Errors of the package. Functions wrap them with context; compare with
// errors.Is.
var (
	// ErrNotSite means the bytes at an address cannot be rewritten into a
	// jump to a trampoline. Such errors are *SiteError values that say why.
	ErrNotSite = errors.New("not a trampoline site")
	// ErrOutOfReach means an address the generated code must reach with a
	// 32-bit displacement (the site, the place it resumes at, a
	// RIP-relative operand of a displaced instruction) lies beyond +-2 GiB
	// of the slot, or on arm64 one it must reach with a b (+-128 MiB)
	// without a scratch register: the slot area must be placed nearer (see
	// Place).
	ErrOutOfReach = errors.New("beyond the reach of the slot")
	// ErrNoPlace means Place found no free address range that reaches
	// every address given.
	ErrNoPlace = errors.New("no free range within +-2 GiB of every address")
	// ErrAreaFull means an Area has no room left for another slot.
	ErrAreaFull = errors.New("slot area full")
	// ErrConfig means a Config or Handler is inconsistent: a counter index
	// outside the data area, an event without a ring, a return probe
	// without a thread table or return trampoline.
	ErrConfig = errors.New("invalid trampoline configuration")
	// ErrEncode means generated code did not decode back to the
	// instructions intended. It reports a defect of the generator, never
	// of the input.
	ErrEncode = errors.New("generated code does not decode as intended")
	// ErrLayout means a data area's header is missing or inconsistent with
	// the memory given to a reader.
	ErrLayout = errors.New("invalid data area layout")
)

// Site refusal codes, stable strings for reports (SiteError.Code), of the
// project's one reason-code type (see xol's Refuse* codes and plan.Reason).
const (
	// RefuseUndecodable: an instruction the jump would replace does not
	// decode.
	RefuseUndecodable = reason.Undecodable
	// RefuseShort: the code ends (the function ends) before 5 bytes of
	// whole instructions.
	RefuseShort reason.Code = "short"
	// RefuseNotRelocatable: a displaced instruction cannot run from
	// another address (xol refuses it); Err holds xol's refusal.
	RefuseNotRelocatable reason.Code = "not-relocatable"
	// RefuseNotBoostable: a displaced instruction can only be stepped out
	// of line, not run from the slot and followed by a jump (popf; an
	// indirect or far call; a RIP-relative operand that needs a scratch
	// register).
	RefuseNotBoostable reason.Code = "not-boostable"
	// RefuseMidRun: a call, or a branch that needs stubs, is displaced but
	// is not the last displaced instruction: its return address or its
	// fall-through would point into the replaced bytes.
	RefuseMidRun reason.Code = "call-not-last"
	// RefuseNoDetour: the site is not a NOP site and detours were not
	// asked for.
	RefuseNoDetour reason.Code = "no-detour"
)

// SiteError says why a site cannot take a trampoline.
type SiteError struct {
	Addr   uint64      // the probe address
	Code   reason.Code // one of the Refuse* codes
	Reason string      // a sentence for a person
	Err    error       // the underlying error (a decode or xol error), or nil
}

func (e *SiteError) Error() string {
	s := fmt.Sprintf("no trampoline at %#x (%s): %s", e.Addr, e.Code, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrNotSite) true.
func (e *SiteError) Is(target error) bool { return target == ErrNotSite }

// Unwrap returns the underlying error.
func (e *SiteError) Unwrap() error { return e.Err }

func siteErr(addr uint64, code reason.Code, err error, format string, args ...any) error {
	return &SiteError{Addr: addr, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}
}
