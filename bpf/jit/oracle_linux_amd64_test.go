package jit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/internal/testenv"
)

// oracle runs generated programs in the kernel (BPF_PROG_TEST_RUN of a
// socket filter, the kernel's own JIT or interpreter) and through this
// JIT in this process, from the same map value.
type oracle struct {
	kmap  *ebpf.Map
	arena *maps.Arena
	m     *maps.Map
	// rejected counts the programs the verifier refused (not compared).
	rejected int
	lastLog  string
}

// oracleBatch is the number of tests in one generated program.
const oracleBatch = 10

func newOracle(t testing.TB) *oracle {
	t.Helper()
	spec := &ebpf.MapSpec{Name: "m", Type: ebpf.Array, KeySize: 4, ValueSize: oracleBatch * genValueSize, MaxEntries: 1}
	kmap, err := ebpf.NewMap(spec)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, ebpf.ErrNotSupported) {
			testenv.Unavailable(t, "creating a BPF map: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { kmap.Close() })
	arena := testArena(t)
	m, err := maps.New(arena, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &oracle{kmap: kmap, arena: arena, m: m}
}

type outcome struct {
	ret   uint64
	value []byte
}

var key0 = []byte{0, 0, 0, 0}

// kernelRun loads insns into the kernel as a socket filter, its map
// references resolved to kmaps, and runs it once with BPF_PROG_TEST_RUN.
// A refusal of the verifier is returned as an *ebpf.VerifierError.
func kernelRun(insns asm.Instructions, kmaps map[string]*ebpf.Map) (uint32, error) {
	kins := slices.Clone(insns)
	for name, m := range kmaps {
		if err := kins.AssociateMap(name, m); err != nil && !errors.Is(err, asm.ErrUnreferencedSymbol) {
			return 0, err
		}
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, Instructions: kins, License: "GPL"})
	if err != nil {
		return 0, err
	}
	defer prog.Close()
	return prog.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
}

// kernel runs the program in the kernel; ok is false when the verifier
// refuses it.
func (o *oracle) kernel(insns asm.Instructions, value []byte) (outcome, bool, error) {
	if err := o.kmap.Update(uint32(0), value, ebpf.UpdateAny); err != nil {
		return outcome{}, false, err
	}
	ret, err := kernelRun(insns, map[string]*ebpf.Map{"m": o.kmap})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			o.lastLog = fmt.Sprintf("%+v", ve)
			return outcome{}, false, nil
		}
		return outcome{}, false, err
	}
	var out []byte
	if err := o.kmap.Lookup(uint32(0), &out); err != nil {
		return outcome{}, false, err
	}
	return outcome{ret: uint64(ret), value: out}, true, nil
}

// testArena returns a 64 KiB arena in this process, unmapped at the end
// of the test.
func testArena(t testing.TB) *maps.Arena {
	t.Helper()
	arena, err := maps.NewArena(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { arena.Close() })
	return arena
}

// jitRun compiles insns against ms, runs the code once in this process
// on stripe and returns R0.
func jitRun(insns asm.Instructions, ms map[string]*maps.Map, stripe int) (uint64, error) {
	code, err := Compile(insns, &Options{Maps: ms})
	if err != nil {
		return 0, err
	}
	f, err := Load(code.Bytes)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var ctx [168]byte
	return f.Run(unsafe.Pointer(&ctx[0]), stripe), nil
}

// jit runs the program through the JIT.
func (o *oracle) jit(insns asm.Instructions, value []byte) (outcome, error) {
	if err := o.m.Update(key0, value, maps.UpdateAny); err != nil {
		return outcome{}, err
	}
	ret, err := jitRun(insns, map[string]*maps.Map{"m": o.m}, 0)
	if err != nil {
		return outcome{}, err
	}
	out, err := o.m.Lookup(key0)
	if err != nil {
		return outcome{}, err
	}
	return outcome{ret: ret, value: out}, nil
}

