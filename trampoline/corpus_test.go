package trampoline_test

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/trampoline"
)

// corpusFiles returns gcc -O2 binaries of the machine: GCC's cc1 (as gcc
// names it) and, for long runs, the newest libLLVM the dynamic linker
// knows.
func corpusFiles(t *testing.T) []string {
	var out []string
	if gcc, err := exec.LookPath("gcc"); err == nil {
		if b, err := exec.Command(gcc, "-print-prog-name=cc1").Output(); err == nil {
			if p := strings.TrimSpace(string(b)); filepath.IsAbs(p) {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		testenv.Unavailable(t, "gcc's cc1 not found")
	}
	if !testenv.Long() {
		return out
	}
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		testenv.Unavailable(t, "ldconfig not on PATH: %v", err)
	}
	if b, err := exec.Command(ldconfig, "-p").Output(); err == nil {
		var llvm []string
		for _, l := range strings.Split(string(b), "\n") {
			if _, p, ok := strings.Cut(l, "=> "); ok && strings.Contains(p, "/libLLVM-") && strings.Contains(l, "x86-64") {
				llvm = append(llvm, strings.TrimSpace(p))
			}
		}
		sort.Strings(llvm)
		if len(llvm) > 0 {
			out = append(out, llvm[len(llvm)-1])
		}
	}
	return out
}

// TestCorpusFunctionEntries analyzes the entry of every function of real
// binaries, applies the function-wide checks of package plan to the bytes
// a detour replaces, generates a slot for each accepted entry (a counter
// and a return probe, so that the relocated instructions follow the
// handler) and checks every generated instruction with the decoder. It
// logs the share of entries that take a trampoline and the refusals by
// reason. The default run takes cc1; PROBEOPT_LONG=1 adds libLLVM.
func TestCorpusFunctionEntries(t *testing.T) {
	files := []string{fixture.Path(t, "x86_64", "funcs-mcount"), fixture.Path(t, "x86_64", "funcs-cet")}
	for _, path := range append(files, corpusFiles(t)...) {
		t.Run(path, func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				testenv.Unavailable(t, "corpus file %s: %v", path, err)
			}
			f, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			text := f.Section(".text")
			if text == nil {
				t.Fatal("no .text")
			}
			data, err := text.Data()
			if err != nil {
				t.Fatal(err)
			}
			syms, err := f.Symbols()
			if err != nil {
				syms, err = f.DynamicSymbols()
			}
			if err != nil {
				t.Fatal(err)
			}
			seen := map[uint64]bool{}
			var total, nop, detour int
			refused := map[plan.Reason]int{}
			d, _ := trampoline.NewData(0x100000, 64, 1024)
			th, _ := trampoline.NewThreads(0x200000, 64)
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Value < text.Addr || s.Value+s.Size > text.Addr+text.Size || seen[s.Value] {
					continue
				}
				seen[s.Value] = true
				total++
				code := data[s.Value-text.Addr : s.Value-text.Addr+s.Size]
				site, err := trampoline.AnalyzeX86(s.Value, code, nil)
				if err != nil {
					var se *trampoline.SiteError
					if !errors.As(err, &se) {
						t.Fatalf("%s at %#x: %v", s.Name, s.Value, err)
					}
					refused[se.Code]++
					continue
				}
				if site.Kind == trampoline.SiteDetour {
					fn := plan.AnalyzeX86(s.Value, code, decode.X86Decoder{})
					if at, ok := fn.BranchTargetIn(site.PatchAddr, site.Resume()); ok {
						_ = at
						refused["branch-into-displaced"]++
						continue
					}
					if fn.IndirectJumps > 0 {
						refused["indirect-jump"]++
						continue
					}
					detour++
				} else {
					nop++
				}
				slot := site.PatchAddr + 0x1000_0000
				cfg := &trampoline.Config{Data: d, Threads: th, ReturnAddr: slot - 0x1000}
				code2, err := trampoline.GenerateX86(slot, site, &trampoline.Handler{ID: 1, Count: true,
					Return: &trampoline.ReturnHandler{Count: true, Counter: 1}}, cfg)
				if err != nil {
					t.Fatalf("%s at %#x (% x): %v", s.Name, s.Value, site.Old, err)
				}
				decodeAll(t, code2, slot)
			}
			var reasons []plan.Reason
			for k := range refused {
				reasons = append(reasons, k)
			}
			sort.Slice(reasons, func(i, j int) bool { return refused[reasons[i]] > refused[reasons[j]] })
			if filepath.Base(path) == "funcs-mcount" && nop == 0 {
				t.Errorf("no NOP site among the -mfentry -mnop-mcount entries")
			}
			t.Logf("%d function entries: %d take a trampoline (%.1f%%: %d NOP sites, %d detours)", total, nop+detour,
				100*float64(nop+detour)/float64(max(total, 1)), nop, detour)
			for _, r := range reasons {
				t.Logf("  refused %-24s %6d (%.1f%%)", r, refused[r], 100*float64(refused[r])/float64(total))
			}
		})
	}
}

// decodeAll decodes code linearly and fails on an instruction that does
// not decode. (Boundaries are compared with objdump in the package's
// internal tests; here the volume is too large for objdump.)
func decodeAll(t *testing.T, code []byte, addr uint64) {
	t.Helper()
	var in decode.X86Inst
	for off := 0; off < len(code); {
		if err := (decode.X86Decoder{}).Decode(code[off:], addr+uint64(off), &in); err != nil {
			// The 64-bit literal of an absolute jump (jmp *0(%rip)) is data.
			t.Fatalf("slot at %#x: +%d (% x): %v", addr, off, code[off:min(off+15, len(code))], err)
		}
		if in.Encoding == decode.EncLegacy && in.Map == decode.Map1Byte && in.Opcode == 0xFF && in.ModRM == 0x25 && in.Disp == 0 {
			off += in.Len + 8
			continue
		}
		off += in.Len
	}
}
