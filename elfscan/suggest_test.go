package elfscan_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
)

// TestNoSymbolSuggestions resolves misspelt specs in the fixtures and
// checks the names the error suggests.
func TestNoSymbolSuggestions(t *testing.T) {
	tests := []struct {
		arch, file, spec string
		want             []string
		note             string
	}{
		{"x86_64", "funcs-pie", "mian", []string{"main"}, ""},
		{"x86_64", "funcs-pie", "Main", []string{"main"}, ""},
		{"x86_64", "funcs-pie", "mian+4", []string{"main"}, ""},
		{"x86_64", "funcs-pie", "printf", []string{"printf@plt"}, ""},
		{"x86_64", "funcs-pie", "dispatch_cold", []string{"dispatch.cold", "dispatch"}, ""},
		{"x86_64", "funcs-pie", "MAIN*", []string{"main"}, ""},
		{"x86_64", "funcs-pie", "print*", []string{"printf@plt"}, ""},
		{"x86_64", "funcs-pie", "zzzzzzzz", nil, ""},
		{"x86_64", "funcs-pie", "usdt:demo:loop", nil, "the file has no USDT probes"},
		{"x86_64", "tiny", "_strat", []string{"_start"}, ""},
		{"x86_64", "tiny", "helper1", []string{"helper"}, ""},
		{"x86_64", "tiny", "h*+0x100", nil, "every function it names is 0x100 bytes long or shorter"},
		{"x86_64", "tiny", "usdt:tiny:strat", []string{"usdt:tiny:start"}, ""},
		{"x86_64", "tiny", "usdt:Tiny:*", []string{"usdt:tiny:start"}, ""},
		{"x86_64", "tiny", "usdt:strat", []string{"usdt:tiny:start"}, ""},
		{"x86_64", "mangled", "demo::ad<int>", []string{"demo::add<int>"}, ""},
		{"x86_64", "mangled", "demo::Widget::drew()", []string{"demo::Widget::draw"}, ""},
		{"x86_64", "mangled", "plain", []string{"plain_c", "plain_c_weak"}, ""},
		{"x86_64", "usdt-pie", "usdt:dmeo:loop", []string{"usdt:demo:loop"}, ""},
		{"x86_64", "usdt-pie", "usdt:demo:sema", []string{"usdt:demo:sema_done", "usdt:demo:sema_start"}, ""},
		{"aarch64", "funcs-pie", "mian", []string{"main"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.arch+"/"+tt.file+"/"+tt.spec, func(t *testing.T) {
			f := open(t, fixture.Path(t, tt.arch, tt.file))
			sp, err := elfscan.ParseSpec(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			sites, err := f.Resolve(sp)
			if err == nil {
				t.Fatalf("resolved to %d sites", len(sites))
			}
			if !errors.Is(err, elfscan.ErrNoSymbol) {
				t.Fatalf("error %v does not match ErrNoSymbol", err)
			}
			var ne *elfscan.NoSymbolError
			if !errors.As(err, &ne) {
				t.Fatalf("error %T is not a *NoSymbolError", err)
			}
			if ne.Spec != tt.spec || ne.Note != tt.note || !reflect.DeepEqual(ne.Suggestions, tt.want) {
				t.Errorf("got %+v, want suggestions %q and note %q", ne, tt.want, tt.note)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, `"`+tt.spec+`": no such symbol`) {
				t.Errorf("message %q", msg)
			}
			if (len(tt.want) > 0) != strings.Contains(msg, "did you mean") {
				t.Errorf("message %q with suggestions %q", msg, tt.want)
			}
			// Every suggestion resolves (NAME@plt and the C++ forms
			// are specs too).
			for _, s := range ne.Suggestions {
				sp, err := elfscan.ParseSpec(s)
				if err != nil {
					t.Errorf("suggestion %q: %v", s, err)
					continue
				}
				if _, err := f.Resolve(sp); err != nil {
					t.Errorf("suggestion %q: %v", s, err)
				}
			}
		})
	}
}

// TestNoSymbolErrorMessage checks the message forms.
func TestNoSymbolErrorMessage(t *testing.T) {
	for _, tt := range []struct {
		e    elfscan.NoSymbolError
		want string
	}{
		{elfscan.NoSymbolError{Spec: "x"}, `"x": no such symbol`},
		{elfscan.NoSymbolError{Spec: "mian", Suggestions: []string{"main"}}, `"mian": no such symbol; did you mean main?`},
		{elfscan.NoSymbolError{Spec: "ab", Suggestions: []string{"a", "b"}}, `"ab": no such symbol; did you mean a or b?`},
		{elfscan.NoSymbolError{Spec: "abc", Suggestions: []string{"a", "b", "c"}}, `"abc": no such symbol; did you mean a, b or c?`},
		{elfscan.NoSymbolError{Spec: "usdt:a:b", Note: "the file has no USDT probes"}, `"usdt:a:b": no such symbol: the file has no USDT probes`},
		{elfscan.NoSymbolError{Spec: "a\nb"}, `"a\nb": no such symbol`},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.e, got, tt.want)
		}
	}
}
