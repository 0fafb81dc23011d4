package probe

import (
	"errors"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/proc"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in     string
		module string
		exact  bool
		kind   elfscan.SpecKind
		symbol string
	}{
		{"main", "", false, elfscan.SpecFunc, "main"},
		{"parse+0x10", "", false, elfscan.SpecFunc, "parse"},
		{"libc.so.6:malloc", "libc.so.6", false, elfscan.SpecFunc, "malloc"},
		{"*:free", "*", false, elfscan.SpecFunc, "free"},
		{"demo::add<int>", "", false, elfscan.SpecFunc, "demo::add<int>"},
		{"libfoo.so:ns::f", "libfoo.so", false, elfscan.SpecFunc, "ns::f"},
		{"usdt:postgresql:*", "", false, elfscan.SpecUSDT, ""},
		{"libpython*:usdt:python:*", "libpython*", false, elfscan.SpecUSDT, ""},
		{"uprobe:/bin/bash:readline", "/bin/bash", true, elfscan.SpecFunc, "readline"},
		{"libc.so.6:0x1234", "libc.so.6", false, elfscan.SpecAddr, ""},
	} {
		sp, err := parseSpec(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if sp.module != c.module || sp.exact != c.exact || sp.es.Kind != c.kind || sp.es.Symbol != c.symbol || sp.text != c.in {
			t.Errorf("%q: module %q exact %v kind %v symbol %q", c.in, sp.module, sp.exact, sp.es.Kind, sp.es.Symbol)
		}
	}
	for _, bad := range []string{"", ":main", "lib[:main", "uprobe:/bin/x", "x:uprobe:/bin/bash:f", "main+"} {
		if _, err := parseSpec(bad); !errors.Is(err, elfscan.ErrBadSpec) && bad != "main+" {
			t.Errorf("%q: %v, want ErrBadSpec", bad, err)
		}
	}
}

// TestParseReturnSpec checks the return-probe forms and their limits.
func TestParseReturnSpec(t *testing.T) {
	for _, c := range []struct {
		in, module, symbol string
		ret                bool
	}{
		{"main%return", "", "main", true},
		{"libc.so.6:malloc%return", "libc.so.6", "malloc", true},
		{"uretprobe:/bin/bash:readline", "/bin/bash", "readline", true},
		{"ur:./prog:f*", "./prog", "f*", true},
		{"ur:main", "ur", "main", false}, // a module named ur
		{"main", "", "main", false},
	} {
		sp, err := parseSpec(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if sp.ret != c.ret || sp.module != c.module || sp.es.Symbol != c.symbol || sp.text != c.in {
			t.Errorf("%q: ret %v module %q symbol %q text %q", c.in, sp.ret, sp.module, sp.es.Symbol, sp.text)
		}
	}
	for _, bad := range []string{"main+4%return", "0x1234%return", "usdt:p:n%return", "uretprobe:/bin/bash:0x10"} {
		if _, err := parseSpec(bad); !errors.Is(err, elfscan.ErrBadSpec) {
			t.Errorf("%q: %v, want ErrBadSpec", bad, err)
		}
	}
}

func TestMatchesModule(t *testing.T) {
	for _, c := range []struct {
		spec, path string
		main, want bool
	}{
		{"main", "/usr/bin/prog", true, true},
		{"main", "/lib/libc.so.6", false, false},
		{"usdt:p:n", "/lib/libc.so.6", false, true},
		{"libc.so.6:malloc", "/lib/x86_64-linux-gnu/libc.so.6", false, true},
		{"libc.so:malloc", "/lib/x86_64-linux-gnu/libc.so.6", false, true},
		{"libc:malloc", "/lib/x86_64-linux-gnu/libc.so.6", false, true},
		{"libcrypt:f", "/lib/x86_64-linux-gnu/libc.so.6", false, false},
		{"libc*:malloc", "/lib/x86_64-linux-gnu/libc.so.6", false, true},
		{"/lib/*/libc.so.6:malloc", "/lib/x86_64-linux-gnu/libc.so.6", false, true},
		{"prog:main", "/usr/bin/prog", true, true},
		{"*:main", "/usr/bin/prog", true, true},
	} {
		sp, err := parseSpec(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := sp.matchesModule(c.path, c.main); got != c.want {
			t.Errorf("%q on %s (main %v): %v, want %v", c.spec, c.path, c.main, got, c.want)
		}
	}
}

func TestExecMappings(t *testing.T) {
	maps := []proc.Mapping{
		{Start: 0x2000, End: 0x3000, Exec: true, Path: "/bin/b", Inode: 2, Offset: 0x1000},
		{Start: 0x1000, End: 0x2000, Read: true, Path: "/bin/b", Inode: 2},
		{Start: 0x5000, End: 0x6000, Exec: true, Path: "[vdso]"},
		{Start: 0x7000, End: 0x8000, Exec: true},
		{Start: 0x9000, End: 0xa000, Exec: true, Path: "/tmp/x (deleted)", Inode: 3},
		{Start: 0x1000000, End: 0x1001000, Exec: true, Path: "/lib/a.so", Inode: 4},
	}
	got := execMappings(maps)
	if len(got) != 2 || got[0].path != "/bin/b" || got[0].offset != 0x1000 || got[1].path != "/lib/a.so" {
		t.Fatalf("%+v", got)
	}
	if mappingsKey(got) == mappingsKey(got[:1]) {
		t.Error("mappingsKey does not see a mapping go")
	}
}
