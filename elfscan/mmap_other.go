//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package elfscan

import "os"

// mapFile reads the whole file.
func mapFile(fh *os.File, size int64) ([]byte, func() error, error) {
	return readFile(fh, size)
}

// fileID returns zeros: the system has no device and inode numbers here.
func fileID(st os.FileInfo) (dev, ino uint64) { return 0, 0 }
