package bpf

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// Two things of libbpf's usdt.bpf.h that cilium/ebpf v0.22 does not read,
// made readable before and after ebpf.LoadCollectionSpecFromReader (the
// object is still read by cilium/ebpf alone):
//
//   - the header declares its maps __weak, and cilium/ebpf refuses a
//     reference to a weak map symbol ("unsupported binding: STB_WEAK"):
//     globalWeakMaps makes the weak symbols of the map sections global in
//     a copy of the file. With one object, as here, libbpf treats a weak
//     map as a global one.
//   - the extern LINUX_HAS_BPF_COOKIE __kconfig is no kernel option, and
//     cilium/ebpf fails to find it in the kernel's configuration:
//     resolveCookieKconfig turns the object's .kconfig into a read-only
//     array map of that name holding 1 (every probeopt attachment has a
//     cookie), and its loads into loads of that map's value. An object
//     with other kconfig externs beside it is refused.
//   - its helpers (bpf_usdt_arg ...) are __weak __hidden functions:
//     libbpf gives a hidden function static linkage in the BTF it loads,
//     so that the kernel verifies it in its caller's context (with
//     res a pointer to the caller's stack); cilium/ebpf keeps it global,
//     and the verifier then refuses bpf_usdt_arg's write through a
//     pointer that may be NULL. staticHiddenFuncs does as libbpf does.

// ErrObject means a BPF object this package cannot read: the error says
// what it holds.
var ErrObject = errors.New("BPF object not supported")

// kconfigMap is the name of the map of the .kconfig externs.
const kconfigMap = ".kconfig"

// cookieKconfig is usdt.bpf.h's extern.
const cookieKconfig = "LINUX_HAS_BPF_COOKIE"

// loadSpec reads a BPF ELF object with cilium/ebpf, after globalWeakMaps,
// and resolves LINUX_HAS_BPF_COOKIE.
func loadSpec(path string) (*ebpf.CollectionSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fixed, err := globalWeakMaps(data)
	if err != nil {
		return nil, err
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(fixed))
	if err != nil {
		return nil, err
	}
	if err := staticHiddenFuncs(data, spec); err != nil {
		return nil, err
	}
	if err := resolveCookieKconfig(spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// globalWeakMaps returns data, or a copy of it in which every STB_WEAK
// symbol defined in a map section (.maps, maps) is STB_GLOBAL.
func globalWeakMaps(data []byte) ([]byte, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read ELF: %w", err)
	}
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return data, nil
	}
	isMap := map[int]bool{}
	var symtab *elf.Section
	for i, s := range f.Sections {
		switch {
		case s.Name == ".maps" || s.Name == "maps":
			isMap[i] = true
		case s.Type == elf.SHT_SYMTAB:
			symtab = s
		}
	}
	if symtab == nil || len(isMap) == 0 {
		return data, nil
	}
	const symSize = 24 // Elf64_Sym: name 4, info 1, other 1, shndx 2, value 8, size 8
	if symtab.Entsize != symSize || symtab.Offset+symtab.Size > uint64(len(data)) {
		return nil, fmt.Errorf("read ELF: symbol table of %d-byte entries at %#x: %w", symtab.Entsize, symtab.Offset, ErrSection)
	}
	out := data
	for off := symtab.Offset; off+symSize <= symtab.Offset+symtab.Size; off += symSize {
		info := data[off+4]
		shndx := binary.LittleEndian.Uint16(data[off+6:])
		if elf.ST_BIND(info) != elf.STB_WEAK || !isMap[int(shndx)] {
			continue
		}
		if &out[0] == &data[0] {
			out = bytes.Clone(data)
		}
		out[off+4] = elf.ST_INFO(elf.STB_GLOBAL, elf.ST_TYPE(info))
	}
	return out, nil
}

