package jit

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/bpf/maps"
)

// readCase is one helper call of the read oracle: probe_read_user_str or
// probe_read_user of size bytes from src into a 64-byte stack buffer
// first filled with 0xa5.
type readCase struct {
	str  bool
	size int
	src  uint64
}

// genReadProgram stores, for every case, the helper's result and the
// whole buffer into "o" (72 bytes a case), and then the results of
// get_current_pid_tgid and get_current_uid_gid.
func genReadProgram(cases []readCase) asm.Instructions {
	insns := asm.Instructions{asm.LoadMapValue(asm.R6, 0, 0).WithReference("o")}
	for i, c := range cases {
		for off := -64; off < 0; off += 8 {
			insns = append(insns, asm.LoadImm(asm.R1, int64(0xa5a5a5a5a5a5a5a5-1<<64), asm.DWord),
				asm.StoreMem(asm.RFP, int16(off), asm.R1, asm.DWord))
		}
		fn := asm.FnProbeReadUser
		if c.str {
			fn = asm.FnProbeReadUserStr
		}
		insns = append(insns, asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -64),
			asm.Mov.Imm(asm.R2, int32(c.size)), asm.LoadImm(asm.R3, int64(c.src), asm.DWord),
			fn.Call(), asm.StoreMem(asm.R6, int16(72*i), asm.R0, asm.DWord))
		for off := 0; off < 64; off += 8 {
			insns = append(insns, asm.LoadMem(asm.R1, asm.RFP, int16(-64+off), asm.DWord),
				asm.StoreMem(asm.R6, int16(72*i+8+off), asm.R1, asm.DWord))
		}
	}
	n := int16(72 * len(cases))
	insns = append(insns, asm.FnGetCurrentPidTgid.Call(), asm.StoreMem(asm.R6, n, asm.R0, asm.DWord),
		asm.FnGetCurrentUidGid.Call(), asm.StoreMem(asm.R6, n+8, asm.R0, asm.DWord),
		asm.Mov.Imm(asm.R0, 0), asm.Return())
	return insns
}

