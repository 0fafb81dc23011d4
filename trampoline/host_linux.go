package trampoline

import (
	"bufio"
	"encoding/binary"
	"os"
	"runtime"
	"strings"
)

const (
	atHWCAP2       = 26
	hwcap2FSGSBase = 1 << 1
)

// HostFeatures reads the features of this machine from /proc/self/auxv
// and /proc/cpuinfo. A feature it cannot confirm is reported absent, and
// all are absent on a machine that is not x86-64.
func HostFeatures() Features {
	var f Features
	if runtime.GOARCH != "amd64" {
		return f
	}
	if b, err := os.ReadFile("/proc/self/auxv"); err == nil {
		for i := 0; i+16 <= len(b); i += 16 {
			k, v := binary.LittleEndian.Uint64(b[i:]), binary.LittleEndian.Uint64(b[i+8:])
			if k == atHWCAP2 {
				f.FSGSBase = v&hwcap2FSGSBase != 0
			}
		}
	}
	if c, err := os.Open("/proc/cpuinfo"); err == nil {
		defer c.Close()
		sc := bufio.NewScanner(c)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "flags") {
				continue
			}
			if _, v, ok := strings.Cut(line, ":"); ok {
				for _, w := range strings.Fields(v) {
					if w == "lahf_lm" {
						f.LAHF = true
					}
				}
			}
			break
		}
	}
	return f
}
