//go:build linux && amd64

package probe_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
)

// throwsCXX throws through cleanups and catches, on every run.
const throwsCXX = `
#include <stdexcept>
#include <cstdio>
#include <string>

struct Noisy {
	int n;
	explicit Noisy(int n) : n(n) {}
	~Noisy() { std::printf("~%d\n", n); }
};

__attribute__((noinline)) int may_throw(int x) {
	if (x > 3)
		throw std::runtime_error("big " + std::to_string(x));
	return x * 2;
}

__attribute__((noinline)) int cleanup(int x) {
	Noisy a(x), b(x + 1);
	return may_throw(x) + may_throw(x + 1);
}

__attribute__((noinline)) int catches(int x) {
	try {
		Noisy a(x);
		return cleanup(x);
	} catch (const std::runtime_error &e) {
		std::printf("caught %s\n", e.what());
		return -1;
	} catch (...) {
		return -2;
	}
}

__attribute__((noinline)) int nested(int x) {
	int r = 0;
	for (int i = 0; i < x; i++) {
		try {
			r += catches(i);
			std::string s(static_cast<size_t>(i), 'x');
			r += may_throw(static_cast<int>(s.size()));
		} catch (const std::exception &) {
			r -= 100;
		}
	}
	return r;
}

int main(int argc, char **) { std::printf("%d\n", nested(argc + 7)); return 0; }
`

// TestLandingPadNoDetour traces a C++ program at every instruction whose
// detour, judged on the function's own branches, would replace the first
// bytes of an exception landing pad: the unwinder jumps to the pad through
// a register when an exception passes, so the engine must not give those
// sites a detour. The program throws on every run: a wrong detour crashes
// it or changes its output.
func TestLandingPadNoDetour(t *testing.T) {
	needPtrace(t)
	gxx := testenv.MustHaveTool(t, "g++")
	dir := t.TempDir()
	src, exe := filepath.Join(dir, "throws.cc"), filepath.Join(dir, "throws")
	if err := os.WriteFile(src, []byte(throwsCXX), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(gxx, "-O2", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, b)
	}
	specs := padSites(t, exe)
	if len(specs) == 0 {
		t.Fatal("no detour covers a landing pad: the fixture does not reach the case")
	}
	want := untraced(t, []string{exe}, nil)
	r := spawn(t, []string{exe}, nil, nil)
	for _, spec := range specs {
		if _, err := r.tr.Add(spec); err != nil {
			t.Fatalf("add %s: %v", spec, err)
		}
	}
	r.finish(t, time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	for _, p := range r.tr.Stats().Probes {
		for _, s := range p.Sites {
			if s.Strategy == plan.TrampolineDetour {
				t.Errorf("%s: a detour (%s), over a landing pad", s.Symbol, s.Detail)
			}
		}
	}
	t.Logf("%d sites before a landing pad: %v", len(specs), specs)
}

// padSites returns SYM+OFF specs of instructions whose detour, judged
// without the file's landing pads, would replace the first bytes of one;
// at most one per 15 bytes, so that no site lies inside the bytes another
// one's trampoline would replace.
func padSites(t *testing.T, exe string) []string {
	t.Helper()
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var frame plan.EHSection
	var data []plan.EHSection
	for _, name := range []string{".eh_frame", ".gcc_except_table"} {
		s := ef.Section(name)
		if s == nil {
			t.Fatalf("%s: no %s", exe, name)
		}
		b, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		es := plan.EHSection{Name: name, Addr: s.Addr, Data: b}
		if name == ".eh_frame" {
			frame = es
		} else {
			data = append(data, es)
		}
	}
	eh, err := plan.ParseExceptionTables(frame, data)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elfscan.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var specs []string
	last := uint64(0) // the last site taken: sites 15 bytes apart do not share a trampoline
	for _, pad := range eh.LandingPads {
		fn := f.FuncAt(pad - 1)
		if fn == nil || fn.Addr == pad {
			continue
		}
		body, err := f.Code(fn.Addr, fn.End-fn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		an := plan.AnalyzeX86(fn.Addr, body, decode.X86Decoder{})
		for a := range an.Starts() {
			if a >= pad || pad-a > 15 || a == fn.Addr {
				continue
			}
			site := &plan.Site{Arch: decode.X86_64, Addr: a, Code: body[a-fn.Addr:], Func: an}
			d := plan.Decide(plan.Probeopt, site, &plan.Options{Rules: true, Live: true})
			var n int
			var at uint64
			for _, r := range d.Rules {
				if r.Name == "trampoline" {
					fmt.Sscanf(r.Detail, "a detour: %d bytes replaced at %v", &n, &at)
				}
			}
			if d.Strategy == plan.TrampolineDetour && pad < at+uint64(n) && (last == 0 || a-last >= 15) {
				specs = append(specs, fmt.Sprintf("%s+%#x", fn.Name, a-fn.Addr))
				last = a
			}
		}
	}
	return specs
}
