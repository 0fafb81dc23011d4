//go:build linux && amd64

package probe_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// dataAreaName is how /proc/PID/maps names the trampolines' data area.
const dataAreaName = "/memfd:probeopt-data"

// dataAreaPaths returns /proc/PID/map_files/START-END of every mapping of
// the data area in process pid.
func dataAreaPaths(t *testing.T, pid int) []string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && fields[5] == dataAreaName {
			out = append(out, fmt.Sprintf("/proc/%d/map_files/%s", pid, fields[0]))
		}
	}
	return out
}

// fdsOfDataArea returns the descriptors of process pid that refer to the
// data area.
func fdsOfDataArea(pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, dataAreaName[1:]) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// asNobody runs argv as uid and gid 65534 with no supplementary groups
// and returns its combined output and whether it succeeded.
func asNobody(t *testing.T, argv ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("run %q as uid 65534: %v", argv, err)
		}
	}
	return string(out), err == nil
}

// TestDataAreaNotReadableByOthers traces the fixture with trampolines and
// checks that another user (uid 65534) cannot open their shared data area
// (the memfd of the counters) through any path procfs offers: the
// map_files entries of the traced process and of the tracer, and the
// descriptors of either (none refers to it: both are closed once the
// area is mapped).
func TestDataAreaNotReadableByOthers(t *testing.T) {
	testenv.NeedPtrace(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a command as uid 65534")
	}
	cat := testenv.MustHaveTool(t, "cat")
	ls := testenv.MustHaveTool(t, "ls")
	exe := traceFixture(t, "tracee")
	inR, inW := fixture.Pipe(t)
	r := spawn(t, []string{exe, "serve"}, nil, inR)
	inR.Close()
	defer inW.Close()
	addResume(t, r.tr, "c_sum", "k_nop")
	pid := r.tr.Pid()
	tracee := dataAreaPaths(t, pid)
	tracer := dataAreaPaths(t, os.Getpid())
	if len(tracee) == 0 || len(tracer) == 0 {
		t.Fatalf("data area not mapped: %d mappings in the traced process, %d in the tracer", len(tracee), len(tracer))
	}
	// Controls: uid 65534 can run cat, and root can reach the area
	// (map_files needs CAP_SYS_ADMIN), so the refusals below are
	// about the area.
	if out, ok := asNobody(t, cat, "/proc/version"); !ok {
		t.Fatalf("uid 65534 cannot run cat: %s", out)
	}
	if f, err := os.Open(tracee[0]); err != nil {
		t.Logf("root cannot open %s either: %v", tracee[0], err)
	} else {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Errorf("fstat the data area: %v", err)
		} else if st.Mode&0o077 != 0 {
			t.Errorf("the data area's memfd has mode %#o: others may use it", st.Mode&0o7777)
		}
		f.Close()
	}

	for _, p := range append(tracee, tracer...) {
		if out, ok := asNobody(t, cat, p); ok || !bytes.Contains([]byte(out), []byte("denied")) && !bytes.Contains([]byte(out), []byte("not permitted")) {
			t.Errorf("uid 65534 read %s (ok %v): %q", p, ok, out)
		}
	}
	for _, p := range []int{pid, os.Getpid()} {
		if fds := fdsOfDataArea(p); len(fds) > 0 {
			t.Errorf("process %d keeps descriptors of the data area open: %v", p, fds)
		}
		dir := fmt.Sprintf("/proc/%d/fd", p)
		if out, ok := asNobody(t, ls, dir); ok {
			t.Errorf("uid 65534 lists %s: %q", dir, out)
		}
	}
	inW.Close()
	select {
	case <-r.tr.Exited():
	case <-time.After(time.Minute):
		t.Fatal("the server did not exit")
	}
}
