//go:build linux && amd64

package x86cpu

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestLengthOracleAfterSysenter checks that the oracle keeps working after
// SYSENTER, which on Intel CPUs leaves the child in 32-bit mode.
func TestLengthOracleAfterSysenter(t *testing.T) {
	o := newTestOracle(t)
	sysenter := x86VendorLengthNamed("sysenter in 64-bit mode")
	want := sysenter.want(hostVendor(t))
	for range 3 {
		if n, res, err := o.Length(mustHex(t, sysenter.hex)); err != nil || (CPULength{n, res}) != want {
			t.Fatalf("Length(%s) = %d %v %v, want %d %v", sysenter.hex, n, res, err, want.N, want.Result)
		}
		if n, res, err := o.Length([]byte{0x90}); err != nil || n != 1 || res != CPUAccepted {
			t.Fatalf("Length(90) after sysenter = %d %v %v, want 1 accepted", n, res, err)
		}
	}
	if got := o.Restarts(); got != 0 {
		t.Errorf("Restarts() = %d, want 0", got)
	}
}

// TestLengthOracleRestart kills the traced child behind the oracle's back
// and checks that the next call restarts it and still answers.
func TestLengthOracleRestart(t *testing.T) {
	o := newTestOracle(t)
	var pid int
	if err := o.run(func() { pid = o.pid }); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatalf("kill child %d: %v", pid, err)
	}
	n, res, err := o.Length([]byte{0x0f, 0x1f, 0x44, 0x00, 0x00})
	if err != nil || n != 5 || res != CPUAccepted {
		t.Fatalf("Length after the child was killed = %d %v %v, want 5 accepted", n, res, err)
	}
	if got := o.Restarts(); got != 1 {
		t.Errorf("Restarts() = %d, want 1", got)
	}
}
