package bpf

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/probeopt/probeopt/bpf/jit"
	"github.com/probeopt/probeopt/bpf/maps"
)

// Object is a BPF ELF object: its programs and maps.
type Object struct {
	// Spec is the object as cilium/ebpf read it.
	Spec *ebpf.CollectionSpec
	// Programs are the object's probe programs, by name.
	Programs []*Program
}

// Program is one probe program of an object.
type Program struct {
	Name    string
	Section Section
	// Spec is the program as read, its type set to what its section
	// implies.
	Spec *ebpf.ProgramSpec
	// Insns are the instructions the kernel accepted (set by Verify),
	// bpf-to-bpf calls linked and map references by name.
	Insns asm.Instructions
}

// Open reads a BPF ELF object and parses its programs' sections. A
// program in a section that is not a probe is refused with ErrSection.
// The maps and the kconfig extern of libbpf's usdt.bpf.h are read (see
// usdt.go and prepare.go).
func Open(path string) (*Object, error) {
	spec, err := loadSpec(path)
	if err != nil {
		return nil, fmt.Errorf("read BPF object %s: %w", path, err)
	}
	return FromSpec(spec)
}

// FromSpec makes an Object of a collection spec already read.
func FromSpec(spec *ebpf.CollectionSpec) (*Object, error) {
	o := &Object{Spec: spec}
	names := make([]string, 0, len(spec.Programs))
	for n := range spec.Programs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ps := spec.Programs[n]
		sec, err := ParseSection(ps.SectionName)
		if err != nil {
			return nil, fmt.Errorf("program %s: %w", n, err)
		}
		ps.Type = ebpf.Kprobe
		ps.AttachType = ebpf.AttachNone
		o.Programs = append(o.Programs, &Program{Name: n, Section: sec, Spec: ps})
	}
	if len(o.Programs) == 0 {
		return nil, fmt.Errorf("no programs in the object: %w", ErrSection)
	}
	return o, nil
}

// Program returns the program named name, or nil.
func (o *Object) Program(name string) *Program {
	for _, p := range o.Programs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// VerifierError is a program the kernel rejected, with the verifier's log.
type VerifierError struct {
	Program string
	Log     []string
	Err     error
}

func (e *VerifierError) Error() string {
	s := fmt.Sprintf("program %s: %v", e.Program, ErrRejected)
	// The verifier's reason is its last line before the statistics.
	for i := len(e.Log) - 1; i >= 0; i-- {
		if l := e.Log[i]; l != "" && !strings.HasPrefix(l, "processed ") {
			return s + ": " + l
		}
	}
	return s
}

// Unwrap returns ErrRejected and the kernel's error.
func (e *VerifierError) Unwrap() []error { return []error{ErrRejected, e.Err} }

// Instance is an object's maps in an arena and its programs compiled.
type Instance struct {
	Maps    map[string]*maps.Map
	Code    map[string]*jit.Code
	Runtime *jit.Runtime
	arena   *maps.Arena
}

// InstanceOptions are the choices of Instantiate; nil means defaults.
type InstanceOptions struct {
	// Stripes is the number of threads that may run the programs at once
	// (the per-CPU maps' copies); a power of two, 0 means 64.
	Stripes int
	// Base is the address the code of each program will run at (only
	// named in errors; the code is position independent).
	Base uint64
}

// Instantiate allocates the object's maps in arena, filling those with
// initial contents (.data, .rodata), and compiles every verified program
// against them.
func (o *Object) Instantiate(arena *maps.Arena, opts *InstanceOptions) (*Instance, error) {
	stripes := 64
	var base uint64
	if opts != nil {
		if opts.Stripes > 0 {
			stripes = opts.Stripes
		}
		base = opts.Base
	}
	in := &Instance{Maps: map[string]*maps.Map{}, Code: map[string]*jit.Code{}, arena: arena}
	rt, err := jit.NewRuntime(arena, stripes)
	if err != nil {
		return nil, err
	}
	in.Runtime = rt
	names := make([]string, 0, len(o.Spec.Maps))
	for n := range o.Spec.Maps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ms := o.Spec.Maps[n]
		m, err := maps.New(arena, ms, &maps.Options{Stripes: stripes})
		if err != nil {
			return nil, err
		}
		for _, kv := range ms.Contents {
			k, kok := kv.Key.(uint32)
			v, vok := kv.Value.([]byte)
			if !kok || !vok {
				return nil, fmt.Errorf("map %s: initial contents of types %T, %T: %w", n, kv.Key, kv.Value, maps.ErrUnsupported)
			}
			key := []byte{byte(k), byte(k >> 8), byte(k >> 16), byte(k >> 24)}
			if err := m.Update(key, v, maps.UpdateAny); err != nil {
				return nil, fmt.Errorf("map %s: initial contents: %w", n, err)
			}
		}
		in.Maps[n] = m
	}
	for _, p := range o.Programs {
		if p.Insns == nil {
			return nil, fmt.Errorf("program %s: %w", p.Name, ErrNotVerified)
		}
		for i := range p.Insns {
			if btf.CORERelocationMetadata(&p.Insns[i]) != nil {
				return nil, fmt.Errorf("program %s: instruction %d has a CO-RE relocation: %w", p.Name, i, jit.ErrUnsupported)
			}
		}
		code, err := jit.Compile(p.Insns, &jit.Options{Base: base, Maps: in.Maps, Runtime: rt})
		if err != nil {
			return nil, fmt.Errorf("program %s: %w", p.Name, err)
		}
		in.Code[p.Name] = code
	}
	return in, nil
}
