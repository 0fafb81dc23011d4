package trampoline

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/proc"
)

// A process of the usual shape: a PIE executable, its heap, libraries
// and the stack.
const typicalMaps = `555555554000-555555556000 r--p 00000000 08:01 100 /usr/bin/prog
555555556000-55555555a000 r-xp 00002000 08:01 100 /usr/bin/prog
55555555a000-55555555c000 r--p 00006000 08:01 100 /usr/bin/prog
55555555c000-55555555d000 rw-p 00008000 08:01 100 /usr/bin/prog
55555555d000-55555557e000 rw-p 00000000 00:00 0 [heap]
7ffff7d80000-7ffff7da8000 r--p 00000000 08:01 200 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffff7da8000-7ffff7f3d000 r-xp 00028000 08:01 200 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffff7f3d000-7ffff7f95000 r--p 001bd000 08:01 200 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffff7fc3000-7ffff7fc7000 r--p 00000000 00:00 0 [vvar]
7ffff7fc7000-7ffff7fc9000 r-xp 00000000 00:00 0 [vdso]
7ffff7fc9000-7ffff7fca000 r--p 00000000 08:01 300 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
7ffff7fca000-7ffff7ff1000 r-xp 00001000 08:01 300 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]
`

func parseMaps(t testing.TB, s string) []Mapping {
	t.Helper()
	ms, err := proc.ParseMaps(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Mapping, len(ms))
	for i, m := range ms {
		out[i] = Mapping{Start: m.Start, End: m.End, Path: m.Path}
	}
	return out
}

// checkPlace verifies a result of Place against its contract.
func checkPlace(t *testing.T, maps []Mapping, reach []uint64, size, at uint64, o PlaceOptions) {
	t.Helper()
	o = (&o).withDefaults()
	size = (size + o.PageSize - 1) &^ (o.PageSize - 1)
	if at%o.PageSize != 0 || at < o.Low || at+size > o.High {
		t.Fatalf("area %#x+%#x not page-aligned or outside [%#x, %#x)", at, size, o.Low, o.High)
	}
	for _, a := range reach {
		for _, b := range []uint64{at, at + size - 1} {
			if d := max(a, b) - min(a, b); d > MaxReach {
				t.Fatalf("area byte %#x is %#x from %#x", b, d, a)
			}
		}
	}
	for _, m := range maps {
		lo, hi := m.Start-min(m.Start, o.Guard), m.End+o.Guard
		if m.Path == "[heap]" {
			hi += o.HeapRoom
		}
		if m.Path == "[stack]" {
			lo -= min(lo, o.StackRoom)
		}
		if at < hi && at+size > lo {
			t.Fatalf("area %#x+%#x overlaps %#x-%#x %s (with guard and room)", at, size, m.Start, m.End, m.Path)
		}
	}
}

func TestPlaceTypical(t *testing.T) {
	maps := parseMaps(t, typicalMaps)
	cases := []struct {
		name  string
		reach []uint64
	}{
		{"exe", []uint64{0x555555556100, 0x555555559f00}},
		{"libc", []uint64{0x7ffff7da8100, 0x7ffff7f3c000}},
		{"ld.so", []uint64{0x7ffff7fca100}},
	}
	for _, c := range cases {
		at, err := Place(maps, c.reach, 1<<20, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		checkPlace(t, maps, c.reach, 1<<20, at, PlaceOptions{})
		// Near: within 64 MiB (much less than 2 GiB) of the sites.
		if d := max(at, c.reach[0]) - min(at, c.reach[0]); d > 64<<20 {
			t.Errorf("%s: area at %#x is %#x from the sites", c.name, at, d)
		}
	}
	// Executable and libraries together are ~42 TiB apart.
	if _, err := Place(maps, []uint64{0x555555556100, 0x7ffff7da8100}, 4096, nil); !errors.Is(err, ErrNoPlace) {
		t.Fatalf("sites 42 TiB apart: %v", err)
	}
	cl := Clusters([]uint64{0x7ffff7da8100, 0x555555556100, 0x7ffff7fca100, 0x555555559f00}, 0)
	if len(cl) != 2 || len(cl[0]) != 2 || len(cl[1]) != 2 || cl[0][0] != 0x555555556100 {
		t.Fatalf("clusters %x", cl)
	}
}

func TestPlaceFull(t *testing.T) {
	// Everything within reach is mapped.
	maps := []Mapping{{Start: 0x10000, End: 0x7FFF_FFFF_0000}}
	if _, err := Place(maps, []uint64{0x40000000}, 4096, nil); !errors.Is(err, ErrNoPlace) {
		t.Fatalf("full address space: %v", err)
	}
	// One hole just large enough, 1.5 GiB away.
	maps = []Mapping{{Start: 0x10000, End: 0x1_0000_0000}, {Start: 0x1_0001_1000, End: 0x7FFF_FFFF_0000}}
	at, err := Place(maps, []uint64{0x1_0000_0000 - 1<<30}, 0xF000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if at != 0x1_0000_1000 {
		t.Fatalf("area at %#x, want the hole at 0x100001000", at)
	}
	// The hole is beyond reach of a site 2.5 GiB away.
	if _, err := Place(maps, []uint64{0x1_0000_0000 - 5<<29}, 0xF000, nil); !errors.Is(err, ErrNoPlace) {
		t.Fatalf("hole beyond reach: %v", err)
	}
	if _, err := Place(maps, nil, 4096, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("no addresses: %v", err)
	}
}

// TestPlaceRandom checks the contract on random address spaces.
func TestPlaceRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 2000; i++ {
		var maps []Mapping
		at := uint64(0x10000) + rng.Uint64N(1<<40)
		for j := 0; j < 40; j++ {
			at += rng.Uint64N(1<<28) &^ 0xFFF
			n := (rng.Uint64N(1<<26) + 4096) &^ 0xFFF
			path := ""
			switch rng.IntN(10) {
			case 0:
				path = "[heap]"
			case 1:
				path = "[stack]"
			}
			maps = append(maps, Mapping{Start: at, End: at + n, Path: path})
			at += n
		}
		rng.Shuffle(len(maps), func(a, b int) { maps[a], maps[b] = maps[b], maps[a] })
		m := maps[rng.IntN(len(maps))]
		reach := []uint64{m.Start + rng.Uint64N(m.End-m.Start)}
		if rng.IntN(2) == 0 {
			reach = append(reach, reach[0]+rng.Uint64N(1<<30))
		}
		size := rng.Uint64N(1<<24) + 1
		got, err := Place(maps, reach, size, nil)
		if errors.Is(err, ErrNoPlace) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		checkPlace(t, maps, reach, size, got, PlaceOptions{})
	}
}
