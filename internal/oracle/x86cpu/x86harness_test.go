package x86cpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/testenv"
)

// TestX86Harnesses checks that both harnesses fit their page, that the
// decoder reads each as a sequence of whole instructions with the entry
// points among their starts, and that objdump decodes them without (bad)
// bytes. The forms themselves are checked in package x86enc.
func TestX86Harnesses(t *testing.T) {
	emu, err := buildEmuHarness()
	if err != nil {
		t.Fatal(err)
	}
	xo, err := buildXOLHarness()
	if err != nil {
		t.Fatal(err)
	}
	objdump := testenv.MustHaveTool(t, "objdump")
	for _, h := range []struct {
		name    string
		code    []byte
		addr    uint64
		entries map[string]int
	}{
		{"emulator", emu.code, emuCtrlAddr + emuOffHarness, map[string]int{"handler": emu.handler, "restorer": emu.restorer, "idle": emu.idle, "gadget": emu.gadget}},
		{"relocation", xo.code, xoCtrlAddr + xoOffHarness, map[string]int{"handler": xo.handler, "restorer": xo.restorer, "idle": xo.idle, "gadget": xo.gadget, "cpuid": xo.cpuid}},
	} {
		if len(h.code) > 0x1000 {
			t.Errorf("%s harness: %d bytes do not fit its page", h.name, len(h.code))
		}
		starts := map[int]bool{}
		for off := 0; off < len(h.code); {
			var inst decode.X86Inst
			if err := (decode.X86Decoder{}).Decode(h.code[off:], h.addr+uint64(off), &inst); err != nil {
				t.Fatalf("%s harness +%#x: %v", h.name, off, err)
			}
			starts[off] = true
			off += inst.Len
		}
		for name, off := range h.entries {
			if !starts[off] {
				t.Errorf("%s harness: %s entry %#x is not an instruction boundary", h.name, name, off)
			}
		}
		p := filepath.Join(t.TempDir(), "code.bin")
		if err := os.WriteFile(p, h.code, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(objdump, "-D", "-b", "binary", "-m", "i386:x86-64", p).Output()
		if err != nil {
			t.Fatalf("objdump: %v", err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "(bad)") {
				t.Errorf("%s harness: objdump: %s", h.name, line)
			}
		}
	}
}
