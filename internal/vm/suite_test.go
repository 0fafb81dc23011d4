package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	fixtures "github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/internal/vm/guest"
)

// suitePackages are the packages whose tests the arm64 suite runs in the
// guest.
var suitePackages = []string{"proc", "batchpatch", "probe"}

// guestSkips are the tests of a suite package that cannot run in the
// guest, by package: their oracle is a host tool the guest does not have.
// strace is one: Debian's strace is not Multi-Arch, so strace:arm64 cannot
// be installed beside the host's.
var guestSkips = map[string]string{
	"proc": "^TestWatchSyscalls$", // strace's system calls of cat
}

// TestARM64Suite is the arm64 suite: it cross-compiles the tests of proc,
// batchpatch and probe (GOARCH=arm64 go test -c) and their aarch64
// fixtures (the patch fixture, loops, scale, usdt-pie), runs them with -test.v in the arm64
// guest (one boot, -test.short: under TCG the long rounds would take many
// minutes; guestSkips left out), and fails with the guest's output when any
// test fails.
func TestARM64Suite(t *testing.T) {
	if testing.Short() {
		t.Skip("the arm64 suite boots a guest and runs for minutes; not with -short")
	}
	guest.Need(t)
	goTool := testenv.MustHaveTool(t, "go")
	dir := t.TempDir()
	files := []string{
		fixtures.BuildFor(t, fixtures.PatchFixture, "arm64"),
		fixtures.BuildFor(t, fixtures.Loops, "arm64"),
		fixtures.BuildFor(t, fixtures.Scale, "arm64"),
		// probe's USDT test reads it from PROBEOPT_FIXTURES (fixture.Committed).
		filepath.Join(fixtures.Dir(t), "aarch64", "usdt-pie"),
		// ExampleApplyFile of batchpatch reads it at ../testdata/x86_64.
		filepath.Join(fixtures.Dir(t), "x86_64", "funcs-pie"),
	}
	root := filepath.Join(fixtures.Dir(t), "..")
	var script []string
	script = append(script, "mkdir -p ../testdata/x86_64 && cp funcs-pie ../testdata/x86_64/", "st=0")
	for _, pkg := range suitePackages {
		bin := filepath.Join(dir, pkg+".test")
		cmd := exec.Command(goTool, "test", "-c", "-o", bin, "./"+pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("GOARCH=arm64 go test -c ./%s: %v\n%s", pkg, err, out)
		}
		files = append(files, bin)
		skip := ""
		if re, ok := guestSkips[pkg]; ok {
			skip = " -test.skip '" + re + "'"
		}
		script = append(script, "echo '# "+pkg+"'", "./"+pkg+".test -test.v -test.short -test.timeout 15m"+skip+" || st=1")
	}
	script = append(script, "exit $st")
	var console bytes.Buffer
	start := time.Now()
	res, err := guest.Run(context.Background(), []string{"sh", "-c", strings.Join(script, "\n")}, &guest.Options{
		Files:   files,
		Env:     []string{fixtures.PrebuiltEnv + "=" + guest.WorkDir, "CI=" + os.Getenv("CI")},
		Timeout: 40 * time.Minute,
		Console: &console,
	})
	if err != nil {
		t.Fatalf("arm64 guest: %v", err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	passed := regexp.MustCompile(`(?m)^\s*--- PASS: (\S+)`).FindAllStringSubmatch(out, -1)
	failed := regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`).FindAllStringSubmatch(out, -1)
	skipped := regexp.MustCompile(`(?m)^\s*--- SKIP: (\S+)`).FindAllStringSubmatch(out, -1)
	t.Logf("arm64 guest (%s host): boot %v, total %v (%v with the builds); %d tests passed, %d failed, %d skipped",
		runtime.GOARCH, res.Boot.Round(time.Millisecond), res.Total.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond), len(passed), len(failed), len(skipped))
	if res.ExitCode != 0 || len(failed) > 0 || len(passed) == 0 {
		t.Fatalf("the arm64 suite failed (exit status %d):\n%s\n--- kernel console ---\n%s", res.ExitCode, out, console.String())
	}
	for _, s := range skipped {
		t.Logf("skipped in the guest: %s", s[1])
	}
	if testing.Verbose() {
		t.Logf("guest output:\n%s", out)
	}
}
