package hostcpu

import (
	"os"
	"runtime"
)

// readHost reads this machine's /proc/cpuinfo and, on x86, the process's
// auxiliary vector.
func readHost() Info {
	cpuinfo, cerr := os.ReadFile("/proc/cpuinfo")
	var auxv []byte
	var aerr error
	if isX86(runtime.GOARCH) {
		auxv, aerr = os.ReadFile("/proc/self/auxv")
	}
	i := Parse(runtime.GOARCH, cpuinfo, auxv)
	i.cpuinfoErr, i.auxvErr = cerr, aerr
	return i
}
