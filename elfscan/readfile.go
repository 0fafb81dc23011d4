package elfscan

import (
	"io"
	"os"
)

// readFile reads size bytes of fh into memory.
func readFile(fh *os.File, size int64) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(fh, 0, size), data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