// staticHiddenFuncs gives the functions whose ELF symbol has hidden
// visibility static linkage in the BTF the programs carry.
func staticHiddenFuncs(data []byte, spec *ebpf.CollectionSpec) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("read ELF: %w", err)
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil // no symbol table: cilium/ebpf has read the object without one
	}
	hidden := map[string]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_VISIBILITY(s.Other) == elf.STV_HIDDEN {
			hidden[s.Name] = true
		}
	}
	for _, ps := range spec.Programs {
		for i := range ps.Instructions {
			if fn := btf.FuncMetadata(&ps.Instructions[i]); fn != nil && hidden[fn.Name] && fn.Linkage == btf.GlobalFunc {
				fn.Linkage = btf.StaticFunc
			}
		}
	}
	return nil
}

// resolveCookieKconfig replaces the .kconfig extern LINUX_HAS_BPF_COOKIE
// by a map (see above). Objects without it are left alone.
func resolveCookieKconfig(spec *ebpf.CollectionSpec) error {
	if spec.Types == nil {
		return nil
	}
	var ds *btf.Datasec
	if err := spec.Types.TypeByName(kconfigMap, &ds); err != nil {
		return nil // no .kconfig: nothing to do
	}
	var off uint32
	found := false
	for _, v := range ds.Vars {
		if v.Type.TypeName() == cookieKconfig {
			off, found = v.Offset, true
		}
	}
	if !found {
		return nil
	}
	for _, v := range ds.Vars {
		if name := v.Type.TypeName(); name != cookieKconfig {
			return fmt.Errorf("kconfig extern %s beside %s: %w", name, cookieKconfig, ErrObject)
		}
	}
	value := make([]byte, ds.Size)
	value[off] = 1
	spec.Maps[kconfigMap] = &ebpf.MapSpec{
		Name:       kconfigMap,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  ds.Size,
		MaxEntries: 1,
		Flags:      bpfFRdonlyProg,
		Contents:   []ebpf.MapKV{{Key: uint32(0), Value: value}},
	}
	for _, ps := range spec.Programs {
		for i := range ps.Instructions {
			ins := &ps.Instructions[i]
			// cilium/ebpf reads a load of a .kconfig extern as a map
			// value load with no map named: every other one names its
			// map or data section.
			if !ins.OpCode.IsDWordLoad() || ins.Src != asm.PseudoMapValue || ins.Reference() != "" {
				continue
			}
			n := asm.LoadMapValue(ins.Dst, 0, off).WithReference(kconfigMap)
			if sym := ins.Symbol(); sym != "" {
				n = n.WithSymbol(sym)
			}
			if src := ins.Source(); src != nil {
				n = n.WithSource(src)
			}
			if fn := btf.FuncMetadata(ins); fn != nil {
				n = btf.WithFuncMetadata(n, fn)
			}
			*ins = n
		}
	}
	return nil
}

// SetUSDTCookie sets what the object's LINUX_HAS_BPF_COOKIE extern reads:
// true (Open's choice), usdt.bpf.h's programs find their specs by the
// attachment's cookie; false, by the probe's address in
// __bpf_usdt_ip_to_spec_id, as on a kernel without BPF cookies. A change
// discards the verified instructions: the kernel's verifier knows the
// value (a read-only map) and checks only the path it selects, so the
// programs must be verified again (Verify). An object without the extern
// is left alone.
func (o *Object) SetUSDTCookie(on bool) {
	kc := o.Spec.Maps[kconfigMap]
	if kc == nil || len(kc.Contents) != 1 {
		return
	}
	var ds *btf.Datasec
	if o.Spec.Types == nil || o.Spec.Types.TypeByName(kconfigMap, &ds) != nil {
		return
	}
	value, _ := kc.Contents[0].Value.([]byte)
	for _, v := range ds.Vars {
		if v.Type.TypeName() != cookieKconfig || int(v.Offset) >= len(value) {
			continue
		}
		want := byte(0)
		if on {
			want = 1
		}
		if value[v.Offset] != want {
			value[v.Offset] = want
			for _, p := range o.Programs {
				p.Insns = nil
			}
		}
	}
}

// bpfFRdonlyProg is BPF_F_RDONLY_PROG: the map is read-only for programs.
const bpfFRdonlyProg = 1 << 7
