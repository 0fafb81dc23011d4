package probe

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/probeopt/probeopt/bpf"
	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/plan"
)

// eBPF programs at live probes. LoadBPF verifies an object's programs in
// the kernel (bpf.Object.Verify), allocates its maps in memory the tracer
// shares with the traced process (a memfd mapped in both, package
// bpf/maps), compiles every program against them (package bpf/jit) and
// places the code in the process, read-execute. Attach then names a
// program and a spec: every site the spec resolves to runs the program
// from its trampoline slot, which builds the kernel's struct pt_regs from
// the live registers (package trampoline, x86call.go) and calls the code
// with the thread's stripe of the per-CPU maps; a uretprobe program runs
// from the return trampoline with the function's return value in rax.
// The tracer reads the maps while the process runs (BPF.Map: Lookup,
// Iterate, and maps.NewReader for ring buffers).
//
// A usdt program of an object written with libbpf's usdt.bpf.h reads its
// probe's arguments: Attach gives each note of the spec's files its
// argument specs in the map __bpf_usdt_specs and the site its spec ID as
// the cookie, as libbpf's bpf_program__attach_usdt does (or, with
// BPFOptions.USDTByAddress, the site's address in
// __bpf_usdt_ip_to_spec_id), and raises the note's semaphore like any
// USDT probe's. A note whose arguments libbpf refuses refuses the
// program's sites in its file (ReasonUSDTArg).
//
// A site that cannot take a trampoline is refused (ReasonNeedsTrampoline):
// a program never runs in the tracer at a trap. The code runs on the
// thread's stack, below the red zone: up to 6 KiB for a program with
// bpf-to-bpf calls (package bpf/jit), less than 1 KiB without; a thread on
// a smaller stack (a goroutine of a Go program) must not be probed.
//
// The maps are shared with children the tracer follows (Options.
// FollowForks): they inherit the mappings, as every process that maps a
// file shares a kernel uprobe's maps. A child's threads number their
// stripes apart from the parent's, so a per-CPU map's stripe may be
// written by a thread of each: an update of a per-CPU value by both at
// once may be lost (not tested). A process image after an exec has
// neither the maps nor the code: its sites are refused.
//
// Other limits: a thread beyond the per-thread stripes (128, fewer with
// large event rings) runs the programs with a stripe number past the
// per-CPU maps' copies, where their lookups return NULL; a signal handler
// that hits a probe while its thread runs a program in a slot runs the
// program nested, on the same stripe, so a plain read-modify-write of a
// per-CPU value by both can lose an update (the kernel runs no program
// nested in a task's uprobe). A return probe's hijacked return address
// shows as probeopt's return trampoline in get_stack's user stacks of
// the frames above it (the kernel shows the original address).

// ErrBPF means a BPF object or program cannot be used at probes: the
// error says why.
var ErrBPF = errors.New("BPF program not usable at probes")

// ReasonNeedsTrampoline is the Reason of a RejectedError for a site of a
// BPF program that cannot take a trampoline: programs run in slots only.
const ReasonNeedsTrampoline plan.Reason = "bpf-needs-trampoline"

// ReasonUSDTArg is the Reason of a RejectedError for a site of a program
// written with libbpf's usdt.bpf.h whose note has an argument libbpf
// refuses (the detail says which; see bpf.ErrUSDTArg).
const ReasonUSDTArg plan.Reason = "bpf-usdt-argument"

// BPFOptions tune LoadBPF; nil means the defaults.
type BPFOptions struct {
	// ArenaSize is the size in bytes of the memory holding the maps (in
	// the traced process and the tracer, memory used as the maps fill);
	// 0 means 64 MiB.
	ArenaSize int
	// USDTByAddress makes the programs written with libbpf's usdt.bpf.h
	// find their argument specs by the probe's address, in the map
	// __bpf_usdt_ip_to_spec_id that Attach fills (LINUX_HAS_BPF_COOKIE
	// reads 0), as libbpf's loader arranges on a kernel without BPF
	// cookies; get_attach_cookie then returns 0. By default they find
	// them by the cookie, as on a kernel with cookies.
	USDTByAddress bool
}

