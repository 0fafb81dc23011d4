package trampoline

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
