//go:build linux && amd64

package probe_test

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/probe"
)

// TestFixtureEveryFunction probes every function of the fixture, runs it,
// and checks the output against an untraced run and the hit counts against
// the calls the program makes.
func TestFixtureEveryFunction(t *testing.T) {
	const n = 300
	argv, want := traceeRun(t, "work", strconv.Itoa(n))
	for _, mode := range []struct {
		name string
		opts probe.Options
	}{
		{"trampolines", probe.Options{}},
		{"traps", probe.Options{NoTrampolines: true}},
		// A bound no pass meets: one site per pass, each live as its
		// pass lands (the process is held at its start meanwhile, so
		// every hit counts).
		{"bounded", probe.Options{MaxPause: time.Nanosecond}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			var passes [][2]int
			if mode.opts.MaxPause > 0 {
				mode.opts.OnPass = func(done, total int) { passes = append(passes, [2]int{done, total}) }
			}
			r := spawn(t, argv, &mode.opts, nil)
			probes, err := r.tr.Add("*")
			if err != nil {
				t.Fatalf("add: %v", err)
			}
			if len(probes) != 1 {
				t.Fatalf("probes %v", probes)
			}
			r.finish(t, time.Minute)
			if !bytes.Equal(r.stdout.Bytes(), want) {
				t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
			}
			st := r.tr.Stats()
			hits := hitsBySymbol(st)
			for sym, w := range map[string]uint64{
				"k_push": n, "k_nop": n, "k_mov": 2 * n, "k_jmp": n, "k_ret": n, "k_redzone": n,
				"k_sse": n, "k_riprel": n, "k_lock": n, "k_rep": n, "k_rep_stos": n, "c_sum": n,
				"work": 1, "k_global": 1, "main": 1,
			} {
				if hits[sym] != w {
					t.Errorf("%s: %d hits, want %d", sym, hits[sym], w)
				}
			}
			t.Logf("traps %d, emulated %d, boosted %d, stepped %d, fallbacks %d, batches %d", st.Traps, st.Emulated, st.Boosted, st.Stepped, st.Fallbacks, st.Batches)
			if mode.opts.MaxPause > 0 {
				sites := 0
				for _, p := range st.Probes {
					sites += len(p.Sites)
				}
				// The engine's own sites (the dynamic linker's
				// rendezvous) are in the batch too.
				if len(passes) < sites || st.Batches < len(passes) || passes[len(passes)-1][1] != len(passes) {
					t.Errorf("bounded: %d passes (%d reported: %v) for %d sites", st.Batches, len(passes), passes, sites)
				}
				for k, p := range passes {
					if p[0] != k+1 {
						t.Errorf("pass %d reported %d of %d sites", k, p[0], p[1])
						break
					}
				}
			}
			tramps := 0
			for _, p := range st.Probes {
				for _, s := range p.Sites {
					tramp := s.Strategy == plan.TrampolineNop || s.Strategy == plan.TrampolineDetour
					if tramp {
						tramps++
						if s.Emulated+s.Boosted+s.Stepped != 0 {
							t.Errorf("%s: trampoline site with trap hits %+v", s.Symbol, s)
						}
					}
					if s.Strategy == plan.XOL && s.Hits > 0 && s.Stepped+s.Boosted != s.Hits {
						t.Errorf("%s: xol site with %d hits, %d stepped, %d boosted", s.Symbol, s.Hits, s.Stepped, s.Boosted)
					}
				}
			}
			if mode.opts.NoTrampolines {
				if tramps != 0 {
					t.Errorf("%d trampoline sites with NoTrampolines", tramps)
				}
				for sym, boosted := range map[string]bool{"k_sse": true, "k_riprel": true, "k_lock": true, "k_rep_stos": false} {
					for _, p := range st.Probes {
						for _, s := range p.Sites {
							if s.Symbol == sym && (s.Boosted == s.Hits) != boosted {
								t.Errorf("%s: %d of %d hits boosted", sym, s.Boosted, s.Hits)
							}
						}
					}
				}
				return
			}
			// c_sum is plain compiled C, k_nop a nop5: both take a
			// trampoline, and their hits make no trap.
			for _, p := range st.Probes {
				for _, s := range p.Sites {
					if (s.Symbol == "c_sum" || s.Symbol == "k_nop") && s.Strategy != plan.TrampolineDetour && s.Strategy != plan.TrampolineNop {
						t.Errorf("%s: %s (%s), want a trampoline", s.Symbol, s.Strategy, s.Detail)
					}
				}
			}
			if tramps == 0 || st.Traps >= uint64(len(hits))*n {
				t.Errorf("%d trampoline sites, %d traps", tramps, st.Traps)
			}
		})
	}
}

// TestRejectedProbe checks that a probe the plan refuses is refused with
// its reason and never written.
func TestRejectedProbe(t *testing.T) {
	testenv.NeedPtrace(t)
	exe := traceFixture(t, "tracee")
	r := spawn(t, []string{exe, "work", "3"}, nil, nil)
	before := r.tr.Stats().Patches
	for spec, reason := range map[string]plan.Reason{
		"k_syscall+1": plan.ReasonMidInstruction,
		"k_syscall+7": plan.ReasonSyscall,
	} {
		_, err := r.tr.Add(spec)
		var re *probe.RejectedError
		if !errors.As(err, &re) || !errors.Is(err, probe.ErrRejected) {
			t.Errorf("%s: error %v, want a RejectedError", spec, err)
			continue
		}
		if re.Reason != reason || re.Detail == "" {
			t.Errorf("%s: reason %s (%s), want %s", spec, re.Reason, re.Detail, reason)
		}
	}
	if _, err := r.tr.Add("no_such_function"); !errors.Is(err, probe.ErrNoSites) {
		t.Errorf("no_such_function: %v, want ErrNoSites", err)
	}
	st := r.tr.Stats()
	if st.Patches != before {
		t.Errorf("%d bytes written for refused probes", st.Patches-before)
	}
	r.finish(t, time.Minute)
}
