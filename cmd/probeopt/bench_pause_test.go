package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestBenchPatchPauses runs the bounded-pause benchmark on small sizes
// and checks its JSON: one object per size and bound, every patch
// applied, a pass count and pauses that fit together, a stall measured,
// and no wrong result in the target (the command fails on one). The
// bound is one no pass meets, so that every size takes several passes.
func TestBenchPatchPauses(t *testing.T) {
	out := runBenchPatch(t, "--patches", "32,128", "--max-pause", "1us", "--repeat", "1", "--threads", "2", "--json")
	var rows []map[string]int64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatalf("JSON: %v\n%s", err, sc.Text())
		}
		r := map[string]int64{}
		for k, v := range raw {
			var n int64
			if json.Unmarshal(v, &n) == nil {
				r[k] = n
			}
		}
		var longest benchPassPhases
		if err := json.Unmarshal(raw["longest_pass"], &longest); err != nil {
			t.Fatalf("longest_pass: %v\n%s", err, sc.Text())
		}
		// The longest pass's phases are its pause.
		sum := longest.Stop + longest.Read + longest.Check + longest.Write + longest.ReadBack + longest.Other + longest.Resume
		if int64(sum) != r["longest_pause_ns"] || longest.Patches <= 0 || longest.Pages <= 0 {
			t.Errorf("longest pass %+v, longest pause %d", longest, r["longest_pause_ns"])
		}
		rows = append(rows, r)
	}
	if len(rows) != 4 {
		t.Fatalf("%d objects, want 4:\n%s", len(rows), out)
	}
	for i, r := range rows {
		size := []int64{32, 32, 128, 128}[i]
		bound := []int64{0, int64(time.Microsecond), 0, int64(time.Microsecond)}[i]
		for _, k := range []string{"patches", "max_pause_ns", "passes", "longest_pause_ns", "median_pause_ns", "total_ns", "target_worst_stall_ns", "applied"} {
			if _, ok := r[k]; !ok {
				t.Errorf("object %d lacks %q", i, k)
			}
		}
		if r["patches"] != size || r["applied"] != size || r["max_pause_ns"] != bound {
			t.Errorf("object %d: %v", i, r)
		}
		if r["longest_pause_ns"] < r["median_pause_ns"] || r["median_pause_ns"] <= 0 || r["total_ns"] < r["longest_pause_ns"] || r["target_worst_stall_ns"] <= 0 {
			t.Errorf("object %d: figures do not fit: %v", i, r)
		}
		if (bound == 0) != (r["passes"] == 1) {
			t.Errorf("object %d: %d passes", i, r["passes"])
		}
	}
}
