//go:build linux && amd64

package x86cpu

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestXOLX86OracleRestart kills the oracle's child and checks that the next
// batch runs in a new one, with the same results.
func TestXOLX86OracleRestart(t *testing.T) {
	o := newTestXOLOracle(t)
	c := XOLX86Campaign{Cases: 300, Seed: 5, Vendor: hostVendor(t)}
	b := c.makeXOLBatch(0, 300)
	first := make([]XOLX86Result, len(b.runs))
	if err := o.Run(b.img, b.runs, first); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(o.pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	again := make([]XOLX86Result, len(b.runs))
	if err := o.Run(b.img, b.runs, again); err != nil {
		t.Fatalf("after the child was killed: %v", err)
	}
	if o.Restarts() != 1 {
		t.Errorf("%d restarts, want 1", o.Restarts())
	}
	for i := range first {
		if first[i].Signal != again[i].Signal || first[i].Regs != again[i].Regs {
			t.Fatalf("run %d differs after the restart: %+v, then %+v", i, first[i].Regs, again[i].Regs)
		}
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Run(b.img, b.runs, again); err != ErrClosed {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
}
