package jit

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/probeopt/probeopt/bpf/maps"
)

// helperOps is the number of map operations of one program.
const helperOps = 40

// genMapOps returns a program of random map_update_elem (every flag, and
// an invalid one), map_delete_elem and map_lookup_elem (then an increment
// through the value pointer) on a hash "h", an array "a" and a per-CPU
// array "p" of 4 entries each, with keys 0-7, each result stored in the
// array "o"; and on an LRU hash "l" with keys 0-3, which it never
// fills.
func genMapOps(r *rand.Rand) asm.Instructions {
	insns := asm.Instructions{asm.LoadMapValue(asm.R6, 0, 0).WithReference("o")}
	for i := 0; i < helperOps; i++ {
		m := []string{"h", "h", "a", "p", "l", "q"}[r.IntN(6)]
		keys := 8
		if m == "l" {
			keys = 4 // never fuller than max entries: eviction aside
		}
		if r.IntN(2) == 0 {
			insns = append(insns, asm.LoadMapPtr(asm.R1, 0).WithReference(m))
		} else {
			// Through R7: the JIT does not know the map at the call,
			// and calls the helper rather than inlining the lookup.
			insns = append(insns, asm.LoadMapPtr(asm.R7, 0).WithReference(m), asm.Mov.Reg(asm.R1, asm.R7))
		}
		insns = append(insns,
			asm.StoreImm(asm.RFP, -4, int64(r.IntN(keys)), asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4))
		switch k := r.IntN(10); {
		case k < 5:
			insns = append(insns,
				asm.StoreImm(asm.RFP, -16, int64(int32(r.Uint32())), asm.Word),
				asm.StoreImm(asm.RFP, -12, int64(int32(r.Uint32())), asm.Word),
				asm.Mov.Reg(asm.R3, asm.RFP),
				asm.Add.Imm(asm.R3, -16),
				asm.Mov.Imm(asm.R4, int32(r.IntN(4))),
				asm.FnMapUpdateElem.Call())
		case k < 7:
			insns = append(insns, asm.FnMapDeleteElem.Call())
		default:
			insns = append(insns,
				asm.FnMapLookupElem.Call(),
				asm.Instruction{OpCode: asm.JEq.Op(asm.ImmSource), Dst: asm.R0, Constant: 0, Offset: 4},
				asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
				asm.Add.Imm(asm.R1, 1),
				asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
				asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource), Offset: 1},
				asm.Mov.Imm(asm.R1, -1),
				asm.Mov.Reg(asm.R0, asm.R1))
		}
		insns = append(insns, asm.StoreMem(asm.R6, int16(8*i), asm.R0, asm.DWord))
	}
	return append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
}

var helperMaps = []*ebpf.MapSpec{
	{Name: "h", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 4},
	{Name: "a", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4},
	{Name: "p", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 4},
	// The kernel's LRU may evict before it is full (its free nodes are
	// held in per-CPU lists): 64 entries for 4 keys.
	{Name: "l", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 64},
	{Name: "q", Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 4},
	{Name: "o", Type: ebpf.Array, KeySize: 4, ValueSize: 8 * helperOps, MaxEntries: 1},
}

// dump returns a map's entries as sorted "key=value" words; a per-CPU
// value is the sum over the CPUs (or stripes).
type dumpEntry struct{ k, v uint64 }

