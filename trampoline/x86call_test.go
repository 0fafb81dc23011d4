package trampoline

import (
	"errors"
	"fmt"
	"testing"

	"github.com/probeopt/probeopt/internal/x86enc"
)

// TestCallsGenerate generates slots with calls at entries and returns,
// and return trampolines made for them, in every configuration and flag
// method, near and far functions: every instruction decodes back at its
// boundary (checkBoundaries, objdump where it is installed). The
// behaviour is checked against the kernel's uprobes in package probe
// (TestBPFAgainstKernel).
func TestCallsGenerate(t *testing.T) {
	const site, slot = 0x401000, 0x401000 + 0x100000
	for sname, s := range analyzedGenSites(t, site) {
		for cname, cfg := range genConfigs(t, slot) {
			c := *cfg
			d := *cfg.Data
			if err := d.SetThreads(64, 8, 0); err != nil {
				t.Fatal(err)
			}
			c.Data, c.ReturnCalls = &d, true
			if c.ThreadPointer == ThreadNone {
				continue
			}
			for hname, h := range map[string]Handler{
				"entry":     {ID: 1, Calls: []Call{{slot + 0x9000, 0}, {slot + 0x2_0000_0000, 1 << 40}}},
				"return":    {ID: 2, Return: &ReturnHandler{Count: true, Counter: 4, Calls: []Call{{slot + 0x9000, 7}}}},
				"both":      {ID: 3, Count: true, Counter: 2, Calls: []Call{{slot + 0x9000, 0}}, Return: &ReturnHandler{Calls: []Call{{slot + 0x9100, 1}}}},
				"far-count": {ID: 4, Return: &ReturnHandler{Count: true, Counter: 1, Calls: []Call{{slot + 0x3_0000_0000, 0}}}},
			} {
				name := fmt.Sprintf("%s/%s/%s", sname, cname, hname)
				a := x86enc.New(slot)
				if err := generateInto(a, s, &h, &c); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				checkBoundaries(t, a.Bytes(), slot, a.Starts())
				if t.Failed() {
					t.Fatalf("%s: % x", name, a.Bytes())
				}
			}
			a := x86enc.New(slot)
			if err := generateReturnInto(a, &c); err != nil {
				t.Fatalf("return trampoline %s: %v", cname, err)
			}
			checkBoundaries(t, a.Bytes(), slot, a.Starts())
		}
	}
}

// TestCallsNeed checks what calls need: the per-thread data plane, a
// thread pointer, a return trampoline with ReturnCalls, no address 0.
func TestCallsNeed(t *testing.T) {
	const site, slot = 0x401000, 0x401000 + 0x100000
	s, err := AnalyzeX86(site, mustHex(t, "0f1f440000c3"), nil)
	if err != nil {
		t.Fatal(err)
	}
	base := genConfigs(t, slot)["near"]
	threads := *base.Data
	if err := threads.SetThreads(64, 8, 0); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cfg Config
		h   Handler
	}{
		"no stripes":        {Config{Data: base.Data, Threads: base.Threads, ReturnAddr: base.ReturnAddr}, Handler{Calls: []Call{{Addr: 0x1000}}}},
		"no thread pointer": {Config{Data: &threads, ThreadPointer: ThreadNone}, Handler{Calls: []Call{{Addr: 0x1000}}}},
		"address 0":         {Config{Data: &threads}, Handler{Calls: []Call{{}}}},
		"no ReturnCalls": {Config{Data: &threads, Threads: base.Threads, ReturnAddr: base.ReturnAddr},
			Handler{Return: &ReturnHandler{Calls: []Call{{Addr: 0x1000}}}}},
	} {
		if _, err := GenerateX86(slot, s, &tc.h, &tc.cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	// The same slot is fine once each need is met.
	ok := Config{Data: &threads, Threads: base.Threads, ReturnAddr: base.ReturnAddr, ReturnCalls: true}
	h := Handler{Calls: []Call{{Addr: 0x1000}}, Return: &ReturnHandler{Calls: []Call{{Addr: 0x1000}}}}
	if _, err := GenerateX86(slot, s, &h, &ok); err != nil {
		t.Error(err)
	}
}
