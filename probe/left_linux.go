//go:build linux && (amd64 || arm64)

package probe

import (
	"fmt"
	"os"
	"strconv"

	"github.com/probeopt/probeopt/internal/textfile"
	"github.com/probeopt/probeopt/proc"
)

func leftover(pid int) (*LeftBehind, error) {
	ms, err := textfile.Executable(pid)
	if err != nil {
		return nil, leftError(pid, err)
	}
	lb := &LeftBehind{Pid: pid}
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		n, diffs, err := textfile.Compare(pid, m.Path, 0)
		if err != nil {
			return nil, leftError(pid, err)
		}
		if n > 0 {
			lb.Files++
		}
		lb.Text = append(lb.Text, diffs...)
	}
	mem, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		return nil, leftError(pid, err)
	}
	defer mem.Close()
	areas, err := findAreas(procFiles{pid: pid, mem: mem})
	if err != nil {
		return nil, leftError(pid, err)
	}
	for _, a := range areas {
		lb.Areas = append(lb.Areas, LeftArea{Addr: a.addr - a.before, Size: a.before + a.size, Kind: areaKindName(a.kind)})
	}
	return lb, nil
}

// leftError is err of Leftover for process pid.
func leftError(pid int, err error) error {
	if os.IsNotExist(err) {
		return fmt.Errorf("process %d: %w", pid, proc.ErrNoProcess)
	}
	return fmt.Errorf("what is left in process %d: %w", pid, err)
}

// procFiles reads a process nobody stops through its files in /proc.
type procFiles struct {
	pid int
	mem *os.File
}

func (p procFiles) Maps() ([]proc.Mapping, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(p.pid) + "/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return proc.ParseMaps(f)
}

func (p procFiles) ReadMemory(addr uint64, b []byte) error {
	_, err := p.mem.ReadAt(b, int64(addr))
	return err
}

// areaKindName names an area kind as LeftArea.Kind does.
func areaKindName(kind int) string {
	switch kind {
	case areaSlots:
		return "slots"
	case areaThreads:
		return "thread table"
	case areaData:
		return "data"
	case areaTrapGuard:
		return "trap guard"
	}
	return "area kind " + strconv.Itoa(kind)
}
