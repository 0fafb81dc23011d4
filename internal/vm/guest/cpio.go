package guest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// cpioWriter writes an archive in the "newc" format the kernel unpacks
// as an initramfs: for each entry a 110-byte ASCII header, the name and
// the data, each padded to 4 bytes, and a TRAILER!!! entry at the end.
type cpioWriter struct {
	w    *bufio.Writer
	off  int64
	ino  int
	dirs map[string]bool
	err  error
}

func newCPIO(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriterSize(w, 1<<20), dirs: map[string]bool{"": true, "/": true}}
}

// Mode bits of the entry types (the S_IF* values of stat(2)).
const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
	cpioChar    = 0o020000
)

func (c *cpioWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// header writes the header and name of one entry; name is absolute.
func (c *cpioWriter) header(name string, mode uint32, size int64, rdevMajor, rdevMinor uint32) {
	name = strings.TrimPrefix(name, "/")
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(h))
	c.write([]byte(name))
	c.write([]byte{0})
	c.pad()
}

// mkdirAll adds dir and its parents that are not in the archive yet.
func (c *cpioWriter) mkdirAll(dir string) {
	dir = path.Clean("/" + dir)
	if c.dirs[dir] {
		return
	}
	c.mkdirAll(path.Dir(dir))
	c.dirs[dir] = true
	c.header(dir, cpioDir|0o755, 0, 0, 0)
}

// bytes adds a file with the given content and permission bits.
func (c *cpioWriter) bytes(name string, perm uint32, data []byte) {
	c.mkdirAll(path.Dir(name))
	c.header(name, cpioFile|perm&0o7777, int64(len(data)), 0, 0)
	c.write(data)
	c.pad()
}

// file adds the host file src (symbolic links followed) as name, keeping
// its permission bits.
func (c *cpioWriter) file(name, src string) {
	if c.err != nil {
		return
	}
	f, err := os.Open(src)
	if err != nil {
		c.err = err
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		c.err = err
		return
	}
	if !st.Mode().IsRegular() {
		c.err = fmt.Errorf("%s: not a regular file", src)
		return
	}
	c.mkdirAll(path.Dir(name))
	c.header(name, cpioFile|uint32(st.Mode().Perm()), st.Size(), 0, 0)
	n, err := io.Copy(c.w, f)
	c.off += n
	if err == nil && n != st.Size() {
		err = fmt.Errorf("%s: changed size while read", src)
	}
	if err != nil && c.err == nil {
		c.err = err
	}
	c.pad()
}

// symlink adds a symbolic link name -> target.
func (c *cpioWriter) symlink(name, target string) {
	c.mkdirAll(path.Dir(name))
	c.header(name, cpioSymlink|0o777, int64(len(target)), 0, 0)
	c.write([]byte(target))
	c.pad()
}

// charDev adds a character device node.
func (c *cpioWriter) charDev(name string, perm, major, minor uint32) {
	c.mkdirAll(path.Dir(name))
	c.header(name, cpioChar|perm, 0, major, minor)
}

// close writes the trailer and flushes.
func (c *cpioWriter) close() error {
	c.header("TRAILER!!!", 0, 0, 0, 0)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
