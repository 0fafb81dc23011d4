//go:build linux

package hostcpu

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/testenv"
)

// lscpu runs lscpu and returns its "Key: value" lines.
func lscpu(t *testing.T) map[string]string {
	t.Helper()
	cmd := exec.Command(testenv.MustHaveTool(t, "lscpu"))
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lscpu: %v", err)
	}
	m := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			if k = strings.TrimSpace(k); m[k] == "" {
				m[k] = strings.TrimSpace(v)
			}
		}
	}
	return m
}

// TestHostLscpu checks Host against lscpu's view of the same machine
// (util-linux's own reading of the kernel's description): vendor, family,
// model, stepping, model name and flags.
func TestHostLscpu(t *testing.T) {
	h := Host()
	if err := h.Err(); err != nil {
		t.Fatalf("Host: %v", err)
	}
	if h.Arch != runtime.GOARCH {
		t.Errorf("Arch %q, want %q", h.Arch, runtime.GOARCH)
	}
	l := lscpu(t)
	t.Logf("host: %s %s (%s) family %d model %d stepping %d, %d flags, la57 %v fsgsbase %v rdpid %v lahf %v",
		h.Vendor, h.VendorID, h.ModelName, h.Family, h.Model, h.Stepping, len(h.Flags), h.LA57, h.FSGSBase, h.RDPID, h.LAHF)
	if got, want := h.Flags, strings.Fields(l["Flags"]); !slices.Equal(got, want) {
		t.Errorf("flags %q, lscpu says %q", got, want)
	}
	if !isX86(h.Arch) {
		// lscpu names an arm64 vendor from the implementer code; there
		// is no x86 description to compare.
		if h.VendorID != "" || h.Vendor != Unknown || h.Family != 0 || h.LAHF || h.FSGSBase {
			t.Errorf("x86 fields on %s: %+v", h.Arch, h)
		}
		return
	}
	if h.Vendor == Unknown {
		t.Errorf("vendor_id %q is not a known vendor", h.VendorID)
	}
	for _, c := range []struct{ key, got string }{
		{"Vendor ID", h.VendorID},
		{"CPU family", strconv.Itoa(h.Family)},
		{"Model", strconv.Itoa(h.Model)},
		{"Stepping", strconv.Itoa(h.Stepping)},
		{"Model name", h.ModelName},
	} {
		if want := l[c.key]; c.got != want {
			t.Errorf("%s %q, lscpu says %q", c.key, c.got, want)
		}
	}
	flags := strings.Fields(l["Flags"])
	for _, c := range []struct {
		flag string
		got  bool
	}{{"la57", h.LA57}, {"rdpid", h.RDPID}, {"lahf_lm", h.LAHF}} {
		if want := slices.Contains(flags, c.flag); c.got != want {
			t.Errorf("%s %v, lscpu flags have it: %v", c.flag, c.got, want)
		}
	}
	// The kernel enables user-mode fsgsbase (HWCAP2_FSGSBASE) from Linux
	// 5.9 on, where the CPU has it.
	if has := slices.Contains(flags, "fsgsbase"); h.FSGSBase && !has {
		t.Errorf("HWCAP2_FSGSBASE without the fsgsbase flag")
	} else if has && !h.FSGSBase && kernelAtLeast(t, 5, 9) {
		t.Errorf("fsgsbase flag, Linux 5.9 or later, and no HWCAP2_FSGSBASE")
	}
}

// kernelAtLeast reports whether the running kernel is major.minor or
// later.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	rel := unix.ByteSliceToString(u.Release[:])
	for n, part := range strings.SplitN(rel, ".", 3)[:2] {
		digits, _, _ := strings.Cut(part, "-")
		v, err := strconv.Atoi(digits)
		if err != nil {
			t.Fatalf("kernel release %q: %v", rel, err)
		}
		if n == 0 {
			ma = v
		} else {
			mi = v
		}
	}
	return ma > major || ma == major && mi >= minor
}

// TestHostCPUID checks Host's flags against the cpuid instruction, as
// golang.org/x/sys/cpu executes it: features the kernel passes through
// unchanged.
func TestHostCPUID(t *testing.T) {
	if !isX86(runtime.GOARCH) {
		t.Skipf("cpuid is an x86 instruction; GOARCH is %s", runtime.GOARCH)
	}
	h := Host()
	for _, c := range []struct {
		flag  string
		cpuid bool
	}{
		{"lahf_lm", cpu.X86.HasLAHF},
		{"sse4_2", cpu.X86.HasSSE42},
		{"popcnt", cpu.X86.HasPOPCNT},
		{"pclmulqdq", cpu.X86.HasPCLMULQDQ},
		{"aes", cpu.X86.HasAES},
		{"cx16", cpu.X86.HasCX16},
		{"movbe", cpu.X86.HasMOVBE},
		{"bmi1", cpu.X86.HasBMI1},
		{"bmi2", cpu.X86.HasBMI2},
		{"adx", cpu.X86.HasADX},
	} {
		if got := h.HasFlag(c.flag); got != c.cpuid {
			t.Errorf("flag %s %v, cpuid says %v", c.flag, got, c.cpuid)
		}
	}
	if h.LAHF != cpu.X86.HasLAHF {
		t.Errorf("LAHF %v, cpuid says %v", h.LAHF, cpu.X86.HasLAHF)
	}
}
