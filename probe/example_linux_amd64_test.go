//go:build linux && amd64

package probe_test

import (
	"fmt"
	"os/exec"

	"github.com/probeopt/probeopt/probe"
)

// A tracer counts the calls of a C library function by a shell: spawn the
// command stopped, add the probe, let it run, read the counts.
func ExampleSpawn() {
	sh, err := exec.LookPath("sh")
	if err != nil {
		fmt.Println(err)
		return
	}
	tr, err := probe.Spawn([]string{sh, "-c", "echo one; echo two >/dev/null"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	probes, err := tr.Add("libc.so.6:write", "libc.so.6:write%return")
	if err != nil {
		fmt.Println(err)
		tr.Kill()
		return
	}
	if err := tr.Resume(); err != nil {
		fmt.Println(err)
		return
	}
	st, err := tr.Wait()
	if err != nil || !st.Success() {
		fmt.Println(st, err)
		return
	}
	for i, p := range tr.Stats().Probes {
		fmt.Printf("%s: %d hits\n", probes[i].Spec, p.Hits)
	}
	// Output:
	// libc.so.6:write: 2 hits
	// libc.so.6:write%return: 2 hits
}
