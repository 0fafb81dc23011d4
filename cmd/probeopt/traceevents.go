package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/probeopt/probeopt/probe"
)

// Event output formats of "trace --events --format".
const (
	formatText = "text"
	formatJSON = "json"
	formatBin  = "bin"
)

// eventSink writes the batches of events the tracer hands over
// (probe.Options.OnEvents) as JSON lines or in the binary event format.
// The readers of several processes may call it at once.
type eventSink struct {
	mu     sync.Mutex
	format string
	out    io.Writer
	bw     *bufio.Writer
	bin    *probe.EventWriter
	specOf map[int][]byte // the JSON string of each probe's spec
	line   []byte
	goid   bool   // JSON lines carry the goroutine id (--goid)
	n      uint64 // events written
	err    error
}

func newEventSink(format string, out io.Writer) *eventSink {
	return &eventSink{format: format, out: out, specOf: map[int][]byte{}}
}

// start names the probes (the header of the binary format) before the
// first event.
func (s *eventSink) start(probes []*probe.Probe) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ps []probe.Probe
	for _, p := range probes {
		q, err := json.Marshal(p.Spec)
		if err != nil {
			return err
		}
		s.specOf[p.ID] = q
		ps = append(ps, *p)
	}
	if s.format == formatBin {
		w, err := probe.NewEventWriter(s.out, ps)
		if err != nil {
			return err
		}
		s.bin = w
		return nil
	}
	s.bw = bufio.NewWriterSize(s.out, 1<<20)
	return nil
}

// write is the OnEvents callback.
func (s *eventSink) write(evs []probe.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.n += uint64(len(evs))
	switch {
	case s.bin != nil:
		s.err = s.bin.Write(evs...)
	case s.bw != nil:
		for i := range evs {
			s.line = appendEventJSON(s.line[:0], &evs[i], s.specOf[evs[i].Probe], s.goid)
			if _, err := s.bw.Write(s.line); err != nil {
				s.err = err
				return
			}
		}
	}
}

// written returns the number of events handed to the sink.
func (s *eventSink) written() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// flush writes what is buffered and returns the first error.
func (s *eventSink) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil && s.bin != nil {
		s.err = s.bin.Flush()
	}
	if s.err == nil && s.bw != nil {
		s.err = s.bw.Flush()
	}
	if s.err != nil {
		return fmt.Errorf("write events: %w", s.err)
	}
	return nil
}

// appendEventJSON appends one event as a JSON line, with the fields of
// traceEvent (encoding/json writes the same object, several times slower),
// the goroutine id with goid.
func appendEventJSON(b []byte, e *probe.Event, spec []byte, goid bool) []byte {
	b = append(b, `{"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","pid":`...)
	b = strconv.AppendInt(b, int64(e.Pid), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(e.Tid), 10)
	b = append(b, `,"probe":`...)
	b = strconv.AppendInt(b, int64(e.Probe), 10)
	b = append(b, `,"spec":`...)
	if spec == nil {
		spec = []byte(`""`)
	}
	b = append(b, spec...)
	b = append(b, `,"addr":`...)
	b = strconv.AppendUint(b, e.Addr, 10)
	if e.Return {
		b = append(b, `,"return":true`...)
		if e.Ret != 0 {
			b = append(b, `,"ret":`...)
			b = strconv.AppendUint(b, e.Ret, 10)
		}
	} else {
		b = append(b, `,"args":[`...)
		for i, a := range e.Args {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, a, 10)
		}
		b = append(b, ']')
	}
	if goid && e.Goid != 0 {
		b = append(b, `,"goid":`...)
		b = strconv.AppendUint(b, e.Goid, 10)
	}
	return append(b, "}\n"...)
}
