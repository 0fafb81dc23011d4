package textfile

import (
	"bytes"
	"os"
	"slices"
	"testing"
)

func TestRuns(t *testing.T) {
	base := bytes.Repeat([]byte{0x90}, 10000)
	for _, tc := range []struct {
		name string
		at   []int // the bytes changed
		want [][2]int
	}{
		{"none", nil, nil},
		{"one", []int{5000}, [][2]int{{5000, 5001}}},
		{"a jump with an unchanged byte", []int{100, 101, 103, 104}, [][2]int{{100, 105}}},
		{"two runs", []int{10, 10 + mergeGap + 1}, [][2]int{{10, 11}, {10 + mergeGap + 1, 10 + mergeGap + 2}}},
		{"joined at the gap", []int{10, 10 + mergeGap}, [][2]int{{10, 10 + mergeGap + 1}}},
		{"first and last", []int{0, 9999}, [][2]int{{0, 1}, {9999, 10000}}},
		{"across a page", []int{4095, 4096}, [][2]int{{4095, 4097}}},
	} {
		got := slices.Clone(base)
		for _, i := range tc.at {
			got[i] = 0xcc
		}
		if r := runs(got, base); !slices.Equal(r, tc.want) {
			t.Errorf("%s: runs %v, want %v", tc.name, r, tc.want)
		}
	}
}

// TestCompareSelf compares this test's own executable with its file: no
// difference, and at least one mapping.
func TestCompareSelf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n, diffs, err := Compare(os.Getpid(), exe, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || len(diffs) != 0 {
		t.Errorf("%d mappings, differences %v; want some mappings and none", n, diffs)
	}
}
