package fuzz

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/testenv"
)

// TestEmuAsmObjdump checks every encoder of the harness against objdump:
// each form, with low and high registers and with short and long
// displacements, must disassemble to the intended Intel-syntax text.
func TestEmuAsmObjdump(t *testing.T) {
	objdump := testenv.MustHaveTool(t, "objdump")
	type vec struct {
		emit func(a *emuAsm)
		want string
	}
	vecs := []vec{
		{func(a *emuAsm) { a.movabs(emuRegRBX, 0x300000000000) }, "movabs rbx,0x300000000000"},
		{func(a *emuAsm) { a.movabs(emuRegR8, 0x1122334455667788) }, "movabs r8,0x1122334455667788"},
		{func(a *emuAsm) { a.movImm32(emuRegRCX, 23) }, "mov ecx,0x17"},
		{func(a *emuAsm) { a.movImm32(emuRegR10, 202) }, "mov r10d,0xca"},
		{func(a *emuAsm) { a.load(true, emuRegRAX, emuRegRBX, 136) }, "mov rax,QWORD PTR [rbx+0x88]"},
		{func(a *emuAsm) { a.load(true, emuRegRAX, emuRegRSI, 0) }, "mov rax,QWORD PTR [rsi]"},
		{func(a *emuAsm) { a.load(false, emuRegRAX, emuRegRSI, 8) }, "mov eax,DWORD PTR [rsi+0x8]"},
		{func(a *emuAsm) { a.load(true, emuRegR9, emuRegRDI, 0) }, "mov r9,QWORD PTR [rdi]"},
		{func(a *emuAsm) { a.load(true, emuRegRAX, emuRegR12, 0) }, "mov rax,QWORD PTR [r12]"},
		{func(a *emuAsm) { a.load(true, emuRegRAX, emuRegR13, 0) }, "mov rax,QWORD PTR [r13+0x0]"},
		{func(a *emuAsm) { a.load(true, emuRegRAX, emuRegRSP, -8) }, "mov rax,QWORD PTR [rsp-0x8]"},
		{func(a *emuAsm) { a.store(true, emuRegR8, 16, emuRegRAX) }, "mov QWORD PTR [r8+0x10],rax"},
		{func(a *emuAsm) { a.store(true, emuRegR10, 0, emuRegRSI) }, "mov QWORD PTR [r10],rsi"},
		{func(a *emuAsm) { a.store(false, emuRegRBX, 64, emuRegRAX) }, "mov DWORD PTR [rbx+0x40],eax"},
		{func(a *emuAsm) { a.store(true, emuRegRDX, 168, emuRegRAX) }, "mov QWORD PTR [rdx+0xa8],rax"},
		{func(a *emuAsm) { a.storeImm(emuRegRBX, 136, 0) }, "mov QWORD PTR [rbx+0x88],0x0"},
		{func(a *emuAsm) { a.storeImm(emuRegRDX, 176, 0x202) }, "mov QWORD PTR [rdx+0xb0],0x202"},
		{func(a *emuAsm) { a.orImm(emuRegRDX, 176, 0x100) }, "or QWORD PTR [rdx+0xb0],0x100"},
		{func(a *emuAsm) { a.cmpMemImm8(emuRegRBX, 144, 0) }, "cmp QWORD PTR [rbx+0x90],0x0"},
		{func(a *emuAsm) { a.cmpRegImm8(emuRegR11, 8) }, "cmp r11,0x8"},
		{func(a *emuAsm) { a.cmpLoad(true, emuRegRAX, emuRegRDI, 0) }, "cmp rax,QWORD PTR [rdi]"},
		{func(a *emuAsm) { a.cmpLoad(false, emuRegRAX, emuRegRBX, 64) }, "cmp eax,DWORD PTR [rbx+0x40]"},
		{func(a *emuAsm) { a.lea(emuRegRSI, emuRegRDX, 40) }, "lea rsi,[rdx+0x28]"},
		{func(a *emuAsm) { a.lea(emuRegR10, emuRegR8, 216) }, "lea r10,[r8+0xd8]"},
		{func(a *emuAsm) { a.mov32(emuRegRDX, emuRegRAX) }, "mov edx,eax"},
		{func(a *emuAsm) { a.mov32(emuRegR9, emuRegR10) }, "mov r9d,r10d"},
		{func(a *emuAsm) { a.addReg(emuRegR8, emuRegRAX) }, "add r8,rax"},
		{func(a *emuAsm) { a.addImm8(emuRegRSI, 8) }, "add rsi,0x8"},
		{func(a *emuAsm) { a.addImm8(emuRegR10, 16) }, "add r10,0x10"},
		{func(a *emuAsm) { a.shlImm(emuRegRAX, 9) }, "shl rax,0x9"},
		{func(a *emuAsm) { a.xor32(emuRegR11, emuRegR11) }, "xor r11d,r11d"},
		{func(a *emuAsm) { a.xor32(emuRegRSI, emuRegRSI) }, "xor esi,esi"},
		{func(a *emuAsm) { a.inc(emuRegR11) }, "inc r11"},
		{func(a *emuAsm) { a.dec32(emuRegRCX) }, "dec ecx"},
		{func(a *emuAsm) { a.incMem(emuRegRBX, 136) }, "inc QWORD PTR [rbx+0x88]"},
		{func(a *emuAsm) { a.repMovsq() }, "rep movs QWORD PTR es:[rdi],QWORD PTR ds:[rsi]"},
		{func(a *emuAsm) { a.syscall() }, "syscall"},
		{func(a *emuAsm) { a.int3() }, "int3"},
		{func(a *emuAsm) { a.ret() }, "ret"},
		{func(a *emuAsm) { a.label("x"); a.jcc(emuCCNE, "x") }, "jne 0x0"},
		{func(a *emuAsm) { a.jmp("y"); a.label("y") }, "jmp 0x5"},
	}
	dir := t.TempDir()
	for _, v := range vecs {
		var a emuAsm
		v.emit(&a)
		code, err := a.finish()
		if err != nil {
			t.Fatal(err)
		}
		got := emuObjdump(t, objdump, dir, code)
		if len(got) != 1 || got[0] != v.want {
			t.Errorf("% x: objdump says %q, want %q", code, got, v.want)
		}
		// The project's decoder must agree on the length.
		var inst decode.X86Inst
		if err := (decode.X86Decoder{}).Decode(code, 0, &inst); err != nil || inst.Len != len(code) {
			t.Errorf("% x: decoder length %d (%v), want %d", code, inst.Len, err, len(code))
		}
	}
}

