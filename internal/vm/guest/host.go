package guest

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// host is where the guest's parts lie on this machine.
type host struct {
	qemu    string
	kernel  string
	busybox string
	// libs are the arm64 C library's shared objects (libc6:arm64), for
	// dynamically linked programs; empty when it is not installed.
	libs []string
}

// Where the Debian packages put the parts.
var (
	kernelGlob   = "/boot/vmlinuz-*-arm64"
	busyboxPaths = []string{"/bin/busybox", "/usr/bin/busybox"}
	libDir       = "/usr/lib/aarch64-linux-gnu"
)

// LibDir is the host directory whose arm64 C library (libc6:arm64) the
// guest gets, at the same path: a test reads the guest's libraries there.
func LibDir() string { return libDir }

// Available reports whether the guest can be booted here: nil, or an
// error wrapping ErrUnavailable that names the missing part.
func Available() error {
	_, err := findHost("")
	if err == nil {
		_, err = goTool()
	}
	return err
}

// findHost finds QEMU, the kernel (kernel if set), busybox and the libs.
func findHost(kernel string) (*host, error) {
	h := &host{}
	var err error
	if h.qemu, err = exec.LookPath("qemu-system-aarch64"); err != nil {
		return nil, fmt.Errorf("%w: qemu-system-aarch64 (package qemu-system-arm) not found", ErrUnavailable)
	}
	if kernel == "" {
		ks, _ := filepath.Glob(kernelGlob)
		if len(ks) == 0 {
			return nil, fmt.Errorf("%w: no %s (package linux-image-arm64:arm64)", ErrUnavailable, kernelGlob)
		}
		sort.Slice(ks, func(i, j int) bool { return versionLess(ks[i], ks[j]) })
		kernel = ks[len(ks)-1]
	}
	if _, err := os.Stat(kernel); err != nil {
		return nil, fmt.Errorf("%w: kernel: %w", ErrUnavailable, err)
	}
	h.kernel = kernel
	for _, p := range busyboxPaths {
		if isStaticARM64(p) {
			h.busybox = p
			break
		}
	}
	if h.busybox == "" {
		return nil, fmt.Errorf("%w: no static arm64 busybox at %s (package busybox-static:arm64)",
			ErrUnavailable, strings.Join(busyboxPaths, " or "))
	}
	ents, _ := os.ReadDir(libDir)
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.Contains(n, ".so") || !(strings.HasPrefix(n, "lib") || strings.HasPrefix(n, "ld-")) {
			continue
		}
		h.libs = append(h.libs, filepath.Join(libDir, n))
	}
	return h, nil
}

// versionLess orders kernel file names by the numbers in them
// (vmlinuz-6.1.0-9 before vmlinuz-6.1.0-10).
func versionLess(a, b string) bool {
	na, nb := numbers(a), numbers(b)
	for i := 0; i < len(na) && i < len(nb); i++ {
		if na[i] != nb[i] {
			return na[i] < nb[i]
		}
	}
	if len(na) != len(nb) {
		return len(na) < len(nb)
	}
	return a < b
}

func numbers(s string) []int {
	var out []int
	n, in := 0, false
	for _, c := range s + "x" {
		if c >= '0' && c <= '9' {
			n, in = n*10+int(c-'0'), true
			continue
		}
		if in {
			out = append(out, n)
		}
		n, in = 0, false
	}
	return out
}

// isStaticARM64 reports whether path is an aarch64 ELF executable
// without a program interpreter.
func isStaticARM64(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		return false
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// goTool returns the go command, which builds /init.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: the go command (it builds the guest's /init)", ErrUnavailable)
	}
	return p, nil
}

// The packages /init is built from.
const (
	initPkg = "github.com/probeopt/probeopt/internal/vm/guestinit"
	wirePkg = "github.com/probeopt/probeopt/internal/vm/wire"
)

var initBuild struct {
	sync.Mutex
	path string
}

// buildInit builds /init for linux/arm64, static, once per content of its
// sources and Go version: the result is cached under the user's cache
// directory.
func buildInit() (string, error) {
	initBuild.Lock()
	defer initBuild.Unlock()
	if initBuild.path != "" {
		return initBuild.path, nil
	}
	gocmd, err := goTool()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(gocmd, "list", "-f", "{{.Dir}}", initPkg, wirePkg).Output()
	if err != nil {
		return "", fmt.Errorf("find the sources of /init (run inside the probeopt module): %w", err)
	}
	ver, err := exec.Command(gocmd, "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	dirs := strings.Fields(string(out))
	h := sha256.New()
	h.Write(ver)
	for _, d := range dirs {
		srcs, _ := filepath.Glob(filepath.Join(d, "*.go"))
		sort.Strings(srcs)
		for _, s := range srcs {
			b, err := os.ReadFile(s)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "%s %d\n", filepath.Base(s), len(b))
			h.Write(b)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "probeopt", "vm")
	bin := filepath.Join(dir, "init-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(bin); err == nil {
		initBuild.path = bin
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	cmd := exec.Command(gocmd, "build", "-trimpath", "-o", tmp, initPkg)
	cmd.Dir = dirs[0]
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build /init: %w\n%s", err, b)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	initBuild.path = bin
	return bin, nil
}
