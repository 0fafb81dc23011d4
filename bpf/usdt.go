package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/probeopt/probeopt/elfscan"
)

// USDT arguments for programs written with libbpf's usdt.bpf.h
// (BPF_USDT, bpf_usdt_arg, bpf_usdt_arg_cnt, bpf_usdt_cookie). Such a
// program finds the argument specs of the USDT note it runs at in the
// array map __bpf_usdt_specs, indexed by a spec ID that its attachment's
// cookie carries (get_attach_cookie), as libbpf's loader arranges on a
// kernel with BPF cookies: the header's extern LINUX_HAS_BPF_COOKIE is 1
// here, since every probeopt attachment has a cookie, and the map
// __bpf_usdt_ip_to_spec_id of the cookie-less path stays empty, as libbpf
// leaves it on such a kernel. Object.SetUSDTCookie(false) selects that
// path instead (package probe then fills the map with each site's
// address).
//
// The specs are libbpf's (src/usdt.c): each argument of the note's
// string is a constant ("-4@$5"), a register ("-4@%edi", read from
// struct pt_regs at the register's offset) or memory at a register plus a
// decimal displacement ("8@-40(%rbp)", "8@(%rsp)"); its size (1, 2, 4 or
// 8 bytes) and sign become a shift that cuts the 64-bit value read and
// extends its sign. The operands libbpf refuses are refused with
// ErrUSDTArg: a symbol ("8@counter(%rip)"), an index register
// ("1@-96(%rbp,%rax,8)", which libbpf before 1.5 does not read), a
// segment, an absolute address, a register libbpf does not name (%ah),
// an argument without a size, a hexadecimal number, more than 12
// arguments. Spec IDs are given as libbpf gives them (USDTSpecs): per
// attachment, one ID per distinct argument string in note order, the
// last released first, else the lowest never used.

// The maps of usdt.bpf.h.
const (
	USDTSpecsMap = "__bpf_usdt_specs"
	USDTIPMap    = "__bpf_usdt_ip_to_spec_id"
	// USDTMaxArgs is the most arguments a spec holds (BPF_USDT_MAX_ARG_CNT).
	USDTMaxArgs = 12
	// USDTSpecSize is the size in bytes of struct __bpf_usdt_spec.
	USDTSpecSize = 208
)

// ErrUSDTArg means a USDT argument that libbpf's loader refuses, and so
// does probeopt; the error names the argument and the note.
var ErrUSDTArg = errors.New("USDT argument not supported by libbpf's usdt.bpf.h")

// ErrUSDTLayout means an object whose __bpf_usdt_specs value is not the
// struct __bpf_usdt_spec this package writes.
var ErrUSDTLayout = errors.New("unknown layout of usdt.bpf.h's __bpf_usdt_specs")

// USDTArgType is enum __bpf_usdt_arg_type.
type USDTArgType uint32

// The kinds of USDT argument of usdt.bpf.h.
const (
	USDTArgConst    USDTArgType = 0 // BPF_USDT_ARG_CONST: the value is ValOff
	USDTArgReg      USDTArgType = 1 // BPF_USDT_ARG_REG: the register at RegOff
	USDTArgRegDeref USDTArgType = 2 // BPF_USDT_ARG_REG_DEREF: 8 bytes at register + ValOff
)

// USDTArgSpec is struct __bpf_usdt_arg_spec.
type USDTArgSpec struct {
	ValOff   uint64
	Type     USDTArgType
	RegOff   int16 // offset of the register in x86-64 struct pt_regs
	Signed   bool
	Bitshift int8 // 64 - 8 * size
}

// USDTSpec is struct __bpf_usdt_spec: the arguments of a note and the
// attachment's USDT cookie (what bpf_usdt_cookie returns).
type USDTSpec struct {
	Args   []USDTArgSpec
	Cookie uint64
}

// Bytes is the spec as the map's value (x86-64, little endian).
func (s USDTSpec) Bytes() []byte {
	b := make([]byte, USDTSpecSize)
	for i, a := range s.Args {
		o := b[16*i:]
		binary.LittleEndian.PutUint64(o, a.ValOff)
		binary.LittleEndian.PutUint32(o[8:], uint32(a.Type))
		binary.LittleEndian.PutUint16(o[12:], uint16(a.RegOff))
		if a.Signed {
			o[14] = 1
		}
		o[15] = byte(a.Bitshift)
	}
	binary.LittleEndian.PutUint64(b[192:], s.Cookie)
	binary.LittleEndian.PutUint16(b[200:], uint16(len(s.Args)))
	return b
}

