//go:build linux && amd64

package probe_test

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/probeopt/probeopt/probe"
)

// TestBoundedAddWhileForking adds probes in passes of one site each
// (a bound no pass meets) while the program forks in a loop: every child,
// forked at any point of the install, runs "work 1" and checks its result
// (its text must be whole at every site, whether it is cleaned and
// detached or followed), and so does the parent after each fork. The
// program's output says how many were wrong; it must be the untraced
// run's.
func TestBoundedAddWhileForking(t *testing.T) {
	const n = 200
	argv, want := traceeRun(t, "forks", strconv.Itoa(n))
	if string(want) != fmt.Sprintf("forks %d bad 0\n", n) {
		t.Fatalf("untraced run printed %q", want)
	}
	for _, follow := range []bool{false, true} {
		t.Run(fmt.Sprintf("follow=%v", follow), func(t *testing.T) {
			passes := 0
			opts := &probe.Options{FollowForks: follow, MaxPause: time.Nanosecond, OnPass: func(done, total int) { passes++ }}
			r := spawn(t, argv, opts, nil)
			if err := r.tr.Resume(); err != nil {
				t.Fatal(err)
			}
			if _, err := r.tr.Add("k_*", "c_sum", "work"); err != nil {
				t.Fatalf("add: %v", err)
			}
			r.finish(t, 2*time.Minute)
			if !bytes.Equal(r.stdout.Bytes(), want) {
				t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
			}
			st := r.tr.Stats()
			sites := 0
			var hits uint64
			for _, p := range st.Probes {
				sites += len(p.Sites)
				hits += p.Hits
			}
			if passes < 2 || sites == 0 {
				t.Errorf("%d passes for %d sites", passes, sites)
			}
			t.Logf("%d passes for %d sites, longest pause %v, staging stop %v, %d hits", passes, sites, st.LongestPause, st.LongestStage, hits)
		})
	}
}