// TestEmuHarnessDisassembles checks that objdump decodes the whole harness
// into instructions without (bad) bytes, and that the entry points are
// instruction boundaries.
func TestEmuHarnessDisassembles(t *testing.T) {
	h, err := buildEmuHarness()
	if err != nil {
		t.Fatal(err)
	}
	starts := map[int]bool{}
	for off := 0; off < len(h.code); {
		var inst decode.X86Inst
		if err := (decode.X86Decoder{}).Decode(h.code[off:], uint64(off), &inst); err != nil {
			t.Fatalf("harness offset %#x: %v", off, err)
		}
		starts[off] = true
		off += inst.Len
	}
	for name, off := range map[string]int{"handler": h.handler, "restorer": h.restorer, "idle": h.idle, "gadget": h.gadget} {
		if !starts[off] {
			t.Errorf("%s entry %#x is not an instruction boundary", name, off)
		}
	}
	objdump := testenv.MustHaveTool(t, "objdump")
	for _, line := range emuObjdump(t, objdump, t.TempDir(), h.code) {
		if strings.Contains(line, "(bad)") {
			t.Errorf("objdump: %s", line)
		}
	}
}

var emuObjdumpLine = regexp.MustCompile(`^\s*[0-9a-f]+:\t(?:[0-9a-f]{2} )+\s*\t(.*)$`)

// emuObjdump disassembles code with objdump in Intel syntax and returns
// the instruction texts, spaces squeezed.
func emuObjdump(t *testing.T, objdump, dir string, code []byte) []string {
	t.Helper()
	p := filepath.Join(dir, "code.bin")
	if err := os.WriteFile(p, code, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(objdump, "-D", "-b", "binary", "-m", "i386:x86-64", "-M", "intel", p).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	var texts []string
	for _, line := range strings.Split(string(out), "\n") {
		m := emuObjdumpLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		txt := strings.Join(strings.Fields(m[1]), " ")
		txt = strings.ReplaceAll(txt, ", ", ",")
		texts = append(texts, txt)
	}
	return texts
}
