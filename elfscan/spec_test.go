package elfscan_test

import (
	"errors"
	"fmt"
	"path"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

func TestParseSpec(t *testing.T) {
	type S = elfscan.Spec
	tests := []struct {
		in   string
		want S
	}{
		{"main", S{Kind: elfscan.SpecFunc, Symbol: "main"}},
		{"parse+0x10", S{Kind: elfscan.SpecFunc, Symbol: "parse", Offset: 16}},
		{"parse+16", S{Kind: elfscan.SpecFunc, Symbol: "parse", Offset: 16}},
		{"tcp_*", S{Kind: elfscan.SpecFunc, Symbol: "tcp_*"}},
		{"operator+", S{Kind: elfscan.SpecFunc, Symbol: "operator+"}},
		{"demo::add<int>(int, int)", S{Kind: elfscan.SpecFunc, Symbol: "demo::add<int>(int, int)"}},
		{"0x401000", S{Kind: elfscan.SpecAddr, Addr: 0x401000}},
		{"usdt:postgresql:query__start", S{Kind: elfscan.SpecUSDT, Provider: "postgresql", Name: "query__start"}},
		{"usdt:postgresql:*", S{Kind: elfscan.SpecUSDT, Provider: "postgresql", Name: "*"}},
		{"usdt:gc__start", S{Kind: elfscan.SpecUSDT, Provider: "*", Name: "gc__start"}},
		{"uprobe:/bin/bash:readline", S{Kind: elfscan.SpecFunc, Path: "/bin/bash", Symbol: "readline"}},
		{"u:./a.out:main+4", S{Kind: elfscan.SpecFunc, Path: "./a.out", Symbol: "main", Offset: 4}},
		{"uprobe:/bin/bash:0x1000", S{Kind: elfscan.SpecAddr, Path: "/bin/bash", Addr: 0x1000}},
		{"usdt:/usr/bin/python3:python:line", S{Kind: elfscan.SpecUSDT, Path: "/usr/bin/python3", Provider: "python", Name: "line"}},
		{"U:/usr/bin/python3:line", S{Kind: elfscan.SpecUSDT, Path: "/usr/bin/python3", Provider: "*", Name: "line"}},
	}
	for _, tt := range tests {
		got, err := elfscan.ParseSpec(tt.in)
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		tt.want.Text = tt.in
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{"", "0xzz", "1234", "usdt:", "usdt:a:b:c", "usdt::x", "uprobe:main", "uprobe:/bin/bash", "uprobe:/bin/bash:", "[", "usdt:p:["} {
		if _, err := elfscan.ParseSpec(bad); !errors.Is(err, elfscan.ErrBadSpec) {
			t.Errorf("%q: error %v, want ErrBadSpec", bad, err)
		}
	}
}

// TestResolve resolves specs in the fixtures.
func TestResolve(t *testing.T) {
	f := open(t, fixture.Path(t, "x86_64", "mangled"))
	resolve := func(spec string) ([]elfscan.Site, error) {
		sp, err := elfscan.ParseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		return f.Resolve(sp)
	}
	names := func(sites []elfscan.Site) []string {
		var out []string
		for _, s := range sites {
			out = append(out, s.Func.Name)
		}
		sort.Strings(out)
		return out
	}
	for spec, want := range map[string][]string{
		"plain_c":                    {"plain_c"},
		"plain_c_weak":               {"plain_c"}, // an alias names the same function
		"demo::Widget::draw()":       {"_ZN4demo6Widget4drawEv"},
		"demo::Widget::draw":         {"_ZN4demo6Widget4drawEv"}, // without the parameters
		"demo::Widget::*":            {"_ZN4demo6Widget4drawEv", "_ZN4demo6WidgetC1Ei", "_ZN4demo6WidgetD1Ev", "_ZNK4demo6Widget4sizeEv"},
		"_ZN4demo6Widget9size_impl*": {"_ZNK4demo6Widget4sizeEv"},
		"mycrate::foo::bar":          {"_RNvNtCs1234_7mycrate3foo3bar"},
	} {
		sites, err := resolve(spec)
		if err != nil {
			t.Errorf("%q: %v", spec, err)
			continue
		}
		if got := names(sites); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %v, want %v", spec, got, want)
		}
	}
	sites, err := resolve("main+4")
	if err != nil || len(sites) != 1 || sites[0].Kind != elfscan.SiteInst || sites[0].Addr != sites[0].Func.Addr+4 {
		t.Errorf("main+4: %+v %v", sites, err)
	}
	if sites[0].Offset != sites[0].Addr {
		t.Errorf("main+4: offset %#x, addr %#x", sites[0].Offset, sites[0].Addr)
	}
	main := sites[0].Func
	if s, err := resolve(hex(main.Addr)); err != nil || s[0].Kind != elfscan.SiteEntry || s[0].Func != main {
		t.Errorf("address of main: %+v %v", s, err)
	}
	if s, err := resolve(hex(main.Addr + 1)); err != nil || s[0].Kind != elfscan.SiteInst {
		t.Errorf("address inside main: %+v %v", s, err)
	}
	if _, err := resolve("main+0x1000"); !errors.Is(err, elfscan.ErrBadSpec) {
		t.Errorf("main+0x1000: %v, want ErrBadSpec", err)
	}
	if _, err := resolve("nothing_*"); !errors.Is(err, elfscan.ErrNoSymbol) {
		t.Errorf("nothing_*: %v, want ErrNoSymbol", err)
	}
	if _, err := resolve("usdt:x:y"); !errors.Is(err, elfscan.ErrNoSymbol) {
		t.Errorf("usdt:x:y: %v, want ErrNoSymbol", err)
	}

	u := open(t, fixture.Path(t, "x86_64", "usdt-pie"))
	sp, _ := elfscan.ParseSpec("usdt:demo:sema_*")
	sites, err = u.Resolve(sp)
	if err != nil || len(sites) != 2 {
		t.Fatalf("usdt:demo:sema_*: %v %v", sites, err)
	}
	for _, s := range sites {
		if s.Kind != elfscan.SiteUSDT || s.USDT == nil || s.USDT.Semaphore == 0 || s.Func == nil || s.Func.Name != "sema_probes" {
			t.Errorf("site %+v", s)
		}
	}
}

func hex(a uint64) string { return fmt.Sprintf("%#x", a) }

// TestResolveBpftrace compares glob resolution of raw names with
// bpftrace -l 'uprobe:PATH:GLOB' (bpftrace has * only, no [...] classes,
// and lists no PLT stubs; probeopt globs match "NAME@plt" stubs only when
// the pattern ends in "@plt").
func TestResolveBpftrace(t *testing.T) {
	bpftrace := testenv.MustHaveTool(t, "bpftrace")
	for _, tc := range []struct{ file, glob string }{
		{"mangled", "*"}, {"mangled", "_ZN4demo*"}, {"mangled", "plain_c*"}, {"mangled", "*_tm_clones"},
		{"funcs-pie", "*"}, {"funcs-pie", "leaf*"}, {"funcs-nopie", "d*"},
	} {
		p := fixture.Path(t, "x86_64", tc.file)
		out := run(t, bpftrace, "-l", "uprobe:"+p+":"+tc.glob)
		want := map[string]bool{}
		for _, l := range strings.Fields(out) {
			want[strings.TrimPrefix(l, "uprobe:"+p+":")] = true
		}
		f := open(t, p)
		sp, err := elfscan.ParseSpec(tc.glob)
		if err != nil {
			t.Fatal(err)
		}
		sites, err := f.Resolve(sp)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.file, tc.glob, err)
		}
		got := map[string]bool{}
		for _, s := range sites {
			for _, n := range s.Func.Names() {
				if ok, _ := path.Match(tc.glob, n); ok {
					got[n] = true
				}
			}
		}
		if diff := setDiff(got, want); diff != "" {
			t.Errorf("%s %q differs from bpftrace -l:\n%s", tc.file, tc.glob, diff)
		}
	}
}
