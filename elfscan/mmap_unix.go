//go:build linux || darwin || freebsd || netbsd || openbsd

package elfscan

import (
	"os"
	"syscall"
)

// mapFile maps the file read-only; the returned function unmaps it.
func mapFile(fh *os.File, size int64) ([]byte, func() error, error) {
	if size == 0 {
		return nil, func() error { return nil }, nil
	}
	if int64(int(size)) != size {
		return readFile(fh, size)
	}
	data, err := syscall.Mmap(int(fh.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return readFile(fh, size)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