func dumpKernel(t *testing.T, m *ebpf.Map) []dumpEntry {
	var out []dumpEntry
	var k uint32
	if m.Type() == ebpf.PerCPUArray || m.Type() == ebpf.PerCPUHash {
		var vs []uint64
		it := m.Iterate()
		for it.Next(&k, &vs) {
			s := uint64(0)
			for _, v := range vs {
				s += v
			}
			out = append(out, dumpEntry{uint64(k), s})
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	} else {
		var v []byte
		it := m.Iterate()
		for it.Next(&k, &v) {
			out = append(out, dumpEntry{uint64(k), binary.LittleEndian.Uint64(v)})
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k < out[j].k })
	return out
}

func dumpOurs(t *testing.T, m *maps.Map) []dumpEntry {
	es, err := m.Entries()
	if err != nil {
		t.Fatal(err)
	}
	var out []dumpEntry
	for _, e := range es {
		k := uint64(binary.LittleEndian.Uint32(e.Key))
		if e.Values != nil {
			s := uint64(0)
			for _, v := range e.Values {
				s += binary.LittleEndian.Uint64(v)
			}
			out = append(out, dumpEntry{k, s})
		} else {
			out = append(out, dumpEntry{k, binary.LittleEndian.Uint64(e.Value)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k < out[j].k })
	return out
}

// TestHelperOracle compares the JIT's map helpers with the kernel's: the
// result of every operation (0, -EEXIST, -ENOENT, -E2BIG, -EINVAL, a
// value) and the maps' contents afterwards, over random sequences.
func TestHelperOracle(t *testing.T) {
	newOracle(t) // skips without the privilege to load BPF
	const programs = 200
	r := rand.New(rand.NewPCG(7, 16))
	codes := map[int64]int{}
	for n := 0; n < programs; n++ {
		insns := genMapOps(r)
		kmaps := map[string]*ebpf.Map{}
		for _, s := range helperMaps {
			m, err := ebpf.NewMap(s)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			kmaps[s.Name] = m
		}
		if _, err := kernelRun(insns, kmaps); err != nil {
			t.Fatalf("program %d: %v", n, err)
		}

		arena := testArena(t)
		ours := map[string]*maps.Map{}
		for _, s := range helperMaps {
			m, err := maps.New(arena, s, &maps.Options{Stripes: 4})
			if err != nil {
				t.Fatal(err)
			}
			ours[s.Name] = m
		}
		if _, err := jitRun(insns, ours, 2); err != nil {
			t.Fatal(err)
		}

		var kout []byte
		if err := kmaps["o"].Lookup(uint32(0), &kout); err != nil {
			t.Fatal(err)
		}
		jout, err := ours["o"].Lookup([]byte{0, 0, 0, 0})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(kout, jout) {
			for i := 0; i < helperOps; i++ {
				kv, jv := int64(binary.LittleEndian.Uint64(kout[8*i:])), int64(binary.LittleEndian.Uint64(jout[8*i:]))
				if kv != jv {
					t.Errorf("program %d, operation %d: kernel %d, JIT %d", n, i, kv, jv)
				}
			}
			t.Fatalf("%v", insns)
		}
		for i := 0; i < helperOps; i++ {
			c := int64(binary.LittleEndian.Uint64(kout[8*i:]))
			if c < -maps.EINVAL || c > 0 {
				c = 1 // a value read through a lookup
			}
			codes[c]++
		}
		for _, name := range []string{"h", "a", "p", "l", "q"} {
			kd, jd := dumpKernel(t, kmaps[name]), dumpOurs(t, ours[name])
			if !slices.Equal(kd, jd) {
				t.Fatalf("program %d: map %s: kernel %v, JIT %v\n%v", n, name, kd, jd, insns)
			}
		}
	}
	// The sequences must have reached every outcome.
	for _, c := range []int64{0, -maps.EEXIST, -maps.ENOENT, -maps.E2BIG, -maps.EINVAL, -1} {
		if codes[c] == 0 {
			t.Errorf("no operation returned %d", c)
		}
	}
	t.Logf("%d programs of %d operations, equal; results (1: a value): %v", programs, helperOps, codes)
}

// TestLRUHelpers inserts six keys into an LRU hash of four through the
// helpers, a lookup making the first the most recently used: every
// insert succeeds and the two least recently used are gone.
func TestLRUHelpers(t *testing.T) {
	m, err := maps.New(testArena(t), &ebpf.MapSpec{Name: "l", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var insns asm.Instructions
	call := func(fn asm.BuiltinFunc, key int32) {
		insns = append(insns,
			asm.LoadMapPtr(asm.R1, 0).WithReference("l"),
			asm.StoreImm(asm.RFP, -4, int64(key), asm.Word),
			asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.RFP, Offset: -16, Constant: int64(key)},
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
			asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -16),
			asm.Mov.Imm(asm.R4, maps.UpdateNoExist), fn.Call())
		if fn == asm.FnMapUpdateElem {
			// Any failure ends the program with its error.
			insns = append(insns, asm.Instruction{OpCode: asm.JEq.Op(asm.ImmSource), Dst: asm.R0, Offset: 1}, asm.Return())
		}
	}
	for k := int32(1); k <= 4; k++ {
		call(asm.FnMapUpdateElem, k)
	}
	call(asm.FnMapLookupElem, 1)
	call(asm.FnMapUpdateElem, 5)
	call(asm.FnMapUpdateElem, 6)
	insns = append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
	ret, err := jitRun(insns, map[string]*maps.Map{"l": m}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ret != 0 {
		t.Fatalf("an insert failed: %d", int64(ret))
	}
	entries, err := m.Entries()
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for _, e := range entries {
		got = append(got, binary.LittleEndian.Uint32(e.Key))
	}
	slices.Sort(got)
	if want := []uint32{1, 4, 5, 6}; !slices.Equal(got, want) {
		t.Errorf("entries %v, want %v", got, want)
	}
}
