package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	fixtures "github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/internal/vm/guest"
)

// traceSite is one function TestARM64Trace counts: in the loops fixture
// or in the guest's C library (Debian's libc6:arm64).
type traceSite struct {
	module, symbol string
}

// TestARM64Trace runs "probeopt trace" (cross-compiled for arm64) in the
// guest on the loops fixture with two threads, counting three of its
// functions and three of Debian's arm64 C library, and the same program
// with a tracefs uprobe at each function (the guest kernel's count): the
// counts must be equal, and the traced program's output the untraced one,
// with trampolines and with --traps.
func TestARM64Trace(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the arm64 guest; not with -short")
	}
	guest.Need(t)
	goTool := testenv.MustHaveTool(t, "go")
	dir := t.TempDir()
	probeopt := filepath.Join(dir, "probeopt")
	cmd := exec.Command(goTool, "build", "-o", probeopt, "./cmd/probeopt")
	cmd.Dir = filepath.Join(fixtures.Dir(t), "..")
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=arm64 go build ./cmd/probeopt: %v\n%s", err, out)
	}
	loops := fixtures.BuildFor(t, fixtures.Loops, "arm64")
	libc := filepath.Join(guest.LibDir(), "libc.so.6")
	sites := []traceSite{{"loops", "leaf"}, {"loops", "bump"}, {"loops", "rec"},
		{"libc.so.6", "malloc"}, {"libc.so.6", "free"}, {"libc.so.6", "printf"}}
	var specs, events []string
	for i, s := range sites {
		host, guestPath := loops, guest.WorkDir+"/loops"
		spec := s.symbol
		if s.module != "loops" {
			host, guestPath, spec = libc, libc, s.module+":"+s.symbol
		}
		specs = append(specs, "'"+spec+"'")
		events = append(events, fmt.Sprintf("echo 'p:po/s%d %s:%#x' >> $T/uprobe_events", i, guestPath, fileOffset(t, host, s.symbol)))
	}
	const run = "./loops 200 2"
	script := strings.Join([]string{
		"set -e", "T=/sys/kernel/tracing",
		run + " > plain.out",
		strings.Join(events, "\n"),
		"echo 1 > $T/events/po/enable", run + " > kernel.out", "echo 0 > $T/events/po/enable",
		"echo '== profile'", "cat $T/uprobe_profile", "echo > $T/uprobe_events",
		"./probeopt trace --json " + strings.Join(specs, " ") + " -- " + run + " > tramp.out",
		"./probeopt trace --traps --json " + strings.Join(specs, " ") + " -- " + run + " > traps.out",
		"echo '== plain'", "cat plain.out", "echo '== kernel'", "cat kernel.out",
		"echo '== tramp'", "cat tramp.out", "echo '== traps'", "cat traps.out",
	}, "\n")
	var console bytes.Buffer
	res, err := guest.Run(context.Background(), []string{"sh", "-c", script}, &guest.Options{
		Files: []string{probeopt, loops}, Timeout: 10 * time.Minute, Console: &console,
	})
	if err != nil {
		t.Fatalf("arm64 guest: %v", err)
	}
	out := string(res.Stdout)
	if res.ExitCode != 0 {
		t.Fatalf("exit status %d:\n%s%s\n--- kernel console ---\n%s", res.ExitCode, out, res.Stderr, console.String())
	}
	parts := map[string]string{}
	for _, p := range strings.Split(out, "== ")[1:] {
		name, body, _ := strings.Cut(p, "\n")
		parts[name] = body
	}
	kernel := map[string]uint64{}
	for _, l := range strings.Split(parts["profile"], "\n") {
		// PATH EVENT HITS
		f := strings.Fields(l)
		if len(f) == 3 {
			n, _ := strconv.ParseUint(f[2], 10, 64)
			kernel[f[1]] = n
		}
	}
	if parts["kernel"] != parts["plain"] {
		t.Errorf("output under the kernel's uprobes %q, untraced %q", parts["kernel"], parts["plain"])
	}
	for _, mode := range []string{"tramp", "traps"} {
		prog, report, _ := strings.Cut(parts[mode], "{")
		if prog != parts["plain"] {
			t.Errorf("%s: traced output %q, untraced %q", mode, prog, parts["plain"])
		}
		var rep struct {
			Probes []struct {
				Spec string `json:"spec"`
				Hits uint64 `json:"hits"`
			} `json:"probes"`
			Traps uint64 `json:"traps"`
		}
		if err := json.Unmarshal([]byte("{"+report), &rep); err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, parts[mode])
		}
		if len(rep.Probes) != len(sites) {
			t.Fatalf("%s: %d probes in the report, want %d", mode, len(rep.Probes), len(sites))
		}
		var line []string
		for i, p := range rep.Probes {
			k := kernel["s"+strconv.Itoa(i)]
			line = append(line, fmt.Sprintf("%s %d (kernel %d)", p.Spec, p.Hits, k))
			if p.Hits != k || k == 0 {
				t.Errorf("%s: %s counted %d, the guest kernel's uprobe %d", mode, p.Spec, p.Hits, k)
			}
		}
		t.Logf("%s (%d traps): %s", mode, rep.Traps, strings.Join(line, ", "))
	}
}

// fileOffset returns the file offset of function name in the ELF file
// at path.
func fileOffset(t *testing.T, path, name string) uint64 {
	t.Helper()
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sites, err := f.Resolve(elfscan.Spec{Text: name, Kind: elfscan.SpecFunc, Symbol: name})
	if err != nil || len(sites) != 1 {
		t.Fatalf("%s: %s: %d sites, %v", path, name, len(sites), err)
	}
	return sites[0].Offset
}
