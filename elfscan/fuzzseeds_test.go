package elfscan_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/probeopt/probeopt/internal/fixture"
)

// newFileSeedDir holds the committed corpus of FuzzNewFile.
var newFileSeedDir = filepath.Join("testdata", "fuzz", "FuzzNewFile")

// newFileSeeds returns the seeds of FuzzNewFile taken from the committed
// fixtures, by file name in newFileSeedDir: for x86-64 and arm64, the tiny
// fixture (about a kilobyte, with functions and a USDT note), its first
// half (cut inside the section headers) and its ELF header alone.
func newFileSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	seeds := map[string][]byte{}
	for _, arch := range []string{"x86_64", "aarch64"} {
		b, err := os.ReadFile(fixture.Path(t, arch, "tiny"))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 64 {
			t.Fatalf("%s/tiny: %d bytes, shorter than an ELF header", arch, len(b))
		}
		seeds["tiny_"+arch] = b
		seeds["tiny_"+arch+"_half"] = b[:len(b)/2]
		seeds["header_"+arch] = b[:64]
	}
	return seeds
}

// corpusBytes returns a []byte input in Go's corpus file format.
func corpusBytes(b []byte) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b)
}

// TestFuzzNewFileSeeds checks that the committed seeds of FuzzNewFile are
// the fixture bytes they come from, so that the target needs no file
// outside its package's testdata. PROBEOPT_UPDATE_SEEDS=1 rewrites them.
func TestFuzzNewFileSeeds(t *testing.T) {
	update := os.Getenv("PROBEOPT_UPDATE_SEEDS") == "1"
	for name, b := range newFileSeeds(t) {
		p := filepath.Join(newFileSeedDir, name)
		want := corpusBytes(b)
		if len(want) >= 64<<10 {
			t.Errorf("seed %s: %d bytes, want well under 64 KiB", name, len(want))
		}
		if update {
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("seed %s: %v (write it with PROBEOPT_UPDATE_SEEDS=1 go test -run '^TestFuzzNewFileSeeds$' ./elfscan)", name, err)
			continue
		}
		if string(got) != string(want) {
			t.Errorf("seed %s differs from the fixture it comes from (rewrite it with PROBEOPT_UPDATE_SEEDS=1 go test -run '^TestFuzzNewFileSeeds$' ./elfscan)", name)
		}
	}
}