// BPF is a BPF object loaded into a traced process. Its methods are safe
// for concurrent use.
type BPF struct {
	t   *Tracer
	obj *bpf.Object
	// inst holds the maps and the compiled code; code is where each
	// program's code lies in the process.
	inst *bpf.Instance
	code map[string]uint64
	// bytes is each program's code, to check that a process has it.
	bytes map[string][]byte

	// usdt hands out the spec IDs of USDT attachments of a program
	// written with libbpf's usdt.bpf.h, nil without its maps.
	usdt   *bpf.USDTSpecs
	byAddr bool // BPFOptions.USDTByAddress

	mu    sync.Mutex
	links []*Link
	state bpfState // the platform's resources
}

// Link is a program attached to the sites of a spec.
type Link struct {
	b       *BPF
	Program string // the program's name
	Spec    string // the spec its sites come from
	probe   *Probe
	closed  bool
	usdt    *bpf.USDTLink // the spec IDs of a usdt.bpf.h program's attachment
	detach  func()        // what is left to undo once the probe is removed, or nil
}

// LoadBPF loads obj into the traced process (verifying its programs in
// the kernel first if Verify was not called): ErrPermission (package
// bpf) without the privilege, a *bpf.VerifierError for a rejected
// program, an error wrapping ErrBPF for an instruction, helper or map the
// JIT does not support.
func (t *Tracer) LoadBPF(obj *bpf.Object, opts *BPFOptions) (*BPF, error) {
	if obj == nil {
		return nil, fmt.Errorf("load a nil BPF object: %w", ErrBPF)
	}
	var o BPFOptions
	if opts != nil {
		o = *opts
	}
	if o.ArenaSize == 0 {
		o.ArenaSize = 64 << 20
	}
	if o.ArenaSize < 0 {
		return nil, fmt.Errorf("arena of %d bytes: %w", o.ArenaSize, ErrOptions)
	}
	return loadBPF(t, obj, &o)
}

// Object returns the loaded object.
func (b *BPF) Object() *bpf.Object { return b.obj }

// Map returns the map named name, or nil. The tracer reads and writes it
// while the process runs (Lookup, Iterate, Update, Delete; a ring buffer
// through maps.NewReader).
func (b *BPF) Map(name string) *maps.Map { return b.inst.Maps[name] }

// Printk returns a reader of the lines the programs write with
// trace_printk (bpf_printk), formatted as the kernel formats them (see
// bpf.PrintkReader).
func (b *BPF) Printk() (*bpf.PrintkReader, error) { return b.inst.Printk() }

