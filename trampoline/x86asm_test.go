package trampoline

import (
	"errors"
	"testing"
)

// TestEmitterAgainstObjdump emits every instruction form the generator
// uses, with registers and memory operands that exercise REX, SIB,
// rbp/r13 and rsp/r12 bases, disp8/disp32 and RIP-relative operands, and
// compares objdump's text for each with the intended instruction.
func TestEmitterAgainstObjdump(t *testing.T) {
	const base = 0x7f0000401000
	e := newX86Emitter(base)
	var want []string
	add := func(text string, f func()) {
		f()
		want = append(want, text)
	}
	add("lea -0x80(%rsp),%rsp", func() { e.lea(rsp, memAt(rsp, -128)) })
	add("lea 0x80(%rsp),%rsp", func() { e.lea(rsp, memAt(rsp, 128)) })
	add("lea 0x1(%rax),%r10", func() { e.lea(r10, memAt(rax, 1)) })
	add("lea 0x100(%r11,%rax,1),%rax", func() { e.lea(rax, memIdx(r11, rax, 256)) })
	add("lea 0x0(%rbp),%rdx", func() { e.lea(rdx, memAt(rbp, 0)) })
	add("lea 0x0(%r13),%rdx", func() { e.lea(rdx, memAt(13, 0)) })
	add("lea (%r12),%rcx", func() { e.lea(rcx, memAt(12, 0)) })
	add("lea 0x7f0000402000(%rip),%r11", func() { e.lea(r11, memRIP(base+0x1000)) })
	add("mov %rdi,0x20(%rax)", func() { e.store(memAt(rax, 32), rdi) })
	add("mov %r9,0x48(%rax)", func() { e.store(memAt(rax, 72), r9) })
	add("mov %r10,0x8(%rsi,%rcx,1)", func() { e.store(memIdx(rsi, rcx, 8), r10) })
	add("mov 0x40(%r11),%rax", func() { e.load(rax, memAt(r11, 64)) })
	add("mov (%r10),%rdx", func() { e.load(rdx, memAt(r10, 0)) })
	add("mov 0x18(%rsi,%rcx,1),%rdx", func() { e.load(rdx, memIdx(rsi, rcx, 24)) })
	add("mov %edx,0x8(%rax)", func() { e.store32(memAt(rax, 8), rdx) })
	add("mov %ecx,0x8(%rsi)", func() { e.store32(memAt(rsi, 8), rcx) })
	add("mov 0x8(%rsi),%ecx", func() { e.load32(rcx, memAt(rsi, 8)) })
	add("mov 0x10(%rsi,%rcx,1),%edx", func() { e.load32(rdx, memIdx(rsi, rcx, 16)) })
	add("movq $0x0,0x50(%rax)", func() { e.storeImm(memAt(rax, 80), 0) })
	add("movl $0x2,0xc(%rax)", func() { e.storeImm32(memAt(rax, 12), 2) })
	add("mov %rax,%r10", func() { e.movRR(r10, rax) })
	add("mov %r10,%rax", func() { e.movRR(rax, r10) })
	add("mov %eax,%ecx", func() { e.movRR32(rcx, rax) })
	add("mov $0x12345678,%edx", func() { e.movImm(rdx, 0x12345678) })
	add("mov $0x80,%ecx", func() { e.movImm(rcx, 128) })
	add("movabs $0x100000007,%rdx", func() { e.movImm(rdx, 0x100000007) })
	add("movabs $0x7f0000001000,%r11", func() { e.movImm(r11, 0x7f0000001000) })
	add("push %rax", func() { e.push(rax) })
	add("push %r11", func() { e.push(r11) })
	add("pop %r10", func() { e.pop(r10) })
	add("pop %rcx", func() { e.pop(rcx) })
	add("pushf", func() { e.pushfq() })
	add("popf", func() { e.popfq() })
	add("lahf", func() { e.lahf() })
	add("sahf", func() { e.sahf() })
	add("seto %al", func() { e.setoAL() })
	add("add $0x7f,%al", func() { e.addAL(0x7f) })
	add("lock incq 0x7f0000401100(%rip)", func() { e.lockInc(memRIP(base + 0x100)) })
	add("lock incq (%r11)", func() { e.lockInc(memAt(r11, 0)) })
	add("lock incq 0x80(%r11)", func() { e.lockInc(memAt(r11, 128)) })
	add("incq 0x10(%rsi)", func() { e.incMem(memAt(rsi, 16)) })
	add("lock cmpxchg %r10,(%r11)", func() { e.cmpxchg(memAt(r11, 0), r10, true) })
	add("lock cmpxchg %rdx,(%rsi)", func() { e.cmpxchg(memAt(rsi, 0), rdx, true) })
	add("cmpxchg %rdx,0x8(%rsi)", func() { e.cmpxchg(memAt(rsi, 8), rdx, false) })
	add("cmp %rdx,(%rsi)", func() { e.cmpMemReg(memAt(rsi, 0), rdx) })
	add("cmp %r10,0x8(%rsi,%rcx,1)", func() { e.cmpMemReg(memIdx(rsi, rcx, 8), r10) })
	add("cmp %r11,(%rdx)", func() { e.cmpMemReg(memAt(rdx, 0), r11) })
	add("cmp %r11,%rdx", func() { e.cmpRR(rdx, r11) })
	add("cmpq $0x0,(%rsi)", func() { e.cmpMemImm8(memAt(rsi, 0), 0) })
	add("cmp $0x1000,%r10", func() { e.cmpImm(r10, 4096, true) })
	add("cmp $0x7e0,%ecx", func() { e.cmpImm(rcx, 2016, false) })
	add("sub 0x40(%r11),%r10", func() { e.subMem(r10, memAt(r11, 64)) })
	add("add $0x20,%ecx", func() { e.add32(rcx, 32) })
	add("sub $0x20,%ecx", func() { e.sub32(rcx, 32) })
	add("and $0xfff,%rax", func() { e.andImm(rax, 0xfff) })
	add("and $0xfffffffffffff800,%rax", func() { e.andImm(rax, -2048) })
	add("add $0x800,%rax", func() { e.add(rax, 2048) })
	add("lea (%r11,%rax,1),%rsi", func() { e.lea(rsi, memIdx(r11, rax, 0)) })
	add("lea 0x20(%rdx,%rcx,1),%rdx", func() { e.lea(rdx, memIdx(rdx, rcx, 32)) })
	add("jmp *-0x8(%rsp)", func() { e.jmpMem(memAt(rsp, -8)) })
	add("shl $0x7,%rax", func() { e.shl(rax, 7) })
	add("shr $0x36,%rax", func() { e.shr(rax, 54) })
	add("shl $0x20,%rdx", func() { e.shl(rdx, 32) })
	add("or %rdx,%rax", func() { e.orRR(rax, rdx) })
	add("or %rcx,%rdx", func() { e.orRR(rdx, rcx) })
	add("add %r11,%rsi", func() { e.addRR(rsi, r11) })
	add("xor %eax,%eax", func() { e.zero32(rax) })
	add("test %rdx,%rdx", func() { e.test(rdx, true) })
	add("test %ecx,%ecx", func() { e.test(rcx, false) })
	add("testl $0x1,0x14(%rsi,%rcx,1)", func() { e.testMemImm32(memIdx(rsi, rcx, 20), 1) })
	add("imul %rdx,%rax", func() { e.imulRR(rax, rdx) })
	add("imul %r11,%r10", func() { e.imulRR(r10, r11) })
	add("inc %rax", func() { e.inc(rax) })
	add("inc %rdx", func() { e.inc(rdx) })
	add("dec %ecx", func() { e.dec32(rcx) })
	add("rdfsbase %rdx", func() { e.rdfsbase(rdx) })
	add("mov %fs:0x0,%rdx", func() { e.loadFS0(rdx) })
	add("rdtsc", func() { e.rdtsc() })
	add("ret", func() { e.ret() })
	add("ud2", func() { e.ud2() })
	l := e.newLabel()
	add("jmp 0x7f0000401400", func() { e.jmpTo(base + 0x400) })
	add("jae JAE", func() { e.jccL(ccAE, l) })
	add("jmp JMP", func() { e.jmpL(l) })
	e.bind(l)
	add("nop", func() { e.one(0x90) })
	code, err := e.finish()
	if err != nil {
		t.Fatal(err)
	}
	obj := objdump(t, code, base)
	if len(obj) != len(want) {
		t.Fatalf("objdump shows %d instructions, emitted %d", len(obj), len(want))
	}
	for i, o := range obj {
		w := want[i]
		if o.addr-base != uint64(e.starts[i]) {
			t.Errorf("instruction %d (%s): objdump at +%d, emitter at +%d", i, w, o.addr-base, e.starts[i])
		}
		switch w {
		case "jae JAE", "jmp JMP":
			// Label targets: the bound position.
			w = w[:3] + " 0x" + hexU(base+uint64(e.a.Offset(l)))
		}
		if o.text != w {
			t.Errorf("instruction %d: objdump %q, want %q", i, o.text, w)
		}
	}
	checkBoundaries(t, code, base, e.starts)
}

func hexU(v uint64) string {
	const d = "0123456789abcdef"
	var b []byte
	for {
		b = append([]byte{d[v&15]}, b...)
		v >>= 4
		if v == 0 {
			return string(b)
		}
	}
}

func TestEmitterReach(t *testing.T) {
	e := newX86Emitter(0x1000)
	e.jmpTo(0x1000 + 1<<32)
	if _, err := e.finish(); !errors.Is(err, ErrOutOfReach) {
		t.Fatalf("jump beyond 2 GiB: %v", err)
	}
	e = newX86Emitter(0x1000)
	e.lockInc(memRIP(0x1000 + 1<<31 + 100))
	if _, err := e.finish(); !errors.Is(err, ErrOutOfReach) {
		t.Fatalf("RIP-relative operand beyond 2 GiB: %v", err)
	}
	e = newX86Emitter(0x1000)
	e.jmpL(e.newLabel())
	if _, err := e.finish(); !errors.Is(err, ErrEncode) {
		t.Fatalf("unbound label: %v", err)
	}
}
