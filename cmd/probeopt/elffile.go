package main

// Finding the files to scan and telling why one is skipped. Reading them
// is the elfscan package's work.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/probeopt/probeopt/elfscan"
)

// scanTarget is one file to scan.
type scanTarget struct {
	path string
	// walked is set for a file found in a directory: not being ELF (or
	// being an ELF file of another kind) skips it instead of failing.
	walked bool
}

// skipCounts counts the files a directory walk skipped, by reason.
type skipCounts map[string]int

func (s skipCounts) total() int {
	n := 0
	for _, v := range s {
		n += v
	}
	return n
}

// String lists the reasons: "not ELF: 3, symlink: 1".
func (s skipCounts) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s: %d", k, s[k])
	}
	return out
}

// expandPaths turns the PATH arguments into files: a file stands for
// itself, a directory for the regular files below it (symbolic links in a
// directory are skipped, so that a file is not scanned twice). Errors of
// the walk are returned with the files found.
func expandPaths(args []string, skipped skipCounts) ([]scanTarget, []error) {
	var targets []scanTarget
	var errs []error
	for _, arg := range args {
		st, err := os.Stat(arg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !st.IsDir() {
			targets = append(targets, scanTarget{path: arg})
			continue
		}
		err = filepath.WalkDir(arg, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				errs = append(errs, err)
				return nil
			}
			switch {
			case d.IsDir():
			case d.Type()&fs.ModeSymlink != 0:
				skipped["symlink"]++
			case !d.Type().IsRegular():
				skipped["not a regular file"]++
			default:
				targets = append(targets, scanTarget{path: p, walked: true})
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return targets, errs
}

// skipReason says why a file found in a directory is skipped rather than
// reported as a failure, or "" when the error is a real failure.
func skipReason(err error) string {
	var ue *elfscan.UnsupportedError
	switch {
	case errors.Is(err, elfscan.ErrNotELF):
		return "not ELF"
	case errors.As(err, &ue):
		return "unsupported ELF"
	case errors.Is(err, fs.ErrPermission):
		return "not readable"
	}
	return ""
}
