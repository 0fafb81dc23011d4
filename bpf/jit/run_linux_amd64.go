package jit

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// callCode is in run_linux_amd64.s.
func callCode(fn, ctx, stripe, stack uintptr) uint64

// callCodeSaved (saved_linux_amd64.s) calls the code with sentinels in
// the registers it must keep, for the tests of the calling convention.
func callCodeSaved(fn, ctx, stack uintptr) (ret, changed uint64)

// runStack is the size of the stack a Func runs on: eight frames of the
// BPF stack and their saved registers, the helpers' frames, and room.
const runStack = 64 << 10

// Func is compiled code placed in this process: written while the memory
// is writable, then made read-execute (never both), with a stack of its
// own to run on. The tests, the kernel oracle and the benchmarks run
// programs through it; in a traced process the slots call the code.
type Func struct {
	code  []byte
	stack []byte
}

// Load places code in this process.
func Load(code []byte) (*Func, error) {
	if len(code) == 0 {
		return nil, fmt.Errorf("load empty code: %w", ErrInvalid)
	}
	page := unix.Getpagesize()
	n := (len(code) + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map code: %w", err)
	}
	copy(mem, code)
	if err := unix.Mprotect(mem, unix.PROT_READ|unix.PROT_EXEC); err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("make code read-execute: %w", err)
	}
	// The stack, with an inaccessible guard page below it.
	stack, err := unix.Mmap(-1, 0, runStack+page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("map stack: %w", err)
	}
	if err := unix.Mprotect(stack[:page], unix.PROT_NONE); err != nil {
		unix.Munmap(mem)
		unix.Munmap(stack)
		return nil, fmt.Errorf("stack guard: %w", err)
	}
	return &Func{code: mem, stack: stack}, nil
}

// Addr is the address of the code.
func (f *Func) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(&f.code[0]))) }

// Run calls the code with ctx (the address of a struct pt_regs, or of the
// test's context) and the calling thread's stripe number, and returns R0.
// Calls on one Func must not overlap: it has one stack.
func (f *Func) Run(ctx unsafe.Pointer, stripe int) uint64 {
	top := uintptr(unsafe.Pointer(&f.stack[len(f.stack)-1])) + 1
	return callCode(uintptr(unsafe.Pointer(&f.code[0])), uintptr(ctx), uintptr(stripe), top)
}

// RunStackCtx calls the code as a probe slot does: with a copy of ctx
// (at most 256 bytes) on the code's stack just above the stack pointer,
// and returns R0.
func (f *Func) RunStackCtx(ctx []byte, stripe int) uint64 {
	if len(ctx) > 256 {
		ctx = ctx[:256]
	}
	at := len(f.stack) - 256
	copy(f.stack[at:], ctx)
	p := uintptr(unsafe.Pointer(&f.stack[at]))
	return callCode(uintptr(unsafe.Pointer(&f.code[0])), p, uintptr(stripe), p)
}

// Close unmaps the code and the stack.
func (f *Func) Close() error {
	err1 := unix.Munmap(f.code)
	err2 := unix.Munmap(f.stack)
	if err1 != nil {
		return fmt.Errorf("unmap code: %w", err1)
	}
	if err2 != nil {
		return fmt.Errorf("unmap stack: %w", err2)
	}
	return nil
}
