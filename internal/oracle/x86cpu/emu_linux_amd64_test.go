//go:build linux && amd64

package x86cpu

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEmuOracleRestart kills the child behind the oracle's back: the next
// batch finds it dead, starts a new child and runs there.
func TestEmuOracleRestart(t *testing.T) {
	o := newTestEmuOracle(t)
	o.mu.Lock()
	pid := o.pid
	o.mu.Unlock()
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	img := NewEmuImage(1)
	c := []EmuCase{{Bytes: []byte{0x90}}}
	c[0].Init.RIP, c[0].Init.RFLAGS = EmuCodeLow, 0x202
	c[0].Init.FSBase, c[0].Init.GSBase = EmuFSBase, EmuGSBase
	if err := img.Place(&c[0]); err != nil {
		t.Fatal(err)
	}
	out := make([]EmuCPUResult, 1)
	if err := o.Run(img, c, out); err != nil {
		t.Fatalf("Run after the child was killed: %v", err)
	}
	if out[0].Signal != emuSigTrap || out[0].State.RIP != EmuCodeLow+1 {
		t.Errorf("nop on the new child: %+v", out[0])
	}
	if o.Restarts() != 1 {
		t.Errorf("Restarts() = %d, want 1", o.Restarts())
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Run(img, c, out); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
}
