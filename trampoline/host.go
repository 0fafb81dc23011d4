package trampoline

import "github.com/probeopt/probeopt/internal/hostcpu"

// Features are the CPU and kernel features the generated code may rely
// on. The tracer and the tracee run on the same machine, so the tracer's
// own view (HostFeatures) applies to the tracee.
type Features struct {
	// FSGSBase: rdfsbase works in user mode (the kernel reports
	// HWCAP2_FSGSBASE in AT_HWCAP2; Linux 5.9 and later).
	FSGSBase bool
	// LAHF: lahf and sahf work in 64-bit mode (CPUID lahf_lm).
	LAHF bool
}

// ThreadPointer returns the best thread-pointer source the features
// allow: ThreadFSBase, else ThreadTCB.
func (f Features) ThreadPointer() ThreadPointer {
	if f.FSGSBase {
		return ThreadFSBase
	}
	return ThreadTCB
}

// Flags returns the best way to save the flags the features allow.
func (f Features) Flags() FlagsSave {
	if f.LAHF {
		return FlagsLAHF
	}
	return FlagsPushf
}

// HostFeatures returns the features of this machine, from hostcpu.Host:
// FSGSBase from HWCAP2_FSGSBASE in the auxiliary vector, LAHF from the
// lahf_lm flag of /proc/cpuinfo. A feature it cannot confirm is reported
// absent, and all are absent on a machine that is not x86-64.
func HostFeatures() Features {
	h := hostcpu.Host()
	if h.Arch != "amd64" {
		return Features{}
	}
	return Features{FSGSBase: h.FSGSBase, LAHF: h.LAHF}
}
