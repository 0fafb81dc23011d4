//go:build linux && amd64

package probe

import (
	"fmt"
	"os"
	"time"
)

var debugOn = os.Getenv("PROBEOPT_DEBUG") != ""

func debugf(format string, args ...any) {
	if debugOn {
		fmt.Fprintf(os.Stderr, "%s probe: %s\n", time.Now().Format("15:04:05.000000"), fmt.Sprintf(format, args...))
	}
}
