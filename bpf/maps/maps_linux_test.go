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
			key := binary.LittleEndian.AppendUint32(nil, uint32(r.IntN(12)))
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
