package proc

import (
	"errors"
	"strings"
	"testing"
)

func TestParseMaps(t *testing.T) {
	text := `55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 1234                       /usr/bin/cat
55d0c0a02000-55d0c0a07000 r-xp 00002000 08:01 1234                       /usr/bin/my prog (deleted)
7ffd1e5f2000-7ffd1e613000 rw-p 00000000 00:00 0                          [stack]
7f0000000000-7f0000001000 rw-s 00000000 00:05 99

ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`
	maps, err := ParseMaps(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 5 {
		t.Fatalf("got %d mappings, want 5", len(maps))
	}
	m := maps[1]
	if m.Start != 0x55d0c0a02000 || m.End != 0x55d0c0a07000 || !m.Read || m.Write || !m.Exec || m.Shared ||
		m.Offset != 0x2000 || m.Dev != "08:01" || m.Inode != 1234 || m.Path != "/usr/bin/my prog (deleted)" {
		t.Errorf("mapping 1 = %+v", m)
	}
	if maps[2].Path != "[stack]" || !maps[3].Shared || maps[3].Path != "" {
		t.Errorf("mappings 2, 3 = %+v %+v", maps[2], maps[3])
	}
	if got, ok := FindMapping(maps, 0x55d0c0a02010); !ok || got.Offset != 0x2000 {
		t.Errorf("FindMapping = %+v, %v", got, ok)
	}
	if _, ok := FindMapping(maps, 0x1000); ok {
		t.Errorf("FindMapping found an unmapped address")
	}
}

func TestParseMapsErrors(t *testing.T) {
	for _, line := range []string{
		"zz-10 r-xp 0 00:00 0",
		"10-20 r-x 0 00:00 0",
		"20-10 r-xp 0 00:00 0",
		"10-20 r-xp 0 00:00",
		"10-20 r-xp 0 00:00 x",
	} {
		if _, err := ParseMaps(strings.NewReader(line)); !errors.Is(err, ErrBadMaps) {
			t.Errorf("%q: err = %v, want ErrBadMaps", line, err)
		}
	}
}