// x86PtRegs is the offset in x86-64 struct pt_regs of each register name
// libbpf reads (its calc_pt_regs_off).
var x86PtRegs = func() map[string]int16 {
	m := map[string]int16{"rip": 128, "eip": 128}
	for _, r := range []struct {
		names [4]string
		off   int16
	}{
		{[4]string{"rax", "eax", "ax", "al"}, 80}, {[4]string{"rbx", "ebx", "bx", "bl"}, 40},
		{[4]string{"rcx", "ecx", "cx", "cl"}, 88}, {[4]string{"rdx", "edx", "dx", "dl"}, 96},
		{[4]string{"rsi", "esi", "si", "sil"}, 104}, {[4]string{"rdi", "edi", "di", "dil"}, 112},
		{[4]string{"rbp", "ebp", "bp", "bpl"}, 32}, {[4]string{"rsp", "esp", "sp", "spl"}, 152},
		{[4]string{"r8", "r8d", "r8w", "r8b"}, 72}, {[4]string{"r9", "r9d", "r9w", "r9b"}, 64},
		{[4]string{"r10", "r10d", "r10w", "r10b"}, 56}, {[4]string{"r11", "r11d", "r11w", "r11b"}, 48},
		{[4]string{"r12", "r12d", "r12w", "r12b"}, 24}, {[4]string{"r13", "r13d", "r13w", "r13b"}, 16},
		{[4]string{"r14", "r14d", "r14w", "r14b"}, 8}, {[4]string{"r15", "r15d", "r15w", "r15b"}, 0},
	} {
		for _, n := range r.names {
			m[n] = r.off
		}
	}
	return m
}()

