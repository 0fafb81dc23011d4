// Package reason holds Code, the one type of the stable, machine-readable
// codes that say why an instruction or a site was refused or how it is
// handled: xol's refusals (xol.RefuseSyscall...), trampoline's site
// refusals (trampoline.RefuseShort...), plan's decision reasons (plan.Reason
// is an alias of Code) and the live engine's refusals (probe.ReasonPatchFailed...).
//
// Each code's string is written once, as a constant of the package that
// coins it; a package that passes on another's code names that constant
// (plan.ReasonSyscall is xol.RefuseSyscall), so no table maps one
// vocabulary onto another. The strings are printed in reports (scan and
// explain JSON) and documented in the README: they never change.
//
// The package owns the type and the codes more than one package coins on
// its own; it does not say what a code means (plan.Reasons does).
package reason

// Code is a stable, machine-readable reason code, such as "syscall" or
// "trampoline-nop".
type Code string

// Codes coined by more than one package.
const (
	// Undecodable: the bytes do not decode as an instruction (a plan
	// decision; a trampoline site whose displaced instruction does not
	// decode).
	Undecodable Code = "undecodable"
	// KernelUprobe: a kernel uprobe (or another tracer's breakpoint)
	// holds the site: its bytes in memory hold an int3 that the file does
	// not have and probeopt did not write (a refusal of the live engine),
	// or one came over a site probeopt had written (why a live site was
	// taken out). The kernel writes the file's byte back when its uprobe
	// goes, which would tear a jump of probeopt's.
	KernelUprobe Code = "kernel-uprobe"
)
