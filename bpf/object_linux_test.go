package bpf

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
)

// needBPF skips (fails under CI) when this process may not load BPF.
func needBPF(t testing.TB) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		testenv.Unavailable(t, "loading BPF: %v", err)
	}
	m.Close()
}

// TestOpenVerify reads the test object, checks its programs against the
// ELF file's own code sections, verifies them in the kernel and compiles
// them.
func TestOpenVerify(t *testing.T) {
	path := bpfObject(t, "probes")
	o, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// The oracle: the object's global functions and their sections,
	// read with debug/elf.
	f, syms := fixture.OpenELF(t, path)
	want := map[string]string{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
			want[s.Name] = f.Sections[s.Section].Name
		}
	}
	if len(o.Programs) != len(want) {
		t.Errorf("%d programs, the ELF file has %d global functions", len(o.Programs), len(want))
	}
	for _, p := range o.Programs {
		if want[p.Name] != p.Spec.SectionName {
			t.Errorf("program %s in section %q, the ELF file says %q", p.Name, p.Spec.SectionName, want[p.Name])
		}
		if s := p.Section.String(); s != p.Spec.SectionName {
			t.Errorf("program %s: section %q reads back as %q", p.Name, p.Spec.SectionName, s)
		}
		if p.Spec.Type != ebpf.Kprobe {
			t.Errorf("program %s: type %v", p.Name, p.Spec.Type)
		}
	}
	if s := o.Program("record").Section; s.Kind != USDT || s.Provider != "prov" || s.Name != "name" {
		t.Errorf("record: %+v", s)
	}
	needBPF(t)
	if err := o.Verify(); err != nil {
		t.Fatal(err)
	}
	for _, p := range o.Programs {
		if len(p.Insns) == 0 {
			t.Errorf("program %s: no instructions kept", p.Name)
		}
	}
}

// TestRejected checks that a program the kernel refuses is refused with
// the verifier's log.
func TestRejected(t *testing.T) {
	o, err := Open(bpfObject(t, "rejected"))
	if err != nil {
		t.Fatal(err)
	}
	needBPF(t)
	err = o.Verify()
	var ve *VerifierError
	if !errors.Is(err, ErrRejected) || !errors.As(err, &ve) {
		t.Fatalf("Verify: %v, want a *VerifierError", err)
	}
	if ve.Program != "beyond" || len(ve.Log) == 0 {
		t.Fatalf("program %q, %d log lines", ve.Program, len(ve.Log))
	}
	log := strings.Join(ve.Log, "\n")
	if !strings.Contains(log, "stack") {
		t.Errorf("the log does not name the stack:\n%s", log)
	}
	if o.Programs[0].Insns != nil {
		t.Error("a rejected program kept instructions")
	}
	t.Logf("%v", err)
}

// TestPermission runs Verify as an unprivileged user (a child of the test
// binary with uid and gid 65534) and expects ErrPermission.
func TestPermission(t *testing.T) {
	if os.Getenv("PROBEOPT_BPF_CHILD") == "1" {
		o, err := Open(os.Getenv("PROBEOPT_BPF_OBJECT"))
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Verify(); !errors.Is(err, ErrPermission) {
			t.Fatalf("Verify without privilege: %v, want ErrPermission", err)
		}
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to start an unprivileged child")
	}
	obj := bpfObject(t, "probes")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the test binary the unprivileged user may run.
	dir, err := os.MkdirTemp("", "probeopt-bpf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "bpf.test")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^TestPermission$", "-test.v")
	cmd.Env = append(os.Environ(), "PROBEOPT_BPF_CHILD=1", "PROBEOPT_BPF_OBJECT="+obj)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(err, unix.EACCES) {
			testenv.Unavailable(t, "run the test binary as uid 65534: %v", err)
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "PASS") {
		t.Fatalf("child:\n%s", out)
	}
}

// TestOpenUSDTHeader reads an object written with libbpf's usdt.bpf.h,
// which cilium/ebpf alone refuses (the header's weak maps), verifies it
// in the kernel (its hidden helpers static, as libbpf loads them) and
// compiles it: the specs map has the layout of usdt.bpf.h's struct, and
// the LINUX_HAS_BPF_COOKIE extern reads 1.
func TestOpenUSDTHeader(t *testing.T) {
	path := bpfObject(t, "usdt")
	if _, err := ebpf.LoadCollectionSpec(path); err == nil || !strings.Contains(err.Error(), "STB_WEAK") {
		t.Logf("cilium/ebpf reads the object alone now (%v): globalWeakMaps may go", err)
	}
	o, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := o.USDTSpecs()
	if err != nil || specs == nil {
		t.Fatalf("USDTSpecs: %v, %v", specs, err)
	}
	kc := o.Spec.Maps[kconfigMap]
	if kc == nil || len(kc.Contents) != 1 || kc.Contents[0].Value.([]byte)[0] != 1 {
		t.Fatalf(".kconfig: %+v", kc)
	}
	needBPF(t)
	if err := o.Verify(); err != nil {
		t.Fatal(err)
	}
	arena, err := maps.NewArena(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer arena.Close()
	if _, err := o.Instantiate(arena, &InstanceOptions{Stripes: 4}); err != nil {
		t.Fatal(err)
	}
}