// isDecimal reports whether s is what C's strtol reads whole in base 10:
// an optional sign and digits.
func isDecimal(s string) bool {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// NewUSDTSpec makes the spec of a USDT note's x86-64 arguments (probe's
// Arguments, parsed by elfscan) with the attachment's cookie, by libbpf's
// rules; an argument libbpf refuses is an error wrapping ErrUSDTArg.
func NewUSDTSpec(p *elfscan.USDTProbe, cookie uint64) (USDTSpec, error) {
	note := p.Provider + ":" + p.Name
	if p.ArgsErr != nil {
		return USDTSpec{}, fmt.Errorf("USDT %s arguments %q: %w: %w", note, p.Args, ErrUSDTArg, p.ArgsErr)
	}
	if len(p.Arguments) > USDTMaxArgs {
		return USDTSpec{}, fmt.Errorf("USDT %s: %d arguments, at most %d: %w", note, len(p.Arguments), USDTMaxArgs, ErrUSDTArg)
	}
	s := USDTSpec{Cookie: cookie}
	for i, a := range p.Arguments {
		as, err := usdtArgSpec(a)
		if err != nil {
			return USDTSpec{}, fmt.Errorf("USDT %s argument %d %q: %w: %s", note, i+1, a.Text, ErrUSDTArg, err)
		}
		s.Args = append(s.Args, as)
	}
	return s, nil
}

// usdtArgSpec is libbpf's parse_usdt_arg for x86-64: the reason it
// refuses, or the spec.
func usdtArgSpec(a elfscan.USDTArg) (USDTArgSpec, error) {
	if a.Size == 0 {
		return USDTArgSpec{}, errors.New("no size")
	}
	s := USDTArgSpec{Signed: a.Signed, Bitshift: int8(64 - 8*a.Size)}
	_, op, _ := strings.Cut(a.Text, "@")
	reg := func(name string) error {
		off, ok := x86PtRegs[name]
		if !ok {
			return fmt.Errorf("register %%%s is not one libbpf reads", name)
		}
		s.RegOff = off
		return nil
	}
	switch a.Kind {
	case elfscan.ArgConst:
		if !isDecimal(op[1:]) {
			return s, errors.New("the constant is not a decimal number")
		}
		s.Type, s.ValOff = USDTArgConst, uint64(a.Value)
		return s, nil
	case elfscan.ArgReg:
		s.Type = USDTArgReg
		return s, reg(a.Reg)
	case elfscan.ArgMem:
		switch {
		case a.Segment != "":
			return s, errors.New("a segment override")
		case a.Symbol != "":
			return s, fmt.Errorf("a displacement from symbol %s", a.Symbol)
		case a.Index != "":
			return s, errors.New("an index register")
		case a.Reg == "":
			return s, errors.New("an absolute address")
		}
		disp, _, _ := strings.Cut(op, "(")
		if disp != "" && !isDecimal(disp) {
			return s, errors.New("the displacement is not a decimal number")
		}
		s.Type, s.ValOff = USDTArgRegDeref, uint64(a.Value)
		return s, reg(a.Reg)
	}
	return s, errors.New("unknown operand")
}

// USDTSpecs hands out the spec IDs of an object's USDT attachments as
// libbpf's loader does (one manager per object): IDs below the specs
// map's size, the last released first, else the lowest never used.
type USDTSpecs struct {
	mu   sync.Mutex
	max  int
	next int
	free []int
}

// USDTSpecs returns the object's spec IDs, nil if its programs do not use
// usdt.bpf.h (no __bpf_usdt_specs map), or ErrUSDTLayout for a map whose
// value is not the struct this package writes.
func (o *Object) USDTSpecs() (*USDTSpecs, error) {
	ms := o.Spec.Maps[USDTSpecsMap]
	if ms == nil {
		return nil, nil
	}
	if err := checkUSDTLayout(ms); err != nil {
		return nil, err
	}
	return &USDTSpecs{max: int(ms.MaxEntries)}, nil
}

// USDTLink is the spec IDs of one attachment: one per distinct argument
// string, shared by its notes.
type USDTLink struct {
	m      *USDTSpecs
	cookie uint64
	byArgs map[string]int
	ids    []int
}

// NewLink starts an attachment whose programs' bpf_usdt_cookie returns
// cookie.
func (m *USDTSpecs) NewLink(cookie uint64) *USDTLink {
	return &USDTLink{m: m, cookie: cookie, byArgs: map[string]int{}}
}

// USDTSpecID is the ID of one note's spec; Spec is set when the ID is
// new and its value must be written to the specs map.
type USDTSpecID struct {
	ID   int
	Spec []byte
}

// Specs returns the spec IDs of notes, in their order (a file's notes of
// one probe, as libbpf attaches them): the first note libbpf would refuse
// fails them all with ErrUSDTArg, and an ID past the map's size fails
// them with ErrUSDTArg too (libbpf's -E2BIG). No ID is taken on failure.
func (l *USDTLink) Specs(notes []*elfscan.USDTProbe) ([]USDTSpecID, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	specs := make([]USDTSpec, len(notes))
	for i, p := range notes {
		s, err := NewUSDTSpec(p, l.cookie)
		if err != nil {
			return nil, err
		}
		specs[i] = s
	}
	out := make([]USDTSpecID, len(notes))
	seen := map[string]int{}
	var taken []int
	undo := func() {
		for _, id := range taken {
			l.m.release(id)
		}
		for k := range seen {
			delete(l.byArgs, k)
		}
	}
	for i, p := range notes {
		args := p.Args
		if args == "" || args[0] == ':' {
			args = ""
		}
		if id, ok := l.byArgs[args]; ok {
			out[i] = USDTSpecID{ID: id}
			continue
		}
		id, ok := l.m.take()
		if !ok {
			undo()
			return nil, fmt.Errorf("USDT %s:%s: more than %d specs in %s: %w", p.Provider, p.Name, l.m.max, USDTSpecsMap, ErrUSDTArg)
		}
		taken = append(taken, id)
		seen[args] = id
		l.byArgs[args] = id
		out[i] = USDTSpecID{ID: id, Spec: specs[i].Bytes()}
	}
	l.ids = append(l.ids, taken...)
	return out, nil
}

// Release gives the link's IDs back for later attachments (libbpf's
// detach).
func (l *USDTLink) Release() {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	for _, id := range l.ids {
		l.m.release(id)
	}
	l.ids = nil
	clear(l.byArgs)
}

func (m *USDTSpecs) take() (int, bool) {
	if n := len(m.free); n > 0 {
		id := m.free[n-1]
		m.free = m.free[:n-1]
		return id, true
	}
	if m.next >= m.max {
		return 0, false
	}
	m.next++
	return m.next - 1, true
}

func (m *USDTSpecs) release(id int) { m.free = append(m.free, id) }

// checkUSDTLayout checks that the specs map's value is struct
// __bpf_usdt_spec as libbpf 1.x lays it out on x86-64: args[12] of
// 16-byte struct __bpf_usdt_arg_spec (val_off at 0, arg_type at 8,
// reg_off at 12, arg_signed at 14, arg_bitshift at 15), usdt_cookie at
// 192, arg_cnt at 200.
func checkUSDTLayout(ms *ebpf.MapSpec) error {
	bad := func(why string) error { return fmt.Errorf("map %s: %s: %w", USDTSpecsMap, why, ErrUSDTLayout) }
	if ms.Type != ebpf.Array || ms.KeySize != 4 || ms.ValueSize != USDTSpecSize {
		return bad(fmt.Sprintf("%v of %d-byte keys and %d-byte values", ms.Type, ms.KeySize, ms.ValueSize))
	}
	st, ok := btf.UnderlyingType(ms.Value).(*btf.Struct)
	if !ok {
		// Without BTF the sizes are all there is to check.
		return nil
	}
	at := func(s *btf.Struct, name string) (btf.Member, bool) {
		for _, m := range s.Members {
			if m.Name == name {
				return m, true
			}
		}
		return btf.Member{}, false
	}
	for name, off := range map[string]uint32{"args": 0, "usdt_cookie": 192, "arg_cnt": 200} {
		if m, ok := at(st, name); !ok || m.Offset.Bytes() != off {
			return bad("member " + name)
		}
	}
	args, _ := at(st, "args")
	arr, ok := btf.UnderlyingType(args.Type).(*btf.Array)
	if !ok || arr.Nelems != USDTMaxArgs {
		return bad("args is not an array of 12")
	}
	as, ok := btf.UnderlyingType(arr.Type).(*btf.Struct)
	if !ok || as.Size != 16 {
		return bad("args' element is not a 16-byte struct")
	}
	for name, off := range map[string]uint32{"val_off": 0, "arg_type": 8, "reg_off": 12, "arg_signed": 14, "arg_bitshift": 15} {
		if m, ok := at(as, name); !ok || m.Offset.Bytes() != off {
			return bad("member " + name + " of struct " + as.Name)
		}
	}
	return nil
}
