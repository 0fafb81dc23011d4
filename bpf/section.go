package bpf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors of the package.
var (
	// ErrSection means a section name that is not a probe this package
	// attaches (kprobes, tracepoints, XDP ...), or a malformed one.
	ErrSection = errors.New("not a uprobe, uretprobe or usdt section")
	// ErrRejected means the kernel's verifier refused a program; the
	// error is a *VerifierError with the log.
	ErrRejected = errors.New("rejected by the kernel's verifier")
	// ErrPermission means the process may not load BPF programs.
	ErrPermission = errors.New("no permission to load BPF programs (needs CAP_BPF and CAP_PERFMON, or root)")
	// ErrNotVerified means Instantiate was called before Verify.
	ErrNotVerified = errors.New("program not verified by the kernel")
	// ErrNotSupported means this system cannot load BPF programs.
	ErrNotSupported = errors.New("BPF not supported on this system")
)

// Kind is what a program attaches to.
type Kind int

// The kinds of section.
const (
	Uprobe Kind = iota + 1
	Uretprobe
	USDT
)

func (k Kind) String() string {
	switch k {
	case Uprobe:
		return "uprobe"
	case Uretprobe:
		return "uretprobe"
	case USDT:
		return "usdt"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Section is where a program attaches, as libbpf reads its ELF section
// name. Manual is true for a bare "uprobe", "uretprobe" or "usdt": the
// target is given when attaching.
type Section struct {
	Kind   Kind
	Manual bool
	// Sleepable is true for the ".s" variants (uprobe.s/...).
	Sleepable bool
	// Path is the binary or library, as written (libbpf resolves a bare
	// library name through the library search path).
	Path string
	// Symbol and Offset (bytes from the symbol, or a file address when
	// Symbol is empty) for uprobe and uretprobe.
	Symbol string
	Offset uint64
	// Provider and Name for usdt.
	Provider, Name string
}

// ParseSection parses a section name the way libbpf does:
// uprobe/PATH:SYM[+OFF], uprobe/PATH:0xADDR, uretprobe/PATH:SYM[+OFF],
// usdt/PATH:PROVIDER:NAME, and the bare uprobe, uretprobe and usdt (with
// the .s sleepable variants of the probes).
func ParseSection(name string) (Section, error) {
	kind, rest, _ := strings.Cut(name, "/")
	var s Section
	switch kind {
	case "uprobe", "uprobe.s":
		s.Kind = Uprobe
	case "uretprobe", "uretprobe.s":
		s.Kind = Uretprobe
	case "usdt":
		s.Kind = USDT
	default:
		return Section{}, fmt.Errorf("section %q: %w", name, ErrSection)
	}
	s.Sleepable = strings.HasSuffix(kind, ".s")
	if !strings.Contains(name, "/") {
		s.Manual = true
		return s, nil
	}
	if s.Kind == USDT {
		// PATH may hold colons no more than libbpf allows: the last two
		// fields are the provider and the name.
		i := strings.LastIndex(rest, ":")
		if i < 0 {
			return Section{}, fmt.Errorf("section %q: want usdt/PATH:PROVIDER:NAME: %w", name, ErrSection)
		}
		j := strings.LastIndex(rest[:i], ":")
		if j <= 0 || i == len(rest)-1 || j+1 == i {
			return Section{}, fmt.Errorf("section %q: want usdt/PATH:PROVIDER:NAME: %w", name, ErrSection)
		}
		s.Path, s.Provider, s.Name = rest[:j], rest[j+1:i], rest[i+1:]
		return s, nil
	}
	i := strings.LastIndex(rest, ":")
	if i <= 0 || i == len(rest)-1 {
		return Section{}, fmt.Errorf("section %q: want %s/PATH:SYMBOL[+OFFSET]: %w", name, kind, ErrSection)
	}
	s.Path, s.Symbol = rest[:i], rest[i+1:]
	if sym, off, ok := strings.Cut(s.Symbol, "+"); ok {
		v, err := strconv.ParseUint(off, 0, 64)
		if err != nil || sym == "" {
			return Section{}, fmt.Errorf("section %q: offset %q: %w", name, off, ErrSection)
		}
		s.Symbol, s.Offset = sym, v
	} else if strings.HasPrefix(s.Symbol, "0x") {
		v, err := strconv.ParseUint(s.Symbol, 0, 64)
		if err != nil {
			return Section{}, fmt.Errorf("section %q: address %q: %w", name, s.Symbol, ErrSection)
		}
		s.Symbol, s.Offset = "", v
	}
	return s, nil
}

// String is the section name libbpf would read as s.
func (s Section) String() string {
	kind := s.Kind.String()
	if s.Sleepable {
		kind += ".s"
	}
	switch {
	case s.Manual:
		return kind
	case s.Kind == USDT:
		return fmt.Sprintf("%s/%s:%s:%s", kind, s.Path, s.Provider, s.Name)
	case s.Symbol == "":
		return fmt.Sprintf("%s/%s:%#x", kind, s.Path, s.Offset)
	case s.Offset != 0:
		return fmt.Sprintf("%s/%s:%s+%#x", kind, s.Path, s.Symbol, s.Offset)
	}
	return fmt.Sprintf("%s/%s:%s", kind, s.Path, s.Symbol)
}
