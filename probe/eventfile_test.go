package probe_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/probe"
)

// TestEventFileLayout writes two events and compares the bytes with the
// layout the format's documentation gives, written out by hand, then
// reads them back; and reads a stream of the first version's 80-byte
// records (no goroutine id).
func TestEventFileLayout(t *testing.T) {
	var buf bytes.Buffer
	w, err := probe.NewEventWriter(&buf, []probe.Probe{{ID: 7, Spec: "hot"}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(0, 0x0102030405060708)
	evs := []probe.Event{
		{Probe: 7, Pid: 0x11, Tid: 0x22, Addr: 0x401000, Time: at, Args: [6]uint64{1, 2, 3, 4, 5, 6}, Goid: 0x2a},
		{Probe: 7, Pid: 0x11, Tid: 0x23, Addr: 0x401000, Time: at, Return: true, Ret: 0xdead},
	}
	if err := w.Write(evs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	const (
		header = "5052424f45565431" + "58000000" + "01000000" + "07000000" + "03000000" + "686f74"
		// entry: time, pid, tid, probe, flags, addr, args
		entry = "0807060504030201" + "11000000" + "22000000" + "07000000" + "00000000" + "0010400000000000" +
			"0100000000000000" + "0200000000000000" + "0300000000000000" + "0400000000000000" + "0500000000000000" + "0600000000000000"
		// return: flags 1, the value returned first
		ret = "0807060504030201" + "11000000" + "23000000" + "07000000" + "01000000" + "0010400000000000" +
			"adde000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000" + "0000000000000000"
	)
	// then the goroutine id
	want := header + entry + "2a00000000000000" + ret + "0000000000000000"
	if got := hex.EncodeToString(buf.Bytes()); got != want {
		t.Fatalf("bytes\n%s\nwant\n%s", got, want)
	}
	v1, _ := hex.DecodeString(strings.Replace(header, "58000000", "50000000", 1) + entry + ret)
	r1, err := probe.NewEventReader(bytes.NewReader(v1))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range evs {
		var got probe.Event
		if err := r1.Read(&got); err != nil || got.Tid != want.Tid || got.Args != want.Args || got.Ret != want.Ret || got.Goid != 0 {
			t.Fatalf("80-byte record %d: %+v (%v), want %+v without a goroutine id", i, got, err, want)
		}
	}
	r, err := probe.NewEventReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Probes) != 1 || r.Probes[0] != (probe.Probe{ID: 7, Spec: "hot"}) {
		t.Fatalf("probes %+v", r.Probes)
	}
	for i, want := range evs {
		var got probe.Event
		if err := r.Read(&got); err != nil {
			t.Fatal(err)
		}
		if !got.Time.Equal(want.Time) || got.Pid != want.Pid || got.Tid != want.Tid || got.Probe != want.Probe ||
			got.Addr != want.Addr || got.Args != want.Args || got.Return != want.Return || got.Ret != want.Ret || got.Goid != want.Goid {
			t.Fatalf("event %d: %+v, want %+v", i, got, want)
		}
	}
	var ev probe.Event
	if err := r.Read(&ev); err != io.EOF {
		t.Fatalf("after the last event: %v", err)
	}
	if _, err := probe.NewEventReader(bytes.NewReader([]byte("PRBOEVT0xxxxxxxx"))); !errors.Is(err, probe.ErrEventFormat) {
		t.Fatalf("bad magic: %v", err)
	}
	if err := r.Read(&ev); err == nil {
		t.Fatal("read past the end")
	}
	trunc, _ := probe.NewEventReader(bytes.NewReader(buf.Bytes()[:buf.Len()-1]))
	trunc.Read(&ev)
	if err := trunc.Read(&ev); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated record: %v", err)
	}
}

// TestEventFileBatches writes more events than the writer buffers, in
// batches of uneven sizes, and reads every one back in order.
func TestEventFileBatches(t *testing.T) {
	var buf bytes.Buffer
	w, err := probe.NewEventWriter(&buf, []probe.Probe{{ID: 1, Spec: "hot"}})
	if err != nil {
		t.Fatal(err)
	}
	const total = 40_000 // about three of the writer's buffers
	var evs []probe.Event
	for i, size := 0, 1; i < total; size = size*3%9001 + 1 {
		evs = evs[:0]
		for ; len(evs) < size && i < total; i++ {
			evs = append(evs, probe.Event{Probe: 1, Pid: 5, Tid: 6, Time: time.Unix(0, int64(i)), Args: [6]uint64{uint64(i)}})
		}
		if err := w.Write(evs...); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := probe.NewEventReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var ev probe.Event
	for i := range total {
		if err := r.Read(&ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Args[0] != uint64(i) || ev.Time.UnixNano() != int64(i) || ev.Tid != 6 {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	if err := r.Read(&ev); err != io.EOF {
		t.Fatalf("after the last event: %v", err)
	}
}
