package proc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrBadMaps means a line of a maps file could not be parsed.
var ErrBadMaps = errors.New("malformed maps line")

// ParseMaps parses the text of /proc/PID/maps: one mapping per line,
// "start-end perms offset dev inode [path]". The path keeps inner spaces;
// a " (deleted)" suffix is kept as the kernel prints it.
func ParseMaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			continue
		}
		m, err := parseMapsLine(text)
		if err != nil {
			return nil, fmt.Errorf("maps line %d %q: %w", line, text, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	return out, nil
}

func parseMapsLine(s string) (Mapping, error) {
	var m Mapping
	fields := make([]string, 0, 5)
	rest := s
	for len(fields) < 5 {
		rest = strings.TrimLeft(rest, " ")
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			if rest == "" {
				return m, ErrBadMaps
			}
			fields = append(fields, rest)
			rest = ""
			continue
		}
		fields = append(fields, rest[:i])
		rest = rest[i:]
	}
	if len(fields) < 5 {
		return m, ErrBadMaps
	}
	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return m, ErrBadMaps
	}
	var err error
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, ErrBadMaps
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil || m.End < m.Start {
		return m, ErrBadMaps
	}
	perms := fields[1]
	if len(perms) != 4 {
		return m, ErrBadMaps
	}
	m.Read = perms[0] == 'r'
	m.Write = perms[1] == 'w'
	m.Exec = perms[2] == 'x'
	m.Shared = perms[3] == 's'
	if m.Offset, err = strconv.ParseUint(fields[2], 16, 64); err != nil {
		return m, ErrBadMaps
	}
	m.Dev = fields[3]
	if m.Inode, err = strconv.ParseUint(fields[4], 10, 64); err != nil {
		return m, ErrBadMaps
	}
	m.Path = strings.TrimLeft(rest, " ")
	return m, nil
}

// FindMapping returns the mapping that contains addr.
func FindMapping(maps []Mapping, addr uint64) (Mapping, bool) {
	for _, m := range maps {
		if m.Contains(addr) {
			return m, true
		}
	}
	return Mapping{}, false
}
