package qemu

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/xol"
)

// arm64Coverage counts, over a set of instructions, how many the emulator
// and the relocator accept.
type arm64Coverage struct {
	n, emu, emuNoPAuth, relNear, relFar, relFarNoScratch int
	missing                                              map[string]int
}

func (c *arm64Coverage) add(word []byte, addr uint64) {
	c.n++
	inst, err := decode.DecodeARM64(word, addr)
	if err != nil {
		c.missing["(undecodable)"]++
		return
	}
	if emulate.ARM64Supported(&inst) == nil {
		c.emu++
	}
	if (emulate.ARM64{NoPAuth: true}).Supported(&inst) == nil {
		c.emuNoPAuth++
	} else {
		name := inst.Mnemonic
		if name == "" {
			name, _, _ = strings.Cut(inst.Text(), " ")
		}
		c.missing[name]++
	}
	if _, err := xol.RelocateARM64(word[:4], addr, addr+0x10000, nil); err == nil {
		c.relNear++
	}
	if _, err := xol.RelocateARM64(word[:4], addr, addr+0x10_0000_0000, nil); err == nil {
		c.relFar++
	}
	if _, err := xol.RelocateARM64(word[:4], addr, addr+0x10_0000_0000, &xol.ARM64RelocOptions{NoScratch: true}); err == nil {
		c.relFarNoScratch++
	}
}

func (c *arm64Coverage) row(name string) string {
	pct := func(x int) string { return fmt.Sprintf("%.1f %%", 100*float64(x)/float64(max(c.n, 1))) }
	return fmt.Sprintf("| %s | %d | %s | %s | %s | %s | %s |", name, c.n, pct(c.emu), pct(c.emuNoPAuth), pct(c.relNear), pct(c.relFar), pct(c.relFarNoScratch))
}

// TestARM64Coverage reports which share of the instructions of aarch64
// binaries the emulator and the relocator accept: at function entries
// (STT_FUNC symbols) and over every word of the executable sections. It
// reads the fixtures in testdata/aarch64 and the files named in
// PROBEOPT_ARM64_COVERAGE (separated by the list separator); the figures go
// to the log (go test -v).
func TestARM64Coverage(t *testing.T) {
	files, _ := filepath.Glob("../testdata/aarch64/*")
	if extra := os.Getenv("PROBEOPT_ARM64_COVERAGE"); extra != "" {
		files = append(files, filepath.SplitList(extra)...)
	}
	entries := arm64Coverage{missing: map[string]int{}}
	all := arm64Coverage{missing: map[string]int{}}
	for _, name := range files {
		f, err := elf.Open(name)
		if err != nil || f.Machine != elf.EM_AARCH64 {
			continue
		}
		syms, _ := f.Symbols()
		if dyn, err := f.DynamicSymbols(); err == nil {
			syms = append(syms, dyn...)
		}
		seen := map[uint64]bool{}
		for _, sec := range f.Sections {
			if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_EXECINSTR == 0 {
				continue
			}
			data, err := sec.Data()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for off := 0; off+4 <= len(data); off += 4 {
				all.add(data[off:off+4], sec.Addr+uint64(off))
			}
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value < sec.Addr || s.Value+4 > sec.Addr+uint64(len(data)) || seen[s.Value] {
					continue
				}
				seen[s.Value] = true
				off := s.Value - sec.Addr
				entries.add(data[off:off+4], s.Value)
			}
		}
		f.Close()
	}
	if all.n == 0 {
		t.Skip("no aarch64 files")
	}
	t.Logf("| instructions | count | emulated | emulated, no PAuth | relocatable 64 KiB away | 64 GiB away | 64 GiB away, no x16/x17 |")
	t.Log(entries.row("function entries"))
	t.Log(all.row("every word of the executable sections"))
	type kv struct {
		k string
		v int
	}
	var top []kv
	for k, v := range all.missing {
		top = append(top, kv{k, v})
	}
	sort.Slice(top, func(i, j int) bool { return top[i].v > top[j].v || top[i].v == top[j].v && top[i].k < top[j].k })
	var parts []string
	for i := 0; i < len(top) && i < 15; i++ {
		parts = append(parts, fmt.Sprintf("%s %d", top[i].k, top[i].v))
	}
	t.Logf("not emulated (most frequent first): %s", strings.Join(parts, ", "))
}