// MapNames returns the names of the object's maps, sorted.
func (b *BPF) MapNames() []string {
	names := make([]string, 0, len(b.inst.Maps))
	for n := range b.inst.Maps {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// CodeAddr returns where the code of program name lies in the process,
// 0 if it has none.
func (b *BPF) CodeAddr(name string) uint64 { return b.code[name] }

// AttachOptions tune Attach; nil means the defaults.
type AttachOptions struct {
	// Cookie is what the program's get_attach_cookie returns at these
	// sites (link.UprobeOptions.Cookie of cilium/ebpf). For a usdt
	// program of an object with libbpf's usdt.bpf.h, it is what
	// bpf_usdt_cookie returns (bpf_usdt_opts.usdt_cookie of libbpf), and
	// get_attach_cookie returns the spec ID of each site's note.
	Cookie uint64
}

// Attach runs program prog at every site spec names. An empty spec means
// the target of the program's section (uprobe/PATH:SYM[+OFF],
// uretprobe/PATH:SYM; a bare section needs a spec). A uretprobe program
// attaches to the returns of the functions spec names (the spec may say
// %return or not). The error is the probe's, as for Tracer.Add.
//
// A usdt program of an object written with libbpf's usdt.bpf.h attaches
// to USDT probes only: each site's note gets its argument specs in the
// map __bpf_usdt_specs, and the site's cookie is their ID, as libbpf's
// bpf_program__attach_usdt does (see package bpf, usdt.go). The notes of a
// file are given their IDs when its first site is installed; a note
// whose arguments libbpf refuses refuses the file's sites of the spec
// (the error wraps bpf.ErrUSDTArg).
func (b *BPF) Attach(prog, spec string, opts *AttachOptions) (*Link, error) {
	var o AttachOptions
	if opts != nil {
		o = *opts
	}
	p := b.obj.Program(prog)
	if p == nil {
		return nil, fmt.Errorf("no program %q in the object: %w", prog, ErrBPF)
	}
	if b.code[prog] == 0 {
		return nil, fmt.Errorf("program %s: not compiled: %w", prog, ErrBPF)
	}
	if spec == "" {
		var err error
		if spec, err = SectionSpec(p.Section); err != nil {
			return nil, fmt.Errorf("program %s: %w", prog, err)
		}
	}
	if p.Section.Kind == bpf.Uretprobe && !strings.HasSuffix(spec, "%return") {
		spec += "%return"
	}
	if p.Section.Kind != bpf.Uretprobe && strings.HasSuffix(spec, "%return") {
		return nil, fmt.Errorf("program %s of section %s at the return probe %q: %w", prog, p.Section, spec, ErrBPF)
	}
	var ul *bpf.USDTLink
	if p.Section.Kind == bpf.USDT && b.usdt != nil {
		sp, err := parseSpec(spec)
		if err != nil {
			return nil, &SpecError{Spec: spec, Err: err}
		}
		if sp.es.Kind != elfscan.SpecUSDT {
			return nil, fmt.Errorf("program %s reads USDT arguments (usdt.bpf.h): %q is not a USDT probe: %w", prog, spec, ErrBPF)
		}
		ul = b.usdt.NewLink(o.Cookie)
	}
	pr, detach, err := attachBPF(b, prog, spec, o.Cookie, ul)
	if pr == nil {
		if ul != nil {
			ul.Release()
		}
		return nil, err
	}
	l := &Link{b: b, Program: prog, Spec: spec, probe: pr, usdt: ul, detach: detach}
	b.mu.Lock()
	b.links = append(b.links, l)
	b.mu.Unlock()
	return l, err
}

// AttachAll attaches every program whose section names its target, and
// returns the links made; the error joins those of the others.
func (b *BPF) AttachAll() ([]*Link, error) {
	var links []*Link
	var errs []error
	for _, p := range b.obj.Programs {
		if p.Section.Manual {
			continue
		}
		l, err := b.Attach(p.Name, "", nil)
		if l != nil {
			links = append(links, l)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("program %s: %w", p.Name, err))
		}
	}
	return links, errors.Join(errs...)
}

// Links returns the links made and not closed.
func (b *BPF) Links() []*Link {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*Link
	for _, l := range b.links {
		if !l.closed {
			out = append(out, l)
		}
	}
	return out
}

// Probe returns the probe of the link (its counts are in Tracer.Stats).
func (l *Link) Probe() *Probe { return l.probe }

// Close removes the program from its sites (one batch). The maps stay.
func (l *Link) Close() error {
	l.b.mu.Lock()
	if l.closed {
		l.b.mu.Unlock()
		return nil
	}
	l.closed = true
	l.b.mu.Unlock()
	err := l.b.t.Remove(l.probe)
	if l.detach != nil {
		l.detach()
	}
	if l.usdt != nil {
		l.usdt.Release()
	}
	return err
}

// SectionSpec returns the probe spec of a section's target: a path
// (starting with "/" or ".") names that file, any other name a module
// pattern, as libbpf resolves a bare library name (libc.so.6:malloc).
func SectionSpec(s bpf.Section) (string, error) {
	if s.Manual {
		return "", fmt.Errorf("section %s names no target: give a spec: %w", s, ErrBPF)
	}
	var target string
	switch {
	case s.Kind == bpf.USDT:
		target = "usdt:" + s.Provider + ":" + s.Name
	case s.Symbol == "":
		target = fmt.Sprintf("%#x", s.Offset)
	case s.Offset != 0:
		target = fmt.Sprintf("%s+%#x", s.Symbol, s.Offset)
	default:
		target = s.Symbol
	}
	if strings.HasPrefix(s.Path, "/") || strings.HasPrefix(s.Path, ".") {
		if s.Kind == bpf.USDT {
			return "usdt:" + s.Path + ":" + s.Provider + ":" + s.Name, nil
		}
		return "uprobe:" + s.Path + ":" + target, nil
	}
	return s.Path + ":" + target, nil
}
