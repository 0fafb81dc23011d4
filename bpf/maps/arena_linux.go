package maps

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// NewArena makes an arena of size bytes in a memfd mapped shared in this
// process; its Base is this process's address until Rebase. Another
// process maps the same memory from FD (the tracee, through the tracer's
// remote mmap), and then Rebase gives the arena that process's address,
// before any map is allocated.
func NewArena(size int) (*Arena, error) {
	fd, err := unix.MemfdCreate("probeopt-bpf", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd for the arena: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("size the arena: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("map the arena: %w", err)
	}
	return &Arena{mem: mem, base: uint64(uintptr(unsafe.Pointer(&mem[0]))), fd: fd}, nil
}

// FD is the arena's memfd, or -1 for an arena over memory of the caller.
func (a *Arena) FD() int {
	if a.mem == nil || a.fd == 0 {
		return -1
	}
	return a.fd
}

// Close unmaps an arena made by NewArena and closes its memfd.
func (a *Arena) Close() error {
	if a.fd == 0 {
		return nil
	}
	err := unix.Munmap(a.mem)
	unix.Close(a.fd)
	a.mem, a.fd = nil, 0
	if err != nil {
		return fmt.Errorf("unmap the arena: %w", err)
	}
	return nil
}
