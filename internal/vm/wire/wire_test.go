package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestRoundTrip encodes records of every kind and size and decodes them
// from lines that carry a kernel message's tail in front, as a console
// line can.
func TestRoundTrip(t *testing.T) {
	var d Decoder
	payloads := [][]byte{nil, []byte("x"), bytes.Repeat([]byte{0, 0xff, '\n', '\r'}, MaxChunk/4)}
	seq := 0
	for _, s := range []Stream{Ready, Stdout, Stderr, Fail, Exit} {
		for _, p := range payloads {
			line := string(Encode(seq, s, p))
			if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
				t.Fatalf("record %d is not one line: %q", seq, line)
			}
			r, ok, err := d.Line("[ 1.0] kernel says " + strings.TrimSuffix(line, "\n") + "\r")
			if !ok || err != nil || r.Seq != seq || r.Stream != s || !bytes.Equal(r.Payload, p) {
				t.Fatalf("record %d: %+v %v %v", seq, r, ok, err)
			}
			seq++
		}
	}
	if _, ok, err := d.Line("[    1.000] Run /init as init process"); ok || err != nil {
		t.Errorf("a kernel line: ok %v err %v", ok, err)
	}
}

// TestCorrupt checks that a damaged record and a lost one are reported.
func TestCorrupt(t *testing.T) {
	rec := strings.TrimSuffix(string(Encode(0, Stdout, []byte("hello"))), "\n")
	for i := len(marker); i < len(rec); i++ {
		b := []byte(rec)
		b[i] ^= 0x01
		var d Decoder
		if _, ok, err := d.Line(string(b)); ok && !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %d flipped: accepted", i)
		}
	}
	cut := rec[:20] + "[ 3.1] oops" + rec[20:]
	var d Decoder
	if _, _, err := d.Line(cut); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a record with a kernel message inside: %v", err)
	}
	d = Decoder{}
	if _, _, err := d.Line(strings.TrimSuffix(string(Encode(1, Stdout, nil)), "\n")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("record 1 before record 0: %v", err)
	}
}
