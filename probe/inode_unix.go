//go:build unix

package probe

import (
	"os"
	"syscall"
)

// sameInode reports whether path names a file with the given inode number.
func sameInode(path string, inode uint64) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && uint64(sys.Ino) == inode
}
