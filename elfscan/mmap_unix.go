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

// fileID returns the device and inode numbers of a file.
func fileID(st os.FileInfo) (dev, ino uint64) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Dev), uint64(sys.Ino)
	}
	return 0, 0
}
