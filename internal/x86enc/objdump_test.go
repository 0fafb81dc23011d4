package x86enc

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
)

// objdumpVectors are forms with their bytes and objdump's AT&T text (the
// comment objdump adds for a RIP-relative operand is dropped).
var objdumpVectors = []struct {
	emit func(a *Asm)
	hex  string
	text string
}{
	{func(a *Asm) { a.Lea(RSP, At(RSP, -128)) }, "488d642480", "lea -0x80(%rsp),%rsp"},
	{func(a *Asm) { a.Lea(RSP, At(RSP, 128)) }, "488da42480000000", "lea 0x80(%rsp),%rsp"},
	{func(a *Asm) { a.Lea(RDX, At(RBP, 0)) }, "488d5500", "lea 0x0(%rbp),%rdx"},
	{func(a *Asm) { a.Lea(RDX, At(R13, 0)) }, "498d5500", "lea 0x0(%r13),%rdx"},
	{func(a *Asm) { a.Lea(RCX, At(R12, 0)) }, "498d0c24", "lea (%r12),%rcx"},
	{func(a *Asm) { a.Lea(RAX, Indexed(R11, RAX, 1, 256)) }, "498d840300010000", "lea 0x100(%r11,%rax,1),%rax"},
	{func(a *Asm) { a.Lea(RAX, Indexed(RSI, R12, 8, 127)) }, "4a8d44e67f", "lea 0x7f(%rsi,%r12,8),%rax"},
	{func(a *Asm) { a.Lea(R11, RIP(testBase+0x1000)) }, "4c8d1df90f0000", "lea 0x7f0000402000(%rip),%r11"},
	{func(a *Asm) { a.Store(S64, At(RAX, 72), R9) }, "4c894848", "mov %r9,0x48(%rax)"},
	{func(a *Asm) { a.Store(S32, At(RBX, 64), RAX) }, "894340", "mov %eax,0x40(%rbx)"},
	{func(a *Asm) { a.Load(S64, RAX, At(RSP, -8)) }, "488b4424f8", "mov -0x8(%rsp),%rax"},
	{func(a *Asm) { a.Load(S32, RDX, Indexed(RSI, RCX, 1, 16)) }, "8b540e10", "mov 0x10(%rsi,%rcx,1),%edx"},
	{func(a *Asm) { a.Load(S64, RDX, Abs(0).FS()) }, "64488b142500000000", "mov %fs:0x0,%rdx"},
	{func(a *Asm) { a.Load(S64, RAX, At(RBX, 8).GS()) }, "65488b4308", "mov %gs:0x8(%rbx),%rax"},
	{func(a *Asm) { a.StoreImm(S64, At(RDX, 176), 0x202) }, "48c782b000000002020000", "movq $0x202,0xb0(%rdx)"},
	{func(a *Asm) { a.StoreImm(S32, At(RAX, 12), 2) }, "c7400c02000000", "movl $0x2,0xc(%rax)"},
	{func(a *Asm) { a.Mov(S64, R10, RAX) }, "4989c2", "mov %rax,%r10"},
	{func(a *Asm) { a.Mov(S32, R9, R10) }, "4589d1", "mov %r10d,%r9d"},
	{func(a *Asm) { a.MovImm(RCX, 128) }, "b980000000", "mov $0x80,%ecx"},
	{func(a *Asm) { a.MovImm(RDX, 0x100000007) }, "48ba0700000001000000", "movabs $0x100000007,%rdx"},
	{func(a *Asm) { a.MovImm32(R10, 202) }, "41baca000000", "mov $0xca,%r10d"},
	{func(a *Asm) { a.MovAbs(RBX, 0x5a5a5a5a0000) }, "48bb00005a5a5a5a0000", "movabs $0x5a5a5a5a0000,%rbx"},
	{func(a *Asm) { a.ALU(Add, S64, R8, RAX) }, "4901c0", "add %rax,%r8"},
	{func(a *Asm) { a.ALU(Or, S64, RAX, RDX) }, "4809d0", "or %rdx,%rax"},
	{func(a *Asm) { a.ALU(Xor, S32, R11, R11) }, "4531db", "xor %r11d,%r11d"},
	{func(a *Asm) { a.ALU(Cmp, S64, RDX, R11) }, "4c39da", "cmp %r11,%rdx"},
	{func(a *Asm) { a.ALULoad(Sub, S64, R10, At(R11, 64)) }, "4d2b5340", "sub 0x40(%r11),%r10"},
	{func(a *Asm) { a.ALULoad(Cmp, S32, RAX, At(RBX, 64)) }, "3b4340", "cmp 0x40(%rbx),%eax"},
	{func(a *Asm) { a.ALUStore(Cmp, S64, Indexed(RSI, RCX, 1, 8), R10) }, "4c39540e08", "cmp %r10,0x8(%rsi,%rcx,1)"},
	{func(a *Asm) { a.ALUImm8(Sub, S32, RCX, 32) }, "83e920", "sub $0x20,%ecx"},
	{func(a *Asm) { a.ALUImm8(Cmp, S64, R11, 8) }, "4983fb08", "cmp $0x8,%r11"},
	{func(a *Asm) { a.ALUImm32(And, S64, RAX, -2048) }, "4881e000f8ffff", "and $0xfffffffffffff800,%rax"},
	{func(a *Asm) { a.ALUImm32(Cmp, S32, RCX, 2016) }, "81f9e0070000", "cmp $0x7e0,%ecx"},
	{func(a *Asm) { a.ALUMemImm8(Cmp, S64, At(RBX, 144), 0) }, "4883bb9000000000", "cmpq $0x0,0x90(%rbx)"},
	{func(a *Asm) { a.ALUMemImm32(Or, S64, At(RDX, 176), 0x100) }, "48818ab000000000010000", "orq $0x100,0xb0(%rdx)"},
	{func(a *Asm) { a.ALUAL(Add, 0x7f) }, "047f", "add $0x7f,%al"},
	{func(a *Asm) { a.Test(S32, RCX, RCX) }, "85c9", "test %ecx,%ecx"},
	{func(a *Asm) { a.TestMemImm32(S32, Indexed(RSI, RCX, 1, 20), 1) }, "f7440e1401000000", "testl $0x1,0x14(%rsi,%rcx,1)"},
	{func(a *Asm) { a.Imul(S64, R10, R11) }, "4d0fafd3", "imul %r11,%r10"},
	{func(a *Asm) { a.Shl(S64, RAX, 7) }, "48c1e007", "shl $0x7,%rax"},
	{func(a *Asm) { a.Shr(S64, RAX, 54) }, "48c1e836", "shr $0x36,%rax"},
	{func(a *Asm) { a.Inc(S64, R11) }, "49ffc3", "inc %r11"},
	{func(a *Asm) { a.Dec(S32, RCX) }, "ffc9", "dec %ecx"},
	{func(a *Asm) { a.IncMem(S64, At(RBX, 136)) }, "48ff8388000000", "incq 0x88(%rbx)"},
	{func(a *Asm) { a.LockIncMem(S64, RIP(testBase+0x100)) }, "f048ff05f8000000", "lock incq 0x7f0000401100(%rip)"},
	{func(a *Asm) { a.Cmpxchg(S64, At(R11, 0), R10, true) }, "f04d0fb113", "lock cmpxchg %r10,(%r11)"},
	{func(a *Asm) { a.Cmpxchg(S64, At(RSI, 8), RDX, false) }, "480fb15608", "cmpxchg %rdx,0x8(%rsi)"},
	{func(a *Asm) { a.Setcc(CondO, RAX) }, "0f90c0", "seto %al"},
	{func(a *Asm) { a.Setcc(CondNE, RSI) }, "400f95c6", "setne %sil"},
	{func(a *Asm) { a.Setcc(CondG, R9) }, "410f9fc1", "setg %r9b"},
	{func(a *Asm) { a.Rdfsbase(RDX) }, "f3480faec2", "rdfsbase %rdx"},
	{func(a *Asm) { a.Push(R11) }, "4153", "push %r11"},
	{func(a *Asm) { a.Pop(RCX) }, "59", "pop %rcx"},
	{func(a *Asm) { a.JmpMem(At(RSP, -8)) }, "ff6424f8", "jmp *-0x8(%rsp)"},
	{func(a *Asm) { a.CallMem(At(RSP, -8)) }, "ff5424f8", "call *-0x8(%rsp)"},
	{func(a *Asm) { a.JmpTo(testBase + 0x400) }, "e9fb030000", "jmp 0x7f0000401400"},
	{func(a *Asm) { a.JccTo(CondNE, testBase+0x400) }, "0f85fa030000", "jne 0x7f0000401400"},
	{func(a *Asm) { a.JccShort(CondB, testBase+7) }, "7205", "jb 0x7f0000401007"},
	{func(a *Asm) { a.JccShort(CondG, testBase-0x7e) }, "7f80", "jg 0x7f0000400f82"},
	{func(a *Asm) { a.CallTo(testBase + 5) }, "e800000000", "call 0x7f0000401005"},
	{func(a *Asm) { a.PushImm32(0x401005) }, "6805104000", "push $0x401005"},
	{func(a *Asm) { a.PushImm32(-1) }, "68ffffffff", "push $0xffffffffffffffff"},
	{func(a *Asm) { a.StoreImm(S32, At(RSP, 4), 0x7f) }, "c74424047f000000", "movl $0x7f,0x4(%rsp)"},
	{func(a *Asm) { l := a.NewLabel(); a.Jcc(CondAE, l); a.Bind(l) }, "0f8300000000", "jae 0x7f0000401006"},
	{func(a *Asm) { l := a.NewLabel(); a.Bind(l); a.Jmp(l) }, "e9fbffffff", "jmp 0x7f0000401000"},
	{func(a *Asm) { l := a.NewLabel(); a.LeaLabel(RAX, l); a.Bind(l) }, "488d0500000000", "lea 0x7f0000401007(%rip),%rax"},
	{func(a *Asm) { a.Neg(S64, RAX) }, "48f7d8", "neg %rax"},
	{func(a *Asm) { a.Neg(S32, R9) }, "41f7d9", "neg %r9d"},
	{func(a *Asm) { a.Sar(S64, RDX, 3) }, "48c1fa03", "sar $0x3,%rdx"},
	{func(a *Asm) { a.ShlCL(S64, R10) }, "49d3e2", "shl %cl,%r10"},
	{func(a *Asm) { a.ShrCL(S32, RBX) }, "d3eb", "shr %cl,%ebx"},
	{func(a *Asm) { a.SarCL(S64, RSI) }, "48d3fe", "sar %cl,%rsi"},
	{func(a *Asm) { a.Div(S64, R11) }, "49f7f3", "div %r11"},
	{func(a *Asm) { a.Idiv(S32, RCX) }, "f7f9", "idiv %ecx"},
	{func(a *Asm) { a.SignExtendAX(S64) }, "4899", "cqto"},
	{func(a *Asm) { a.SignExtendAX(S32) }, "99", "cltd"},
	{func(a *Asm) { a.Bswap(S64, R13) }, "490fcd", "bswap %r13"},
	{func(a *Asm) { a.Bswap(S32, RAX) }, "0fc8", "bswap %eax"},
	{func(a *Asm) { a.Rol16(RDI, 8) }, "66c1c708", "rol $0x8,%di"},
	{func(a *Asm) { a.MovzxB(S32, RAX, RSI) }, "400fb6c6", "movzbl %sil,%eax"},
	{func(a *Asm) { a.MovzxB(S64, R8, R15) }, "4d0fb6c7", "movzbq %r15b,%r8"},
	{func(a *Asm) { a.MovzxW(S32, RDX, R9) }, "410fb7d1", "movzwl %r9w,%edx"},
	{func(a *Asm) { a.MovsxB(S64, RAX, RDI) }, "480fbec7", "movsbq %dil,%rax"},
	{func(a *Asm) { a.MovsxW(S32, RCX, RBX) }, "0fbfcb", "movswl %bx,%ecx"},
	{func(a *Asm) { a.Movsxd(R14, RAX) }, "4c63f0", "movslq %eax,%r14"},
	{func(a *Asm) { a.LoadZxB(RAX, At(RBP, -8)) }, "0fb645f8", "movzbl -0x8(%rbp),%eax"},
	{func(a *Asm) { a.LoadZxW(R9, At(RDI, 2)) }, "440fb74f02", "movzwl 0x2(%rdi),%r9d"},
	{func(a *Asm) { a.LoadSxB(S64, RSI, At(RAX, 0)) }, "480fbe30", "movsbq (%rax),%rsi"},
	{func(a *Asm) { a.LoadSxW(S32, RAX, At(R13, 16)) }, "410fbf4510", "movswl 0x10(%r13),%eax"},
	{func(a *Asm) { a.LoadSxd(RDX, At(RSP, 8)) }, "4863542408", "movslq 0x8(%rsp),%rdx"},
	{func(a *Asm) { a.StoreB(At(RBP, -1), RSI) }, "408875ff", "mov %sil,-0x1(%rbp)"},
	{func(a *Asm) { a.StoreB(At(R8, 0), RAX) }, "418800", "mov %al,(%r8)"},
	{func(a *Asm) { a.StoreW(At(RBX, 4), R10) }, "6644895304", "mov %r10w,0x4(%rbx)"},
	{func(a *Asm) { a.StoreImmB(At(RBP, -3), -1) }, "c645fdff", "movb $0xff,-0x3(%rbp)"},
	{func(a *Asm) { a.StoreImmW(At(RAX, 6), 0x1234) }, "66c740063412", "movw $0x1234,0x6(%rax)"},
	{func(a *Asm) { a.StoreImmW(RIP(testBase+0x100), 1) }, "66c705f70000000100", "movw $0x1,0x7f0000401100(%rip)"},
	{func(a *Asm) { a.LockALUStore(Add, S64, At(RDI, 8), RAX) }, "f048014708", "lock add %rax,0x8(%rdi)"},
	{func(a *Asm) { a.LockALUStore(Xor, S32, At(R11, 0), RDX) }, "f04131" + "13", "lock xor %edx,(%r11)"},
	{func(a *Asm) { a.Xadd(S64, At(RSI, 0), RCX, true) }, "f0480fc10e", "lock xadd %rcx,(%rsi)"},
	{func(a *Asm) { a.Xchg(S32, At(RBP, -4), R8) }, "448745fc", "xchg %r8d,-0x4(%rbp)"},
	{func(a *Asm) { l := a.NewLabel(); a.CallLabel(l); a.Bind(l) }, "e800000000", "call 0x7f0000401005"},
	{func(a *Asm) { a.CallReg(R11) }, "41ffd3", "call *%r11"},
	{(*Asm).Pause, "f390", "pause"},
	{(*Asm).RepStosb, "f3aa", "rep stos %al,%es:(%rdi)"},
	{(*Asm).Pushfq, "9c", "pushf"},
	{(*Asm).Popfq, "9d", "popf"},
	{(*Asm).Lahf, "9f", "lahf"},
	{(*Asm).Sahf, "9e", "sahf"},
	{(*Asm).Ret, "c3", "ret"},
	{(*Asm).Ud2, "0f0b", "ud2"},
	{(*Asm).Rdtsc, "0f31", "rdtsc"},
	{(*Asm).Lfence, "0faee8", "lfence"},
	{(*Asm).Cpuid, "0fa2", "cpuid"},
	{(*Asm).Syscall, "0f05", "syscall"},
	{(*Asm).Int3, "cc", "int3"},
	{(*Asm).Nop, "90", "nop"},
	{(*Asm).RepMovsb, "f3a4", "rep movsb %ds:(%rsi),%es:(%rdi)"},
	{(*Asm).RepMovsq, "f348a5", "rep movsq %ds:(%rsi),%es:(%rdi)"},
}