// TestReadOracle compares probe_read_user and probe_read_user_str, and
// the pid and uid helpers, with the kernel's: a raw tracepoint program
// run with BPF_PROG_TEST_RUN runs on this thread, in this process, so the
// kernel's helpers read the same addresses. The strings lie before an
// unmapped page, at every distance from it, of every length up to the
// buffer and beyond; the sizes go from 1 to 64; the addresses include
// the unmapped page, NULL and a kernel address.
func TestReadOracle(t *testing.T) {
	newOracle(t) // skips without the privilege to load BPF
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	page, err := unix.Mmap(-1, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	if err := unix.Mprotect(page[2*4096:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for i := range page[:2*4096] {
		page[i] = 'a' + byte(r.IntN(26)) // every page resident
	}
	base := uint64(uintptr(unsafe.Pointer(&page[0])))
	end := base + 2*4096 // the unmapped page
	const perProgram = 20
	compared := 0
	for round := 0; round < 60; round++ {
		var cases []readCase
		for len(cases) < perProgram {
			c := readCase{str: r.IntN(3) != 0, size: 1 + r.IntN(64)}
			switch k := r.IntN(10); {
			case k < 6: // near the unmapped page
				c.src = end - uint64(1+r.IntN(80))
			case k < 8: // a string that ends in the middle of the first page
				at := 1000 + r.IntN(200)
				page[at+r.IntN(70)] = 0
				c.src = base + uint64(at)
			case k < 9:
				c.src = []uint64{0, end, end + 100, 0xffff_8000_0000_0000}[r.IntN(4)]
			default: // across the two mapped pages
				c.src = base + 4096 - uint64(r.IntN(40))
			}
			cases = append(cases, c)
		}
		insns := genReadProgram(cases)
		spec := &ebpf.MapSpec{Name: "o", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(72*perProgram + 16), MaxEntries: 1}
		kmap, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatal(err)
		}
		kins := insns
		if err := kins.AssociateMap("o", kmap); err != nil {
			t.Fatal(err)
		}
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint, Instructions: kins, License: "GPL"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := prog.Run(&ebpf.RunOptions{Context: make([]byte, 8)}); err != nil {
			t.Fatal(err)
		}
		prog.Close()
		var kout []byte
		if err := kmap.Lookup(uint32(0), &kout); err != nil {
			t.Fatal(err)
		}
		kmap.Close()
		m, err := maps.New(testArena(t), spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jitRun(genReadProgram(cases), map[string]*maps.Map{"o": m}, 0); err != nil {
			t.Fatal(err)
		}
		jout, err := m.Lookup([]byte{0, 0, 0, 0})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cases {
			k, j := kout[72*i:72*i+72], jout[72*i:72*i+72]
			if !bytes.Equal(k, j) {
				t.Errorf("round %d, %+v (%d bytes before the unmapped page): kernel r0 %d %q, JIT r0 %d %q",
					round, c, int64(end-c.src), int64(binary.LittleEndian.Uint64(k)), k[8:],
					int64(binary.LittleEndian.Uint64(j)), j[8:])
			}
			compared++
		}
		n := 72 * perProgram
		if !bytes.Equal(kout[n:], jout[n:]) {
			t.Errorf("pid_tgid, uid_gid: kernel %x, JIT %x", kout[n:], jout[n:])
		}
	}
	t.Logf("%d reads equal", compared)
}

// TestClockOracle interleaves the kernel's ktime_get_ns and
// ktime_get_boot_ns with the JIT's: every reading lies between the
// kernel's readings before and after it.
func TestClockOracle(t *testing.T) {
	newOracle(t) // skips without the privilege to load BPF
	for _, fn := range []asm.BuiltinFunc{asm.FnKtimeGetNs, asm.FnKtimeGetBootNs} {
		insns := asm.Instructions{fn.Call(), asm.Return()}
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint, Instructions: insns, License: "GPL"})
		if err != nil {
			t.Fatal(err)
		}
		defer prog.Close()
		// The kernel's reading comes back through the test run's 32-bit
		// result: compare modulo 2^32, over gaps far below 2^32 ns.
		kernel := func() uint32 {
			ret, err := prog.Run(&ebpf.RunOptions{Context: make([]byte, 8)})
			if err != nil {
				t.Fatal(err)
			}
			return ret
		}
		f := compileLoad(t, insns, nil)
		var ctx [8]byte
		for i := 0; i < 1000; i++ {
			k1 := kernel()
			j := uint32(f.Run(unsafe.Pointer(&ctx[0]), 0))
			k2 := kernel()
			if j-k1 > k2-k1 {
				t.Fatalf("%v: kernel %d, JIT %d, kernel %d (mod 2^32)", fn, k1, j, k2)
			}
		}
	}
}

// TestCommOracle compares get_current_comm with the kernel's for every
// size from 1 to 24 bytes, into a buffer first filled with 0xa5, with a
// thread name of 15 bytes (the most) and a short one.
func TestCommOracle(t *testing.T) {
	newOracle(t) // skips without the privilege to load BPF
	// The thread is renamed: it stays locked, and ends with the test.
	runtime.LockOSThread()
	for _, name := range []string{"probeopt-oracle", "jit"} {
		b := append([]byte(name), 0)
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		var insns asm.Instructions
		insns = append(insns, asm.LoadMapValue(asm.R6, 0, 0).WithReference("o"))
		for size := 1; size <= 24; size++ {
			for off := -24; off < 0; off += 8 {
				insns = append(insns, asm.LoadImm(asm.R1, int64(0xa5a5a5a5a5a5a5a5-1<<64), asm.DWord),
					asm.StoreMem(asm.RFP, int16(off), asm.R1, asm.DWord))
			}
			insns = append(insns, asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -24),
				asm.Mov.Imm(asm.R2, int32(size)), asm.FnGetCurrentComm.Call(),
				asm.StoreMem(asm.R6, int16(32*(size-1)), asm.R0, asm.DWord))
			for off := 0; off < 24; off += 8 {
				insns = append(insns, asm.LoadMem(asm.R1, asm.RFP, int16(-24+off), asm.DWord),
					asm.StoreMem(asm.R6, int16(32*(size-1)+8+off), asm.R1, asm.DWord))
			}
		}
		insns = append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
		kout, jout := runBoth(t, insns, 32*24)
		for size := 1; size <= 24; size++ {
			k, j := kout[32*(size-1):32*size], jout[32*(size-1):32*size]
			if !bytes.Equal(k, j) {
				t.Errorf("%q, size %d: kernel %q, JIT %q", name, size, k, j)
			}
		}
		if !bytes.Contains(kout, []byte(name)) {
			t.Errorf("the kernel's comm is not %q: %q", name, kout[:32*16])
		}
	}
}

