package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
)

// TestTraceReturnDepth traces a recursion of known depth (cx_rec(100):
// 101 nested calls, 50 times) with a return probe: by default the report
// counts 63 returns a recursion and says how many it missed, per site in
// --json and in a line of the text; --return-depth 127 counts them all.
func TestTraceReturnDepth(t *testing.T) {
	needLiveTrace(t, "trace")
	prog, lib := fixture.Build(t, fixture.Coexist), fixture.Build(t, fixture.CoexistLib)
	const calls = 101 * 50
	for _, c := range []struct {
		depth         string
		hits, missing uint64
	}{{"0", 63 * 50, calls - 63*50}, {"127", calls, 0}} {
		out := filepath.Join(t.TempDir(), "report.json")
		_, stderr, code := runCLI(t, "trace", "--json", "-o", out, "--return-depth", c.depth, "libcoexist.so:cx_rec%return", "--", prog, lib, "rec", "100", "50")
		if code != 0 {
			t.Fatalf("--return-depth %s: exit %d\n%s", c.depth, code, stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var rep traceReport
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		if len(rep.Probes) != 1 || len(rep.Probes[0].Sites) != 1 {
			t.Fatalf("--return-depth %s: %s", c.depth, b)
		}
		p, s := rep.Probes[0], rep.Probes[0].Sites[0]
		if p.Hits != c.hits || p.DepthMissed != c.missing || s.DepthMissed != c.missing {
			t.Errorf("--return-depth %s: %d returns, %d missed (site %d); want %d, %d", c.depth, p.Hits, p.DepthMissed, s.DepthMissed, c.hits, c.missing)
		}
		text, stderr, code := runCLI(t, "trace", "--return-depth", c.depth, "libcoexist.so:cx_rec%return", "--", prog, lib, "rec", "100", "50")
		if code != 0 {
			t.Fatalf("text: exit %d\n%s", code, stderr)
		}
		if line := "returns not counted"; strings.Contains(text, line) != (c.missing > 0) {
			t.Errorf("--return-depth %s: the text report says %q: %v\n%s", c.depth, line, !(c.missing > 0), text)
		}
	}
	if _, stderr, code := runCLI(t, "trace", "--return-depth", "5000", "x", "--", "true"); code != exitUsage {
		t.Errorf("--return-depth 5000: exit %d, want %d (%s)", code, exitUsage, stderr)
	}
}
