package plan_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
)

var (
	objdumpInsn  = regexp.MustCompile(`^\s+([0-9a-f]+):\t`)
	objdumpLabel = regexp.MustCompile(`^([0-9a-f]+) <([^>]+)>:`)
	objdumpJump  = regexp.MustCompile(`\t(j[a-z]+|call|loop[a-z]*|jrcxz|b|bl|b\.[a-z]+|cbn?z|tbn?z)\s+([0-9a-f]+) <`)
)

// TestSweepObjdump compares the instruction boundaries of every function's
// linear sweep with the instruction addresses objdump -d prints, and the
// direct branch targets inside each function with objdump's.
func TestSweepObjdump(t *testing.T) {
	t.Parallel()
	type target struct{ arch, path string }
	var targets []target
	for _, a := range []string{"x86_64", "aarch64"} {
		// Not kinds: it puts symbols inside instructions on purpose, and
		// objdump restarts decoding at every symbol.
		for _, n := range []string{"funcs-pie", "funcs-nopie", "funcs-mcount", "funcs-cet", "usdt-pie", "mangled"} {
			if contains(fixture.ELF[a], n) {
				targets = append(targets, target{a, fixture.Path(t, a, n)})
			}
		}
	}
	if p := "/usr/bin/python3.11"; fileExists(p) {
		targets = append(targets, target{"x86_64", p})
	}
	for _, tg := range targets {
		t.Run(tg.arch+"/"+tg.path[strings.LastIndexByte(tg.path, '/')+1:], func(t *testing.T) {
			objdump := "objdump"
			if tg.arch == "aarch64" {
				objdump = "aarch64-linux-gnu-objdump"
			}
			objdump = testenv.MustHaveTool(t, objdump)
			insns, targetsOf := objdumpSweep(t, objdump, tg.path)
			f, err := elfscan.Open(tg.path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			funcs, err := f.Funcs()
			if err != nil {
				t.Fatal(err)
			}
			checked, bad := 0, 0
			for i := range funcs {
				fn := &funcs[i]
				if fn.PLT || fn.Size == 0 {
					continue
				}
				code, err := f.Code(fn.Addr, fn.Size)
				if err != nil {
					continue
				}
				var an *plan.Function
				if tg.arch == "aarch64" {
					an = plan.AnalyzeARM64(fn.Addr, code)
				} else {
					an = plan.AnalyzeX86(fn.Addr, code, decodeAMD)
				}
				var got []uint64
				for a := range an.Starts() {
					got = append(got, a)
				}
				var want []uint64
				for a := fn.Addr; a < fn.Addr+fn.Size; a++ {
					if insns[a] {
						want = append(want, a)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) || an.Err != nil {
					bad++
					if bad <= 5 {
						t.Errorf("%s: %d boundaries (sweep error %v), objdump %d", fn.Name, len(got), an.Err, len(want))
					}
					continue
				}
				for _, br := range targetsOf[fn.Addr] {
					from, tgt := br[0], br[1]
					if from < fn.Addr || from >= fn.Addr+fn.Size || tgt < fn.Addr || tgt >= fn.Addr+fn.Size {
						continue
					}
					if _, ok := an.BranchTargetIn(tgt-1, tgt+1); !ok {
						t.Errorf("%s: objdump's branch target %#x missing", fn.Name, tgt)
					}
				}
				checked++
			}
			if bad > 0 {
				t.Errorf("%d of %d functions differ from objdump", bad, checked+bad)
			}
			if checked == 0 {
				t.Fatal("no function compared")
			}
			t.Logf("%d functions: boundaries and branch targets equal objdump's", checked)
		})
	}
}

// objdumpSweep returns objdump's instruction addresses and, per label, the
// direct branches (source, target) listed under it.
func objdumpSweep(t *testing.T, objdump, path string) (map[uint64]bool, map[uint64][][2]uint64) {
	t.Helper()
	cmd := exec.Command(objdump, "-d", "--no-show-raw-insn", "-j", ".text", "-j", ".init", "-j", ".fini", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	insns := map[uint64]bool{}
	targets := map[uint64][][2]uint64{}
	var fn uint64
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := objdumpLabel.FindStringSubmatch(line); m != nil {
			fn, _ = strconv.ParseUint(m[1], 16, 64)
			continue
		}
		m := objdumpInsn.FindStringSubmatch(line)
		if m == nil || strings.Contains(line, "(bad)") {
			continue
		}
		a, _ := strconv.ParseUint(m[1], 16, 64)
		insns[a] = true
		if j := objdumpJump.FindStringSubmatch(line); j != nil {
			tgt, _ := strconv.ParseUint(j[2], 16, 64)
			targets[fn] = append(targets[fn], [2]uint64{a, tgt})
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return insns, targets
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