// check runs one program both ways and describes a difference.
func (o *oracle) check(insns asm.Instructions, value []byte) (compared bool, diff string, err error) {
	k, ok, err := o.kernel(insns, value)
	if err != nil || !ok {
		return false, "", err
	}
	j, err := o.jit(insns, value)
	if err != nil {
		return true, "", fmt.Errorf("JIT: %w\n%v", err, insns)
	}
	if uint32(k.ret) == uint32(j.ret) && bytes.Equal(k.value, j.value) {
		return true, "", nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "r0: kernel %#x, JIT %#x\n", uint32(k.ret), j.ret)
	for i := 0; i < len(k.value); i += 8 {
		kw, jw := binary.LittleEndian.Uint64(k.value[i:]), binary.LittleEndian.Uint64(j.value[i:])
		if kw != jw {
			fmt.Fprintf(&b, "test %d, value+%d: kernel %#x, JIT %#x\n", i/genValueSize, i%genValueSize, kw, jw)
		}
	}
	fmt.Fprintf(&b, "%v", insns)
	return true, b.String(), nil
}

// oracleCount is the number of programs: 20,000, or 1,000,000 in a long
// run, or PROBEOPT_BPF_PROGRAMS.
func oracleCount() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("PROBEOPT_BPF_PROGRAMS"), &n); err == nil && n > 0 {
		return n
	}
	if testenv.Long() {
		return 1_000_000
	}
	return 20_000
}

// TestKernelOracle compares the JIT with the kernel on generated programs
// (see gen_test.go for what they cover): R0, the registers, the stack
// window and the map value after the run must be equal.
func TestKernelOracle(t *testing.T) {
	newOracle(t) // skips without the privilege to load BPF
	n := oracleCount()
	seed := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16)).Uint64()
	t.Logf("seed %#x", seed)
	start := time.Now()
	// One worker per CPU, each with its own kernel map and arena; batch b
	// is generated from (seed, b) whichever worker runs it.
	type result struct {
		batch    int
		ok       bool
		diff     string
		err      error
		rejected string
	}
	batches := (n + oracleBatch - 1) / oracleBatch
	next := make(chan int)
	results := make(chan result)
	workers := runtime.GOMAXPROCS(0)
	for w := 0; w < workers; w++ {
		o := newOracle(t)
		go func() {
			for b := range next {
				r := rand.New(rand.NewPCG(seed, uint64(b)))
				insns, value := genProgram(r, oracleBatch, 20+r.IntN(60))
				ok, diff, err := o.check(insns, value)
				results <- result{batch: b, ok: ok, diff: diff, err: err, rejected: o.lastLog}
			}
		}()
	}
	go func() {
		for b := 0; b < batches; b++ {
			next <- b
		}
		close(next)
	}()
	compared, rejected, mismatches := 0, 0, 0
	lastLog := ""
	for i := 0; i < batches; i++ {
		res := <-results
		switch {
		case res.err != nil:
			t.Errorf("batch %d: %v", res.batch, res.err)
		case !res.ok:
			rejected += oracleBatch
			lastLog = res.rejected
		default:
			compared += oracleBatch
			if res.diff != "" {
				mismatches++
				if mismatches <= 3 {
					t.Errorf("batch %d differs:\n%s", res.batch, res.diff)
				}
			}
		}
	}
	t.Logf("%d programs (in batches of %d, %d workers), %d compared, %d refused by the verifier, %d batches with a mismatch, %v",
		n, oracleBatch, workers, compared, rejected, mismatches, time.Since(start).Round(time.Millisecond))
	// The generator keeps to what the verifier accepts: a refusal means
	// a generator defect, which would hide cases.
	if rejected*100 > n || rejected > 0 && n < 100*oracleBatch {
		t.Errorf("%d of %d programs refused by the verifier; the last log:\n%s", rejected, n, lastLog)
	}
}

// FuzzBPFJIT generates a program from the fuzzer's seed and length and
// compares the JIT with the kernel on it.
func FuzzBPFJIT(f *testing.F) {
	f.Add(uint64(1), uint8(20))
	f.Add(uint64(0xdeadbeef), uint8(80))
	f.Add(uint64(42), uint8(1))
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		o := newOracle(t)
		r := rand.New(rand.NewPCG(seed, 16))
		insns, value := genProgram(r, 1+int(n%3), int(n%120))
		value = append(value, make([]byte, oracleBatch*genValueSize-len(value))...)
		ok, diff, err := o.check(insns, value)
		if err != nil {
			t.Fatal(err)
		}
		if ok && diff != "" {
			t.Fatalf("differs:\n%s", diff)
		}
	})
}
