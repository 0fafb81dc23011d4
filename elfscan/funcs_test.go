package elfscan_test

import (
	"debug/elf"
	"errors"
	"reflect"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
)

func TestFuncsMerge(t *testing.T) {
	f := open(t, fixture.Path(t, "x86_64", "mangled"))
	if f.Arch != decode.X86_64 || f.Kind() != "pie" || f.FuncSource() != ".symtab" {
		t.Errorf("arch %v kind %q source %q", f.Arch, f.Kind(), f.FuncSource())
	}
	funcs, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*elfscan.Func{}
	for i := range funcs {
		byName[funcs[i].Name] = &funcs[i]
		if i > 0 && funcs[i].Addr <= funcs[i-1].Addr {
			t.Errorf("functions not sorted by address at %d", i)
		}
	}
	check := func(name string, aliases []string, bind elf.SymBind, demangled string) *elfscan.Func {
		t.Helper()
		fn := byName[name]
		if fn == nil {
			t.Fatalf("no function %s", name)
		}
		if !reflect.DeepEqual(fn.Aliases, aliases) || fn.Bind != bind || fn.Demangled() != demangled {
			t.Errorf("%s: aliases %v bind %v demangled %q; want %v %v %q", name, fn.Aliases, fn.Bind, fn.Demangled(), aliases, bind, demangled)
		}
		return fn
	}
	// A global and a local at one address: the global names the function.
	check("_ZNK4demo6Widget4sizeEv", []string{"_ZN4demo6Widget9size_implEv"}, elf.STB_GLOBAL, "demo::Widget::size() const")
	// A global and a weak: the global.
	check("plain_c", []string{"plain_c_weak"}, elf.STB_GLOBAL, "")
	// Two globals: the shorter, then the first in byte order.
	check("_ZN4demo6WidgetC1Ei", []string{"_ZN4demo6WidgetC2Ei"}, elf.STB_GLOBAL, "demo::Widget::Widget(int)")
	check("_ZN4demo3fooEv.cold", nil, elf.STB_LOCAL, "demo::foo() [clone .cold]")
	// No size: it ends where the next function starts.
	ns := check("no_size", nil, elf.STB_GLOBAL, "")
	if next := f.FuncAt(ns.End); ns.Size != 0 || next == nil || next.Name != "main" {
		t.Errorf("no_size: size %d, end %#x (next %v)", ns.Size, ns.End, next)
	}
	if fn := f.FuncAt(ns.Addr + 1); fn != ns {
		t.Errorf("FuncAt inside no_size: %v", fn)
	}
	if fn := f.FuncAt(0); fn != nil {
		t.Errorf("FuncAt(0): %v", fn)
	}
	if fn := byName["__cxa_finalize@plt"]; fn == nil || !fn.PLT || fn.Sources != elfscan.FromPLT {
		t.Errorf("PLT stub: %+v", fn)
	}
}

func TestKindsAndSources(t *testing.T) {
	for _, tc := range []struct {
		arch, name, kind, source string
	}{
		{"x86_64", "funcs-pie", "pie", ".symtab"},
		{"x86_64", "funcs-nopie", "executable", ".symtab"},
		{"x86_64", "funcs-stripped", "pie", "none"},
		{"aarch64", "funcs-pie", "pie", ".symtab"},
		{"aarch64", "funcs-nopie", "executable", ".symtab"},
		{"aarch64", "funcs-stripped", "pie", "none"},
	} {
		f := open(t, fixture.Path(t, tc.arch, tc.name))
		if f.Kind() != tc.kind || f.FuncSource() != tc.source {
			t.Errorf("%s/%s: kind %q source %q, want %q %q", tc.arch, tc.name, f.Kind(), f.FuncSource(), tc.kind, tc.source)
		}
	}
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		if !fileExists(p) {
			continue
		}
		f := open(t, p)
		if f.Kind() != "shared library" && f.Kind() != "pie" {
			t.Errorf("%s: kind %q", p, f.Kind())
		}
	}
}

func TestAddressesAndCode(t *testing.T) {
	f, funcs := openFuncs(t, fixture.Path(t, "x86_64", "funcs-nopie"))
	var leaf *elfscan.Func
	for i := range funcs {
		if funcs[i].Name == "leaf" {
			leaf = &funcs[i]
		}
	}
	off, err := f.TextOffset(leaf.Addr)
	if err != nil || off != leaf.Addr-0x400000 {
		t.Errorf("TextOffset(leaf): %#x %v", off, err)
	}
	code, err := f.Code(leaf.Addr, leaf.Size)
	if err != nil || uint64(len(code)) != leaf.Size {
		t.Fatalf("Code: %d bytes, %v", len(code), err)
	}
	data := readFixture(t, "x86_64", "funcs-nopie")
	if string(code) != string(data[off:off+leaf.Size]) {
		t.Errorf("Code differs from the file bytes at the offset")
	}
	for _, addr := range []uint64{0, 0x400000 - 1, 1 << 62} {
		if _, err := f.TextOffset(addr); !errors.Is(err, elfscan.ErrNotMapped) {
			t.Errorf("TextOffset(%#x): %v, want ErrNotMapped", addr, err)
		}
		if _, err := f.Code(addr, 4); !errors.Is(err, elfscan.ErrNotMapped) {
			t.Errorf("Code(%#x): %v, want ErrNotMapped", addr, err)
		}
	}
	if _, err := f.Addr(1 << 40); !errors.Is(err, elfscan.ErrNotMapped) {
		t.Errorf("Addr: %v", err)
	}
	// Data is mapped but not executable.
	var rodata uint64
	for _, s := range f.Segments {
		if !s.Exec() && s.Vaddr > 0x400000 {
			rodata = s.Vaddr
			break
		}
	}
	if _, err := f.TextOffset(rodata); !errors.Is(err, elfscan.ErrNotMapped) {
		t.Errorf("TextOffset(data %#x): %v", rodata, err)
	}
	if _, err := f.Offset(rodata); err != nil {
		t.Errorf("Offset(data %#x): %v", rodata, err)
	}
	// Data reads code and data alike: .rodata as debug/elf reads it.
	ef, err := elf.Open(fixture.Path(t, "x86_64", "funcs-nopie"))
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, name := range []string{".rodata", ".text"} {
		sec := ef.Section(name)
		want, err := sec.Data()
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Data(sec.Addr, sec.Size)
		if err != nil || string(got) != string(want) {
			t.Errorf("Data(%s at %#x): %d bytes, %v; want the section's %d", name, sec.Addr, len(got), err, len(want))
		}
	}
	if _, err := f.Data(1<<40, 4); !errors.Is(err, elfscan.ErrNotMapped) {
		t.Errorf("Data(1<<40): %v, want ErrNotMapped", err)
	}
}

func TestDemangle(t *testing.T) {
	for in, want := range map[string]string{
		"main":                         "",
		"_ZN4demo6Widget4drawEv":       "demo::Widget::draw()",
		"_ZN4demo6Widget4drawEv@plt":   "demo::Widget::draw()@plt",
		"_ZSt17__throw_bad_allocv@@GL": "std::__throw_bad_alloc()@@GL",
		"_Znotmangled":                 "",
		"_RNvCs1234_7mycrate4main":     "mycrate::main",
	} {
		if got := elfscan.Demangle(in); got != want {
			t.Errorf("Demangle(%q) = %q, want %q", in, got, want)
		}
	}
}
