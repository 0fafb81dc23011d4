package maps

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/internal/testenv"
)

// kernelClass names a kernel map error the way this package's sentinels
// divide them.
func kernelClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ebpf.ErrKeyNotExist):
		return "ENOENT"
	case errors.Is(err, ebpf.ErrKeyExist):
		return "EEXIST"
	case errors.Is(err, unix.E2BIG):
		return "E2BIG"
	case errors.Is(err, unix.EINVAL):
		return "EINVAL"
	}
	return err.Error()
}

func ourClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrKeyNotExist):
		return "ENOENT"
	case errors.Is(err, ErrKeyExist):
		return "EEXIST"
	case errors.Is(err, ErrTooBig):
		return "E2BIG"
	case errors.Is(err, ErrInvalid):
		return "EINVAL"
	}
	return err.Error()
}

// TestAgainstKernel runs the same random Update, Delete and Lookup calls
// on a kernel map (through the bpf system call) and on this package's map
// of the same spec, and compares every result and the entries after.
func TestAgainstKernel(t *testing.T) {
	for _, spec := range []*ebpf.MapSpec{
		{Type: ebpf.Hash, KeySize: 4, ValueSize: 12, MaxEntries: 8},
		{Type: ebpf.Array, KeySize: 4, ValueSize: 12, MaxEntries: 8},
		// An LRU map never full: the same semantics (eviction,
		// approximate in the kernel and possible before it is full,
		// aside).
		{Type: ebpf.LRUHash, KeySize: 4, ValueSize: 12, MaxEntries: 64},
	} {
		km, err := ebpf.NewMap(spec)
		if err != nil {
			testenv.Unavailable(t, "creating a BPF map: %v", err)
		}
		defer km.Close()
		m, err := New(NewArenaMem(make([]byte, 1<<16), 0x1000), spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, uint64(spec.Type)))
		classes := map[string]int{}
		for i := 0; i < 3000; i++ {
			keys := 12
			if spec.Type == ebpf.LRUHash {
				keys = 8
			}
			key := binary.LittleEndian.AppendUint32(nil, uint32(r.IntN(keys)))
			val := make([]byte, 12)
			for j := range val {
				val[j] = byte(r.Uint32())
			}
			var kc, oc string
			switch r.IntN(3) {
			case 0:
				flags := uint64(r.IntN(4))
				kc = kernelClass(km.Update(key, val, ebpf.MapUpdateFlags(flags)))
				oc = ourClass(m.Update(key, val, flags))
			case 1:
				kc = kernelClass(km.Delete(key))
				oc = ourClass(m.Delete(key))
			default:
				var kv []byte
				kc = kernelClass(km.Lookup(key, &kv))
				ov, err := m.Lookup(key)
				oc = ourClass(err)
				if err == nil && !slices.Equal(kv, ov) {
					t.Fatalf("%v: lookup %x: kernel %x, ours %x", spec.Type, key, kv, ov)
				}
			}
			if kc != oc {
				t.Fatalf("%v, call %d: kernel %s, ours %s", spec.Type, i, kc, oc)
			}
			classes[kc]++
		}
		var ke, oe [][]byte
		var k, v []byte
		it := km.Iterate()
		for it.Next(&k, &v) {
			ke = append(ke, append(slices.Clone(k), v...))
		}
		entries, err := m.Entries()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			oe = append(oe, append(slices.Clone(e.Key), e.Value...))
		}
		less := func(a, b []byte) int { return slices.Compare(a, b) }
		slices.SortFunc(ke, less)
		slices.SortFunc(oe, less)
		if !slices.EqualFunc(ke, oe, slices.Equal) {
			t.Errorf("%v: entries differ: kernel %x, ours %x", spec.Type, ke, oe)
		}
		t.Logf("%v: 3000 calls equal, %d entries equal; results %v", spec.Type, len(ke), classes)
	}
}

// TestLRUEviction fills an LRU map, uses one entry again, and inserts
// more: the least recently used entries go first, the map never holds
// more than max entries and no insert fails.
func TestLRUEviction(t *testing.T) {
	m, err := New(NewArenaMem(make([]byte, 1<<16), 0x1000), &ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := func(i uint32) []byte { return binary.LittleEndian.AppendUint32(nil, i) }
	v := make([]byte, 8)
	for i := uint32(1); i <= 4; i++ {
		if err := m.Update(k(i), v, UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Update(k(1), v, UpdateExist); err != nil { // 1 is now the most recent
		t.Fatal(err)
	}
	for i := uint32(5); i <= 6; i++ {
		if err := m.Update(k(i), v, UpdateNoExist); err != nil {
			t.Fatalf("insert %d into a full LRU map: %v", i, err)
		}
	}
	var got []uint32
	entries, err := m.Entries()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		got = append(got, binary.LittleEndian.Uint32(e.Key))
	}
	slices.Sort(got)
	if want := []uint32{1, 4, 5, 6}; !slices.Equal(got, want) {
		t.Errorf("entries %v, want %v (2 and 3 the least recently used)", got, want)
	}
}

// TestPerCPUHash checks the tracer's side of a per-CPU hash: an update
// stores the value in every stripe, a lookup and the iteration show every
// stripe, a delete removes them all.
func TestPerCPUHash(t *testing.T) {
	m, err := New(NewArenaMem(make([]byte, 1<<16), 0x1000), &ebpf.MapSpec{Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: 4, MaxEntries: 4}, &Options{Stripes: 3})
	if err != nil {
		t.Fatal(err)
	}
	key, val := []byte{1, 0, 0, 0}, []byte{9, 8, 7, 6}
	if _, err := m.Lookup(key); !errors.Is(err, ErrInvalid) {
		t.Errorf("Lookup of a per-CPU map: %v, want ErrInvalid", err)
	}
	if err := m.Update(key, val, UpdateNoExist); err != nil {
		t.Fatal(err)
	}
	vs, err := m.LookupPerCPU(key)
	if err != nil || len(vs) != 3 {
		t.Fatalf("LookupPerCPU: %d values, %v", len(vs), err)
	}
	for s, v := range vs {
		if !slices.Equal(v, val) {
			t.Errorf("stripe %d: %x", s, v)
		}
	}
	es, err := m.Entries()
	if err != nil || len(es) != 1 || len(es[0].Values) != 3 || es[0].Value != nil {
		t.Fatalf("Entries: %+v, %v", es, err)
	}
	if err := m.Delete(key); err != nil {
		t.Fatal(err)
	}
	if _, err := m.LookupPerCPU(key); !errors.Is(err, ErrKeyNotExist) {
		t.Errorf("after Delete: %v", err)
	}
}
