package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/probe"
)

// TestTraceGoid runs "trace --events --goid" on a static Go program whose
// goroutines print their own goroutine id and, when locked to a thread,
// their thread id: every event of main.work (its first argument names the
// goroutine) carries both, in text, in JSON lines and in the binary
// format. --goid without --events is a usage error.
func TestTraceGoid(t *testing.T) {
	needLiveTrace(t, "trace")
	exe := fixture.GoCommandFor(t, "gothreads", runtime.GOARCH, false)
	const workers, calls = 2, 100
	for _, format := range []string{"text", "json", "bin"} {
		t.Run(format, func(t *testing.T) {
			evFile := filepath.Join(t.TempDir(), "events")
			stdout, stderr, code := runBinary(t, "trace", "--events", "--goid", "--format", format, "-o", evFile, "main.work", "--", exe, strconv.Itoa(workers), strconv.Itoa(calls))
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			type worker struct{ tid, goid int }
			ws := map[int]worker{}
			for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
				var i, tid, goid, sum int
				var locked bool
				if _, err := fmt.Sscanf(l, "worker %d locked %t tid %d goid %d sum %d", &i, &locked, &tid, &goid, &sum); err != nil {
					t.Fatalf("output %q: %v", l, err)
				}
				ws[i] = worker{tid, goid}
			}
			f, err := os.Open(evFile)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n := 0
			var next func() (string, bool)
			if format == "bin" {
				er, err := probe.NewEventReader(f)
				if err != nil {
					t.Fatal(err)
				}
				next = func() (string, bool) {
					var ev probe.Event
					if er.Read(&ev) != nil {
						return "", false
					}
					return fmt.Sprintf("bin %d %d %d", ev.Tid, ev.Goid, ev.Args[0]), true
				}
			} else {
				sc := bufio.NewScanner(f)
				next = func() (string, bool) {
					if !sc.Scan() {
						return "", false
					}
					return sc.Text(), true
				}
			}
			for {
				l, ok := next()
				if !ok {
					break
				}
				var tid, goid int
				var arg0 uint64
				switch {
				case format == "bin":
					// The file holds main.work's events alone.
					if _, err := fmt.Sscanf(l, "bin %d %d %d", &tid, &goid, &arg0); err != nil {
						t.Fatal(err)
					}
				case format == "json":
					var ev traceEvent
					if err := json.Unmarshal([]byte(l), &ev); err != nil {
						continue // the report
					}
					if ev.Spec != "main.work" || len(ev.Args) == 0 {
						continue
					}
					tid, goid, arg0 = ev.Tid, int(ev.Goid), ev.Args[0]
				default:
					fs := strings.Fields(l)
					if len(fs) != 12 || fs[3] != "main.work" || !strings.HasPrefix(fs[11], "goid=") {
						continue
					}
					tid, _ = strconv.Atoi(fs[2])
					goid, _ = strconv.Atoi(strings.TrimPrefix(fs[11], "goid="))
					arg0, _ = strconv.ParseUint(fs[5], 0, 64)
				}
				w, ok := ws[int(arg0)]
				if !ok || goid != w.goid || w.tid != 0 && tid != w.tid || tid <= 0 {
					t.Errorf("event %q: worker %d is thread %d goroutine %d", l, arg0, w.tid, w.goid)
				}
				n++
			}
			// Each call's entry, and a second entry when the stack
			// check sends it to morestack.
			if n < 2*workers*calls {
				t.Errorf("%d events of main.work, want at least %d", n, 2*workers*calls)
			}
		})
	}
	if _, stderr, code := runCLI(t, "trace", "--goid", "main.work", "--", exe, "1", "1"); code != exitUsage {
		t.Errorf("--goid without --events: exit %d, want %d (%s)", code, exitUsage, stderr)
	}
}