// TestReadKernelOracle compares probe_read_kernel with the kernel's on
// what a program may read as the kernel's memory, its own stack (at
// every offset and size within 24 bytes of known words), its context
// and a value of its map, and on the addresses whose reads fail: NULL and
// an unmapped low address (the kernel's -ERANGE for an address below the
// kernel's half), a readable address of this process (-ERANGE too: the
// kernel refuses a user address before it reads) and the unmapped start
// of the kernel's half (-EFAULT), dst zeroed each time.
func TestReadKernelOracle(t *testing.T) {
	newOracle(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const (
		fromStack = iota // fp-32+off
		fromAbs          // src
		fromCtx          // the context, +off
		fromMap          // the map's value, +off
	)
	type kcase struct {
		from      int
		off, size int
		src       int64
	}
	var cases []kcase
	for off := 0; off < 24; off += 5 {
		for size := 1; size <= 24-off; size += 3 {
			cases = append(cases, kcase{from: fromStack, off: off, size: size})
		}
	}
	user := []byte("a readable word of the tracer")
	for _, src := range []int64{0, 4096, -1 << 47, int64(uintptr(unsafe.Pointer(&user[0])))} {
		cases = append(cases, kcase{from: fromAbs, size: 8, src: src})
	}
	cases = append(cases, kcase{from: fromCtx, size: 8}, kcase{from: fromMap, off: 8, size: 16})
	gen := func() asm.Instructions {
		insns := asm.Instructions{asm.Mov.Reg(asm.R7, asm.R1), asm.LoadMapValue(asm.R6, 0, 0).WithReference("o")}
		for i, w := range []int64{0x0706050403020100, 0x0f0e0d0c0b0a0908, 0x1716151413121110, 0x1f1e1d1c1b1a1918} {
			insns = append(insns, asm.LoadImm(asm.R1, w, asm.DWord), asm.StoreMem(asm.RFP, int16(-32+8*i), asm.R1, asm.DWord))
		}
		for i, c := range cases {
			insns = append(insns, asm.LoadImm(asm.R1, int64(0xa5a5a5a5a5a5a5a5-1<<64), asm.DWord))
			for off := -64; off < -32; off += 8 {
				insns = append(insns, asm.StoreMem(asm.RFP, int16(off), asm.R1, asm.DWord))
			}
			insns = append(insns, asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -64), asm.Mov.Imm(asm.R2, int32(c.size)))
			switch c.from {
			case fromStack:
				insns = append(insns, asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, int32(-32+c.off)))
			case fromAbs:
				insns = append(insns, asm.LoadImm(asm.R3, c.src, asm.DWord))
			case fromCtx:
				insns = append(insns, asm.Mov.Reg(asm.R3, asm.R7), asm.Add.Imm(asm.R3, int32(c.off)))
			case fromMap:
				insns = append(insns, asm.Mov.Reg(asm.R3, asm.R6), asm.Add.Imm(asm.R3, int32(c.off)))
			}
			insns = append(insns, asm.FnProbeReadKernel.Call(), asm.StoreMem(asm.R6, int16(40*i), asm.R0, asm.DWord))
			for off := 0; off < 32; off += 8 {
				insns = append(insns, asm.LoadMem(asm.R1, asm.RFP, int16(-64+off), asm.DWord),
					asm.StoreMem(asm.R6, int16(40*i+8+off), asm.R1, asm.DWord))
			}
		}
		return append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
	}
	kout, jout := runBoth(t, gen(), uint32(40*len(cases)))
	failed := 0
	for i, c := range cases {
		k, j := kout[40*i:40*i+40], jout[40*i:40*i+40]
		kr := int64(binary.LittleEndian.Uint64(k))
		if (c.from == fromAbs) != (kr != 0) {
			t.Errorf("%+v: the kernel's read returned %d; the case must fail exactly when it reads an absolute address", c, kr)
		}
		if kr != 0 {
			failed++
		}
		if !bytes.Equal(k, j) {
			t.Errorf("%+v: kernel r0 %d %x, JIT r0 %d %x", c, kr, k[8:],
				int64(binary.LittleEndian.Uint64(j)), j[8:])
		}
	}
	runtime.KeepAlive(user)
	t.Logf("%d probe_read_kernel calls compared (%d failing)", len(cases), failed)
}

