//go:build linux && (amd64 || arm64)

package batchpatch

import (
	"fmt"
	"testing"
)

// BenchmarkApply times one pass (stop, check, write, verify, resume) of n
// patches against the running 8-thread fixture: in one batch, and as one
// stop per patch. Every iteration applies the batch and reverts it.
func BenchmarkApply(b *testing.B) {
	f := startFixture(b, nil)
	for _, n := range []int{1, 16, 256, 4096} {
		ps := patches(f, n, aPatch)
		inv := make([]Patch, n)
		for i, q := range ps {
			inv[i] = q.Inverse()
		}
		b.Run(fmt.Sprintf("batch/%d", n), func(b *testing.B) {
			for b.Loop() {
				for _, batch := range [][]Patch{ps, inv} {
					if _, err := Apply(f.p, batch, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		if n > 256 {
			continue // one stop per patch: the 4,096 case is left to probeopt bench patch
		}
		b.Run(fmt.Sprintf("per-patch/%d", n), func(b *testing.B) {
			for b.Loop() {
				for _, batch := range [][]Patch{ps, inv} {
					for _, q := range batch {
						if _, err := Apply(f.p, []Patch{q}, nil); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
	}
}
