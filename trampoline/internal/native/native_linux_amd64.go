package native

// Supported reports whether Call and Loop run code on this platform.
const Supported = true

func call(fn uintptr, r *Regs, stack uintptr)
func loop(fn uintptr, r *Regs, stack uintptr, n uint64)

// Call calls fn (a SysV function: call, ret) with the registers of r,
// switching to the stack whose top (highest address, 16-byte aligned) is
// stack, and stores the registers fn returned with into r. The stack must
// be large enough for fn and must not be Go memory the garbage collector
// moves (use mmap).
func Call(fn uintptr, r *Regs, stack uintptr) {
	r.Flags = r.Flags&ArithFlags | 2
	call(fn, r, stack)
}

// Loop calls fn n times (n > 0) on the stack whose top is stack, with rdi
// and rsi from r before each call (the other registers are whatever the
// previous call left). It stores fn's last rax in r.GPR[0].
func Loop(fn uintptr, r *Regs, stack uintptr, n uint64) {
	if n == 0 {
		return
	}
	loop(fn, r, stack, n)
}