var (
	objdumpLine = regexp.MustCompile(`^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t([^#]*)(?:# (0x[0-9a-f]+))?`)
	ripDisp     = regexp.MustCompile(`-?0x[0-9a-f]+\(%rip\)`)
)

// TestObjdump checks the bytes of each vector, and that objdump reads them
// as one instruction with the vector's text.
func TestObjdump(t *testing.T) {
	tool := testenv.MustHaveTool(t, "objdump")
	dir := t.TempDir()
	for _, v := range objdumpVectors {
		a := New(testBase)
		v.emit(a)
		code, err := a.Finish()
		if err != nil {
			t.Fatalf("%s: %v", v.text, err)
		}
		if got := hex.EncodeToString(code); got != v.hex {
			t.Errorf("%s: %s, want %s", v.text, got, v.hex)
		}
		p := filepath.Join(dir, "code.bin")
		if err := os.WriteFile(p, code, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(tool, "-D", "-b", "binary", "-m", "i386:x86-64", "--insn-width=16",
			"--adjust-vma=0x7f0000401000", p).CombinedOutput()
		if err != nil {
			t.Fatalf("objdump: %v\n%s", err, out)
		}
		var texts []string
		for _, l := range strings.Split(string(out), "\n") {
			if m := objdumpLine.FindStringSubmatch(l); m != nil {
				text := m[3]
				if m[4] != "" { // the address of a RIP-relative operand
					text = ripDisp.ReplaceAllString(text, m[4]+"(%rip)")
				}
				texts = append(texts, strings.Join(strings.Fields(text), " "))
			}
		}
		if len(texts) != 1 || texts[0] != v.text {
			t.Errorf("% x: objdump %q, want %q", code, texts, v.text)
		}
	}
}
