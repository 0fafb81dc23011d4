package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/probeopt/probeopt/plan"
)

// benchStress runs argv untraced, then traced o.runs times, and compares
// each traced run with the untraced one.
func benchStress(specs, argv []string, stdin []byte, o *benchStressOptions, stderr io.Writer) (*stressReport, error) {
	rep := &stressReport{Command: argv, Failures: []stressRun{}}
	in, err := stdinFile(stdin)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	want, code, elapsed, err := untracedRun(argv, in)
	if err != nil {
		return nil, err
	}
	rep.Exit, rep.UntracedNs = code, elapsed.Nanoseconds()
	var times []time.Duration
	reported := false
	for run := 1; run <= o.runs; run++ {
		traps := o.trapsEvery > 0 && run%o.trapsEvery == 0
		if traps {
			rep.TrapRuns++
		}
		if _, err := in.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		// The tracer's words on the specs are the same every run: the
		// first run's are shown.
		words := io.Discard
		if run == 1 {
			words = stderr
		}
		out, st, got, took, err := compareTraced(specs, argv, in, &benchCompareOptions{traps: traps}, words)
		rep.Runs++
		fail := stressRun{Run: run, Traps: traps, Exit: got}
		switch {
		case err != nil:
			fail.Why = "the tracer failed: " + err.Error()
		case got != code:
			fail.Why = fmt.Sprintf("exit status %d, untraced %d", got, code)
		case !bytes.Equal(out, want):
			fail.Why = outputDiff(out, want)
		}
		if fail.Why != "" {
			rep.Failures = append(rep.Failures, fail)
			fmt.Fprintf(stderr, "probeopt: run %d: %s\n", run, fail.Why)
			continue
		}
		times = append(times, took)
		if !traps && !reported {
			reported = true
			for _, p := range st.Probes {
				for _, s := range p.Sites {
					rep.Sites++
					rep.Hits += s.Hits
					if s.Strategy == plan.TrampolineDetour || s.Strategy == plan.TrampolineNop {
						rep.Trampolines++
					}
				}
			}
		}
	}
	if len(times) > 0 {
		slices.Sort(times)
		rep.TracedNs = times[len(times)/2].Nanoseconds()
	}
	return rep, nil
}

// untracedRun runs argv with standard input in and returns its standard
// output, its exit status (128+N for signal N) and how long it ran.
func untracedRun(argv []string, in *os.File) ([]byte, int, time.Duration, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stderr = in, io.Discard
	start := time.Now()
	out, err := cmd.Output()
	elapsed := time.Since(start)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, 0, elapsed, nil
	case errors.As(err, &ee):
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return out, code, elapsed, nil
	}
	return nil, 0, 0, fmt.Errorf("untraced run: %w", err)
}

// outputDiff says where a traced run's output first differs from the
// untraced run's.
func outputDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("output differs at byte %d (%d bytes, untraced %d): %q", i, len(got), len(want), strings.ToValidUTF8(string(got[i:min(len(got), i+40)]), "?"))
}
