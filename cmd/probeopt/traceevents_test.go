package main

import (
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/probeopt/probeopt/probe"
)

// TestEventJSONLines: the hand-written JSON line of an event is what
// encoding/json makes of traceEvent, the object "trace --json --events"
// documents.
func TestEventJSONLines(t *testing.T) {
	for _, spec := range []string{"hot", `odd"spec\with<html>&` + "\x01\u2028"} {
		for _, e := range []probe.Event{
			{Probe: 3, Pid: 10, Tid: 11, Addr: 1 << 40, Time: time.Date(2026, 12, 2, 4, 5, 6, 7, time.UTC), Args: [6]uint64{0, 1, ^uint64(0), 3, 4, 5}},
			{Probe: 4, Pid: 10, Tid: 12, Addr: 7, Time: time.Date(2026, 12, 2, 4, 5, 6, 0, time.UTC), Return: true, Ret: 99},
			{Probe: 4, Pid: 10, Tid: 12, Addr: 7, Time: time.Unix(1, 500).UTC(), Return: true},
			{Probe: 5, Pid: 10, Tid: 13, Addr: 8, Time: time.Unix(2, 0).UTC(), Goid: 17, Args: [6]uint64{1}},
			{Probe: 5, Pid: 10, Tid: 13, Addr: 8, Time: time.Unix(2, 0).UTC(), Goid: 18, Return: true, Ret: 3},
		} {
			q, _ := json.Marshal(spec)
			got := string(appendEventJSON(nil, &e, q, e.Goid != 0))
			te := traceEvent{Time: e.Time, Pid: e.Pid, Tid: e.Tid, Probe: e.Probe, Spec: spec, Addr: e.Addr, Return: e.Return, Ret: e.Ret, Goid: e.Goid}
			if !e.Return {
				te.Args = e.Args[:]
			}
			b, err := json.Marshal(te)
			if err != nil {
				t.Fatal(err)
			}
			if want := string(b) + "\n"; got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		}
	}
}

// BenchmarkEventSink measures writing events as the trace command does
// (batches of 1024 to a buffered io.Discard): ns/op is per event.
//
//	go test ./cmd/probeopt -run '^$' -bench EventSink
func BenchmarkEventSink(b *testing.B) {
	for _, format := range []string{formatBin, formatJSON} {
		b.Run(format, func(b *testing.B) {
			s := newEventSink(format, io.Discard)
			if err := s.start([]*probe.Probe{{ID: 1, Spec: "hot"}}); err != nil {
				b.Fatal(err)
			}
			evs := make([]probe.Event, 1024)
			for i := range evs {
				evs[i] = probe.Event{Probe: 1, Pid: 1000, Tid: 1001, Addr: 0x5555_5555_4000, Time: time.Now(), Args: [6]uint64{uint64(i), 2, 3, 4, 5, 6}}
			}
			b.ResetTimer()
			for done := 0; done < b.N; done += len(evs) {
				s.write(evs[:min(len(evs), b.N-done)])
			}
			if err := s.flush(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
