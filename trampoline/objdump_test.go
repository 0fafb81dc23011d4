package trampoline

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/testenv"
)

// objInst is one instruction as objdump prints it.
type objInst struct {
	addr uint64
	len  int
	text string // mnemonic and operands, spaces collapsed; a RIP-relative displacement replaced by the target objdump computed
}

var ripDisp = regexp.MustCompile(`-?0x[0-9a-f]+\(%rip\)`)

var objLine = regexp.MustCompile(`^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$`)

// objdump disassembles code placed at addr with GNU objdump, the oracle
// for instruction boundaries and text.
func objdump(t testing.TB, code []byte, addr uint64) []objInst {
	t.Helper()
	tool := testenv.MustHaveTool(t, "objdump")
	f := filepath.Join(t.TempDir(), "code.bin")
	if err := os.WriteFile(f, code, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "-D", "-b", "binary", "-m", "i386:x86-64", "--insn-width=16",
		fmt.Sprintf("--adjust-vma=%#x", addr), f).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump: %v\n%s", err, out)
	}
	var res []objInst
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := objLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		a, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		text := m[3]
		if i := strings.Index(text, "#"); i >= 0 {
			comment := strings.Fields(text[i+1:])
			text = text[:i]
			if len(comment) > 0 {
				text = ripDisp.ReplaceAllString(text, comment[0]+"(%rip)")
			}
		}
		res = append(res, objInst{addr: a, len: len(strings.Fields(m[2])), text: strings.Join(strings.Fields(text), " ")})
	}
	return res
}

// checkBoundaries decodes code linearly with the project decoder and with
// objdump and requires the same instruction boundaries, and that the
// emitter's own instruction starts (when given) are among them.
func checkBoundaries(t *testing.T, code []byte, addr uint64, starts []int) {
	t.Helper()
	obj := objdump(t, code, addr)
	objStart := map[int]int{}
	for _, o := range obj {
		objStart[int(o.addr-addr)] = o.len
		if strings.Contains(o.text, "(bad)") {
			t.Errorf("objdump: (bad) at %#x", o.addr)
		}
	}
	var in decode.X86Inst
	for off := 0; off < len(code); {
		if err := (decode.X86Decoder{}).Decode(code[off:], addr+uint64(off), &in); err != nil {
			t.Fatalf("decode at +%d (% x): %v", off, code[off:min(off+15, len(code))], err)
		}
		l, ok := objStart[off]
		if !ok {
			t.Fatalf("decoder: instruction at +%d (% x), objdump has no instruction starting there", off, in.Bytes[:in.Len])
		}
		if l != in.Len {
			t.Fatalf("at +%d: decoder %d bytes, objdump %d (% x)", off, in.Len, l, code[off:min(off+15, len(code))])
		}
		off += in.Len
	}
	for _, s := range starts {
		if _, ok := objStart[s]; !ok {
			t.Errorf("emitter instruction at +%d is not an instruction start for objdump", s)
		}
	}
}
