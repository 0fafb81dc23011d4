//go:build linux && amd64

package probe_test

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/proc"
)

// TestMisuse passes the library what a careless caller would: a nil
// probe, probes added and removed from several goroutines at once, a
// second Detach, calls after it. Nothing panics, every error says what
// happened, Events is closed at the end, and the text equals the file.
func TestMisuse(t *testing.T) {
	s, tr := attachServer(t, &probe.Options{Events: true})
	if err := tr.Remove(nil); !errors.Is(err, probe.ErrUnknownProbe) {
		t.Errorf("Remove(nil): %v, want ErrUnknownProbe", err)
	}
	if err := tr.Resume(); err != nil {
		t.Fatal(err)
	}
	specs := []string{"k_push", "k_nop", "c_sum", "k_mov", "c_fib%return", "mix"}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				ps, err := tr.Add(specs[(g+i)%len(specs)])
				if err != nil {
					t.Errorf("Add: %v", err)
					return
				}
				_ = tr.Stats()
				if err := tr.Remove(ps...); err != nil {
					t.Errorf("Remove: %v", err)
					return
				}
			}
		}(g)
	}
	s.work(t, 30)
	wg.Wait()
	s.work(t, 10)
	if err := tr.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Detach(); !errors.Is(err, probe.ErrClosed) {
		t.Errorf("second Detach: %v, want ErrClosed", err)
	}
	if _, err := tr.Add("k_push"); !errors.Is(err, probe.ErrClosed) {
		t.Errorf("Add after Detach: %v, want ErrClosed", err)
	}
	if err := tr.Remove(&probe.Probe{ID: 1}); !errors.Is(err, probe.ErrClosed) {
		t.Errorf("Remove after Detach: %v, want ErrClosed", err)
	}
	deadline := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-tr.Events():
		case <-deadline:
			t.Fatal("Events not closed 10 s after Detach")
		}
	}
	testenv.TextEqualsFile(t, s.cmd.Process.Pid, s.exe)
	s.work(t, 5)
}

// TestAttachErrors checks what Attach says of a pid nobody has and of a
// process another tracer holds (here, a tracer of this very program: the
// kernel's TracerPid names it).
func TestAttachErrors(t *testing.T) {
	testenv.NeedPtrace(t)
	_, err := probe.Attach(1<<22+4321, nil)
	if !errors.Is(err, proc.ErrNoProcess) || strings.Contains(err.Error(), "exited") {
		t.Errorf("Attach to a missing pid: %v, want ErrNoProcess, no word of an exit", err)
	}
	s, tr := attachServer(t, nil)
	defer tr.Detach()
	_, err = probe.Attach(s.cmd.Process.Pid, nil)
	var te *proc.TracedError
	if !errors.As(err, &te) || te.Tracer != os.Getpid() || te.Pid != s.cmd.Process.Pid {
		t.Errorf("second Attach: %v, want a TracedError naming process %d", err, os.Getpid())
	}
}

// TestTrapsCountProbesOnly checks that Stats.Traps counts the probes'
// traps: with traps only, one k_push probe, and "work 40", 40 traps (the
// program's own count), whatever the engine's own sites took
// (InternalTraps).
func TestTrapsCountProbesOnly(t *testing.T) {
	s, tr := attachServer(t, &probe.Options{NoTrampolines: true})
	defer tr.Detach()
	addResume(t, tr, "k_push")
	s.work(t, 40)
	if st := tr.Stats(); st.Traps != 40 {
		t.Errorf("Traps = %d (internal %d), want 40", st.Traps, st.InternalTraps)
	}
	// A return probe needs a trampoline, which the option forbids: the
	// refusal says so.
	_, err := tr.Add("c_fib%return")
	var re *probe.RejectedError
	if !errors.As(err, &re) || re.Reason != probe.ReasonReturnNeedsTrampoline || !strings.Contains(re.Detail, "NoTrampolines") {
		t.Errorf("return probe with NoTrampolines: %v, want a refusal naming the option", err)
	}
}
