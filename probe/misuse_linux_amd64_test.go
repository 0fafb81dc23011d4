//go:build linux && amd64

package probe_test

import (
	"bytes"
	"errors"
	"os"
	"strconv"
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

// TestLeftover checks what Leftover sees in a process: the jumps and
// areas of a tracer while it is attached, nothing once it has detached,
// and a byte written into the text behind its back (through
// /proc/PID/mem) at its address with both values.
func TestLeftover(t *testing.T) {
	s, tr := attachServer(t, nil)
	pid := s.cmd.Process.Pid
	addResume(t, tr, "k_push", "c_fib%return")
	s.work(t, 5)
	var site uint64
	for _, p := range tr.Stats().Probes {
		for _, st := range p.Sites {
			if st.Symbol == "k_push" {
				site = st.RuntimeAddr
			}
		}
	}
	if site == 0 {
		t.Fatal("no k_push site")
	}
	lb, err := probe.Leftover(pid)
	if err != nil {
		t.Fatal(err)
	}
	near := func(lb *probe.LeftBehind, addr uint64) bool {
		for _, d := range lb.Text {
			if d.Path == s.exe && d.Addr <= addr+16 && addr < d.Addr+uint64(d.Len) {
				return true
			}
		}
		return false
	}
	if !near(lb, site) || len(lb.Areas) == 0 {
		t.Errorf("attached: %v; want a difference at k_push (%#x) and areas", lb, site)
	}
	if err := tr.Detach(); err != nil {
		t.Fatal(err)
	}
	if lb, err = probe.Leftover(pid); err != nil || !lb.Empty() || lb.Files < 3 {
		t.Fatalf("detached: %v, %v; want nothing in 3 files or more", lb, err)
	}
	mem, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/mem", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var orig [1]byte
	if _, err := mem.ReadAt(orig[:], int64(site)); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.WriteAt([]byte{orig[0] ^ 0xff}, int64(site)); err != nil {
		t.Fatal(err)
	}
	lb, err = probe.Leftover(pid)
	if _, err2 := mem.WriteAt(orig[:], int64(site)); err2 != nil {
		t.Fatal(err2)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := probe.TextDiff{Path: s.exe, Addr: site, Len: 1, Got: []byte{orig[0] ^ 0xff}, Want: orig[:]}
	if len(lb.Text) != 1 || len(lb.Areas) != 0 || lb.Text[0].Path != want.Path || lb.Text[0].Addr != want.Addr || lb.Text[0].Len != 1 ||
		!bytes.Equal(lb.Text[0].Got, want.Got) || !bytes.Equal(lb.Text[0].Want, want.Want) {
		t.Errorf("a byte written: %v; want %v", lb, want)
	}
	if lb, err = probe.Leftover(pid); err != nil || !lb.Empty() {
		t.Errorf("the byte put back: %v, %v; want nothing", lb, err)
	}
	s.work(t, 5)
	if _, err := probe.Leftover(1 << 22); !errors.Is(err, proc.ErrNoProcess) {
		t.Errorf("Leftover of a missing process: %v, want ErrNoProcess", err)
	}
}