// runBoth runs insns, which write into the array map "o" of one value of
// size bytes, as a raw tracepoint program in the kernel
// (BPF_PROG_TEST_RUN, on this thread) and through the JIT, and returns
// the value each left.
func runBoth(t *testing.T, insns asm.Instructions, size uint32) (kout, jout []byte) {
	t.Helper()
	return runBothCtx(t, insns, size, nil)
}

// runBothCtx is runBoth with ctx the context of both runs, on the code's
// stack for the JIT (Func.RunStackCtx); nil: 8 zero bytes for the
// kernel, a struct pt_regs elsewhere for the JIT.
func runBothCtx(t *testing.T, insns asm.Instructions, size uint32, ctx []byte) (kout, jout []byte) {
	t.Helper()
	spec := &ebpf.MapSpec{Name: "o", Type: ebpf.Array, KeySize: 4, ValueSize: size, MaxEntries: 1}
	kmap, err := ebpf.NewMap(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer kmap.Close()
	kins := slices.Clone(insns)
	if err := kins.AssociateMap("o", kmap); err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint, Instructions: kins, License: "GPL"})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	kctx := ctx
	if kctx == nil {
		kctx = make([]byte, 8)
	}
	if _, err := prog.Run(&ebpf.RunOptions{Context: kctx}); err != nil {
		t.Fatal(err)
	}
	if err := kmap.Lookup(uint32(0), &kout); err != nil {
		t.Fatal(err)
	}
	m, err := maps.New(testArena(t), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ctx == nil {
		if _, err := jitRun(insns, map[string]*maps.Map{"o": m}, 0); err != nil {
			t.Fatal(err)
		}
	} else {
		code, err := Compile(insns, &Options{Maps: map[string]*maps.Map{"o": m}})
		if err != nil {
			t.Fatal(err)
		}
		f, err := Load(code.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.RunStackCtx(ctx, 0)
	}
	if jout, err = m.Lookup([]byte{0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	return kout, jout
}

// TestReadKernelCtxOracle compares probe_read_kernel of the program's
// context with the kernel's, the context lying on the code's stack as a
// probe slot puts it (the fast path's copy): offsets and sizes within
// the 96 bytes of a raw tracepoint's context; the bytes read are the
// context's.
func TestReadKernelCtxOracle(t *testing.T) {
	newOracle(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx := make([]byte, 96)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range ctx {
		ctx[i] = byte(r.IntN(256))
	}
	type kcase struct{ off, size int }
	var cases []kcase
	for off := 0; off < 96; off += 7 {
		for size := 1; off+size <= 96 && size <= 32; size += 5 {
			cases = append(cases, kcase{off, size})
		}
	}
	insns := asm.Instructions{asm.Mov.Reg(asm.R7, asm.R1), asm.LoadMapValue(asm.R6, 0, 0).WithReference("o")}
	for i, c := range cases {
		insns = append(insns, asm.LoadImm(asm.R1, int64(0xa5a5a5a5a5a5a5a5-1<<64), asm.DWord))
		for off := -64; off < -32; off += 8 {
			insns = append(insns, asm.StoreMem(asm.RFP, int16(off), asm.R1, asm.DWord))
		}
		insns = append(insns, asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -64), asm.Mov.Imm(asm.R2, int32(c.size)),
			asm.Mov.Reg(asm.R3, asm.R7), asm.Add.Imm(asm.R3, int32(c.off)),
			asm.FnProbeReadKernel.Call(), asm.StoreMem(asm.R6, int16(40*i), asm.R0, asm.DWord))
		for off := 0; off < 32; off += 8 {
			insns = append(insns, asm.LoadMem(asm.R1, asm.RFP, int16(-64+off), asm.DWord),
				asm.StoreMem(asm.R6, int16(40*i+8+off), asm.R1, asm.DWord))
		}
	}
	insns = append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
	kout, jout := runBothCtx(t, insns, uint32(40*len(cases)), ctx)
	for i, c := range cases {
		k, j := kout[40*i:40*i+40], jout[40*i:40*i+40]
		if !bytes.Equal(k, j) || !bytes.Equal(k[8:8+c.size], ctx[c.off:c.off+c.size]) {
			t.Errorf("%+v: kernel r0 %d %x, JIT r0 %d %x, context %x", c, int64(binary.LittleEndian.Uint64(k)), k[8:],
				int64(binary.LittleEndian.Uint64(j)), j[8:], ctx[c.off:c.off+c.size])
		}
	}
	t.Logf("%d reads of the context compared", len(cases))
}
