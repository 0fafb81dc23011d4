// Package hostcpu is the one reader of the machine's CPU description: the
// vendor, family, model and stepping, the model name, the feature flags
// and the few features the project depends on (5-level paging, user-mode
// rdfsbase, rdpid, lahf in 64-bit mode), from /proc/cpuinfo and
// /proc/self/auxv. Host reads them once, on first use, and is safe for
// concurrent use; Parse is the same reading as a pure function, for tests.
//
// It also owns the rule that turns the CPU vendor into the decoder's
// vendor (Info.X86Vendor): which x86 vendors follow Intel's rules, which
// follow AMD's, and which are not characterised.
//
// It does not execute cpuid or any other instruction, probe the kernel
// beyond those two files, or decide what a caller does with a feature:
// package trampoline chooses its code from Info's features, package
// decode its lengths from the vendor, and so on. Only Linux is read; on
// other systems Host describes an unknown CPU (Info.Err wraps
// ErrNotSupported).
package hostcpu
