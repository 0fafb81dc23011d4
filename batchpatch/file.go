package batchpatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// FileOptions tune ApplyFile. A nil *FileOptions means the defaults.
type FileOptions struct {
	// Offset translates a patch address into a file offset (for an ELF
	// file, a virtual address through the program headers). nil means
	// Patch.Addr already is a file offset.
	Offset func(addr uint64) (int64, error)
	// Perm is the mode of the new file; 0 means the source's.
	Perm os.FileMode
}

// image is a file held in memory, addressed by file offset.
type image []byte

func (m image) ReadMemory(addr uint64, buf []byte) error {
	if addr > uint64(len(m)) || uint64(len(buf)) > uint64(len(m))-addr {
		return fmt.Errorf("read %d bytes at offset %#x: past the end of the file (%d bytes)", len(buf), addr, len(m))
	}
	copy(buf, m[addr:])
	return nil
}

func (m image) WriteMemory(addr uint64, data []byte) error {
	if addr > uint64(len(m)) || uint64(len(data)) > uint64(len(m))-addr {
		return fmt.Errorf("write %d bytes at offset %#x: past the end of the file (%d bytes)", len(data), addr, len(m))
	}
	copy(m[addr:], data)
	return nil
}

// ApplyFile writes to dst a copy of src with the patches applied. The
// batch is validated as for a live process (sorted, no overlaps, old bytes
// present in src); src is never modified. dst is written to a temporary
// file in its directory and renamed into place, so it is either absent,
// its former self, or complete.
func ApplyFile(src, dst string, ps []Patch, opts *FileOptions) error {
	var o FileOptions
	if opts != nil {
		o = *opts
	}
	if same, err := sameFile(src, dst); err != nil {
		return fmt.Errorf("patch file %s: %w", src, err)
	} else if same {
		return fmt.Errorf("patch file %s into %s: %w", src, dst, ErrSameFile)
	}
	if err := Validate(ps); err != nil {
		return fmt.Errorf("patch file %s: %w", src, err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("patch file: %w", err)
	}
	fps := ps
	if o.Offset != nil {
		fps = make([]Patch, len(ps))
		for i, p := range ps {
			off, err := o.Offset(p.Addr)
			if err != nil {
				return fmt.Errorf("patch file %s: %w", src, &PatchError{Index: i, Addr: p.Addr, Err: err})
			}
			if off < 0 {
				return fmt.Errorf("patch file %s: %w", src, &PatchError{Index: i, Addr: p.Addr, Err: fmt.Errorf("negative file offset %d", off)})
			}
			fps[i] = p
			fps[i].Addr = uint64(off)
		}
		// Offsets keep the order of addresses within a segment, not
		// necessarily across segments.
		if err := validateTranslated(fps); err != nil {
			return fmt.Errorf("patch file %s: %w", src, err)
		}
	}
	if _, err := transact(image(data), fps, nil, identity(len(fps)), nil); err != nil {
		return fmt.Errorf("patch file %s: %w", src, err)
	}
	perm := o.Perm
	if perm == 0 {
		st, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("patch file: %w", err)
		}
		perm = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return fmt.Errorf("patch file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("patch file: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("patch file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("patch file: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("patch file: %w", err)
	}
	return nil
}

// validateTranslated checks translated patches for overlaps in file
// offset order.
func validateTranslated(ps []Patch) error {
	ix := identity(len(ps))
	sorted := make([]Patch, len(ps))
	copy(sorted, ps)
	Sort(sorted)
	if err := Validate(sorted); err != nil {
		var pe *PatchError
		if errors.As(err, &pe) {
			for i := range ix {
				if ps[i].Addr == sorted[pe.Index].Addr {
					pe.Index = i
					break
				}
			}
		}
		return err
	}
	copy(ps, sorted)
	return nil
}

// sameFile reports whether dst names src (dst not existing is fine).
func sameFile(src, dst string) (bool, error) {
	a, err := os.Stat(src)
	if err != nil {
		return false, err
	}
	b, err := os.Stat(dst)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}
